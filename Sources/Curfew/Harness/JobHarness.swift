import CCurfew
import Dispatch
import Synchronization

/// Runs one job against virtual time and checks that it keeps the
/// contract: what `curfew test` does.
///
/// The job runs on the runner's own ``JobRun`` and ``Grant``, watched
/// (``TracedRun``), on a ``ManualClock`` and one thread: each chunk advances
/// the clock by a fixed cost (or the grant is made to expire just before a
/// chosen chunk), and whenever the job waits, the clock jumps to the next
/// timer. So a 180 s grant is exercised in milliseconds, a chunked job gives
/// the same trace every time, and its outcome and reason are the ones
/// `curfew run` would give. A hook that does not return within a
/// wall-clock limit is reported and abandoned.
///
/// - Important: The grant's time is virtual: the harness never waits for a
///   budget in real time.
public struct JobHarness: Sendable {
    /// How virtual time moves.
    public enum Mode: Sendable, Equatable {
        /// Every chunk costs this much virtual time.
        case chunkCost(Duration)
        /// Chunks cost nothing and the grant expires just before chunk `n` (from 1).
        case expireAtChunk(Int)
    }

    public var job: PluginJob
    public var policy: GrantPolicy
    public var mode: Mode
    public var parameters: [String: String]
    /// The wall-clock time a hook may take before it is reported as not returning.
    public var hookTimeout: Duration
    /// Chunks after which a job that never finishes nor expires is stopped.
    public var maximumChunks: Int
    /// Where the job's checkpoints go (memory by default: a test leaves no trace).
    public var checkpoints: any CheckpointKeeper = MemoryCheckpoints()
    /// What the job's chunks were seen to take before: the first prediction.
    public var estimate: ChunkEstimate = .empty

    public init(
        job: PluginJob, policy: GrantPolicy = GrantPolicy(), mode: Mode = .chunkCost(.seconds(1)),
        parameters: [String: String] = [:], hookTimeout: Duration = .seconds(5), maximumChunks: Int = 1_000_000
    ) {
        self.job = job
        self.policy = policy
        self.mode = mode
        self.parameters = parameters
        self.hookTimeout = hookTimeout
        self.maximumChunks = maximumChunks
    }

