import Foundation
import Testing

@testable import Curfew

extension ProcessTests.Second {
    /// `request_next_run`, the host service a job asks for its next run with,
    /// as a run reports it in every mode.
    @Suite(.timeLimit(.minutes(2))) struct NextRunRequestTests {
        @Test(arguments: ["none", "job"])
        func aJobsRequestIsReportedAsAnEvent(isolation: String) async throws {
            let plugin = try Fixtures.compile("serve_jobs.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", plugin, "--only", "asks", "--param", "next=2.25", "--param", "bad=1", "--isolate", isolation, "--json"])
            #expect(result.status == 0, "\(result.stderr)")
            let events = try OutputEvent.all(in: result.stdout)
            let answers = events.filter { $0.event == "log" && $0.job == "asks" }.compactMap(\.message)
            // NaN, -1, infinity and eleven years are refused (CURFEW_ERROR), each said in the job's log.
            #expect(answers.filter { $0 == "bad request answered 1" }.count == 4, "\(answers)")
            #expect(answers.filter { $0.hasPrefix("next run not requested:") }.count == 4, "\(answers)")
            #expect(answers.last == "request answered 0")
            let requests = events.filter { $0.event == "next-run" }
            #expect(requests.count == 1)
            #expect(requests.first?.job == "asks")
            #expect(requests.first?.after == 2.25)
        }
    }
}

/// The checks on `request_next_run`'s argument, which plugin code chooses.
@Suite struct NextRunDelayTests {
    @Test func onlyAFiniteDelayUpToTenYearsIsAccepted() {
        #expect(NextRunRequest.delay(seconds: 0) == .zero)
        #expect(NextRunRequest.delay(seconds: 1.5) == .milliseconds(1500))
        #expect(NextRunRequest.delay(seconds: Double(NextRunRequest.maximum.components.seconds)) == NextRunRequest.maximum)
        for bad in [-0.001, .nan, .infinity, -.infinity, Double(NextRunRequest.maximum.components.seconds) + 1, 1e300] {
            #expect(NextRunRequest.delay(seconds: bad) == nil, "\(bad)")
        }
    }
}
