import Foundation
import Testing

@testable import Curfew
@testable import CurfewHost
@testable import CurfewCLI

extension ProcessTests.First {
    /// A run stopped from outside — its output closed, its terminal hung up —
    /// still expires every job, lets the cleanup hooks run, and exits with a
    /// status that says why.
    @Suite(.timeLimit(.minutes(1))) struct StopTests {
        /// Starts `curfew` with stdout on a pipe and reads until `lines` lines came.
        func start(_ arguments: [String], lines: Int) async throws -> (Process, Pipe, String) {
            let (process, output) = try Fixtures.startCurfew(arguments)
            let text = await Fixtures.read(output.fileHandleForReading) { $0.split(separator: "\n").count >= lines }
            return (process, output, text)
        }

        @Test(arguments: Isolation.allCases)
        func closingTheOutputExpiresTheJobsAndExits141(isolation: Isolation) async throws {
            let plugin = try Fixtures.compile("hostile_jobs.c")
            let folder = Fixtures.temporaryFolder("stop")
            let marker = folder + "/marker"
            let (process, output, text) = try await start(
                ["run", plugin, "--only", "ticks", "--isolate", isolation.rawValue, "--budget", "30s", "--grace", "500ms",
                 "--param", "marker=\(marker)"] + Fixtures.allowingWrite(folder, in: isolation), lines: 4)
            #expect(text.contains("ticks: tick"), "\(text)")
            // As `| head -4` does: the reader goes away while the job is running.
            try output.fileHandleForReading.close()
            let signalled = ContinuousClock.now
            await Fixtures.wait(for: process)
            #expect(process.terminationReason == .exit, "not killed by SIGPIPE")
            #expect(process.terminationStatus == ExitCode.outputClosed)
            #expect(ContinuousClock.now - signalled < .seconds(10), "within the lead, not the budget")
            let cleanup = (try? String(contentsOfFile: marker, encoding: .utf8)) ?? ""
            #expect(cleanup == "cleanup ran: shutdown\n")
        }

        /// The first SIGTERM waits for cleanups; a second does not: a
        /// cleanup that never ends cannot hold the host for its lead.
        @Test func aSecondSignalEndsTheHostWithoutWaitingForCleanups() async throws {
            let plugin = try Fixtures.compile("crashing_jobs.c")
            let (process, output, startText) = try await start(
                ["run", plugin, "--only", "loops-in-expire", "--isolate", "job", "--budget", "2m", "--grace", "30s", "--json"], lines: 2)
            var text = await Fixtures.read(output.fileHandleForReading, startingWith: startText) { $0.contains("\"event\":\"started\"") }
            kill(process.processIdentifier, SIGTERM)
            text = await Fixtures.read(output.fileHandleForReading, startingWith: text) { $0.contains("\"event\":\"expiring\"") }
            #expect(process.isRunning, "the first signal waits for the cleanup")
            let again = ContinuousClock.now
            kill(process.processIdentifier, SIGTERM)
            await Fixtures.wait(for: process)
            #expect(ContinuousClock.now - again < .seconds(20), "not the 30 s lead")
            #expect(process.terminationReason == .exit)
            #expect(process.terminationStatus == 128 + SIGTERM)
        }

        @Test func sighupExpiresEveryJobLikeSigterm() async throws {
            let plugin = try Fixtures.compile("hostile_jobs.c")
            let (process, output, startText) = try await start(
                ["run", plugin, "--only", "ticks", "--budget", "30s", "--grace", "400ms", "--json"], lines: 2)
            var text = await Fixtures.read(output.fileHandleForReading, startingWith: startText) { $0.contains("\"event\":\"started\"") }
            kill(process.processIdentifier, SIGHUP)
            text += await Fixtures.readToEnd(output.fileHandleForReading)
            await Fixtures.wait(for: process)
            #expect(process.terminationReason == .exit)
            #expect(process.terminationStatus == 128 + SIGHUP)
            let finished = try OutputEvent.all(in: text).filter { $0.event == "finished" }
            #expect(finished.count == 1)
            #expect(finished.first?.reason == "host shutting down; cleanup ran")
        }
    }
}
