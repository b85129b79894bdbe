import Glibc
import Testing

@testable import Curfew

extension ProcessTests {
    /// The fork server serves only while it has one thread; its warm-up runs
    /// on a thread of its own, which can stay in `/proc/self/task` for a
    /// moment after it is joined (a C loop of create, join and count saw two
    /// threads 55 times in 20,000). A server that counted two refused to
    /// serve, its host fell back to spawning, and a scan test saw a worker
    /// whose parent was not the fork server (once in 30 runs). Each start here
    /// is a chance for that race: rare, so this guards more than it proves.
    @Suite(.timeLimit(.minutes(2))) struct ForkServerStartTests {
        @Test func everyFreshForkServerForks() throws {
            let environment = WorkerProtocol.helperEnvironment()
            var failed = 0
            for _ in 0..<100 {
                let server = try #require(ForkServer(executable: Fixtures.curfewExecutable, environment: environment))
                var pair: [Int32] = [-1, -1]
                try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
                let null = open("/dev/null", O_WRONLY | O_CLOEXEC)
                let child = server.fork(channel: pair[1], out: null, err: null)
                close(pair[1])
                close(null)
                if child == nil { failed += 1 }
                close(pair[0])  // the worker reads end of file and leaves
                server.close()
            }
            #expect(failed == 0, "fork servers that refused to serve")
        }
    }
}
