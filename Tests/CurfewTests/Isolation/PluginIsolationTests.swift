import Foundation
import Synchronization
import Testing

@testable import Curfew
@testable import CurfewCLI

extension ProcessTests.First {
    /// `--isolate plugin`: a worker per plugin file, shared by its jobs.
    @Suite(.timeLimit(.minutes(1))) struct PluginIsolationTests {
        @Test func aCrashTakesDownItsPluginsJobsAndNoOthers() async throws {
            let crashing = try Fixtures.compile("crashing_jobs.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", crashing, Fixtures.examplePlugins[1], "--isolate", "plugin", "--json", "--jobs", "4", "--budget", "2s",
                 "--only", "segfault", "--only", "sum-squares"])
            #expect(result.status == 2)
            let events = try OutputEvent.all(in: result.stdout)
            let finished = Dictionary(uniqueKeysWithValues: events.filter { $0.event == "finished" }.map { ($0.job!, $0) })
            #expect(finished["sum-squares"]?.outcome == "completed")
            #expect(finished["segfault"]?.outcome == "crashed")
            #expect(finished["segfault"]?.reason
                == "its plugin's worker, shared by the plugin's jobs, died of SIGSEGV in chunk 1; stderr: about to dereference NULL")
        }

        /// Runs `jobs` one at a time under `--isolate plugin`; when the first
        /// one's end is delivered, `held` runs with the runner once the second
        /// has been admitted (or after 10 s), and the end waits for it.
        func runHoldingTheFirstEnd(
            _ jobs: [PluginJob], held: @escaping @Sendable (Runner, _ admitted: Bool) -> Void
        ) async -> [JobResult] {
            var configuration = RunConfiguration(policy: try! GrantPolicy(budget: .seconds(20)), maxConcurrentJobs: 1)
            configuration.isolation = .plugin
            configuration.workerExecutable = Fixtures.curfewExecutable
            let runner = Mutex<Runner?>(nil)
            let made = Runner(jobs: jobs, configuration: configuration) { event in
                guard case .finished(let result) = event, result.job == jobs[0].name, let runner = runner.withLock({ $0 }) else { return }
                var admitted = false
                for _ in 0..<10_000 where !admitted {
                    admitted = runner.status().contains { $0.job == jobs[1].name }
                    if !admitted { usleep(1000) }
                }
                held(runner, admitted)
            }
            runner.withLock { $0 = made }
            return await made.run()
        }

        /// Before: a shared worker's job gave up its slot only once its end
        /// had been delivered (after every event before it, on the events'
        /// thread), so the next job waited for that too; a worker's own job
        /// gave it up as its worker said the job was over. Now both do. Here
        /// the end's delivery waits until the next job has been admitted.
        @Test func aSharedWorkersJobGivesUpItsSlotWhenItsWorkerSaysItEnded() async throws {
            let plugin = try Fixtures.compile("runner_jobs.c")
            let jobs = try PluginLoader(parameters: ["limit": "2"]).load(plugin).jobs.filter { ["count", "fail"].contains($0.name) }
            try #require(jobs.count == 2)
            let nextAdmitted = Mutex<Bool?>(nil)
            let results = await runHoldingTheFirstEnd(jobs) { _, admitted in nextAdmitted.withLock { $0 = admitted } }
            #expect(results.count == 2)
            #expect(nextAdmitted.withLock { $0 } == true, "the next job waited for this one's end to be delivered")
        }

        /// A plugin's worker is closed as its last job's end is read, not once
        /// that end has been delivered: with deliveries held up (a slow reader
        /// of the output, a store another process holds), workers would
        /// otherwise pile up, one a plugin, past `--jobs`.
        @Test func aPluginsWorkerClosesWhenItsLastJobEndsNotWhenTheEndIsDelivered() async throws {
            let jobs = try ["a", "b"].map { name in
                try PluginLoader().load(Fixtures.compile("sibling_job.c", defines: ["JOB_NAME=\"held-\(name)\""])).jobs[0]
            }
            // Whether a's worker was open once b was admitted: the slot a gave
            // up closes a's worker before b is admitted. (Not once b's worker
            // is made: b may be over, its worker closed too, before that is seen.)
            let openWhileHeld = Mutex<Bool?>(nil)
            let results = await runHoldingTheFirstEnd(jobs) { runner, admitted in
                openWhileHeld.withLock { $0 = admitted ? runner.hasSharedWorker(for: jobs[0].pluginPath) : nil }
            }
            #expect(results.map(\.outcome) == [.completed, .completed])
            #expect(openWhileHeld.withLock { $0 } == false, "a's worker was still open beside b's")
        }

        /// A plugin's worker leaves when the last of its jobs ends, not at the
        /// end of the run: a folder of many plugins does not keep a process each.
        @Test func aPluginsWorkerLeavesWithItsLastJob() async throws {
            let folder = Fixtures.temporaryFolder("siblings")
            for name in ["a", "b", "c"] {
                let plugin = try Fixtures.compile("sibling_job.c", defines: ["JOB_NAME=\"sib-\(name)\"", "WAITS=\(name == "c" ? 1 : 0)"])
                try FileManager.default.copyItem(atPath: plugin, toPath: "\(folder)/\(name).so")
            }
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable, ["run", folder, "--isolate", "plugin", "--json", "--jobs", "1", "--budget", "5s"])
            let events = try OutputEvent.all(in: result.stdout)
            let last = try #require(events.last { $0.event == "log" }, "\(result.stdout)")
            #expect(last.job == "sib-c")
            #expect(last.message == "siblings: 0", "the workers of a and b are gone by the time c runs")
            #expect(events.filter { $0.event == "finished" }.allSatisfy { $0.outcome == "completed" })
        }

        @Test func aStuckJobDoesNotTakeItsSiblingsDown() async throws {
            // One job's chunk never returns; its worker's own runner gives up on it at the
            // deadline, as in process, and the sibling on the same worker expires cleanly.
            let crashing = try Fixtures.compile("crashing_jobs.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", crashing, "--isolate", "plugin", "--json", "--jobs", "2", "--budget", "1s", "--only", "loops-in-chunk", "--only", "ticks"])
            let events = try OutputEvent.all(in: result.stdout)
            let finished = Dictionary(uniqueKeysWithValues: events.filter { $0.event == "finished" }.map { ($0.job!, $0) })
            #expect(finished["ticks"]?.outcome == "expired")
            #expect(finished["loops-in-chunk"]?.outcome == "terminated")
            #expect(finished["loops-in-chunk"]?.reason == "chunk 1 was still running at the hard deadline")
        }

        @Test func aPluginsJobsShareOneWorkerAndAllFinish() async throws {
            let fixture = try RunnerFixture()
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", fixture.path, "--isolate", "plugin", "--jobs", "4", "--budget", "600ms", "--only", "count", "--only", "spin",
                 "--only", "fail", "--only", "tick", "--param", "tick-ms=5"])
            #expect(result.status == 2, "fail fails: \(result.stdout)\(result.stderr)")
            #expect(result.stdout.hasSuffix("4 jobs: 1 completed, 1 failed, 2 expired\n"))
        }
    }
}
