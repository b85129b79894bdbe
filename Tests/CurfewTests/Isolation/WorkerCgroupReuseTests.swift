import Foundation
import Glibc
import Testing
import _CurfewShims

@testable import Curfew

extension ProcessTests.First {
    /// A worker's cgroup, once its worker has ended, goes to the next
    /// worker instead of an `rmdir` and a `mkdir` (most of what a cgroup per
    /// worker cost the host). Not one that was killed: the kernel (6.18)
    /// SIGKILLs a process cloned into a cgroup killed more often than its
    /// parent's, so every worker forked into a reused cgroup died at once
    /// while a kill came with every worker's end. Nor one with a cgroup
    /// beneath it, nor one a controller would keep charging. Where this
    /// process may make no cgroup, there is nothing to try.
    @Suite(.timeLimit(.minutes(1))) struct WorkerCgroupReuseTests {
        func folder(_ name: String) -> String? {
            guard let own = WorkerCgroups.ownCgroup()?.folder else { return nil }
            let path = own + "/curfew-test-\(getpid())-\(name)"
            return mkdir(path, 0o755) == 0 ? path : nil
        }

        func emptyCgroup(_ cgroups: WorkerCgroups) throws -> WorkerCgroup {
            let (group, descriptor) = try cgroups.makeEmpty()
            close(descriptor)
            return group
        }

        @Test func anEmptiedWorkerCgroupGoesToTheNextWorker() throws {
            guard let path = folder("reuse") else { return }
            defer { #expect(WorkerCgroup(path: path).remove(allowed: .seconds(5)) == nil, "\(path)") }
            let cgroups = WorkerCgroups(madeFolder: path, controllers: [])
            let first = try emptyCgroup(cgroups)
            #expect(cgroups.giveBack(first, allowed: .seconds(5)) == nil)
            let again = try emptyCgroup(cgroups)
            #expect(again.path == first.path, "the emptied cgroup is the next worker's")

            // Something left in it: killed, and the cgroup removed.
            var pid: pid_t = 0
            let words = ["/bin/sleep", "30"]
            var argv = words.map { strdup($0) } + [nil]
            defer { argv.forEach { free($0) } }
            try #require(posix_spawn(&pid, "/bin/sleep", nil, nil, &argv, environ) == 0)
            try again.add(pid)
            #expect(cgroups.giveBack(again, allowed: .seconds(5)) == nil)
            var status: Int32 = 0
            #expect(waitpid(pid, &status, 0) == pid && status & 0x7f == SIGKILL, "what was left in it was killed")
            #expect(access(again.path, F_OK) != 0, "a killed cgroup is removed")

            // A cgroup a job made beneath its own: removed with it, not kept.
            let nested = try emptyCgroup(cgroups)
            #expect(nested.path != again.path)
            #expect(mkdir(nested.path + "/inner", 0o755) == 0)
            #expect(cgroups.giveBack(nested, allowed: .seconds(5)) == nil)
            #expect(access(nested.path, F_OK) != 0, "removed")
        }

        @Test func aCgroupWithAControllerIsRemoved() throws {
            guard let path = folder("charged") else { return }
            defer { #expect(WorkerCgroup(path: path).remove(allowed: .seconds(5)) == nil, "\(path)") }
            let cgroups = WorkerCgroups(madeFolder: path, controllers: ["memory"])
            let group = try emptyCgroup(cgroups)
            #expect(cgroups.giveBack(group, allowed: .seconds(5)) == nil)
            #expect(access(group.path, F_OK) != 0, "removed, not kept")
        }

        /// The fork server forks a worker into a cgroup its last worker
        /// left, and the worker lives.
        @Test func aWorkerForkedIntoAReusedCgroupLives() throws {
            guard let path = folder("forked") else { return }
            defer { #expect(WorkerCgroup(path: path).remove(allowed: .seconds(5)) == nil, "\(path)") }
            let cgroups = WorkerCgroups(madeFolder: path, controllers: [])
            let server = try #require(ForkServer(executable: Fixtures.curfewExecutable, environment: WorkerProtocol.helperEnvironment()))
            defer { server.close() }
            var used: String?
            for round in 0..<2 {
                let (group, folder) = try cgroups.makeEmpty()
                if round == 1 { #expect(group.path == used, "the cgroup its last worker left") }
                var pair: [Int32] = [-1, -1]
                try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
                let null = open("/dev/null", O_WRONLY | O_CLOEXEC)
                let child = server.fork(channel: pair[1], out: null, err: null, cgroup: folder)
                [folder, pair[1], null].forEach { close($0) }
                let worker = try #require(child)
                // Alive and waiting for its first message: its pidfd says nothing yet.
                let pidfd = curfew_shim_pidfd_open(worker.pid)
                try #require(pidfd >= 0)
                var entry = [pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)]
                #expect(poll(&entry, 1, 200) == 0, "the worker in \(group.path) lives (round \(round))")
                close(pair[0])  // the worker reads end of file and leaves
                entry[0].revents = 0
                #expect(poll(&entry, 1, 10_000) == 1, "and leaves once its channel closes")
                close(pidfd)
                // Its exit reaches the server before the cgroup empties for good.
                for _ in 0..<1000 where group.isPopulated != false { usleep(1000) }
                #expect(cgroups.giveBack(group, allowed: .seconds(5)) == nil)
                used = group.path
            }
        }
    }
}
