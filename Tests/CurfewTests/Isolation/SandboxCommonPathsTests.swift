import Foundation
import Testing
import _CurfewShims

/// What a fork server holds for its workers' sandboxes (the system's paths,
/// opened once, see `curfew_sandbox_open_common`) stays true as the files
/// change, and a process with a second thread is never sandboxed.
/// `sandbox_common.c` is compiled with `sandbox.c` into a program of its
/// own, which plays the fork server over an `/etc` of its own (a tmpfs in
/// a user and mount namespace) and forks a worker per check.
@Suite(
    .timeLimit(.minutes(1)),
    .enabled(if: curfew_sandbox_probe_namespaces() == 1, "the kernel or its user cannot make the namespaces"),
    .enabled(if: curfew_sandbox_landlock_abi() > 0, "the kernel has no Landlock"))
struct SandboxCommonPathsTests {
    func program() throws -> String {
        let output = Fixtures.workRoot + "/sandbox_common"
        let arguments = [
            "cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", Fixtures.packageRoot.appendingPathComponent("Sources/_CurfewShims/include").path,
            Fixtures.sourceFolder + "/sandbox_common.c", Fixtures.packageRoot.appendingPathComponent("Sources/_CurfewShims/sandbox.c").path,
            "-o", output, "-lpthread",
        ]
        let result = try Fixtures.runBlocking("/usr/bin/env", arguments, in: nil, timeout: nil, environment: [:])
        guard result.status == 0 else { throw FixtureError.compileFailed(source: "sandbox_common.c", output: result.stderr) }
        return output
    }

    /// A file replaced by rename, made where it was missing, removed and
    /// made again, or changed behind a link into a folder nobody watches is
    /// read by a worker forked after; a path outside is not; and a second
    /// thread keeps the sandbox from being made at all. Without the
    /// server's refresh, the replaced file is refused: the check can fail.
    @Test func workersReadTheSystemsFilesAsTheyAreWhenForked() async throws {
        let program = try program()
        let run = try await Fixtures.run(program, [], timeout: .seconds(30))
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        for check in ["range", "held", "outside", "replaced", "created", "recreated", "linked", "dangling", "threads"] {
            #expect(run.stdout.contains("\(check) ok"), "\(run.stdout)")
        }
        let stale = try await Fixtures.run(program, ["--no-refresh"], timeout: .seconds(30))
        #expect(stale.status == 1 && stale.stdout.contains("replaced FAILED"), "\(stale.stdout)\(stale.stderr)")
    }
}
