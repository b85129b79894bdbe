import CCurfew
import Synchronization
import Testing

@testable import Curfew

/// Budget-aware dispatch on a hand-stepped clock: each chunk of the test's
/// job moves the clock by the time the test gives it, so "a 700 ms chunk" is
/// exact and no test waits for a budget.
@Suite(.serialized) struct BudgetDispatchTests {
    /// The clock the job's chunks step, and what each chunk costs (the last
    /// cost repeats); global because a C hook captures nothing.
    struct Stepping: Sendable {
        var clock: ManualClock?
        var costs: [Duration] = []
        var chunks = 0
        var expires = 0
    }

    nonisolated(unsafe) static var stepping = Stepping()
    static let lock = Mutex(())

    static let job: PluginJob = {
        let chunk: curfew_chunk_fn = { _, _ in
            let (clock, cost) = BudgetDispatchTests.lock.withLock { _ -> (ManualClock?, Duration) in
                let index = BudgetDispatchTests.stepping.chunks
                BudgetDispatchTests.stepping.chunks += 1
                let costs = BudgetDispatchTests.stepping.costs
                return (BudgetDispatchTests.stepping.clock, costs[min(index, costs.count - 1)])
            }
            clock?.advance(by: cost)
            return CURFEW_CHUNK_CONTINUE
        }
        let expire: curfew_expire_fn = { _, _, _ in
            BudgetDispatchTests.lock.withLock { _ in BudgetDispatchTests.stepping.expires += 1 }
        }
        return PluginJob(
            name: "stepped", summary: "Chunks that step a manual clock.", pluginPath: "/stepped.so", isContinuous: false,
            hooks: JobHooks(create: nil, chunk: chunk, expire: expire, destroy: nil), index: 0)
    }()

    func run(costs: [Duration], budget: Duration, state: StateStore? = nil) async -> (JobResult, Stepping, [String]) {
        let clock = ManualClock()
        Self.lock.withLock { _ in Self.stepping = Stepping(clock: clock, costs: costs) }
        var configuration = RunConfiguration(policy: try! GrantPolicy(budget: budget), maxConcurrentJobs: 1)
        configuration.state = state
        let events = EventLog()
        let runner = Runner(jobs: [Self.job], configuration: configuration, clock: clock) { events.record($0) }
        let result = await runner.run()[0]
        return (result, Self.lock.withLock { _ in Self.stepping }, events.logs(of: "stepped"))
    }

    /// Before: the third 700 ms chunk started with 0.6 s left of a 2 s
    /// budget and the job was terminated mid-chunk.
    @Test func aChunkPredictedToOverrunIsNotStartedAndTheJobExpiresWithItsCleanup() async {
        let (result, stepping, logs) = await run(costs: [.milliseconds(700)], budget: .seconds(2))
        #expect(result.outcome == .expired)
        #expect(result.reason == "time ran out: the next chunk, about 700 ms, would overrun; cleanup ran")
        #expect(result.chunks == 2)
        #expect(stepping.chunks == 2)
        #expect(stepping.expires == 1)
        #expect(logs.contains("the next chunk, about 700 ms, would overrun the expiration point (100 ms left): expiring now"))
        #expect(result.estimate?.predicted == 700_000_000)
    }

    @Test func chunksThatFitAllRunUntilTheExpirationPoint() async {
        let (result, stepping, _) = await run(costs: [.milliseconds(100)], budget: .seconds(2))
        // The expiration point is at 1.5 s: 15 chunks of 100 ms fit, the 15th ending on it.
        #expect(result.outcome == .expired)
        #expect(stepping.chunks == 15)
    }

    /// What the metrics read: each chunk's time by bucket, and how late
    /// `expire` was called after the expiration point (1.5 s of 2 s): the
    /// 15th chunk, predicted at 100 ms, took 300 ms and ended at 1.7 s.
    @Test func aRunMeasuresItsChunksAndHowLateItsExpireHookWasCalled() async {
        let costs = Array(repeating: Duration.milliseconds(100), count: 14) + [.milliseconds(300)]
        let (result, stepping, _) = await run(costs: costs, budget: .seconds(2))
        #expect(result.outcome == .expired)
        #expect(stepping.chunks == 15)
        #expect(result.measures.chunkCounts == [0, 0, 0, 0, 14, 1, 0, 0])
        #expect(result.measures.chunkNanoseconds == 1_700_000_000)
        #expect(result.measures.expireLateness == .milliseconds(200))
        // Called early, before a chunk that would overrun: not late.
        let (early, _, _) = await run(costs: [.milliseconds(700)], budget: .seconds(2))
        #expect(early.measures.expireLateness == .zero)
        #expect(early.measures.chunkCounts == [0, 0, 0, 0, 0, 2, 0, 0])
    }

    @Test func anEstimateThatWasWrongStillEndsInTerminatedHonestly() async {
        // Five 10 ms chunks teach 10 ms; the sixth takes 3 s, past the deadline.
        let costs = Array(repeating: Duration.milliseconds(10), count: 5) + [.seconds(3)]
        let (result, stepping, _) = await run(costs: costs, budget: .seconds(2))
        #expect(result.outcome == .terminated)
        #expect(result.reason == "chunk 6 was still running at the hard deadline")
        #expect(stepping.chunks == 6)
    }

    @Test func whatARunLearntIsTheNextRunsFirstPrediction() async throws {
        let store = try StateStore(folder: Fixtures.temporaryFolder("state"))
        _ = await run(costs: [.milliseconds(700)], budget: .seconds(2), state: store)
        #expect(try store.estimate(job: "stepped", plugin: "/stepped.so")?.predicted == 700_000_000)
        // 1 s budget: the expiration point is at 750 ms, and a 700 ms chunk fits once;
        // with 600 ms it would not fit at all, and no chunk starts.
        let (fits, _, _) = await run(costs: [.milliseconds(700)], budget: .seconds(1), state: store)
        #expect(fits.chunks == 1)
        let (none, stepping, _) = await run(costs: [.milliseconds(700)], budget: .milliseconds(600), state: store)
        #expect(none.outcome == .expired)
        #expect(none.chunks == 0)
        #expect(stepping.expires == 1)
        #expect(none.reason == "time ran out: the next chunk, about 700 ms, would overrun; cleanup ran")
        // Declined on an earlier run's word alone, the estimate counts for less:
        // a stale one cannot keep the job from ever running a chunk again.
        #expect(try store.estimate(job: "stepped", plugin: "/stepped.so")?.predicted == 525_000_000)
        let (second, _, _) = await run(costs: [.milliseconds(700)], budget: .milliseconds(600), state: store)
        #expect(second.chunks == 0)
        let (probe, probing, _) = await run(costs: [.milliseconds(700)], budget: .milliseconds(600), state: store)
        #expect(probing.chunks == 1, "394 ms < the 450 ms to the expiration point: a chunk is tried")
        #expect(probe.outcome == .terminated, "and, 700 ms long, it is terminated, honestly")
    }
}
