import Foundation
import Glibc
import Testing

@testable import Curfew
@testable import CurfewCLI

/// `curfew test`: deterministic expiration on virtual time, and each
/// contract violation caught with a fixture that commits it.
@Suite(.timeLimit(.minutes(1))) struct HarnessTests {
    let path: String
    let jobs: [String: PluginJob]

    init() throws {
        path = try Fixtures.compile("harness_jobs.c")
        jobs = Dictionary(uniqueKeysWithValues: try PluginLoader().load(path).jobs.map { ($0.name, $0) })
    }

    func release() {
        let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL)
        unsafeBitCast(dlsym(handle, "fixture_release")!, to: (@convention(c) () -> Void).self)()
    }

    @Test func theSameInputsGiveTheSameTrace() throws {
        let timer = try PluginLoader().load(Fixtures.examplePlugins[0]).jobs[0]
        let harness = JobHarness(job: timer, mode: .chunkCost(.seconds(2)))
        let first = harness.run()
        let second = harness.run()
        #expect(first.trace == second.trace)
        #expect(first.trace.count > 100, "a 180 s grant, a tick every 3 s of virtual time")
        #expect(first.outcome == .expired)
        #expect(first.violations.isEmpty)
        // The chunk that would run across the expiration point (174 s to 176 s) is not
        // started: as in a run, the expiration comes that much forward.
        #expect(first.trace.last { $0.kind == "chunk" }?.time == .seconds(171))
        let expiring = try #require(first.trace.first { $0.kind == "expiring" })
        #expect(expiring.time == .seconds(174))
        #expect(first.trace.last?.kind == "destroy")
    }

    @Test func expirationAtAChosenChunk() throws {
        let report = JobHarness(job: jobs["steady"]!, mode: .expireAtChunk(3)).run()
        #expect(report.outcome == .expired)
        #expect(report.chunks == 2)
        #expect(report.violations.isEmpty)
        #expect(report.trace.map(\.description) == [
            "    0.000s  create  ok",
            "    0.000s  chunk 1  continue",
            "    0.000s  log  info: step 1, 180.0 s left",
            "    0.000s  progress  1 of 5",
            "    0.000s  chunk 2  continue",
            "    0.000s  log  info: step 2, 180.0 s left",
            "    0.000s  progress  2 of 5",
            "  175.000s  expiring  time ran out",
            "  175.000s  expire",
            "  175.000s  log  info: cleaning up",
        ])
    }

    /// The trace says how `create` returned: an error, not "ok".
    @Test func aCreateThatFailsSaysSoInTheTrace() throws {
        let failing = try #require(try PluginLoader().load(Fixtures.compile("runner_jobs.c")).jobs.first { $0.name == "create-fails" })
        let report = JobHarness(job: failing).run()
        #expect(report.outcome == .failed)
        #expect(report.trace.first?.description == "    0.000s  create  error")
        #expect(!report.trace.contains { $0.kind == "chunk" || $0.kind == "destroy" })
    }

    @Test func aJobThatKeepsTheContractHasNoViolations() throws {
        let report = JobHarness(job: jobs["steady"]!, mode: .chunkCost(.seconds(10))).run()
        #expect(report.outcome == .completed)
        #expect(report.outcome == .completed)
        #expect(report.chunks == 5)
        #expect(report.violations.isEmpty)
        #expect(report.trace.contains { $0.description == "   40.000s  log  info: step 5, 140.0 s left" })
    }

    @Test func aTaskNeverEnded() throws {
        let report = JobHarness(job: jobs["never-ends"]!, hookTimeout: .milliseconds(200)).run()
        #expect(report.outcome == .terminated)
        #expect(report.violations == ["Background task 'upload', begun at 0.000s, was never ended."])
    }

    @Test func anExpireThatNeverReturns() throws {
        defer { release() }
        let report = JobHarness(job: jobs["hangs-in-expire"]!, mode: .expireAtChunk(2), hookTimeout: .milliseconds(200)).run()
        #expect(report.outcome == .terminated)
        #expect(report.violations == ["Expire did not return within 0.200s of wall-clock time; the harness abandoned it."])
    }

    @Test func hostCallsAfterDestroy() throws {
        let report = JobHarness(job: jobs["talks-after-destroy"]!).run()
        #expect(report.outcome == .completed)
        #expect(report.violations == ["log was called 1 time after the job ended (after destroy returned)."])
    }

    @Test func negativeOrAbsurdProgress() throws {
        let report = JobHarness(job: jobs["bad-progress"]!).run()
        #expect(report.violations == [
            "Progress in chunk 1 exceeds its total: 12 of 10.",
            "Negative progress in chunk 2: -1 of 10.",
        ])
    }

    @Test func aChunkThatRunsIntoTheDeadline() throws {
        // One 200 s chunk: nothing was known of it, and it runs through the deadline at 180 s.
        let report = JobHarness(job: jobs["steady"]!, mode: .chunkCost(.seconds(200))).run()
        #expect(report.outcome == .terminated)
        #expect(report.reason == "chunk 1 was still running at the hard deadline")
        #expect(report.violations == [
            "Chunk 1 ran from 0.000s to 200.000s, into the hard deadline at 180.000s: a chunk that long is terminated "
                + "in a real run. Keep chunks shorter than the lead (5.000s), or watch time_remaining() inside them.",
        ])
        #expect(!report.trace.contains { $0.kind == "expire" || $0.kind == "destroy" }, "as in the runner: never called again")
        // The same job told what its chunks took before: the first is not started.
        var told = JobHarness(job: jobs["steady"]!, mode: .chunkCost(.seconds(200)))
        told.estimate = ChunkEstimate(mean: 200_000_000_000, deviation: 0, samples: 1)!
        #expect(told.run().outcome == .expired)
    }

    /// Budget-aware dispatch, as the runner does it: a chunk predicted to run
    /// past the expiration point is not started, and the job expires with
    /// its cleanup instead of being terminated mid-chunk.
    @Test func aChunkPredictedToOverrunIsDeclined() throws {
        // Five 40 s chunks: the fifth would run from 160 s through the deadline at 180 s.
        let report = JobHarness(job: jobs["steady"]!, mode: .chunkCost(.seconds(40))).run()
        #expect(report.outcome == .expired)
        #expect(report.reason == "time ran out: the next chunk, about 40 s, would overrun; cleanup ran")
        #expect(report.chunks == 4)
        #expect(report.violations.isEmpty)
        let declined = try #require(report.trace.first { $0.kind == "log" && $0.detail.contains("would overrun") })
        #expect(declined.detail == "info: the next chunk, about 40 s, would overrun the expiration point (15 s left): expiring now")
        #expect(report.trace.contains { $0.kind == "expire" })
        // 6 s chunks against a 5 s lead: before, the one in flight at the expiration point ended at the deadline.
        let sum = try PluginLoader().load(Fixtures.examplePlugins[1]).jobs[0]
        let overrun = JobHarness(job: sum, mode: .chunkCost(.seconds(6)), parameters: ["count": "1000000000"]).run()
        #expect(overrun.outcome == .expired)
        #expect(overrun.chunks == 29)
    }

    @Test func aTaskDrivenJobWithNoOpenTaskCompletes() throws {
        let report = JobHarness(job: jobs["quick-task"]!).run()
        #expect(report.outcome == .completed)
        #expect(report.violations.isEmpty)
        #expect(!report.trace.contains { $0.kind == "expiring" })
    }

    @Test func aContinuousJobRunsUntilAVirtualShutdown() throws {
        let fixture = try RunnerFixture()
        let continuous = try fixture.jobs("continuous")[0]
        let report = JobHarness(
            job: continuous, policy: try GrantPolicy(budget: .seconds(10), allowsContinuous: true), mode: .chunkCost(.zero),
            parameters: ["tick-ms": "1000"]
        ).run()
        #expect(report.outcome == .expired)
        #expect(report.reason == "host shutting down; cleanup ran")
        #expect(report.chunks == 10)
        #expect(report.violations.isEmpty)
        #expect(fixture.count("continuous", "expire-shutdown") == 1)
        let expiring = try #require(report.trace.first { $0.kind == "expiring" })
        #expect(expiring.time == .seconds(10))
        #expect(expiring.detail == "host shutting down")
    }
}

