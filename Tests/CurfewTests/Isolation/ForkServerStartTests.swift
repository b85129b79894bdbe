import Dispatch
import Glibc
import Synchronization
import Testing

@testable import Curfew

extension ProcessTests.First {
    /// The fork server serves only while it has one thread. Its warm-up ran
    /// on a thread of its own once, which could stay in `/proc/self/task`
    /// for a moment after it was joined (a C loop of create, join and count
    /// saw two threads 55 times in 20,000). A server that counted two
    /// refused to serve, its host fell back to spawning, and a scan test saw
    /// a worker whose parent was not the fork server (once in 30 runs). Each
    /// start here is a chance for a race of that kind: rare, so this guards
    /// more than it proves.
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

extension ProcessTests.First {
    /// A fork asked for without waiting (how spares are forked): each
    /// request is answered once, in the order sent, and a request the server
    /// can no longer read is refused at once and never answered.
    @Suite(.timeLimit(.minutes(1))) struct ForkRequestTests {
        @Test func eachRequestIsAnsweredOnceAndNoneAfterTheServerLeaves() throws {
            let server = try #require(ForkServer(executable: Fixtures.curfewExecutable, environment: WorkerProtocol.helperEnvironment()))
            let answers = Mutex<[(request: Int, pid: pid_t?)]>([])
            let answered = DispatchSemaphore(value: 0)
            var hostEnds: [Int32] = []
            for request in 0..<3 {
                var pair: [Int32] = [-1, -1]
                try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
                let null = open("/dev/null", O_WRONLY | O_CLOEXEC)
                let sent = server.fork(channel: pair[1], out: null, err: null) { child in
                    answers.withLock { $0.append((request, child?.pid)) }
                    answered.signal()
                }
                close(pair[1])
                close(null)
                try #require(sent)
                hostEnds.append(pair[0])
            }
            for _ in 0..<3 { try #require(answered.wait(timeout: .now() + 10) == .success) }
            let got = answers.withLock { $0 }
            #expect(got.map(\.request) == [0, 1, 2])
            #expect(Set(got.compactMap(\.pid)).count == 3, "three workers")
            hostEnds.forEach { close($0) }  // each worker reads end of file and leaves
            server.close()
            let late = server.fork(channel: -1, out: -1, err: -1) { _ in answers.withLock { $0.append((3, nil)) } }
            #expect(!late)
            #expect(answers.withLock { $0.count } == 3, "a refused request is never answered")
        }

        /// A server asked to start soon and closed before it did never starts.
        @Test func aLazyServerClosedBeforeItStartsNeverDoes() throws {
            let forks = LazyForkServer(
                executable: Fixtures.curfewExecutable, environment: WorkerProtocol.helperEnvironment(), enabled: true)
            forks.close()
            forks.startSoon()
            #expect(forks.fork(channel: -1, out: -1, err: -1) == nil)
            #expect(forks.serverPid == nil)
            #expect(!forks.isOn)
        }
    }
}

extension ProcessTests.First {
    /// A worker is forked straight into the cgroup it is given (clone3 with
    /// CLONE_INTO_CGROUP), not moved there after: a move takes the kernel's
    /// global threadgroup lock, which waits for an RCU grace period and holds
    /// up every fork and exit on the machine meanwhile. Where this process may
    /// make no cgroup, there is nothing to try.
    @Suite(.timeLimit(.minutes(1))) struct ForkIntoCgroupTests {
        @Test func aWorkerIsForkedIntoTheCgroupItIsGiven() throws {
            guard let own = WorkerCgroups.ownCgroup()?.folder else { return }
            let path = own + "/curfew-test-\(getpid())-into"
            guard mkdir(path, 0o755) == 0 else { return }
            defer { #expect(WorkerCgroup(path: path).remove(allowed: .seconds(5)) == nil, "\(path)") }
            let folder = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            try #require(folder >= 0)
            let server = try #require(ForkServer(executable: Fixtures.curfewExecutable, environment: WorkerProtocol.helperEnvironment()))
            defer { server.close() }
            var pair: [Int32] = [-1, -1]
            try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
            let null = open("/dev/null", O_WRONLY | O_CLOEXEC)
            let child = server.fork(channel: pair[1], out: null, err: null, cgroup: folder)
            [folder, pair[1], null].forEach { close($0) }
            defer { close(pair[0]) }  // the worker reads end of file and leaves
            let worker = try #require(child)
            // Where clone3 is refused (a container's call filter), the server
            // forks and says so, and the host moves the worker.
            guard try Fixtures.clone3IsLetThrough() else { return }
            #expect(worker.placed)
            let groups = (try? String(contentsOfFile: "/proc/\(worker.pid)/cgroup", encoding: .utf8)) ?? ""
            let unified = groups.split(separator: "\n").first { $0.hasPrefix("0::") }
            #expect(unified?.hasSuffix("/curfew-test-\(getpid())-into") == true, "\(groups)")
        }
    }
}
