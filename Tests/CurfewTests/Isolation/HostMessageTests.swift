import Testing

@testable import CurfewFormats

/// The host's messages to a worker: typed, read back as sent, and every
/// line a plugin could forge on the shared socket refused with a reason.
@Suite struct HostMessageTests {
    static let run = HostMessage.Run(
        plugin: "/plugins/p.so", job: "sum", index: 3, budgetNanoseconds: 2_000_000_000, graceNanoseconds: 500_000_000,
        started: 1_000_000_000, app: .inactive,
        keepsState: true, checkpoint: [0, 1, 2, 255], estimate: HostMessage.Estimate(mean: 10, deviation: 2, samples: 7),
        continuous: false, last: true, parameters: ["a": "1", "é": "\n\""],
        limits: HostMessage.Limits(memoryBytes: 1 << 30, cpuSeconds: 5, openFiles: 64))
    static let sandboxed: HostMessage.Run = {
        var run = HostMessageTests.run
        run.sandbox = HostMessage.Sandbox(network: .off, read: ["/plugins/p.so", "/data/in"], write: ["/data/out"], scratch: "/tmp/s", exec: true)
        return run
    }()

    @Test(arguments: [
        HostMessage.run(run), .run(sandboxed), .confine(sandboxed.sandbox!), .scan(files: ["/a.so", "/b c.so"]),
        .expire(job: "sum", reason: .cancelled),
        .app(job: "sum", event: .didEnterBackground, state: .background, deadline: 42),
        .app(job: "sum", event: .willEnterForeground, state: .inactive, deadline: nil),
        .checkpointSaved(job: "sum", id: 9, status: .tooLarge, message: "over 1 MiB"), .close,
    ])
    func eachMessageReadsBackAsSent(message: HostMessage) throws {
        #expect(try HostMessage.decode(Array(message.line.utf8)) == message)
    }

    @Test(arguments: [
        (#"{"type":"run","job":"j","protocol":1}"#, "protocol version mismatch"),
        (#"{"type":"expire","job":"j","reason":"bored"}"#, "unknown reason 'bored'"),
        (#"{"type":"expire","job":"j","reason":"timeout","extra":1}"#, "unknown field 'extra'"),
        (#"{"type":"checkpoint-saved","job":"j","id":-1,"status":"ok"}"#, "a negative \"id\" (-1)"),
        (#"{"type":"checkpoint-saved","job":"j","id":1,"status":"fine"}"#, "unknown status 'fine'"),
        (#"{"type":"app","job":"j","event":"launch","state":"asleep"}"#, "unknown state 'asleep'"),
        (#"{"type":"app","job":"","event":"launch","state":"active"}"#, "\"job\" must name a job in 1 to 256 bytes"),
        (#"{"type":"close","job":"j"}"#, "unknown field 'job'"),
        (#"{"type":"scan","protocol":4,"files":[1]}"#, "\"files\" holds other than strings of at most 4096 bytes"),
        (#"[1]"#, "an array, not an object"),
        (
            #"{"type":"run","protocol":4,"plugin":"/p.so","job":"j","budget_ns":1,"started":0,"app":"active","state":true,"continuous":true,"last":true,"parameters":{},"limits":{"memory":0,"cpu":0,"files":0},"sandbox":{"network":"loopy","read":[],"write":[],"scratch":"/s","exec":false}}"#,
            "unknown network 'loopy'"
        ),
        (
            #"{"type":"run","protocol":4,"plugin":"/p.so","job":"j","budget_ns":1,"started":0,"app":"active","state":true,"continuous":true,"last":true,"parameters":{},"limits":{"memory":0,"cpu":0,"files":0},"sandbox":{"network":"off","read":[],"write":[],"scratch":"s","exec":false}}"#,
            "\"scratch\" must be an absolute path of at most 4096 bytes"
        ),
        (#"{"type":"run","protocol":4,"plugin":"/p.so","job":"j","budget_ns":1,"started":0,"app":"active","state":true,"continuous":true,"last":true,"parameters":{},"limits":[]}"#, "\"limits\" is an array, not an object"),
        (#"{"type":"nap","job":"j"}"#, "unknown type 'nap'"),
        (#"{"type":"confine","protocol":4,"sandbox":{"network":"off","read":[],"write":[],"scratch":"/s","exec":false},"job":"j"}"#, "unknown field 'job'"),
        (#"{"type":"confine","protocol":4,"sandbox":{"network":"off","read":[],"write":[],"scratch":"/s"}}"#, "no \"exec\""),
        (#"{"type":"confine","protocol":3,"sandbox":{}}"#, "protocol version mismatch"),
    ])
    func aLineThatIsNoMessageIsRefusedWithAReason(line: String, reason: String) {
        #expect(throws: MessageInvalid(reason: reason)) { try HostMessage.decode(Array(line.utf8)) }
    }

    @Test func aRunIsCheckedFieldByField() {
        var line = HostMessage.run(Self.run).line
        func refused(_ from: String, _ to: String) -> String? {
            do {
                _ = try HostMessage.decode(Array(line.replacingOccurrences(of: from, with: to).utf8))
                return nil
            } catch { return error.reason }
        }
        #expect(refused(#""budget_ns":2000000000"#, #""budget_ns":"2s""#) == "\"budget_ns\" is not a 64-bit integer")
        #expect(refused(#""index":3"#, #""index":99999999999"#) == "an index past any plugin's table")
        #expect(refused(#""started":1000000000"#, #""started":-5"#) == "a negative \"started\" (-5)")
        #expect(refused(#""state":true"#, #""state":"yes""#) == "\"state\" is a string, not a boolean")
        #expect(refused(#""checkpoint":"AAEC/w==""#, #""checkpoint":"%%%""#) == "\"checkpoint\" is not base64")
        #expect(refused(#""cpu":5"#, #""cpu":5,"disk":1"#) == "unknown field 'disk'")
        line = line.replacingOccurrences(of: #""parameters":{"#, with: #""parameters":{"n":1,"#)
        #expect(refused("", "") == "\"n\" is a number, not a string")
    }
}
