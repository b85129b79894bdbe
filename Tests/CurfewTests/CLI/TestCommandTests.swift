import Foundation
import Glibc
import Testing

@testable import Curfew
@testable import CurfewCLI

extension ProcessTests.First {
    /// `curfew test` as a user runs it.
    @Suite(.timeLimit(.minutes(1))) struct TestCommandTests {
        @Test func aViolationMakesTheStatusTwo() async throws {
            let path = try Fixtures.compile("harness_jobs.c")
            let result = try await Fixtures.run(Fixtures.curfewExecutable, ["test", path, "--job", "never-ends"])
            #expect(result.status == 2)
            #expect(result.stdout.hasSuffix("1 contract violation:\n  - Background task 'upload', begun at 0.000s, was never ended.\n"))
            let clean = try await Fixtures.run(Fixtures.curfewExecutable, ["test", path, "--job", "steady", "--expire-at-chunk", "2", "--json"])
            #expect(clean.status == 0)
            let last = try #require(clean.stdout.split(separator: "\n").last)
            #expect(last == #"{"event":"result","job":"steady","outcome":"expired","reason":"time ran out; cleanup ran","chunks":1,"violations":[]}"#)
            // Before: "kind":"chunk 1".
            #expect(clean.stdout.contains(#""kind":"chunk","chunk":1,"detail":"#))
        }

        /// Before: "Outcome: failed … No contract violations." and status 0.
        @Test func aJobThatCannotStartFailsTheTest() async throws {
            let path = try Fixtures.compile("runner_jobs.c")
            let failed = try await Fixtures.run(Fixtures.curfewExecutable, ["test", path, "--job", "create-fails"])
            #expect(failed.status == 2, "\(failed.stdout)")
            #expect(failed.stdout.contains("Outcome: failed (create failed: missing configuration) after 0 chunks.\nNo contract violations.\n"))
            let late = try await Fixtures.run(Fixtures.curfewExecutable, ["test", path, "--job", "late-begin", "--json"])
            #expect(late.status == 2, "\(late.stdout)")
            let last = try #require(late.stdout.split(separator: "\n").last)
            #expect(last.hasPrefix(#"{"event":"result","job":"late-begin","outcome":"failed","reason":"create returned with no background task open; begin the task before create returns","chunks":0,"violations":["create returned with no background task open"#))
            let begun = try await Fixtures.run(Fixtures.curfewExecutable, ["test", path, "--job", "begun-then-fails"])
            #expect(begun.status == 2)
            #expect(begun.stdout.contains("end tasks  'download': ended by the host, their handlers not called"), "\(begun.stdout)")
        }

        /// Before: a progress line came and went across runs of `sync-worker`,
        /// unmarked. What the job's own threads report is marked as varying;
        /// the rest of the trace, and the verdict, are the same every run.
        @Test func aTaskDrivenJobsTraceIsTheSameButForWhatItsThreadsSay() async throws {
            var seen: Set<[Substring]> = []  // times are virtual: whole lines compare
            for _ in 0..<5 {
                let result = try await Fixtures.run(Fixtures.curfewExecutable, ["test", Fixtures.examplePlugins[2], "--json"])
                #expect(result.status == 0)
                let steady = result.stdout.split(separator: "\n").filter { !$0.contains(#""varies":true"#) }
                #expect(steady.last?.hasPrefix(#"{"event":"result","job":"sync-worker","outcome":"expired""#) == true)
                seen.insert(steady)
            }
            #expect(seen.count == 1, "\(seen)")
        }

        @Test func choosingTheJob() async throws {
            let path = try Fixtures.compile("harness_jobs.c")
            let result = try await Fixtures.run(Fixtures.curfewExecutable, ["test", path])
            #expect(result.status == 1)
            #expect(result.stderr == "Error: \(path) has 6 jobs; choose one with --job (steady, never-ends, hangs-in-expire, talks-after-destroy, bad-progress, quick-task).\n")
        }

        @Test func help() {
            #expect(Help.text(.test) == """
                OVERVIEW: Run one job against virtual time and check that it keeps the contract.

                Each chunk advances a virtual clock by --chunk-cost, or the grant expires
                just before chunk --expire-at-chunk, so a 180 s grant takes milliseconds
                and a chunked job gives the same trace every time. A task-driven job
                expires right after create. Checked: tasks begun and never ended, hooks
                that do not return (5 s of wall-clock time), host calls after destroy,
                chunks that run into the hard deadline, negative or absurd progress.

                USAGE: curfew test <plugin> [--job <name>] [--budget <duration>] [--grace <duration>] [--chunk-cost <duration>] [--stall <duration>] [--expire-at-chunk <n>] [--param <key=value> ...] [--json]

                ARGUMENTS:
                  <plugin>                A plugin (.so) or a foreign-job manifest
                                          (.curfew.json).

                OPTIONS:
                  --job <name>            The job to test. (default: the plugin's only job)
                  --budget <duration>     The grant's budget, in virtual time. (default: 180s)
                  --grace <duration>      Lead of the expiration before the deadline. (default:
                                          5s, at most a quarter of the budget)
                  --chunk-cost <duration>
                                          Virtual time each chunk takes. (default: 1s)
                  --stall <duration>      Expire the job (stalled) when its progress does not
                                          move for this long, in virtual time, as serve's
                                          "stall" does.
                  --expire-at-chunk <n>   Chunks take no time and the grant expires just before
                                          chunk n (from 1).
                  --param <key=value>     A parameter the job reads with param(); repeat for
                                          more.
                  --json                  Print the trace and the result as JSON Lines.
                  -h, --help              Show help information.

                EXIT STATUS:
                  0    the job kept the contract and completed or expired cleanly
                  1    the plugin or the job could not be loaded
                  2    the job broke the contract (each violation is listed), or it failed
                       (say, its create returned an error), was terminated or was refused
                  64   usage error

                """)
        }

        @Test func usageErrors() {
            let usage = "Usage: curfew test <plugin> [--job <name>] [--budget <duration>] [--grace <duration>] [--chunk-cost <duration>] [--stall <duration>] [--expire-at-chunk <n>] [--param <key=value> ...] [--json]\n  See 'curfew test --help' for more information.\n"
            #expect(usageErrorText(["test"]) == "Error: Missing expected argument '<plugin>'\n" + usage)
            #expect(usageErrorText(["test", "a.so", "--chunk-cost", "1s", "--expire-at-chunk", "2"]) == "Error: --chunk-cost and --expire-at-chunk cannot be used together\n" + usage)
            #expect(usageErrorText(["test", "a.so", "--expire-at-chunk", "0"]) == "Error: The value '0' is invalid for '--expire-at-chunk <n>': use a chunk number from 1\n" + usage)
            #expect(throws: Never.self) { try Invocation(parsing: ["test", "a.so", "--expire-at-chunk", "4", "--budget", "10s"]) }
        }
    }
}
