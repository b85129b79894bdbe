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
    }
}
