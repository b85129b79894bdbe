import CCurfew
import Dispatch
import Glibc
import Synchronization

/// The harness's `curfew_context`: virtual time, the task table, the trace.
final class HarnessContext: HostContext, @unchecked Sendable {
    // Safe because every mutable field lives in `state`, under its lock;
    // `jobState` is touched only by the driving thread.
    struct OpenTask {
        let name: String
        let began: Duration
        let handler: curfew_expiration_handler?
        let userData: UserData
    }

    struct State {
        var now: Duration = .zero
        var expiring = false
        var over = false
        var trace: [HarnessEvent] = []
        var violations: [String] = []
        var tasks = OpenTasks<OpenTask>()
        var nextTask: UInt64 = 1
        var chunk = 0              // the chunk running or last run, from 1
        var hook: (name: String, since: ContinuousClock.Instant)?
        var callsAfterDestroy: [String: Int] = [:]
        var lastError: String?
        var outcome: (Outcome, String)?
        /// `nil` while there is no deadline (a continuous job before its shutdown).
        var deadline: Duration?
        /// The watchdog gave up on a hook: call no other.
        var abandoned = false
        /// The prediction of the chunk not started, as the runner would decline it.
        var declined: Int64?
    }

    let harness: JobHarness
    private let state = Mutex(State())
    /// The thread that calls the hooks: host calls from any other are the job's own threads'.
    private let driver = Mutex<pthread_t?>(nil)
    private var jobState: UnsafeMutableRawPointer?
    /// When the grant expires: the budget minus the lead, or, for a continuous
    /// job, the virtual moment the host shuts down (at the budget).
    private let expirationPoint: Duration
    private let reason: ExpirationReason
    private let lead: Duration

    init(harness: JobHarness) {
        self.harness = harness
        let policy = harness.policy
        if harness.job.isContinuous {
            expirationPoint = policy.budget
            reason = .shutdown
            lead = policy.shutdownLead
        } else {
            expirationPoint = policy.budget - policy.lead
            reason = .timeout
            lead = policy.lead
        }
        super.init(job: harness.job, parameters: ParameterTable(harness.parameters))
        state.withLock { $0.deadline = harness.job.isContinuous ? nil : policy.budget }
    }

    // MARK: Driving

    func drive() {
        driver.withLock { $0 = pthread_self() }
        let job = harness.job
        // create
        var made: UnsafeMutableRawPointer?
        let line = state.withLock { $0.trace.count }
        guard let status = call("create", { job.hooks.create.map { $0(context, &made) } ?? CURFEW_OK }) else { return }
        jobState = made
        state.withLock { $0.trace.insert(HarnessEvent(time: .zero, kind: "create", detail: status == CURFEW_OK ? "ok" : "error"), at: line) }
        guard status == CURFEW_OK else {
            let (why, ended) = state.withLock { state in
                (state.lastError.map { "create failed: \($0)" } ?? "create returned an error", state.tasks.removeAll())
            }
            if !ended.isEmpty {
                record("end tasks", "\(Reason.quoted(ended.map(\.task.name))): ended by the host, their handlers not called")
            }
            finish(.failed, why, destroy: false)
            return
        }
        if job.hooks.chunk == nil && state.withLock({ $0.nextTask == 1 }) {
            violation(
                "create returned with no background task open, so the job has nothing to keep it alive and a task its "
                    + "threads begin later is refused. Begin the task in create and hand its id to the thread that ends it.")
            finish(.failed, JobRun.noTaskOpen, destroy: true)
            return
        }
        // Each run is a launch into the background, as in `curfew run`.
        if let appEvent = job.hooks.appEvent {
            record("app_event", "launch (background)")
            guard call("app_event", { appEvent(context, jobState, CURFEW_APP_EVENT_LAUNCH) }) != nil else { return }
        }

        var failure: String?
        var expired = false
        if let chunk = job.hooks.chunk {
            switch runChunks(chunk) {
            case .ended(let why): failure = why
            case .expired: expired = true
            case .terminated(let why):
                finish(.terminated, why, destroy: false)
                return
            }
        } else if !state.withLock({ $0.tasks.isEmpty }) {
            // A task-driven job's work runs on its own threads in real time:
            // the harness tests its expiration path, right after create.
            expired = true
        }
        if expired { expire() }

        // Tasks still open now stay open until the deadline: the job would be terminated.
        if !state.withLock({ $0.tasks.isEmpty }) {
            if !expired {
                expire()
                expired = true
            }
            let stillOpen = waitForTasks()
            if !stillOpen.isEmpty {
                advance(to: state.withLock { $0.deadline ?? $0.now })
                for (name, began) in stillOpen {
                    violation("Background task '\(name)', begun at \(format3(began.seconds))s, was never ended.")
                }
                record("deadline", "terminated: \(stillOpen.count == 1 ? "a task was" : "tasks were") never ended")
                finish(.terminated, "background task\(stillOpen.count == 1 ? "" : "s") never ended", destroy: false)
                return
            }
        }
        if let failure {
            finish(.failed, failure, destroy: true)
        } else if expired {
            let cleanup = job.hooks.expire != nil ? "cleanup ran" : "tasks ended"
            finish(.expired, "\(Reason.expired(reason, declined: state.withLock { $0.declined })); \(cleanup)", destroy: true)
        } else {
            finish(.completed, job.isChunked ? "work done" : "all tasks ended", destroy: true)
        }
    }

