import Foundation
import Testing

@testable import Curfew
@testable import CurfewCLI
@testable import CurfewHost

extension ProcessTests.Second {
    /// A policy's stall time: a job whose progress stops moving is expired
    /// `stalled`, in process, in a worker and on `curfew test`'s clock.
    @Suite(.timeLimit(.minutes(1))) struct StallTests {
        @Test(arguments: [Isolation.none, .job])
        func aJobWhoseProgressStopsIsExpiredStalled(isolation: Isolation) async throws {
            let plugin = try Fixtures.compile("stall_jobs.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", plugin, "--json", "--isolate", isolation.rawValue, "--stall", "300ms", "--budget", "20s"], timeout: .seconds(30))
            let events = try OutputEvent.all(in: result.stdout)
            let finished = try #require(events.first { $0.event == "finished" }, "\(result.stderr.prefix(500))")
            #expect(finished.outcome == "expired")
            #expect(finished.reason == "stalled: its progress stopped moving; cleanup ran")
            #expect(events.contains { $0.event == "log" && $0.message == "expire: stalled" })
            // The last move is at or after the last progress event (they are
            // at most one every 100 ms): the expiration comes a stall time
            // after it, with room for a busy machine on the late side only.
            let moved = try #require(events.last { $0.event == "progress" }?.time)
            let expiring = try #require(events.first { $0.event == "expiring" }?.time)
            #expect(expiring - moved >= 0.3)
            #expect(expiring - moved < 1.3)
            #expect(result.status == 0)
        }

        /// On `curfew test`'s clock the stall is exact: the expiration comes
        /// the stall time after the last move, to the virtual nanosecond.
        @Test func theHarnessExpiresItAtTheStallTime() async throws {
            let plugin = try Fixtures.compile("stall_jobs.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["test", plugin, "--json", "--stall", "2500ms", "--chunk-cost", "1s", "--param", "pause_ms=0", "--param", "moving=4"],
                timeout: .seconds(30))
            let lines = result.stdout.split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
            let moves = lines.filter { $0["kind"] as? String == "progress" }.compactMap { $0["time"] as? Double }
            let expiring = try #require(lines.first { $0["kind"] as? String == "expiring" })
            #expect(moves == [0, 1, 2, 3])
            #expect(expiring["time"] as? Double == 5.5)
            #expect(expiring["detail"] as? String == "stalled: its progress stopped moving")
            #expect(lines.last?["outcome"] as? String == "expired")
            #expect(result.status == 0, "\(result.stdout)")
        }

        @Test func theConfigAndTheCommandLineTakeAStallTime() throws {
            let config = try ServeConfig.parse(Array(#"{"defaults": {"stall": "30s"}, "jobs": {"a": {"stall": "1s"}}}"#.utf8), file: "c.json")
            #expect(config.policy(for: "a").stall == .seconds(1))
            #expect(config.policy(for: "b").stall == .seconds(30))
            // A job's own false turns the defaults' off.
            let off = try ServeConfig.parse(Array(#"{"defaults": {"stall": "30s"}, "jobs": {"a": {"stall": false}}}"#.utf8), file: "c.json")
            #expect(off.policy(for: "a").stall == .zero)
            #expect(throws: CurfewError.self) { try ServeConfig.parse(Array(#"{"jobs": {"a": {"stall": true}}}"#.utf8), file: "c.json") }
            #expect(throws: CurfewError.self) {
                try ServeConfig.parse(Array(#"{"jobs": {"a": {"stall": "50ms"}}}"#.utf8), file: "c.json")
            }
            guard case .run(let options) = try Invocation(parsing: ["run", "x.so", "--stall", "2s"]) else {
                Issue.record("not a run")
                return
            }
            #expect(options.policy.stall == .seconds(2))
            #expect(throws: UsageError.self) { try Invocation(parsing: ["run", "x.so", "--stall", "10ms"]) }
        }
    }
}
