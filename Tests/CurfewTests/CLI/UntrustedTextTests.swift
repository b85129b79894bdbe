import Foundation
import Testing

@testable import Curfew
@testable import CurfewCLI

extension ProcessTests.Second {
    /// Nothing a job writes can look like a line of the host's, or reach the
    /// terminal as a control sequence.
    @Suite(.timeLimit(.minutes(1))) struct UntrustedTextTests {
        @Test func controlCharactersAreEscapedOnOneLine() {
            #expect(Untrusted.line("plain text") == "plain text")
            #expect(Untrusted.line("a\nb\r\tc") == "a\\nb\\r\\tc")
            #expect(Untrusted.line("\u{1B}[31mred\u{1B}[0m") == "\\x1B[31mred\\x1B[0m")
            #expect(Untrusted.line("\u{7F}\u{9B}31m") == "\\x7F\\x9B31m")
            #expect(Untrusted.line("abc\u{202E}cba") == "abc\\u{202E}cba")
            #expect(Untrusted.line("é ✓ 日本") == "é ✓ 日本", "printable text outside ASCII stays as it is")
        }

        @Test func anyProgressAJobReportsIsShownWithoutATrap() {
            #expect(Reporter.describe(JobProgress(completed: 3, total: 4)) == "3/4 (75%)")
            #expect(Reporter.describe(JobProgress(completed: .max, total: 1)) == "9223372036854775807/1 (>100%)")
            #expect(Reporter.describe(JobProgress(completed: .min, total: 1)) == "-9223372036854775808/1 (<0%)")
            #expect(Reporter.describe(JobProgress(completed: 5, total: 0)) == "5")
        }

        @Test func linesSplitAtLineBreaksAndEscapeTheRest() {
            #expect(Untrusted.lines("one") == ["one"])
            #expect(Untrusted.lines("one\ntwo\r\nthree\rfour") == ["one", "two", "three\\rfour"])
            #expect(Untrusted.lines("") == [""])
            #expect(Untrusted.lines("end\n") == ["end", ""])
        }

        @Test(arguments: Isolation.allCases)
        func aJobCannotForgeAHostLine(isolation: Isolation) async throws {
            let plugin = try Fixtures.compile("hostile_jobs.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable, ["run", "--isolate", isolation.rawValue, "--only", "forges", plugin],
                timeout: .seconds(20))
            #expect(result.status == 2, "the job fails: \(result.stderr)")
            let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
            #expect(!lines.contains { $0.hasPrefix("finished  fake-job") || $0.hasPrefix("finished  other") }, "\(result.stdout)")
            #expect(!result.stdout.contains("\u{1B}") && !result.stdout.contains("\r"), "no raw escape reaches the terminal")
            // The multi-line message is one entry: its later lines indented under it.
            #expect(lines.contains("forges: hello"))
            #expect(lines.contains("        finished  fake-job: completed (work done) after 1 chunk, 0.00s"))
            #expect(lines.contains("forges: warning: \\x1B[2J\\x1B[31mred\\x1B[0m and\\rover"))
            // The reason carries the logged error on one line, in the event and the table.
            #expect(lines.contains { $0.hasPrefix("finished  forges: failed (chunk returned failed: disk\\nfinished  other: completed)") })
        }
    }
}