/// `curfew test` runs the runner's own `JobRun` and `Grant`: for every
/// fixture job but one, it gives the outcome and reason `curfew run` gives.
/// One job at a time; the blocking ones hold a Dispatch worker each (the
/// harness's and the run's) until both runs have met the block.
@Suite(.serialized, .timeLimit(.minutes(2))) struct HarnessMatchesRunTests {
    /// Blocks in a hook until `fixture_release()`: its plugin is a copy of its
    /// own, whose gate opens once both runs have met the block.
    static let blocking: Set<String> = ["stuck", "stuck-expire", "stuck-destroy", "hangs-in-expire", "blocking-handler"]
    /// Waits, in `create`, for a second of real time to see the expiration:
    /// in the harness no virtual time passes inside a hook, so its course differs.
    static let realTime = "expired-in-create"

    static func release(_ plugin: String) {
        let handle = dlopen(plugin, RTLD_NOW | RTLD_LOCAL)
        unsafeBitCast(dlsym(handle, "fixture_release")!, to: (@convention(c) () -> Void).self)()
    }

    @Test func everyFixtureJobEndsAsInARun() async throws {
        // A lead long enough that a loaded machine still gives `expire` a thread in it.
        let policy = try GrantPolicy(budget: .milliseconds(600), grace: .milliseconds(300), allowsContinuous: true)
        var compared: [String] = []
        for source in ["harness_jobs.c", "runner_jobs.c"] {
            let shared = try await Fixtures.offPool { try Fixtures.compile(source) }
            for name in try PluginLoader().load(shared).jobs.map(\.name) where name != Self.realTime {
                let blocks = Self.blocking.contains(name)
                let plugin = blocks ? try await Fixtures.offPool { try Fixtures.compile(source) } : shared
                defer { if blocks { Self.release(plugin) } }
                let job = try #require(try PluginLoader().load(plugin).jobs.first { $0.name == name })
                // A hundred tasks, not many-tasks' 10,001: their handlers end them in the lead, under ASan too.
                let parameters = ["count": "5", "tasks": "100"]
                let harness = JobHarness(
                    job: job, policy: policy, mode: .chunkCost(.milliseconds(1)), parameters: parameters, hookTimeout: .milliseconds(300))
                let report = try await Fixtures.offPool { harness.run() }
                let configuration = RunConfiguration(policy: policy, maxConcurrentJobs: 1, parameters: parameters)
                let runner = Runner(jobs: [job], configuration: configuration)
                defer { runner.shutdown() }
                let results = Task { await runner.run() }
                if job.isContinuous {
                    // It has no budget: the harness shuts it down at the budget's end, the run here.
                    let give = ContinuousClock.now + .seconds(20)
                    while !runner.status().contains(where: { ($0.chunks ?? 0) > 0 }) && ContinuousClock.now < give {
                        try await Task.sleep(for: .milliseconds(1))
                    }
                    runner.shutdown()
                }
                let run = try #require(await results.value.first)
                #expect(report.outcome == run.outcome, "\(name): test said \(report.reason), run said \(run.reason)")
                #expect(report.reason == run.reason, "\(name)")
                compared.append(name)
            }
        }
        #expect(compared.count == 24, "\(compared)")
    }
}
