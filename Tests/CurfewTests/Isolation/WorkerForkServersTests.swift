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

        /// A server whose workers take a sandbox holds the system's files
        /// for them, and holds them to date without an inotify watch: closing
        /// one waits for an SRCU grace period (14 ms on the 250 Hz machine of
        /// BENCHMARKS.md), and the server's exit, which every run's end waits
        /// for, closed its watch.
        @Test func aSandboxingServerHoldsItsFilesWithNoInotifyWatch() async throws {
            var configuration = RunConfiguration()
            configuration.sandbox = SandboxPolicy()
            let environment = WorkerRun.environment(for: configuration)
            try #require(environment.contains { $0.hasPrefix(WorkerSandbox.aheadVariable + "=") }, "workers prepare a sandbox ahead")
            let forks = LazyForkServer(executable: Fixtures.curfewExecutable, environment: environment, enabled: true)
            defer { forks.close() }
            forks.startSoon()
            let pid = try await started(forks)
            var pair: [Int32] = [-1, -1]
            try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
            let null = open("/dev/null", O_WRONLY | O_CLOEXEC)
            let child = forks.fork(channel: pair[1], out: null, err: null)
            [pair[1], null].forEach { close($0) }
            defer { close(pair[0]) }  // the worker reads end of file and leaves
            try #require(child != nil, "the server forked")
            let folder = "/proc/\(pid)/fd"
            let descriptors = try #require(opendir(folder))
            defer { closedir(descriptors) }
            var held = 0
            var watches: [String] = []
            while let entry = readdir(descriptors) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                guard let number = Int(name) else { continue }
                var target = [CChar](repeating: 0, count: 4096)
                let length = readlink(folder + "/" + name, &target, target.count - 1)
                guard length > 0 else { continue }
                let text = String(decoding: target[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
                if number >= 256 { held += 1 }
                if text.contains("inotify") { watches.append(text) }
            }
            #expect(held > 0, "the system's files are held for the workers")
            #expect(watches.isEmpty, "\(watches)")
        }
    }
}