    enum ChunkLoopEnd {
        case ended(failure: String?)
        case expired
        case terminated(String)
    }

    /// Calls chunks until the work ends, the grant expires, or a chunk runs
    /// into the hard deadline.
    private func runChunks(_ chunk: curfew_chunk_fn) -> ChunkLoopEnd {
        var estimate = harness.estimate
        while true {
            let (now, index) = state.withLock { ($0.now, $0.chunk + 1) }
            if case .expireAtChunk(let n) = harness.mode, index >= n { return .expired }
            if now >= expirationPoint { return .expired }
            // As the runner does: a chunk predicted to run past the expiration point is not started.
            let left = expirationPoint - now
            if left < .nanoseconds(estimate.predicted) {
                // Named in the reason when the chunk would have run past the deadline, as the runner does.
                state.withLock { state in
                    if let deadline = state.deadline, deadline - now < .nanoseconds(estimate.predicted) { state.declined = estimate.predicted }
                }
                record(
                    "declined", "chunk \(index): it would take about \(JobRun.milliseconds(estimate.predicted)) (estimate), "
                        + "and \(JobRun.milliseconds(Int64(clamping: left.nanoseconds))) is left before the expiration point")
                return .expired
            }
            if index > harness.maximumChunks {
                violation("The job ran \(harness.maximumChunks) chunks without finishing; stopped there.")
                return .ended(failure: "stopped after \(harness.maximumChunks) chunks")
            }
            // The chunk's line goes before what it did, at the time it started.
            let line = state.withLock { state -> Int in
                state.chunk = index
                return state.trace.count
            }
            guard let result = call("chunk \(index)", { chunk(context, jobState) }) else { return .ended(failure: nil) }
            let record = { (detail: String) in
                self.state.withLock { $0.trace.insert(HarnessEvent(time: now, kind: "chunk", detail: detail, chunk: index), at: line) }
            }
            if case .chunkCost(let cost) = harness.mode {
                advance(by: cost)
                estimate.add(Int64(clamping: cost.nanoseconds))
            }
            let (after, deadline) = state.withLock { ($0.now, $0.deadline) }
            if let deadline, after >= deadline {
                record("still running at the hard deadline")
                violation(
                    "Chunk \(index) ran from \(format3(now.seconds))s to \(format3(after.seconds))s, into the hard deadline at "
                        + "\(format3(deadline.seconds))s: a chunk that long is terminated in a real run. Keep chunks shorter than "
                        + "the lead (\(format3(lead.seconds))s), or watch time_remaining() inside them.")
                return .terminated("chunk \(index) was still running at the hard deadline")
            }
            switch result {
            case 0:
                record("continue")
            case -1:
                record("done")
                return .ended(failure: nil)
            case let delay where delay > 0:
                let pause = Duration.nanoseconds(delay)
                record("continue after \(format3(pause.seconds))s")
                // The grant expires during the pause, as the runner's timer would.
                advance(to: min(after + pause, max(expirationPoint, after)))
            default:
                let why = result == -2 ? "chunk returned failed" : "chunk returned \(result), not a valid result"
                record(result == -2 ? "failed" : "invalid result \(result)")
                let logged = state.withLock { $0.lastError }
                return .ended(failure: logged.map { "\(why): \($0)" } ?? why)
            }
        }
    }

