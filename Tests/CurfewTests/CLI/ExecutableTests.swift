import Foundation
import Testing

@testable import Curfew
@testable import CurfewCLI

extension ProcessTests.Second {
    /// The `curfew` executable, run as a user runs it.
    @Suite(.timeLimit(.minutes(1))) struct CurfewExecutableTests {
        func curfew(_ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
            try await Fixtures.run(Fixtures.curfewExecutable, arguments)
        }

        @Test func helpAndVersionGoToStdoutWithStatusZero() async throws {
            let help = try await curfew(["help", "list"])
            #expect(help.status == 0)
            #expect(help.stdout == Help.text(.list))
            #expect(help.stderr.isEmpty)
            let version = try await curfew(["--version"])
            #expect(version.status == 0)
            #expect(version.stdout == Help.version + "\n")
        }

        @Test func aUsageErrorGoesToStderrWithStatus64() async throws {
            let result = try await curfew(["run", "--jobs", "many"])
            #expect(result.status == 64)
            #expect(result.stdout.isEmpty)
            #expect(result.stderr == "Error: The value 'many' is invalid for '--jobs <n>': use a whole number from 1 to 1024\n" + ArgumentTests.runUsage)
        }

        /// A folder with the examples, a garbage file, an empty file and a `.so` without the entry.
        func mixedFolder() async throws -> String {
            let folder = Fixtures.temporaryFolder("mixed")
            for plugin in Fixtures.examplePlugins {
                try FileManager.default.copyItem(atPath: plugin, toPath: folder + "/" + URL(fileURLWithPath: plugin).lastPathComponent)
            }
            try "garbage\n".write(toFile: folder + "/garbage.so", atomically: true, encoding: .utf8)
            #expect(FileManager.default.createFile(atPath: folder + "/empty.so", contents: Data()))
            let source = folder + "/helper.c"
            try "int helper(void) { return 7; }\n".write(toFile: source, atomically: true, encoding: .utf8)
            #expect(try await Fixtures.run("/usr/bin/env", ["cc", "-shared", "-fPIC", source, "-o", folder + "/no-entry.so"]).status == 0)
            return folder
        }

        static let exampleParameters = [
            "--param", "interval-ms=100", "--param", "count=1000000", "--param", "limit=20000",
            "--param", "steps=3", "--param", "step-ms=10", "--param", "files=2", "--param", "file-ms=10",
        ]

        @Test func runningTheMixedFolderRejectsEachBadFileAndRunsEveryJob() async throws {
            let folder = try await mixedFolder()
            let result = try await curfew(["run", folder, "--budget", "800ms"] + Self.exampleParameters)
            #expect(result.status == 3, "jobs clean, files rejected: \(result.stdout)\(result.stderr)")
            let lines = result.stdout.split(separator: "\n").map(String.init)
            let rejected = lines.filter { $0.hasPrefix("rejected") }
            #expect(rejected == [
                "rejected  \(folder)/empty.so: Empty file (0 bytes), not a shared object.",
                "rejected  \(folder)/garbage.so: Not an ELF shared object (it does not start with the ELF magic bytes).",
                "rejected  \(folder)/no-entry.so: No 'curfew_plugin_entry' symbol: not a Curfew plugin, or its entry is not exported (mark it CURFEW_EXPORT).",
            ])
            // The summary table: one row per job, with its outcome and reason.
            let header = try #require(lines.firstIndex { $0.hasPrefix("JOB ") })
            let rows = lines[(header + 1)...].prefix(5).map { $0.split(separator: " ", omittingEmptySubsequences: true) }
            let outcomes = Dictionary(uniqueKeysWithValues: rows.map { (String($0[0]), String($0[1])) })
            #expect(outcomes == [
                "sum-squares": "completed", "swift-primes": "completed", "sync-worker": "completed", "timer-counter": "expired",
                "swift-uploader": "completed",
            ])
            #expect(lines.contains { $0.hasPrefix("timer-counter") && $0.hasSuffix("time ran out; cleanup ran") })
            #expect(lines.last == "5 jobs: 4 completed, 1 expired; 3 plugin files rejected")
        }

        @Test func theSameRunAsJSONLines() async throws {
            let folder = try await mixedFolder()
            let result = try await curfew(["run", folder, "--budget", "800ms", "--json"] + Self.exampleParameters)
            #expect(result.status == 3)
            let events = try OutputEvent.all(in: result.stdout)
            #expect(events.filter { $0.event == "rejected" }.map(\.code) == ["empty-file", "not-elf", "missing-entry"])
            #expect(events.filter { $0.event == "loaded" }.count == 5)
            let finished = Dictionary(uniqueKeysWithValues: events.filter { $0.event == "finished" }.map { ($0.job!, $0) })
            #expect(finished.mapValues(\.outcome) == [
                "sum-squares": "completed", "swift-primes": "completed", "sync-worker": "completed", "timer-counter": "expired",
                "swift-uploader": "completed",
            ])
            #expect(finished["timer-counter"]?.reason == "time ran out; cleanup ran")
            #expect(finished["sum-squares"]?.chunks == 10)
            // A task-driven job has no chunks: null, as the table's "-" (before: 0).
            #expect(finished["sync-worker"]?.chunks == nil)
            #expect(result.stdout.contains(#""job":"sync-worker","plugin":"#) && result.stdout.contains(#""outcome":"completed","chunks":null,"#))
            #expect(events.filter { $0.event == "expiring" }.map(\.job) == ["timer-counter"])
            // Everything human went to stderr: the rejections, and no table.
            #expect(result.stderr.contains("rejected  \(folder)/garbage.so"))
            #expect(!result.stderr.contains("JOB "))
        }

        @Test func listShowsJobsAndRejections() async throws {
            let folder = try await mixedFolder()
            let result = try await curfew(["list", folder])
            #expect(result.status == 3)
            #expect(result.stdout.contains("\(folder)/libExampleTaskDriven.so\n  sync-worker  Syncs items on its own thread under a background task it begins. [task-driven]\n"))
            #expect(result.stdout.contains("rejected  \(folder)/garbage.so: Not an ELF shared object"))
            let empty = Fixtures.temporaryFolder("empty")
            let none = try await curfew(["list", empty])
            #expect(none.status == 1)
            #expect(none.stderr == "Error: No plugin (a .so file or a .curfew.json manifest) in \(empty)\n")
        }

        @Test func theGuidesCExampleBuildsWithItsOneLineCommandAndRunsFromItsFolder() async throws {
            let readme = try String(contentsOf: Fixtures.packageRoot.appendingPathComponent("docs/writing-jobs.md"), encoding: .utf8)
            let start = try #require(readme.range(of: "```c file=hello.c\n"))
            let end = try #require(readme.range(of: "```\n", range: start.upperBound..<readme.endIndex))
            let folder = Fixtures.temporaryFolder("readme")
            try String(readme[start.upperBound..<end.lowerBound]).write(toFile: folder + "/hello.c", atomically: true, encoding: .utf8)
            let build = try await Fixtures.run(
                "/usr/bin/env", ["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-shared", "-fPIC", "-fvisibility=hidden",
                                 "-I", Fixtures.includeFolder, "hello.c", "-o", "hello.so"], in: folder)
            #expect(build.status == 0, "\(build.stderr)")
            // A bare file name means the file in the current folder, not a library search.
            let result = try await Fixtures.run(Fixtures.curfewExecutable, ["run", "hello.so", "--json"], in: folder)
            #expect(result.status == 0, "\(result.stderr)")
            let finished = try OutputEvent.all(in: result.stdout).filter { $0.event == "finished" }
            #expect(finished.map(\.outcome) == ["completed"])
            #expect(finished.map(\.chunks) == [5])
        }

        @Test func onlyWithAnUnknownJobIsAnError() async throws {
            let result = try await curfew(["run", Fixtures.examplePlugins[1], "--only", "nope"])
            #expect(result.status == 1)
            #expect(result.stderr == "Error: No loaded job is named 'nope' (loaded: sum-squares).\n")
        }

        /// Before: "Nothing to run" and status 3, where the README says 1.
        @Test func aPathThatDoesNotExistIsAnErrorWithStatusOne() async throws {
            for command in ["run", "list"] {
                let result = try await Fixtures.run(Fixtures.curfewExecutable, [command, "/nonexistent"])
                #expect(result.status == 1, "\(command)")
                #expect(result.stderr == "Error: /nonexistent: no such file or folder.\n", "\(command)")
                #expect(result.stdout.isEmpty)
            }
        }

        @Test func aFailedJobMakesTheStatusTwo() async throws {
            let fixture = try RunnerFixture()
            let result = try await curfew(["run", fixture.path, "--only", "fail", "--only", "count"])
            #expect(result.status == 2)
            #expect(result.stdout.contains("finished  fail: failed (chunk returned failed: disk full) after 3 chunks"))
        }

        @Test func sigtermExpiresEveryJobAndExitsWithinTheLead() async throws {
            let fixture = try RunnerFixture()
            let (process, output) = try Fixtures.startCurfew([
                "run", fixture.path, "--only", "tick", "--only", "spin", "--budget", "60s", "--grace", "400ms",
                "--param", "tick-ms=5", "--json",
            ])
            // Handshake: wait until both jobs have started.
            var text = await Fixtures.read(output.fileHandleForReading) { $0.components(separatedBy: "\"event\":\"started\"").count >= 3 }
            let signalled = ContinuousClock.now
            kill(process.processIdentifier, SIGTERM)
            text += await Fixtures.readToEnd(output.fileHandleForReading)
            await Fixtures.wait(for: process)
            let took = ContinuousClock.now - signalled
            #expect(process.terminationReason == .exit)
            #expect(process.terminationStatus == 143)
            #expect(took < .seconds(3), "exits within the lead time, not the budget")
            let finished = try OutputEvent.all(in: text).filter { $0.event == "finished" }
            #expect(finished.count == 2)
            #expect(finished.allSatisfy { $0.outcome == "expired" && $0.reason == "host shutting down; cleanup ran" })
            #expect(fixture.count("tick", "creates") == -1, "the fixture ran in the child, not here")
        }
    }
}
