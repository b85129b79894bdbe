import Foundation
import Synchronization
import Testing

@testable import Curfew
@testable import CurfewCLI

extension ProcessTests.Second {
    /// Workers come from a fork server; when it cannot fork, from posix_spawn.
    /// Both paths give the same outcomes.
    @Suite(.timeLimit(.minutes(1))) struct WorkerStartTests {
        func run(forking: Bool) async throws -> ([String: JobResult], WorkerStarts) {
            let plugin = try Fixtures.compile("crashing_jobs.c")
            let jobs = try PluginLoader().load(plugin).jobs.filter { ["fine", "segfault", "exits", "loops-in-chunk", "prints"].contains($0.name) }
            var configuration = RunConfiguration(policy: try GrantPolicy(budget: .milliseconds(800)), maxConcurrentJobs: 8)
            configuration.isolation = .job
            configuration.workerExecutable = Fixtures.curfewExecutable
            configuration.usesForkServer = forking
            let runner = Runner(jobs: jobs, configuration: configuration)
            let results = await runner.run()
            return (Dictionary(uniqueKeysWithValues: results.map { ($0.job, $0) }), runner.workerStarts)
        }

        /// The CLI starts the fork server while it scans: the run that
        /// follows forks its workers from it; one started for other workers
        /// (another environment) is not taken, and is closed.
        @Test func aRunTakesTheForkServerStartedEarlyForItsWorkers() async throws {
            var configuration = RunConfiguration(policy: try GrantPolicy(budget: .seconds(5)), maxConcurrentJobs: 2)
            configuration.isolation = .job
            configuration.workerExecutable = Fixtures.curfewExecutable
            var other = configuration
            other.limits.memoryBytes = 256 << 20  // workers start with MALLOC_ARENA_MAX=2
            Runner.startWorkersEarly(for: other)
            let plugin = try Fixtures.compile("sibling_job.c", defines: ["JOB_NAME=\"early\""])
            let jobs = try PluginLoader().load(plugin).jobs
            _ = Runner(jobs: jobs, configuration: configuration)
            #expect(WorkerSource.earlyWaiting, "not taken by a run with other workers")
            Runner.startWorkersEarly(for: configuration)  // the other one is closed
            let runner = Runner(jobs: jobs, configuration: configuration)
            #expect(!WorkerSource.earlyWaiting, "taken")
            let results = await runner.run()
            #expect(results.map(\.outcome) == [.completed])
            #expect((runner.workerStarts.forked, runner.workerStarts.spawned) == (1, 0))
            // One no run takes is closed: its process ends.
            Runner.startWorkersEarly(for: other)
            var pid: pid_t?
            for _ in 0..<5000 where pid == nil {
                pid = WorkerSource.earlyServerPid
                if pid == nil { usleep(1000) }
            }
            let server = try #require(pid, "the early server started")
            Runner.discardEarlyWorkers()
            #expect(!WorkerSource.earlyWaiting)
            #expect(kill(server, 0) == -1 && errno == ESRCH, "closed and reaped")
        }

        /// Every hook runs on a worker thread of libdispatch, on its job's
        /// serial queue, as the design says: in process, in a worker of the
        /// job's own (forked or spawned) and in a plugin's. Before, on threads
        /// of a pool of the host's own, and a worker's first job on its main
        /// thread.
        @Test(arguments: [
            (Isolation.none, ["where", "where-2"], true),
            (Isolation.job, ["where", "where-2"], true),
            (Isolation.job, ["where", "where-2"], false),
            (Isolation.plugin, ["where", "where-2"], true),
            (Isolation.plugin, ["where", "where-2"], false),
        ])
        func everyHookRunsOnADispatchWorker(isolation: Isolation, names: [String], forking: Bool) async throws {
            let plugin = try Fixtures.compile("dispatch_jobs.c")
            var configuration = RunConfiguration(policy: try GrantPolicy(budget: .seconds(5)), maxConcurrentJobs: 1)
            configuration.isolation = isolation
            configuration.workerExecutable = Fixtures.curfewExecutable
            configuration.usesForkServer = forking
            let lines = Mutex<[String: [String]]>([:])
            let jobs = try PluginLoader().load(plugin).jobs.filter { names.contains($0.name) }
            let runner = Runner(jobs: jobs, configuration: configuration, events: { event in
                if case .log(let job, _, let message) = event { lines.withLock { $0[job, default: []].append(message) } }
            })
            let results = await runner.run()
            #expect(results.map(\.outcome) == Array(repeating: .completed, count: names.count))
            for name in names {
                #expect(lines.withLock { $0[name] } == [
                    "create on curfew.job, under libdispatch", "chunk on curfew.job, under libdispatch",
                ], "\(name)")
            }
        }

        /// Before, a continuous job whose grace was over the default budget
        /// (`--allow-continuous --grace 200s`) trapped its worker (SIGILL):
        /// the worker gave its policy the default budget and that grace.
        @Test func aContinuousJobsLongGraceRunsInAWorker() async throws {
            let plugin = try Fixtures.compile("runner_jobs.c")
            var configuration = RunConfiguration(
                policy: try GrantPolicy(budget: .seconds(600), grace: .seconds(200), allowsContinuous: true), maxConcurrentJobs: 1,
                parameters: ["tick-ms": "5"])
            configuration.isolation = .job
            configuration.workerExecutable = Fixtures.curfewExecutable
            let jobs = try PluginLoader().load(plugin).jobs.filter { $0.name == "continuous" }
            let seen = Mutex<(started: Bool, finished: Bool)>((false, false))
            let runner = Runner(jobs: jobs, configuration: configuration, events: { event in
                if case .started = event { seen.withLock { $0.started = true } }
                if case .finished = event { seen.withLock { $0.finished = true } }
            })
            async let results = runner.run()
            let give = ContinuousClock.now + .seconds(20)
            while seen.withLock({ !$0.started && !$0.finished }) && ContinuousClock.now < give { try await Task.sleep(for: .milliseconds(2)) }
            runner.cancel()
            let result = try #require(await results.first)
            #expect(result.outcome == .expired, "\(result.reason)")
        }

        /// Whatever parameters the host takes reach a worker: the typed run
        /// message first capped them (1,024 of 64 KiB), and a job the host
        /// ran in process failed in a worker.
        @Test(arguments: [Isolation.job, .plugin])
        func manyAndLongParametersReachTheWorker(isolation: Isolation) async throws {
            let plugin = try Fixtures.compile("dispatch_jobs.c")
            var parameters = ["long": String(repeating: "x", count: 100_000)]
            for index in 0..<2000 { parameters["p\(index)"] = "\(index)" }
            var configuration = RunConfiguration(policy: try GrantPolicy(budget: .seconds(5)), maxConcurrentJobs: 1, parameters: parameters)
            configuration.isolation = isolation
            configuration.workerExecutable = Fixtures.curfewExecutable
            let jobs = try PluginLoader().load(plugin).jobs
            let results = await Runner(jobs: jobs, configuration: configuration).run()
            #expect(results.map(\.outcome) == [.completed, .completed], "\(results.map(\.reason))")
        }

        @Test(arguments: [true, false])
        func theSameOutcomesEitherWay(forking: Bool) async throws {
            let (results, starts) = try await run(forking: forking)
            // Each path really ran: five workers forked, or five spawned.
            #expect(forking ? (starts.forked == 5 && starts.spawned == 0) : (starts.forked == 0 && starts.spawned == 5))
            #expect(results.mapValues(\.outcome) == [
                "fine": .completed, "prints": .completed, "segfault": .crashed, "exits": .crashed, "loops-in-chunk": .terminated,
            ])
            #expect(results["segfault"]?.reason == "its worker died of SIGSEGV in chunk 1; stderr: about to dereference NULL")
            #expect(results["exits"]?.reason == "its worker exited with status 0 before the job finished")
        }
    }
}