    /// The grant expires now: the tasks' handlers, then the job's `expire`.
    private func expire() {
        let handlers = state.withLock { state -> [(id: UInt64, task: OpenTask)] in
            state.now = max(state.now, expirationPoint)
            state.expiring = true
            if state.deadline == nil { state.deadline = state.now + lead }  // a continuous job's shutdown
            return state.tasks.ordered
        }
        record("expiring", reason.description)
        for (id, task) in handlers {
            guard let handler = task.handler, state.withLock({ $0.tasks.contains(id) }) else { continue }
            record("handler", "task '\(task.name)'")
            call("the expiration handler of task '\(task.name)'") { handler(task.userData.pointer, reason.cValue) }
        }
        if let expire = harness.job.hooks.expire {
            record("expire", "")
            call("expire") { expire(context, jobState, reason.cValue) }
        }
    }

    /// Waits (in real time, within the hook timeout) for task-driven work to end its tasks.
    private func waitForTasks() -> [(String, Duration)] {
        let limit = ContinuousClock.now + harness.hookTimeout
        while true {
            let open = state.withLock { state in state.tasks.ordered.map { ($0.task.name, $0.task.began) } }
            if open.isEmpty || ContinuousClock.now >= limit { return open }
            usleep(1000)
        }
    }

    private func finish(_ outcome: Outcome, _ reason: String, destroy: Bool) {
        if destroy, let destroyHook = harness.job.hooks.destroy {
            record("destroy", "")
            call("destroy") { destroyHook(context, jobState) }
        }
        state.withLock {
            $0.over = true
            $0.outcome = (outcome, reason)
        }
        // Let threads the job left behind show themselves (calls after destroy).
        usleep(100_000)
    }

    // MARK: Bookkeeping

    /// Calls a hook under the watchdog's eye; `nil` (not called) once the
    /// harness has abandoned an earlier hook.
    @discardableResult
    private func call<T>(_ hook: String, _ body: () -> T) -> T? {
        guard state.withLock({ state -> Bool in
            guard !state.abandoned else { return false }
            state.hook = (hook, ContinuousClock.now)
            return true
        }) else { return nil }
        defer { state.withLock { $0.hook = nil } }
        return body()
    }

    func overstayingHook() -> String? {
        state.withLock { state in
            guard let hook = state.hook, ContinuousClock.now - hook.since > harness.hookTimeout else { return nil }
            return hook.name
        }
    }

    private func record(_ kind: String, _ detail: String) {
        let fromJobThread = driver.withLock { driver in driver.map { pthread_equal($0, pthread_self()) == 0 } ?? false }
        state.withLock { $0.trace.append(HarnessEvent(time: $0.now, kind: kind, detail: detail, fromJobThread: fromJobThread)) }
    }

    private func violation(_ text: String) {
        state.withLock { $0.violations.append(text) }
    }

    private func advance(by duration: Duration) {
        state.withLock { $0.now += duration }
    }

    private func advance(to instant: Duration) {
        state.withLock { $0.now = max($0.now, instant) }
    }

    /// Notes a host call; returns false (ignore it) once the job is over.
    private func hostCall(_ name: String) -> Bool {
        state.withLock { state in
            guard state.over else { return true }
            state.callsAfterDestroy[name, default: 0] += 1
            return false
        }
    }

    func report(abandoning stuck: String?) -> HarnessReport {
        state.withLock { state in
            if stuck != nil { state.abandoned = true }
            var violations = state.violations
            var outcome = state.outcome ?? (.terminated, "did not finish")
            if let stuck {
                violations.append(
                    "\(stuck.prefix(1).uppercased() + stuck.dropFirst()) did not return within \(format3(harness.hookTimeout.seconds))s of wall-clock time; the harness abandoned it.")
                outcome = (.terminated, "\(stuck) did not return")
            }
            for (name, count) in state.callsAfterDestroy.sorted(by: { $0.key < $1.key }) {
                violations.append("\(name) was called \(count) time\(count == 1 ? "" : "s") after the job ended (after destroy returned).")
            }
            return HarnessReport(
                job: job.name, trace: state.trace, outcome: outcome.0, reason: outcome.1, chunks: state.chunk,
                violations: violations)
        }
    }

