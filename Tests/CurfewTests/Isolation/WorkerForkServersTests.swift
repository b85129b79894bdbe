import Glibc
import Testing

@testable import Curfew

extension ProcessTests.First {
    /// A serving host's fork servers, kept across runs: closing one kills
    /// every worker it forked, so none is closed while a run holds it.
    @Suite(.timeLimit(.minutes(1))) struct WorkerForkServersTests {
        func alive(_ pid: Int32) -> Bool { kill(pid, 0) == 0 }

        func started(_ server: LazyForkServer) async throws -> Int32 {
            for _ in 0..<5000 where server.serverPid == nil { try await Task.sleep(for: .milliseconds(2)) }
            return try #require(server.serverPid, "the fork server started")
        }

        /// Before, a fifth kind of run closed the server used longest ago,
        /// whatever run still held it (and its workers were killed).
        @Test func aServerIsClosedOnlyOnceNoRunHoldsIt() async throws {
            let kept = WorkerForkServers()
            let base = WorkerRun.environment(for: RunConfiguration())
            var servers: [LazyForkServer] = []
            for kind in 0...WorkerForkServers.limit {
                servers.append(try #require(kept.server(executable: Fixtures.curfewExecutable, environment: base + ["CURFEW_TEST_KIND=\(kind)"])))
            }
            var pids: [Int32] = []
            for server in servers { pids.append(try await started(server)) }
            #expect(kept.started == WorkerForkServers.limit + 1)
            #expect(pids.allSatisfy(alive), "every server a run holds lives")
            // The same kind again is the same server.
            let again = try #require(kept.server(executable: Fixtures.curfewExecutable, environment: base + ["CURFEW_TEST_KIND=0"]))
            #expect(again === servers[0] && kept.started == WorkerForkServers.limit + 1)
            kept.release(again)
            // As runs end, the idle ones beyond the limit go, used longest ago first.
            for server in servers { kept.release(server) }
            for _ in 0..<5000 where alive(pids[0]) { try await Task.sleep(for: .milliseconds(2)) }
            #expect(!alive(pids[0]), "the one used longest ago, idle, is closed")
            #expect(pids.dropFirst().allSatisfy(alive), "the limit's worth stays")
            kept.close()
            #expect(!pids.contains(where: alive), "all end with the host")
            #expect(kept.server(executable: Fixtures.curfewExecutable, environment: base) == nil, "none after the close")
        }
    }
}
