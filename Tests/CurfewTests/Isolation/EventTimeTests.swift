import Foundation
import Testing

@testable import Curfew
@testable import CurfewCLI

extension ProcessTests.First {
    /// An event's time is when it happened, not when the host got around to
    /// writing it, however much output another job floods it with.
    @Suite(.timeLimit(.minutes(1))) struct EventTimeTests {
        @Test(arguments: Isolation.allCases)
        func aBystandersTimesDoNotLagBehindAFlood(isolation: Isolation) async throws {
            let plugin = try Fixtures.compile("hostile_jobs.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", plugin, "--json", "--isolate", isolation.rawValue, "--jobs", "2", "--only", "prints", "--only", "forks",
                 "--param", "lines=20000", "--param", "children=0"],
                timeout: .seconds(60))
            #expect(result.status == 0, "\(result.stderr.prefix(300))")
            struct Timed: Decodable { let event: String; let job: String?; let time: Double; let elapsed: Double? }
            let events = try result.stdout.split(separator: "\n").map { try JSONDecoder().decode(Timed.self, from: Data($0.utf8)) }
            let started = try #require(events.first { $0.event == "started" && $0.job == "forks" })
            let finished = try #require(events.first { $0.event == "finished" && $0.job == "forks" })
            let elapsed = try #require(finished.elapsed)
            // The flood is written around the bystander's events: written late, they
            // still say when they happened.
            #expect(abs((finished.time - started.time) - elapsed) < 0.1, "started \(started.time), finished \(finished.time), elapsed \(elapsed)")
            let floodEnd = try #require(events.last { $0.event == "log" && $0.job == "prints" })
            #expect(finished.time < floodEnd.time, "the bystander ended long before the flood did")
        }
    }
}
