import Foundation
import Testing

@testable import Curfew
@testable import CurfewCLI

extension ProcessTests.Second {
    /// The processes a job starts end with it, in every mode, even those that
    /// call setsid() to leave its process group.
    @Suite(.timeLimit(.minutes(1))) struct ChildProcessTests {
        @Test(arguments: Isolation.allCases, [false, true])
        func theProcessesAJobStartsEndWithIt(isolation: Isolation, setsid: Bool) async throws {
            let plugin = try Fixtures.compile("hostile_jobs.c")
            let folder = Fixtures.temporaryFolder("children")
            let pidFile = folder + "/pids"
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", plugin, "--isolate", isolation.rawValue, "--only", "forks", "--param", "children=5",
                 "--param", "setsid=\(setsid ? 1 : 0)", "--param", "pidfile=\(pidFile)"] + Fixtures.allowingWrite(folder, in: isolation),
                timeout: .seconds(20))
            #expect(result.status == 0, "\(result.stderr)")
            let pids = try String(contentsOfFile: pidFile, encoding: .utf8).split(separator: "\n").compactMap { pid_t($0) }
            #expect(pids.count == 5)
            var alive: [pid_t] = []
            for pid in pids where !(await Fixtures.isGone(pid)) { alive.append(pid) }
            #expect(alive.isEmpty, "\(alive.count) of 5 outlived the job")
            alive.forEach { kill($0, SIGKILL) }  // tidy up should the test fail
        }

        /// Where the host gives workers cgroups, the fork server forks each
        /// straight into its own with clone3, not glibc's fork: the worker's
        /// C library must still know its first thread, where its plugin is
        /// loaded, as fork() leaves it (its tid, which its CPU clock and its
        /// priority-inheriting mutexes use; its robust-mutex list), and
        /// the sandbox must refuse clone3 as before, though the server's own
        /// filter lets it through. Each fails with that piece left out. And
        /// the worker's timer thread stays in the normal class, though the
        /// host's may be real-time: the process is its plugin's.
        @Test(arguments: [true, false])
        func aWorkerForkedIntoItsCgroupKnowsItsThread(sandboxed: Bool) async throws {
            let plugin = try Fixtures.compile("hostile_jobs.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", plugin, "--isolate", "job", "--only", "reports-self", "--json", "--verbose", "--no-state"]
                    + (sandboxed ? [] : ["--no-sandbox"]),
                timeout: .seconds(20), environment: Fixtures.withCgroups)
            #expect(result.status == 0, "\(result.stderr)")
            let said = try OutputEvent.all(in: result.stdout).first { $0.event == "log" && $0.job == "reports-self" }?.message
            let clone3 = sandboxed ? "refused" : "let through"
            #expect(said == "first thread: tid known, robust list registered; clone3: \(clone3); real-time threads: 0", "\(result.stderr)")
        }

        /// A run killed with SIGKILL ends nothing: what its job started
        /// after `setsid()` outlives it. Where a cgroup is delegated, the
        /// next host that starts workers ends it, from the dead host's
        /// folder, and removes that; elsewhere the host says it has no
        /// cgroup (and the test ends the sleepers itself).
        @Test func whatAKilledRunLeftIsEndedByTheNextOne() async throws {
            let plugin = try Fixtures.compile("hostile_jobs.c")
            let folder = Fixtures.temporaryFolder("left")
            let pidFile = folder + "/pids"
            let (first, _) = try Fixtures.startCurfew(
                ["run", plugin, "--isolate", "job", "--only", "forks", "--param", "children=3", "--param", "setsid=1",
                 "--param", "stay=1", "--param", "pidfile=\(pidFile)", "--allow-write", folder, "--no-state", "--budget", "60s", "--json"],
                environment: Fixtures.withCgroups)
            var pids: [pid_t] = []
            for _ in 0..<2000 where pids.count < 3 {
                try await Task.sleep(for: .milliseconds(10))
                let text = (try? String(contentsOfFile: pidFile, encoding: .utf8)) ?? ""
                if text.hasSuffix("\n") { pids = text.split(separator: "\n").compactMap { pid_t($0) } }
            }
            defer { pids.forEach { kill($0, SIGKILL) } }
            try #require(pids.count == 3, "the job wrote its children's pids")
            kill(first.processIdentifier, SIGKILL)
            await Fixtures.wait(for: first)  // reaped: its pid is free, and its folder stale

            let state = Fixtures.temporaryFolder("state")
            let next = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", plugin, "--isolate", "job", "--only", "forks", "--param", "children=0", "--state", state, "--verbose"],
                timeout: .seconds(20), environment: Fixtures.withCgroups)
            #expect(next.status == 0, "\(next.stderr)")
            let said = try #require(next.stderr.split(separator: "\n").first { $0.hasPrefix("workers get ") }, "\(next.stderr)")
            let sandbox = try StateStore(folder: state).history(job: "forks").first?.sandbox
            guard said.hasPrefix("workers get a cgroup each under ") else {
                #expect(said.hasPrefix("workers get no cgroup ("), "\(said)")
                #expect(sandbox == "on")
                return
            }
            #expect(sandbox == "on; cgroup")
            var alive: [pid_t] = []
            for pid in pids where !(await Fixtures.isGone(pid)) { alive.append(pid) }
            #expect(alive.isEmpty, "\(alive.count) of 3 outlived the next run")
            // The next host's own folder went with it.
            let own = String(said.dropFirst("workers get a cgroup each under ".count).prefix { $0 != " " })
            #expect(own.contains("/curfew.") && !FileManager.default.fileExists(atPath: own), "\(own)")
        }

        /// A host in a cgroup below the root uses it only where it is
        /// delegated (marked `trusted.delegate`, as systemd does): then its
        /// workers get cgroups beneath it; unmarked, it says why it makes
        /// none. Where this process may not make cgroups, there is nothing to try.
        @Test func aCgroupBelowTheRootIsUsedOnlyWhereDelegated() async throws {
            typealias SetAttribute = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeRawPointer, Int, Int32) -> Int32
            guard geteuid() == 0, let (mine, _) = WorkerCgroups.ownCgroup(), access(mine, W_OK) == 0,
                let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "setxattr")
            else { return }
            let setAttribute = unsafeBitCast(symbol, to: SetAttribute.self)
            let plugin = try Fixtures.compile("hostile_jobs.c")
            for delegated in [false, true] {
                let cgroup = "\(mine)/curfew-test-\(getpid())-\(delegated)"
                try FileManager.default.createDirectory(atPath: cgroup, withIntermediateDirectories: false)
                // Once what the host started has died too (its fork server
                // dies with it, not at once), with what it left beneath.
                defer { #expect(WorkerCgroup(path: cgroup).remove(allowed: .seconds(5)) == nil, "\(cgroup)") }
                // Root in a user namespace may not set a trusted attribute: nothing to try.
                if delegated && setAttribute(cgroup, "trusted.delegate", "1", 1, 0) != 0 { return }
                let run = try await Fixtures.run(
                    "/bin/sh",
                    ["-c", #"echo $$ > "$0/cgroup.procs" && exec "$@""#, cgroup, Fixtures.curfewExecutable, "run", plugin,
                     "--isolate", "job", "--only", "forks", "--param", "children=0", "--no-state", "--verbose"],
                    timeout: .seconds(20), environment: Fixtures.withCgroups)
                #expect(run.status == 0, "\(run.stderr)")
                let said = run.stderr.split(separator: "\n").first { $0.hasPrefix("workers get ") } ?? ""
                if delegated {
                    #expect(said.hasPrefix("workers get a cgroup each under \(cgroup)/curfew."), "\(run.stderr)")
                } else {
                    #expect(said == "workers get no cgroup (its cgroup \(cgroup) is not delegated to it, as systemd's Delegate=yes does): what a job starts ends by the subreaper walk.", "\(run.stderr)")
                }
            }
        }
    }
}