    // MARK: Host services, in virtual time

    override var timeRemainingSeconds: Double {
        guard hostCall("time_remaining") else { return 0 }
        let (deadline, now) = state.withLock { ($0.deadline, $0.now) }
        guard let deadline else { return Double.greatestFiniteMagnitude }
        return max(0, (deadline - now).seconds)
    }

    override var isExpiring: Bool {
        guard hostCall("is_expiring") else { return true }
        return state.withLock { $0.expiring }
    }

    override func beginTask(
        name: String, handler: curfew_expiration_handler?, userData: UnsafeMutableRawPointer?
    ) -> BackgroundTaskIdentifier {
        guard hostCall("begin_background_task") else { return .invalid }
        let begun = state.withLock { state -> Result<UInt64, Grant.Refusal> in
            guard !state.expiring else { return .failure(.notActive) }
            guard state.tasks.count < Grant.maximumOpenTasks else { return .failure(.tooManyTasks) }
            let id = state.nextTask
            state.nextTask += 1
            state.tasks.append(id, OpenTask(name: name, began: state.now, handler: handler, userData: UserData(pointer: userData)))
            return .success(id)
        }
        let id: UInt64
        switch begun {
        case .success(let value): id = value
        case .failure(.notActive):
            record("begin task", "'\(name)' refused: the grant is expiring")
            return .invalid
        case .failure(.tooManyTasks):
            record("begin task", "'\(name)' refused: \(Grant.maximumOpenTasks) tasks are open, the most a job may have")
            return .invalid
        }
        record("begin task", "'\(name)'")
        return BackgroundTaskIdentifier(rawValue: id)
    }

    override func endTask(_ id: BackgroundTaskIdentifier) {
        guard hostCall("end_background_task") else { return }
        let name = state.withLock { $0.tasks.remove(id.rawValue)?.name }
        if let name { record("end task", "'\(name)'") }
    }

    override func log(_ level: LogLevel, _ message: String) {
        guard hostCall("log") else { return }
        if level == .error { state.withLock { $0.lastError = message } }
        record("log", "\(level): \(message)")
    }

    override func reportProgress(_ progress: Progress) {
        guard hostCall("report_progress") else { return }
        let chunk = state.withLock { $0.chunk }
        let place = chunk > 0 ? " in chunk \(chunk)" : ""
        if progress.completed < 0 || progress.total < 0 {
            violation("Negative progress\(place): \(progress.completed) of \(progress.total).")
        } else if progress.total > 0 && progress.completed > progress.total {
            violation("Progress\(place) exceeds its total: \(progress.completed) of \(progress.total).")
        }
        record("progress", "\(progress.completed) of \(progress.total)")
    }

    override func parameter(_ key: String) -> UnsafePointer<CChar>? {
        guard hostCall("param") else { return nil }
        return parameters.value(for: key)
    }

    override var keepsCheckpoints: Bool { true }

    override func requestNextRun(after delay: Duration) -> curfew_status {
        guard hostCall("request_next_run") else { return CURFEW_UNAVAILABLE }
        record("next-run", "asks to run again in \(delay.seconds) s")
        return CURFEW_OK
    }

    override func saveCheckpoint(_ bytes: UnsafeRawBufferPointer) -> curfew_status {
        guard hostCall("checkpoint_save") else { return CURFEW_UNAVAILABLE }
        do throws(CurfewError) {
            try harness.checkpoints.saveCheckpoint(job.stateKey, bytes: Array(bytes))
            record("checkpoint", "saved \(bytes.count) bytes")
            return CURFEW_OK
        } catch {
            record("checkpoint", "refused: \(error.description)")
            return error.checkpointStatus
        }
    }

    override func loadCheckpoint() -> [UInt8]? {
        guard hostCall("checkpoint_load") else { return nil }
        return try? harness.checkpoints.checkpoint(job.stateKey)
    }
}
