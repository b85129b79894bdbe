import Foundation
import Testing

@testable import Curfew

extension ProcessTests {
    /// A Swift plugin that imports Foundation, run by the `curfew` executable:
    /// loading Foundation into a process of the host's must not keep it from
    /// exiting, in any mode, nor in `curfew test`.
    @Suite(.timeLimit(.minutes(1))) struct FoundationPluginTests {
        static let plugin = Fixtures.buildFolder + "/libFixtureFoundationJob.so"

        /// `curfew run` of one of the plugin's jobs, under `isolation`.
        func run(_ job: String, _ isolation: Isolation) async throws -> (status: Int32, stdout: String, stderr: String) {
            try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", "--budget", "5s", "--isolate", isolation.rawValue, "--only", job, Self.plugin],
                timeout: .seconds(20))
        }

        @Test(arguments: Isolation.allCases)
        func aRunWithAFoundationPluginEnds(isolation: Isolation) async throws {
            let result = try await run("foundation-job", isolation)
            #expect(result.status == 0, "stderr: \(result.stderr)")
            #expect(result.stdout.contains("foundation-job: completed"), "stdout: \(result.stdout)")
        }

        /// A Swift job's `create` makes a lazy global while a thread of its
        /// own waits for it. A worker's first thread runs the `create`;
        /// forked with the fork server's per-thread record of its id, it
        /// held the global's lock under the server's id, and both threads
        /// spun until the deadline killed the worker.
        @Test(arguments: Isolation.allCases)
        func aLazyGlobalTwoThreadsOfAJobWaitForIsMadeOnce(isolation: Isolation) async throws {
            let result = try await run("contended-global", isolation)
            #expect(result.status == 0, "stderr: \(result.stderr)")
            #expect(result.stdout.contains("both threads read the global, 42"), "stdout: \(result.stdout)")
            #expect(result.stdout.contains("contended-global: completed"), "stdout: \(result.stdout)")
        }

        @Test func curfewTestWithAFoundationPluginEnds() async throws {
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable, ["test", Self.plugin, "--job", "foundation-job"], timeout: .seconds(20))
            #expect(result.status == 0, "stderr: \(result.stderr)")
            #expect(result.stdout.contains("completed"), "stdout: \(result.stdout)")
        }
    }
}
