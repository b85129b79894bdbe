import Foundation
import Testing
import CurfewFormats

@testable import Curfew
@testable import CurfewCLI

extension ProcessTests.Second {
    /// Everything a worker says and prints reaches the host whole, under load
    /// and at the end of a job, and each job ends exactly once.
    @Suite(.timeLimit(.minutes(2))) struct WorkerOutputTests {
        func finished(_ stdout: String) throws -> [OutputEvent] {
            try OutputEvent.all(in: stdout).filter { $0.event == "finished" }
        }

        @Test(arguments: [Isolation.job, .plugin])
        func aHugeLogMessageArrivesWhole(isolation: Isolation) async throws {
            let plugin = try Fixtures.compile("hostile_jobs.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable, ["run", plugin, "--json", "--isolate", isolation.rawValue, "--only", "logs-huge"],
                timeout: .seconds(30))
            #expect(result.status == 0, "\(result.stderr.prefix(500))")
            let events = try OutputEvent.all(in: result.stdout)
            let huge = events.filter { $0.event == "log" && $0.job == "logs-huge" && ($0.message?.count ?? 0) > 1000 }
            #expect(huge.count == 1)
            #expect(huge.first?.message == String(repeating: "x", count: 1 << 20))
            #expect(try finished(result.stdout).map { $0.outcome } == ["completed"])
        }

        @Test(.disabled(if: Fixtures.sanitized, "17 MiB through a worker within its timeout"))
        func aLogMessageOverTheLimitIsCutWithANote() async throws {
            let plugin = try Fixtures.compile("hostile_jobs.c")
            let bytes = 17 << 20
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", plugin, "--json", "--isolate", "job", "--only", "logs-huge", "--param", "bytes=\(bytes)"],
                timeout: .seconds(30))
            #expect(result.status == 0, "\(result.stderr.prefix(500))")
            let events = try OutputEvent.all(in: result.stdout)
            let huge = try #require(events.first { $0.event == "log" && ($0.message?.count ?? 0) > 1000 }?.message)
            #expect(huge.utf8.count <= WorkerProtocol.maximumLogMessageBytes)
            #expect(huge.hasSuffix(" … [truncated: \(bytes) bytes, more than the 16 MiB a message from a worker may hold]"))
            #expect(huge.hasPrefix(String(repeating: "x", count: 1000)))
            #expect(try finished(result.stdout).map { $0.outcome } == ["completed"])
        }

        @Test func aLogMessageIsCutByItsEscapedSize() {
            let limit = WorkerProtocol.maximumLogMessageBytes
            let escapedSize = { (text: String) in JSONLine.quote(text).utf8.count - 2 }
            let controls = String(repeating: "\u{01}", count: limit / 4)  // 6 bytes each once escaped
            let cut = WorkerProtocol.truncatedLogMessage(controls)
            #expect(escapedSize(cut) <= limit)
            #expect(cut.hasSuffix("[truncated: \(limit / 4) bytes, more than the 16 MiB a message from a worker may hold]"))
            let breaks = String(repeating: "\n", count: limit / 4)  // 2 bytes each: fits
            #expect(WorkerProtocol.truncatedLogMessage(breaks) == breaks)
            let wide = String(repeating: "é", count: limit / 2 + 1)  // 2 bytes each, one too many
            let wideCut = WorkerProtocol.truncatedLogMessage(wide)
            #expect(wideCut.utf8.count <= limit && wideCut.hasPrefix("éé") && !wideCut.contains("\u{FFFD}"), "cut between characters")
        }

        @Test func aMessageLineOverTheLimitIsDroppedWholeNeverReadInPieces() {
            var buffer = LineBuffer(maximumLength: 8, dropsOverlongLines: true)
            let feed = { (text: String, buffer: inout LineBuffer) -> [String] in
                Array(text.utf8).withUnsafeBytes { buffer.append($0) }
            }
            #expect(feed("{\"a\":1}\n{\"too\":", &buffer) == ["{\"a\":1}"])
            #expect(feed("\"long\"}", &buffer) == [])
            #expect(buffer.droppedLines == 1)
            #expect(feed("}\n{\"b\":2}\n", &buffer) == ["{\"b\":2}"], "the rest of the long line is skipped, the next arrives")
            var pieces = LineBuffer(maximumLength: 4)
            #expect(feed("abcdefghij\n", &pieces) == ["abcd", "efgh", "ij"], "output lines come in pieces")
            #expect(feed("wxyz", &pieces) == [] && feed("\n", &pieces) == ["wxyz"], "a line of exactly the limit, once")
        }

        @Test func thousandsOfJobsInWorkersEachEndOnceWithTheirOwnOutcome() async throws {
            // Eight files of 250 jobs: a plugin declares at most 256.
            let count = 2000
            let plugins = try (0..<8).map { file in
                try Fixtures.compile("many_jobs.c", defines: ["JOB_COUNT=250", "JOB_PREFIX=\"p\(file)\""])
            }
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable, ["run"] + plugins + ["--json", "--isolate", "job", "--jobs", "32"], timeout: .seconds(100))
            #expect(result.status == 0, "\(result.stderr.prefix(500))")
            let events = try OutputEvent.all(in: result.stdout)
            let ends = try finished(result.stdout)
            let perJob = Dictionary(grouping: ends, by: { $0.job ?? "" })
            #expect(ends.count == count)
            #expect(perJob.count == count, "every job ended, each once")
            let notCompleted = ends.filter { $0.outcome != "completed" }
            #expect(notCompleted.isEmpty, "\(notCompleted.prefix(3).map { "\($0.job ?? ""): \($0.reason ?? "")" })")
            let logs = events.filter { $0.event == "log" && $0.message == "done" }
            #expect(Set(logs.compactMap(\.job)).count == count, "every job's own log line arrived")
        }
    }
}
