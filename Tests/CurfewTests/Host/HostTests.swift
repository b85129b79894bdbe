import Synchronization
import Testing

@testable import Curfew
@testable import CurfewHost

/// `RunHost` and `ServeHost`, embedded without the command line: the run `curfew run` makes,
/// stopped the way a signal stops it. Not owning this process: it must not
/// end the other tests' children.
@Suite(.timeLimit(.minutes(1))) struct HostTests {
    final class Recorder: Sendable {
        let events = Mutex<[RunHost.Event]>([])
        let host = Mutex<RunHost?>(nil)
    }

    @Test func aStopExpiresEveryJobWithTheShutdownReasonAndSetsTheStatus() async throws {
        let fixture = try RunnerFixture()
        var options = RunHost.Options(paths: [fixture.path])
        options.only = ["tick", "spin"]
        options.scanner = SafeScanner(workerExecutable: Fixtures.curfewExecutable, cacheFolder: nil)
        options.keepsState = false
        options.ownsProcess = false
        options.configuration = RunConfiguration(
            policy: try GrantPolicy(budget: .seconds(20), grace: .seconds(5)), parameters: ["tick-ms": "10", "chunk-us": "50"])
        let recorder = Recorder()
        let host = RunHost(options) { event in
            recorder.events.withLock { $0.append(event) }
            // Once both jobs run, stop as SIGINT would.
            if case .run(.started, _) = event,
                recorder.events.withLock({ $0.filter { if case .run(.started, _) = $0 { true } else { false } }.count }) == 2
            {
                recorder.host.withLock { $0 }?.stop(status: 130, reason: "SIGINT")
            }
        }
        recorder.host.withLock { $0 = host }
        let outcome = await host.run()

        #expect(outcome.failure == nil)
        #expect(outcome.status == 130 && host.stopStatus == 130)
        #expect(outcome.stopReason == "SIGINT")
        #expect(outcome.results.map(\.outcome) == [.expired, .expired])
        let events = recorder.events.withLock { $0 }
        func index(_ matches: (RunHost.Event) -> Bool) -> Int? { events.firstIndex(where: matches) }
        let scanned = try #require(index { if case .scanned = $0 { true } else { false } })
        let running = try #require(index { if case .running = $0 { true } else { false } })
        let stopping = try #require(index { if case .stopping(reason: "SIGINT", lead: .seconds(5)) = $0 { true } else { false } })
        let expirings = events.indices.filter { if case .run(.expiring(_, .shutdown), _) = events[$0] { true } else { false } }
        #expect(scanned < running && running < stopping)
        #expect(expirings.count == 2 && expirings.allSatisfy { $0 > stopping }, "every job hears the shutdown, after the stop is said")
    }

    @Test func anUnknownJobRunsNothingAndSaysWhichWereLoaded() async throws {
        let fixture = try RunnerFixture()
        var options = RunHost.Options(paths: [fixture.path])
        options.only = ["no-such-job"]
        options.scanner = SafeScanner(workerExecutable: Fixtures.curfewExecutable, cacheFolder: nil)
        options.keepsState = false
        options.ownsProcess = false
        let host = RunHost(options)
        let outcome = await host.run()
        guard case .unknownJob("no-such-job", let loaded) = outcome.failure else {
            Issue.record("\(String(describing: outcome.failure))")
            return
        }
        #expect(loaded.contains("tick"))
        #expect(outcome.status == ExitCode.failure && outcome.stopReason == nil && host.stopStatus == nil)
        #expect(outcome.results.isEmpty)
    }

    /// `ServeHost`, embedded: it serves, answers on its socket, and a stop
    /// ends it with status 0, said in order.
    @Test func anEmbeddedServeHostServesUntilStopped() async throws {
        let folder = Fixtures.temporaryFolder("served")
        var options = ServeHost.Options(server: Server.Options(folders: [folder]), socketPath: folder + "/serve.sock")
        options.keepsState = false
        options.ownsProcess = false
        let said = Mutex<[String]>([])
        let host = Mutex<ServeHost?>(nil)
        let served = ServeHost(options) { event in
            switch event {
            case .serving:
                said.withLock { $0.append("serving") }
                let answer = (try? ControlSocket.ask(path: folder + "/serve.sock", request: #"{"command":"status"}"#)) ?? []
                said.withLock { $0.append(answer.isEmpty ? "no answer" : "answered") }
                host.withLock { $0 }?.stop(reason: "test")
            case .stopping(let reason): said.withLock { $0.append("stopping: \(reason)") }
            default: break
            }
        }
        host.withLock { $0 = served }
        let outcome = await served.run()
        #expect(outcome.failure == nil)
        #expect(outcome.status == ExitCode.success)
        #expect(said.withLock { $0 } == ["serving", "answered", "stopping: test"])
    }
}