    /// Runs the job and returns its trace, outcome and contract violations.
    public func run() -> HarnessReport {
        let clock = ManualClock()
        let trace = HarnessTrace(clock: clock)
        // One thread: the job's hooks and handlers, one at a time.
        let executor = DispatchQueue(label: "curfew.test")
        let manager = GrantManager(clock: clock, policy: policy, expiryQueue: InlineQueue())
        let result = Mutex<JobResult?>(nil)
        let ended = DispatchSemaphore(value: 0)
        let runBox = Mutex<TracedRun?>(nil)
        let probe = ChunkProbe(
            before: { trace.chunkStarting($0) },
            after: { number, status in
                guard let run = runBox.withLock({ $0 }) else { return }
                chunkReturned(number, status, run: run, clock: clock, trace: trace)
            })
        let run: TracedRun
        do throws(CurfewError) {
            run = try TracedRun(
                job: job, manager: manager, parameters: parameters, checkpoints: checkpoints, estimate: estimate,
                hooks: executor, chunkProbe: probe, trace: trace
            ) { finished in
                result.withLock { $0 = finished }
                ended.signal()
            }
        } catch {
            return HarnessReport(job: job.name, trace: [], outcome: .refused, reason: error.description, chunks: 0, violations: [])
        }
        runBox.withLock { $0 = run }
        if case .expireAtChunk(1) = mode {
            // Before the first chunk: as `create` returns.
            trace.onCreateReturned = { expireNow(run: run, clock: clock) }
        }
        let driven = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            drive(run, clock: clock, executor: executor)
            driven.signal()
        }
        // The watchdog: a hook that overstays is reported, and its thread
        // abandoned; virtual time jumps to the hard deadline, where the run
        // gives the job up as a real one would.
        while driven.wait(timeout: .now() + .milliseconds(20)) == .timedOut {
            if let stuck = trace.overstayingHook(hookTimeout) {
                if run.grant.deadline == nil { run.expireNow(.shutdown) }
                if let deadline = run.grant.deadline { clock.advance(by: max(.zero, clock.now().duration(to: deadline))) }
                _ = ended.wait(timeout: .now() + .seconds(1))
                return report(trace, result: result.withLock { $0 }, abandoning: stuck)
            }
        }
        _ = ended.wait(timeout: .now() + .seconds(5))
        // Let threads the job left behind show themselves (calls after destroy).
        Syscalls.nap(microseconds: 100_000)
        return report(trace, result: result.withLock { $0 }, abandoning: nil)
    }

    /// Moves virtual time while the job waits for it, until the run ends.
    private func drive(_ run: TracedRun, clock: ManualClock, executor: DispatchQueue) {
        run.start()
        if job.isContinuous {
            // A continuous job runs until a virtual shutdown at the budget.
            _ = clock.schedule(at: clock.now().advanced(by: policy.budget)) { run.expireNow(.shutdown) }
        }
        var stillSince: ContinuousClock.Instant?
        while !run.hasEnded {
            executor.sync {}
            // In this order: a task's end removes it, then queues the run's next step.
            let open = run.grant.openTaskCount
            guard !run.isEndingTask, run.isQuiet, !run.hasEnded else { continue }
            // Expiring, with tasks open: the job's own threads end them in real
            // time, and get the hook timeout to do it before the deadline comes.
            if run.grant.isExpiring && open > 0 {
                let since = stillSince ?? .now
                stillSince = since
                if ContinuousClock.now - since < hookTimeout {
                    Syscalls.nap(microseconds: 1000)
                    continue
                }
            }
            stillSince = nil
            if !clock.advanceToNextTimer() {
                // Nothing armed and nothing queued: only the job's threads can move it.
                Syscalls.nap(microseconds: 1000)
            }
        }
    }

    /// After chunk `number` returned: its line, its cost in virtual time, and
    /// the checks a real run would make of it.
    private func chunkReturned(_ number: UInt64, _ status: curfew_chunk_result, run: TracedRun, clock: ManualClock, trace: HarnessTrace) {
        let detail: String
        switch status {
        case 0: detail = "continue"
        case -1: detail = "done"
        case -2: detail = "failed"
        case let delay where delay > 0: detail = "continue after \(format3(Duration.nanoseconds(delay).seconds))s"
        default: detail = "invalid result \(status)"
        }
        let began = trace.chunkReturned(number, detail)
        switch mode {
        case .chunkCost(let cost):
            let deadline = run.grant.deadline
            clock.advance(by: cost)
            let now = trace.now
            if let deadline, clock.now() >= deadline, let start = run.grant.startedAt {
                let at = start.duration(to: deadline)
                trace.violation(
                    "Chunk \(number) ran from \(format3(began.seconds))s to \(format3(now.seconds))s, into the hard deadline at "
                        + "\(format3(at.seconds))s: a chunk that long is terminated in a real run. Keep chunks shorter than "
                        + "the lead (\(format3(run.grant.lead.seconds))s), or watch time_remaining() inside them.")
            }
        case .expireAtChunk(let chunk):
            if number + 1 == UInt64(clamping: chunk) { expireNow(run: run, clock: clock) }
        }
        if number == UInt64(clamping: maximumChunks) && status == 0 {
            trace.violation("The job ran \(maximumChunks) chunks without finishing; stopped there.")
            expireNow(run: run, clock: clock)
        }
    }

    /// Makes the grant expire now: virtual time moves to its expiration
    /// point (or, without a budget, the host shuts down).
    private func expireNow(run: TracedRun, clock: ManualClock) {
        if let point = run.grant.expirationPoint {
            clock.advance(by: max(.zero, clock.now().duration(to: point)))
        } else {
            run.expireNow(.shutdown)
        }
    }

    private func report(_ trace: HarnessTrace, result: JobResult?, abandoning stuck: String?) -> HarnessReport {
        var violations = trace.violations
        let outcome = result.map { ($0.outcome, $0.reason) } ?? (.terminated, stuck.map { "\($0) did not return" } ?? "did not finish")
        if let stuck {
            violations.append(
                "\(stuck.prefix(1).uppercased() + stuck.dropFirst()) did not return within \(format3(hookTimeout.seconds))s of wall-clock time; the harness abandoned it.")
        } else {
            for task in trace.openTasks {
                violations.append("Background task '\(task.name)', begun at \(format3(task.began.seconds))s, was never ended.")
            }
            if result?.reason == JobRun.noTaskOpen {
                violations.append(
                    "create returned with no background task open, so the job has nothing to keep it alive and a task its "
                        + "threads begin later is refused. Begin the task in create and hand its id to the thread that ends it.")
            }
        }
        return HarnessReport(
            job: job.name, trace: trace.events, outcome: outcome.0, reason: outcome.1,
            chunks: Int(clamping: result?.chunks ?? 0), violations: violations)
    }
}

/// One line of a harness trace.
public struct HarnessEvent: Sendable, Equatable, CustomStringConvertible {
    /// Virtual time since the grant began.
    public let time: Duration
    /// What happened, e.g. `chunk`, `log`, `expire`.
    public let kind: String
    /// The details, in words.
    public let detail: String
    /// For a `chunk`, its number, from 1.
    public var chunk: Int?
    /// A host call from a thread the job started, not from a hook: where it
    /// falls in the trace, and whether it comes at all before the job ends,
    /// depends on real time, so it may vary from run to run.
    public var fromJobThread = false

    public init(time: Duration, kind: String, detail: String, chunk: Int? = nil, fromJobThread: Bool = false) {
        self.time = time
        self.kind = kind
        self.detail = detail
        self.chunk = chunk
        self.fromJobThread = fromJobThread
    }

    public var description: String {
        let seconds = String(format3(time.seconds))
        let what = chunk.map { "\(kind) \($0)" } ?? kind
        let line = String(repeating: " ", count: max(0, 9 - seconds.count)) + seconds + "s  " + what + (detail.isEmpty ? "" : "  " + detail)
        return fromJobThread ? line + "  (job thread: may vary)" : line
    }
}

/// What a harness run found.
public struct HarnessReport: Sendable {
    public let job: String
    public let trace: [HarnessEvent]
    public let outcome: Outcome
    public let reason: String
    public let chunks: Int
    /// Contract violations, each a sentence; empty when the job kept the contract.
    public let violations: [String]
}

/// Seconds with three decimals.
func format3(_ seconds: Double) -> String {
    let thousandths = Int64((seconds * 1000).rounded())
    let sign = thousandths < 0 ? "-" : ""
    let magnitude = thousandths.magnitude
    let fraction = String(magnitude % 1000)
    return "\(sign)\(magnitude / 1000)." + String(repeating: "0", count: 3 - fraction.count) + fraction
}
