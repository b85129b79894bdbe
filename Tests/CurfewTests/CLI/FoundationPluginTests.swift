import Foundation
import Synchronization
import Testing

@testable import Curfew

extension ProcessTests.First {
    /// A Swift plugin that imports Foundation, run by the `curfew` executable:
    /// loading Foundation into a process of the host's must not keep it from
    /// exiting, in any mode, nor in `curfew test`.
    @Suite(.timeLimit(.minutes(1))) struct FoundationPluginTests {
        static let plugin = Fixtures.buildFolder + "/libFixtureFoundationJob.so"

        @Test(arguments: Isolation.allCases)
        func aRunWithAFoundationPluginEnds(isolation: Isolation) async throws {
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", "--budget", "5s", "--isolate", isolation.rawValue, "--only", "foundation-job", Self.plugin],
                timeout: .seconds(20))
            #expect(result.status == 0, "stderr: \(result.stderr)")
            #expect(result.stdout.contains("foundation-job: completed"), "stdout: \(result.stdout)")
        }

        /// A Swift job's `create` makes a lazy global while a thread of its
        /// own waits for it, in a worker forked by the fork server and in
        /// one spawned. A worker's first thread runs the `create`; forked
        /// from a server thread that had run Swift, it held the global's
        /// lock under the server's thread id, and both threads spun until
        /// the deadline killed the worker.
        @Test(arguments: [(Isolation.job, true), (.job, false), (.plugin, true), (.plugin, false)])
        func aLazyGlobalTwoThreadsOfAJobWaitForIsMadeOnce(isolation: Isolation, forking: Bool) async throws {
            var configuration = RunConfiguration(policy: try GrantPolicy(budget: .seconds(5)), maxConcurrentJobs: 1)
            configuration.isolation = isolation
            configuration.workerExecutable = Fixtures.curfewExecutable
            configuration.usesForkServer = forking
            let lines = Mutex<[String]>([])
            let jobs = try PluginLoader().load(Self.plugin).jobs.filter { $0.name == "contended-global" }
            let runner = Runner(jobs: jobs, configuration: configuration, events: { event in
                if case .log(_, _, let message) = event { lines.withLock { $0.append(message) } }
            })
            let results = await runner.run()
            #expect(results.map(\.outcome) == [.completed], "\(results.map(\.reason))")
            #expect(lines.withLock { $0 } == ["both threads read the global, 42"])
            // The path asked for is the one taken: a forked worker is the case that hung.
            #expect((runner.workerStarts.forked, runner.workerStarts.spawned) == (forking ? 1 : 0, forking ? 0 : 1))
        }

        @Test func curfewTestWithAFoundationPluginEnds() async throws {
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable, ["test", Self.plugin, "--job", "foundation-job"], timeout: .seconds(20))
            #expect(result.status == 0, "stderr: \(result.stderr)")
            #expect(result.stdout.contains("completed"), "stdout: \(result.stdout)")
        }
    }
}
