import Foundation
import Testing

/// In process (`--isolate none`) a fault in plugin code ends the host: one
/// line names the job, the hook, the chunk and the signal, after what the
/// job said before it, and the host exits 5. Before, it died of SIGSEGV
/// (139) with no line, the Swift backtracer printed the host's stack as the
/// job's stderr, and a raised SIGSEGV went back into the plugin.
extension ProcessTests.Second {
    @Suite(.timeLimit(.minutes(2))) struct PluginFaultTests {
        @Test(arguments: [
            ("null-at-3", "chunk", 3, "last words before the fault"),
            ("raises-segv", "chunk", 1, "last words before the signal"),
            ("faults-in-expire", "expire", nil, "expiring, then the fault"),
            ("overflows", "chunk", 1, "last words before the overflow"),
        ] as [(String, String, Int?, String)])
        func aFaultInPluginCodeIsNamedAndEndsTheHostWithStatusFive(job: String, hook: String, chunk: Int?, said: String) async throws {
            let plugin = try Fixtures.compile("fault_jobs.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable, ["run", plugin, "--only", job, "--budget", "300ms", "--no-state", "--json"],
                timeout: .seconds(30))
            #expect(result.status == 5, "\(result.stdout)\(result.stderr)")
            let lines = result.stdout.split(separator: "\n").map(String.init)
            let crash = try #require(lines.last, "\(result.stdout)")
            let place = chunk.map { ",\"chunk\":\($0)" } ?? ""
            #expect(crash.hasPrefix("{\"event\":\"host-crash\"") && crash.hasSuffix(
                "\"job\":\"\(job)\",\"hook\":\"\(hook)\"\(place),\"signal\":\"SIGSEGV\"}"), "\(crash)")
            #expect(lines.contains { $0.contains("\"event\":\"log\"") && $0.contains(said) }, "the job's last line arrives: \(result.stdout)")
            let named = chunk.map { "chunk \($0)" } ?? hook
            #expect(result.stderr.contains(
                "Error: Job '\(job)' crashed with SIGSEGV in \(named), in the host's process; the run ends here, with no summary (exit status 5)."),
                "\(result.stderr)")
            #expect(result.stderr.contains("--isolate job"))
            #expect(!(result.stdout + result.stderr).contains("Program crashed"), "the backtracer stays out of plugin faults")
            #expect(!(result.stdout + result.stderr).contains("[stderr]"))
        }
    }
}

extension ProcessTests.Second {
    /// A job that begins 100,000 tasks (10,000 granted) and ends every id it
    /// got finished its work in about a second in a debug worker, then was
    /// terminated at its 5 s deadline: each end of a refused id was a debug
    /// line, one channel message each. Said once now, and it completes.
    @Suite(.timeLimit(.minutes(2))) struct TaskFloodTests {
        @Test(arguments: ["none", "job"])
        func aJobThatEndsEveryRefusedTaskCompletesAndSaysItOnce(isolation: String) async throws {
            let plugin = try Fixtures.compile("task_flood.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable, ["run", plugin, "--isolate", isolation, "--budget", "20s", "--no-state", "--json", "--verbose"],
                timeout: .seconds(60))
            let events = try OutputEvent.all(in: result.stdout)
            #expect(events.first { $0.event == "finished" }?.outcome == "completed", "\(result.stderr)")
            let said = events.filter { $0.event == "log" }.compactMap(\.message)
            #expect(said.filter { $0.contains("refused: the job has 10000 tasks open") }.count == 1, "\(said.prefix(5))")
            #expect(said.filter { $0.hasPrefix("end_background_task(") }.isEmpty, "ending an invalid id is harmless and silent")
            #expect(said.count < 10, "\(said.count) lines")
        }
    }
}
