import Foundation
import Glibc
import Testing
import _CurfewShims

@testable import Curfew

extension ProcessTests.First {
    /// A worker's cgroup, once its worker has ended, goes to the next
    /// worker instead of an `rmdir` and a `mkdir` (most of what a cgroup per
    /// worker cost the host). Not one that was killed: the kernel (6.18
    /// here) SIGKILLs a process cloned into a cgroup whose count of kills
    /// differs from its parent cgroup's, so every worker forked into a
    /// reused cgroup died at once while a kill came with every worker's
    /// end. Nor one a job could have written (an unsandboxed worker's), one
    /// frozen, one with a cgroup beneath it, or one a controller would keep
    /// charging.
    @Suite(
        .timeLimit(.minutes(1)),
        .enabled(if: mayMakeCgroups(), "this process may make no cgroup of its own"))
    struct WorkerCgroupReuseTests {
        func folder(_ name: String) throws -> String {
            let path = try #require(WorkerCgroups.ownCgroup()?.folder) + "/curfew-test-\(getpid())-\(name)"
            try #require(mkdir(path, 0o755) == 0, "\(path): \(String(cString: strerror(errno)))")
            return path
        }

        func emptyCgroup(_ cgroups: WorkerCgroups) throws -> WorkerCgroup {
            let (group, descriptor) = try cgroups.makeEmpty()
            close(descriptor)
            return group
        }

        @Test func anEmptiedWorkerCgroupGoesToTheNextWorker() throws {
            let path = try folder("reuse")
            defer { #expect(WorkerCgroup(path: path).remove(allowed: .seconds(5)) == nil, "\(path)") }
            let cgroups = WorkerCgroups(madeFolder: path, controllers: [])
            let first = try emptyCgroup(cgroups)
            #expect(cgroups.giveBack(first, reusable: true, allowed: .seconds(5)) == nil)
            let again = try emptyCgroup(cgroups)
            #expect(again.path == first.path, "the emptied cgroup is the next worker's")

            // An unsandboxed worker's: removed.
            #expect(cgroups.giveBack(again, reusable: false, allowed: .seconds(5)) == nil)
            #expect(access(again.path, F_OK) != 0, "an unsandboxed worker's cgroup is removed")

            // Something left in it: killed, and the cgroup removed.
            let held = try emptyCgroup(cgroups)
            var pid: pid_t = 0
            let words = ["/bin/sleep", "30"]
            var argv = words.map { strdup($0) } + [nil]
            defer { argv.forEach { free($0) } }
            try #require(posix_spawn(&pid, "/bin/sleep", nil, nil, &argv, environ) == 0)
            try held.add(pid)
            #expect(cgroups.giveBack(held, reusable: true, allowed: .seconds(5)) == nil)
            var status: Int32 = 0
            #expect(waitpid(pid, &status, 0) == pid && status & 0x7f == SIGKILL, "what was left in it was killed")
            #expect(access(held.path, F_OK) != 0, "a killed cgroup is removed")

            // A cgroup a job made beneath its own: removed with it, not kept.
            let nested = try emptyCgroup(cgroups)
            #expect(mkdir(nested.path + "/inner", 0o755) == 0)
            #expect(cgroups.giveBack(nested, reusable: true, allowed: .seconds(5)) == nil)
            #expect(access(nested.path, F_OK) != 0, "removed")

            // Killed once, even empty: never given out again.
            let killed = try emptyCgroup(cgroups)
            #expect(killed.kill())
            #expect(cgroups.giveBack(killed, reusable: true, allowed: .seconds(5)) == nil)
            #expect(access(killed.path, F_OK) != 0, "a killed cgroup is removed")

            // Killed late, after it was kept (its last worker's kill racing
            // its end), or frozen: not given out.
            for spoil in ["cgroup.kill", "cgroup.freeze"] {
                let kept = try emptyCgroup(cgroups)
                #expect(cgroups.giveBack(kept, reusable: true, allowed: .seconds(5)) == nil)
                if spoil == "cgroup.kill" { #expect(kept.kill()) } else { try "1".write(toFile: kept.path + "/" + spoil, atomically: false, encoding: .utf8) }
                let next = try emptyCgroup(cgroups)
                #expect(next.path != kept.path, "a cgroup spoilt by \(spoil) after it was kept is not given out")
                #expect(access(kept.path, F_OK) != 0, "and is removed")
                #expect(cgroups.giveBack(next, reusable: true, allowed: .seconds(5)) == nil)
            }
        }

        @Test func aCgroupWithAControllerIsRemoved() throws {
            let path = try folder("charged")
            defer { #expect(WorkerCgroup(path: path).remove(allowed: .seconds(5)) == nil, "\(path)") }
            let cgroups = WorkerCgroups(madeFolder: path, controllers: ["memory"])
            let group = try emptyCgroup(cgroups)
            #expect(cgroups.giveBack(group, reusable: true, allowed: .seconds(5)) == nil)
            #expect(access(group.path, F_OK) != 0, "removed, not kept")
        }

        /// The fork server forks a worker into a cgroup its last worker
        /// left, and the worker lives.
        @Test func aWorkerForkedIntoAReusedCgroupLives() throws {
            let path = try folder("forked")
            defer { #expect(WorkerCgroup(path: path).remove(allowed: .seconds(5)) == nil, "\(path)") }
            let placed = try Fixtures.clone3IsLetThrough()
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
                #expect(worker.placed == placed, "forked into the cgroup where clone3 is let through")
                if !worker.placed { try group.add(worker.pid) }
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
                for _ in 0..<1000 where group.events != .idle { usleep(1000) }
                #expect(cgroups.giveBack(group, reusable: true, allowed: .seconds(5)) == nil)
                used = group.path
            }
        }
    }
}

/// Whether this process may make cgroups beneath its own, with
/// `cgroup.kill` (cgroup v2, Linux 5.14): one made and removed to see.
private func mayMakeCgroups() -> Bool {
    guard let own = WorkerCgroups.ownCgroup()?.folder else { return false }
    let probe = own + "/curfew-test-\(getpid())-probe"
    guard mkdir(probe, 0o755) == 0 else { return false }
    defer { rmdir(probe) }
    return access(probe + "/cgroup.kill", F_OK) == 0
}
