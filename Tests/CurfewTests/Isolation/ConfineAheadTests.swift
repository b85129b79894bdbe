import Glibc
import Testing

@testable import Curfew
@testable import CurfewFormats

/// A worker confined ahead of its job (`confine`, then `run`) runs only the
/// job whose sandbox is the one it applied: a sandbox cannot be widened, so
/// a `run` that names another is refused with that reason, never run under
/// the wrong one.
@Suite(.timeLimit(.minutes(1)), .enabled(if: Sandbox.landlockABI > 0, "the kernel has no Landlock"))
struct ConfineAheadTests {
    /// The worker's lines until it exits (its channel's end).
    func lines(from channel: Int32) -> String {
        var text = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(channel, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            text += buffer[..<count]
        }
        return String(decoding: text, as: UTF8.self)
    }

    func run(sandbox: HostMessage.Sandbox) -> HostMessage.Run {
        HostMessage.Run(
            plugin: "/nonexistent/plugin.so", job: "j", index: 0, budgetNanoseconds: 1_000_000_000, graceNanoseconds: nil,
            started: 0, app: .background, keepsState: false, checkpoint: nil, estimate: nil, continuous: false, last: true,
            parameters: [:], limits: HostMessage.Limits(memoryBytes: 0, cpuSeconds: 0, openFiles: 0), sandbox: sandbox)
    }

    @Test(arguments: [false, true]) func aRunForAnotherSandboxThanTheOneAppliedIsRefused(wider: Bool) throws {
        let environment = Fixtures.environment.map { "\($0.key)=\($0.value)" }
        let pool = WorkerPool(executable: Fixtures.curfewExecutable, environment: environment, capacity: 1)
        defer { pool.close() }
        let worker = try pool.take()
        defer { [worker.channel, worker.out, worker.err].forEach { close($0) } }
        let scratch = Fixtures.temporaryFolder("confined")
        let applied = HostMessage.Sandbox(network: .off, read: [], write: [], scratch: scratch, exec: false)
        var asked = applied
        if wider { asked.read = ["/etc"] } else { asked.scratch = Fixtures.temporaryFolder("other") }
        #expect(WorkerProtocol.send(HostMessage.confine(applied).line, to: worker.channel))
        #expect(WorkerProtocol.send(HostMessage.run(run(sandbox: asked)).line, to: worker.channel))
        let said = lines(from: worker.channel)
        #expect(said.contains("confined ahead for another sandbox"), "\(said)")
        #expect(worker.process.reap() == 1 << 8, "the worker exits with status 1")
    }
}
