import CurfewFormats
import Foundation
import Testing

@testable import Curfew
@testable import CurfewCLI

extension ProcessTests.First {
    /// `--isolate job`: each job in a worker process; a crash, a hang, an exit or
    /// a limit ends only that job, and the host reports it and carries on.
    @Suite(.timeLimit(.minutes(1))) struct IsolationTests {
        func run(_ arguments: [String]) async throws -> (status: Int32, events: [OutputEvent], stdout: String) {
            let plugin = try Fixtures.compile("crashing_jobs.c")
            let result = try await Fixtures.run(Fixtures.curfewExecutable, ["run", plugin, "--isolate", "job", "--json", "--jobs", "8"] + arguments)
            let events = try OutputEvent.all(in: result.stdout)
            return (result.status, events, result.stdout)
        }

        func outcomes(_ events: [OutputEvent]) -> [String: String] {
            Dictionary(uniqueKeysWithValues: events.filter { $0.event == "finished" }.map { ($0.job!, $0.outcome!) })
        }

        func reason(_ events: [OutputEvent], _ job: String) -> String {
            events.first { $0.event == "finished" && $0.job == job }?.reason ?? ""
        }

        @Test func crashesHangsAndExitsEndOnlyTheirJob() async throws {
            let jobs = ["fine", "segfault", "abort", "loops-in-chunk", "loops-in-expire", "prints", "exits"]
            let (status, events, stdout) = try await run(["--budget", "1s"] + jobs.flatMap { ["--only", $0] })
            #expect(status == 2)
            #expect(outcomes(events) == [
                "fine": "completed", "segfault": "crashed", "abort": "crashed", "loops-in-chunk": "terminated",
                "loops-in-expire": "terminated", "prints": "completed", "exits": "crashed",
            ])
            #expect(reason(events, "segfault") == "its worker died of SIGSEGV in chunk 1; stderr: about to dereference NULL")
            #expect(reason(events, "abort") == "its worker died of SIGABRT in chunk 1")
            #expect(reason(events, "exits") == "its worker exited with status 0 before the job finished")
            // The worker's runner shares the deadline and says what was still running.
            #expect(reason(events, "loops-in-chunk") == "chunk 1 was still running at the hard deadline")
            #expect(reason(events, "loops-in-expire") == "expire was still running at the hard deadline")
            // The plugin's own output is tagged with its job, and stdout stays JSON Lines.
            let printed = events.filter { $0.event == "log" && $0.job == "prints" }.compactMap(\.message)
            // In order within each stream (two pipes: their lines may interleave either way).
            #expect(printed.filter { $0.hasPrefix("[stdout]") } == ["[stdout] {\"event\": not json", "[stdout] \"quote\" \\ and a partial line"])
            #expect(printed.filter { $0.hasPrefix("[stderr]") } == ["[stderr] warning from the plugin"])
            #expect(!stdout.contains("\n{\"event\": not json"))
        }

        /// Before: isolated, every termination was "still running at the hard
        /// deadline; its worker was killed 0.1 ms after it" with 0 chunks, and a
        /// crash said nothing of where it happened.
        @Test(arguments: ["none", "plugin", "job"])
        func aJobGivesTheSameOutcomeAndReasonInEveryMode(isolation: String) async throws {
            let plugin = try Fixtures.compile("crashing_jobs.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", plugin, "--isolate", isolation, "--json", "--budget", "600ms", "--only", "hangs-at-31", "--only", "loops-in-expire"])
            let finished = try OutputEvent.all(in: result.stdout).filter { $0.event == "finished" }
            let byJob = Dictionary(uniqueKeysWithValues: finished.map { ($0.job!, $0) })
            #expect(byJob["hangs-at-31"]?.outcome == "terminated")
            #expect(byJob["hangs-at-31"]?.reason == "chunk 31 was still running at the hard deadline")
            #expect(byJob["hangs-at-31"]?.chunks == 30)
            #expect(byJob["loops-in-expire"]?.outcome == "terminated")
            #expect(byJob["loops-in-expire"]?.reason == "expire was still running at the hard deadline")
            guard isolation != "none" else { return }  // a crash in process ends the host
            let crash = try await Fixtures.run(
                Fixtures.curfewExecutable, ["run", plugin, "--isolate", isolation, "--json", "--only", "crashes-at-5"])
            let crashed = try #require(try OutputEvent.all(in: crash.stdout).first { $0.event == "finished" })
            let whose = isolation == "job" ? "its worker" : "its plugin's worker, shared by the plugin's jobs,"
            #expect(crashed.outcome == "crashed")
            #expect(crashed.reason == "\(whose) died of SIGSEGV in chunk 5")
            #expect(crashed.chunks == 4)
        }

        @Test func aProcessLeftHoldingTheWorkersOutputDoesNotHoldUpTheJob() async throws {
            let (status, events, _) = try await run(["--budget", "20s", "--only", "spawns-helper", "--allow-exec"])
            #expect(status == 0)
            let finished = try #require(events.first { $0.event == "finished" })
            #expect(finished.outcome == "completed")
            // Finished when its worker exited, not when the helper's sleep or the budget ran out.
            #expect(finished.elapsed ?? 99 < 5)
        }

        @Test(.disabled(if: Fixtures.sanitized, "needs an address-space limit"))
        func limitsEndTheJobThatHitsThem() async throws {
            // A 30 s budget: burns-cpu must use its 1 s of CPU before the wall
            // clock's deadline, and a busy machine gives it a fraction of a core.
            let (status, events, _) = try await run([
                "--budget", "30s", "--memory", "256MiB", "--cpu-time", "1s", "--only", "allocates", "--only", "burns-cpu", "--only", "fine",
            ])
            #expect(status == 2)
            #expect(outcomes(events) == ["fine": "completed", "allocates": "crashed", "burns-cpu": "crashed"])
            #expect(reason(events, "allocates").hasPrefix("its worker died of SIGABRT in chunk "))
            #expect(reason(events, "allocates").hasSuffix("; it may have hit its memory limit (--memory 256MiB)"))
            #expect(reason(events, "burns-cpu") == "its worker died of SIGXCPU; it used up its CPU time limit (--cpu-time 1s)")
        }

        @Test func theExamplesRunTheSameInWorkers() async throws {
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", "--isolate", "job", "--budget", "800ms"] + Fixtures.examplePlugins + ProcessTests.Second.CurfewExecutableTests.exampleParameters)
            #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            #expect(result.stdout.hasSuffix("5 jobs: 4 completed, 1 expired\n"))
        }

        @Test func sigtermReachesJobsInWorkers() async throws {
            let fixture = try RunnerFixture()
            let (process, output) = try Fixtures.startCurfew(
                ["run", fixture.path, "--isolate", "job", "--only", "tick", "--budget", "60s", "--grace", "400ms", "--param", "tick-ms=5", "--json"])
            var text = await Fixtures.read(output.fileHandleForReading) { $0.contains("\"event\":\"started\"") }
            kill(process.processIdentifier, SIGTERM)
            text += await Fixtures.readToEnd(output.fileHandleForReading)
            await Fixtures.wait(for: process)
            #expect(process.terminationStatus == 143)
            #expect(text.contains("\"outcome\":\"expired\",\"chunks\":"))
            #expect(text.contains("\"reason\":\"host shutting down; cleanup ran\""))
        }

        @Test func limitsNeedIsolation() {
            #expect(throws: UsageError("--memory, --cpu-time and --open-files need --isolate job or plugin", command: .run)) {
                try Invocation(parsing: ["run", "--memory", "1GiB"])
            }
            #expect(Quantities.size("256MiB") == 256 << 20)
            #expect(Quantities.size("2G") == 2 << 30)
            #expect(Quantities.size("4096") == 4096)
            #expect(Quantities.size("lots") == nil)
        }
    }

    /// The issue's whole scenario: the examples and every misbehaving fixture in
    /// one folder, run with --isolate job.
    @Suite(.timeLimit(.minutes(1))) struct IsolationFolderTests {
        @Test(.disabled(if: Fixtures.sanitized, "needs an address-space limit"))
        func everyValidJobCompletesAndEachBadOneGetsItsOutcome() async throws {
            let folder = Fixtures.temporaryFolder("isolated-folder")
            for plugin in Fixtures.examplePlugins {
                try FileManager.default.copyItem(atPath: plugin, toPath: folder + "/" + URL(fileURLWithPath: plugin).lastPathComponent)
            }
            try FileManager.default.copyItem(atPath: try Fixtures.compile("crashing_jobs.c"), toPath: folder + "/crashing.so")
            for (variant, name) in [(1, "entry-segfaults"), (2, "constructor-aborts")] {
                try FileManager.default.copyItem(
                    atPath: try Fixtures.compile("bad_loader.c", defines: ["VARIANT=\(variant)"]), toPath: folder + "/\(name).so")
            }
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", folder, "--isolate", "job", "--jobs", "16", "--budget", "2s", "--memory", "256MiB", "--cpu-time", "1s", "--json", "--allow-exec"]
                    + ProcessTests.Second.CurfewExecutableTests.exampleParameters)
            #expect(result.status == 2)
            let events = try OutputEvent.all(in: result.stdout)
            let outcomes = Dictionary(uniqueKeysWithValues: events.filter { $0.event == "finished" }.map { ($0.job!, $0.outcome!) })
            // With --cpu-time 1s an endless chunk meets its CPU limit, or, on a busy
            // machine that gives it less than a core, the 2 s deadline first.
            var expected = [
                "sum-squares": "completed", "swift-primes": "completed", "sync-worker": "completed", "swift-uploader": "completed",
                "timer-counter": "expired",
                "fine": "completed", "prints": "completed", "segfault": "crashed", "abort": "crashed", "exits": "crashed",
                "loops-in-expire": "terminated", "spawns-helper": "completed", "ticks": "expired",
                "crashes-at-5": "crashed",
            ]
            let reasons = Dictionary(uniqueKeysWithValues: events.filter { $0.event == "finished" }.map { ($0.job!, $0.reason ?? "") })
            for endless in ["loops-in-chunk", "burns-cpu", "hangs-at-31"] {
                let outcome = outcomes[endless]
                #expect(outcome == "crashed" || outcome == "terminated")
                expected[endless] = outcome
                if outcome == "crashed" {
                    #expect(reasons[endless] == "its worker died of SIGXCPU; it used up its CPU time limit (--cpu-time 1s)")
                } else {
                    #expect(reasons[endless]?.contains("at the hard deadline") == true)
                }
            }
            // It allocates until its memory limit ends its worker; beside two
            // CPU hogs, its 2 s deadline once came first (its expire waited 500 ms).
            let allocates = outcomes["allocates"]
            #expect(allocates == "crashed" || reasons["allocates"]?.contains("at the hard deadline") == true, "\(reasons["allocates"] ?? "")")
            expected["allocates"] = allocates
            let differing = Set(outcomes.keys).union(expected.keys).filter { outcomes[$0] != expected[$0] }.sorted()
            #expect(outcomes == expected, "\(differing.map { "\($0): \(outcomes[$0] ?? "none") (\(reasons[$0] ?? "")), not \(expected[$0] ?? "none")" })")
            #expect(reasons["loops-in-expire"]?.contains("at the hard deadline") == true)
            let rejected = events.filter { $0.event == "rejected" }
            #expect(rejected.count == 2)
            #expect(rejected.allSatisfy { ($0.reason ?? "").hasPrefix("Crashed while loading: the scanner worker died of SIG") })
        }
    }
}
