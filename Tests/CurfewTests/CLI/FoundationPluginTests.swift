import Foundation
import Testing

@testable import Curfew

extension ProcessTests {
    /// A Swift plugin that imports Foundation, run by the `curfew` executable:
    /// loading Foundation into a process of the host's must not keep it from
    /// exiting, in any mode, nor in `curfew test`.
    @Suite(.timeLimit(.minutes(1))) struct FoundationPluginTests {
        static let plugin = Fixtures.buildFolder + "/libFixtureFoundationJob.so"

        @Test(arguments: Isolation.allCases)
        func aRunWithAFoundationPluginEnds(isolation: Isolation) async throws {
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable, ["run", "--budget", "5s", "--isolate", isolation.rawValue, Self.plugin],
                timeout: .seconds(20))
            #expect(result.status == 0, "stderr: \(result.stderr)")
            #expect(result.stdout.contains("foundation-job: completed"), "stdout: \(result.stdout)")
        }

        @Test func curfewTestWithAFoundationPluginEnds() async throws {
            let result = try await Fixtures.run(Fixtures.curfewExecutable, ["test", Self.plugin], timeout: .seconds(20))
            #expect(result.status == 0, "stderr: \(result.stderr)")
            #expect(result.stdout.contains("completed"), "stdout: \(result.stdout)")
        }
    }
}
