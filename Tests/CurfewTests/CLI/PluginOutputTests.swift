import Foundation
import Testing

@testable import Curfew
@testable import CurfewHost
@testable import CurfewCLI

extension ProcessTests.Second {
    /// What plugin code writes to fds 1 and 2 becomes its jobs' output, in
    /// every mode; the host's own output stays whole, and `exit()` in process
    /// is reported, not mistaken for success.
    @Suite(.timeLimit(.minutes(1))) struct PluginOutputTests {
        /// Every line a run printed, each of which must be a JSON object.
        func events(_ stdout: String) throws -> [[String: Any]] {
            try stdout.split(separator: "\n").map { line in
                let object = try JSONSerialization.jsonObject(with: Data(line.utf8))
                return try #require(object as? [String: Any], "not a JSON object: \(line.prefix(200))")
            }
        }

        /// The text of every output line the events carry, from `log` events
        /// (`[stdout] …`) and unattributed `output` events alike.
        func printed(_ events: [[String: Any]], stream: String) -> [String] {
            events.compactMap { event in
                if event["event"] as? String == "log", let message = event["message"] as? String, message.hasPrefix("[\(stream)] ") {
                    return String(message.dropFirst(stream.count + 3))
                }
                if event["event"] as? String == "output", event["stream"] as? String == stream { return event["line"] as? String }
                return nil
            }
        }

        @Test(arguments: Isolation.allCases)
        func jsonStaysJSONAndNoLineIsLost(isolation: Isolation) async throws {
            let plugin = try Fixtures.compile("hostile_jobs.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", plugin, "--json", "--isolate", isolation.rawValue, "--only", "prints", "--param", "lines=3000"],
                timeout: .seconds(30))
            #expect(result.status == 0, "\(result.stderr)")
            let events = try events(result.stdout)
            let out = printed(events, stream: "stdout")
            // Compared whole, reported by count: a failure must not print 6,000 lines.
            let expectedOut = (0..<3000).map { "out \($0) {\"event\":\"finished\"}" } + ["no newline at the end"]
            let allOut = out == expectedOut
            #expect(allOut, "\(out.count) of \(expectedOut.count) stdout lines, last: \(out.last ?? "none")")
            let err = printed(events, stream: "stderr")
            let allErr = err == (0..<3000).map { "err \($0)" }
            #expect(allErr, "\(err.count) of 3000 stderr lines")
            // The job's output comes before the event that says it ended.
            let finished = try #require(events.lastIndex { $0["event"] as? String == "finished" })
            let lastOutput = try #require(events.lastIndex { ($0["message"] as? String ?? $0["line"] as? String)?.contains("no newline") == true })
            #expect(lastOutput < finished)
        }

        // The budget is long so that a busy machine cannot end `logs-huge` mid-message: the test is
        // about the message arriving whole, not fast. `ticks` spends it all, so keep it only as long as that needs.
        @Test(.disabled(if: Fixtures.sanitized, "a 1 MiB message within a 5 s budget"), arguments: Isolation.allCases)
        func everyHostileJobAtOnceStillGivesJSONLinesWithNothingLost(isolation: Isolation) async throws {
            let plugin = try Fixtures.compile("hostile_jobs.c")
            let folder = Fixtures.temporaryFolder("all-at-once")
            let pidFile = folder + "/pids"
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", plugin, "--json", "--isolate", isolation.rawValue, "--budget", "5s", "--jobs", "5"]
                    + ["prints", "forges", "logs-huge", "forks", "ticks"].flatMap { ["--only", $0] }
                    + ["--param", "lines=2000", "--param", "children=3", "--param", "setsid=1", "--param", "pidfile=\(pidFile)"]
                    + Fixtures.allowingWrite(folder, in: isolation),
                timeout: .seconds(30))
            #expect(result.status == 2, "forges fails, the rest end cleanly: \(result.stderr.prefix(300))")
            let events = try events(result.stdout)  // every line parses, or this throws
            let out = printed(events, stream: "stdout").filter { $0.hasPrefix("out ") }
            #expect(out.count == 2000)
            let messages = events.compactMap { $0["message"] as? String }
            #expect(messages.contains("hello\nfinished  fake-job: completed (work done) after 1 chunk, 0.00s"), "a multi-line message, whole")
            #expect(messages.contains { $0.count == 1 << 20 }, "the 1 MiB message, whole")
            let finished = events.filter { $0["event"] as? String == "finished" }.compactMap { $0["job"] as? String }
            #expect(finished.sorted() == ["forges", "forks", "logs-huge", "prints", "ticks"])
            let pids = try String(contentsOfFile: pidFile, encoding: .utf8).split(separator: "\n").compactMap { pid_t($0) }
            for pid in pids { #expect(await Fixtures.isGone(pid)) }
        }

        @Test func inProcessOutputOfConcurrentJobsIsTheirPlugins() async throws {
            let plugin = try Fixtures.compile("hostile_jobs.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", plugin, "--json", "--jobs", "2", "--only", "prints", "--only", "ticks", "--budget", "1s",
                 "--param", "lines=500"],
                timeout: .seconds(30))
            #expect(result.status == 0, "\(result.stderr)")
            let events = try events(result.stdout)
            #expect(printed(events, stream: "stdout").filter { $0.hasPrefix("out ") }.count == 500)
            // Two jobs of one file run at once: a line is the plugin's, not a guess at a job.
            let unattributed = events.filter { $0["event"] as? String == "output" }
            #expect(!unattributed.isEmpty)
            #expect(unattributed.allSatisfy { $0["plugin"] as? String == plugin })
        }

        @Test func exitInAChunkInProcessSaysWhichJobAndExitsFour() async throws {
            let plugin = try Fixtures.compile("hostile_jobs.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable, ["run", plugin, "--json", "--only", "exits", "--param", "status=0"], timeout: .seconds(20))
            #expect(result.status == ExitCode.jobEndedHost)
            #expect(result.stderr.contains("Error: Job 'exits' called exit(0) in the host's process"), "\(result.stderr)")
            let events = try events(result.stdout)
            let exit = try #require(events.last)
            #expect(exit["event"] as? String == "host-exit")
            #expect(exit["job"] as? String == "exits")
            #expect(exit["status"] as? Int == 0)
        }

        @Test func exitInAChunkIsContainedByAWorker() async throws {
            let plugin = try Fixtures.compile("hostile_jobs.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable, ["run", plugin, "--isolate", "job", "--only", "exits", "--param", "status=0"],
                timeout: .seconds(20))
            #expect(result.status == ExitCode.jobNotClean)
            #expect(result.stdout.contains("finished  exits: crashed"), "\(result.stdout)")
        }

        @Test func curfewTestKeepsItsJSONWhenTheJobPrints() async throws {
            let plugin = try Fixtures.compile("hostile_jobs.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable, ["test", plugin, "--job", "prints", "--json", "--param", "lines=50"], timeout: .seconds(20))
            #expect(result.status == 0, "\(result.stderr)")
            let events = try events(result.stdout)
            #expect(printed(events, stream: "stdout").count == 51)
            #expect(events.last?["event"] as? String == "result")
        }
    }
}
