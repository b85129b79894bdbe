import CCurfew
import Dispatch
import Synchronization
import _CurfewShims

/// Runs one job under its grant: calls its hooks on the job's serial queue,
/// drives its chunk loop, routes the grant's expiration to its `expire` hook
/// without ever overlapping a chunk, and decides its outcome.
///
/// Its address is the job's `curfew_context *` (see ``HostContext``).
///
/// - Important: Its hooks never overlap, no chunk starts once the grant is
///   expiring, `expire` runs at most once, `destroy` runs last, and a job
///   past its hard deadline is never called again. The chunk loop takes no
///   lock, allocation or dispatch per call.
///
/// Not final: `curfew test` runs this same class, through ``TracedRun``,
/// which only watches (the `hookStarting` family, the host services).
class JobRun: HostContext, JobExecution, @unchecked Sendable {
    // Safe because its mutable state is the `control` Mutex, and `jobState`,
    // which only the job's serial queue touches.
    /// Where the job is in its life. Guarded by `control`.
    enum Stage {
        case pending      // not started
        case creating     // `create` is enqueued or running
        case queued       // a slice is enqueued on the job queue
        case running      // a slice is calling chunks
        case delayed      // waiting for a chunk's requested delay
        case idle         // stopped at the expiration point; the grant's expiration is due
        case expiring     // `expire` is enqueued or running
        case waiting      // hooks done; waiting for the job's own tasks to end
        case destroying   // `destroy` is enqueued or running
        case finished
        case terminated   // overran the hard deadline: never called again
    }

    struct Control {
        var stage: Stage = .pending
        var pendingExpire: ExpirationReason?
        var expiredBy: ExpirationReason?
        var expireCalled = false
        var createFailed = false
        var failure: String?
        /// Not run: why (its checkpoint could not be read).
        var refusal: String?
        var delayTimer: (any CurfewTimer)?
        var chunks: UInt64 = 0
        var progress: JobProgress?
        var lastProgressEvent: CurfewInstant?
        /// When the job's progress last moved (or it started): with a stall
        /// time, the job is expired `stalled` that long after.
        var progressMovedAt: CurfewInstant?
        /// Runs of other jobs this run asked for (`submit_run`).
        var submitted = 0
        /// The conditions this run last asked for (`require_conditions`), and how often it changed them.
        var conditions: Set<Condition>?
        var conditionChanges = 0
        var stallTimer: (any CurfewTimer)?
        var lastError: String?
        var startedAt: CurfewInstant?
        /// What the chunks have taken so far (updated after each slice).
        var estimate: ChunkEstimate
        /// Chunk times and the `expire` hook's lateness, for metrics.
        var measures = RunMeasures()
        /// The prediction of the chunk the loop declined to start, as it
        /// began the expiration early instead.
        var declined: Int64?
        /// The host's app state, as `app_state` answers.
        var appState: AppState
        /// App events not yet delivered to the job's `app_event` hook.
        var appEvents: [AppEvent] = []
        /// `create` succeeded and the job got its launch event: it gets the others.
        var launched = false
        /// The `app_event` hook is running.
        var inAppEvent = false
        /// Since when the hook of the stage (create, expire, destroy) has
        /// waited for a thread; `nil` once it has started. At the hard
        /// deadline it tells the host's lateness from the job's overrun.
        var waitingSince: CurfewInstant?
        /// The job's result went out at the hard deadline while `destroy`
        /// still waited for a thread: it runs, unreported, if it gets one
        /// before the process ends.
        var reportedBeforeDestroy = false

        /// Reported: nothing the job says or saves counts any more.
        var isOver: Bool { stage == .finished || stage == .terminated || reportedBeforeDestroy }
    }

    /// What to do once the control lock is released.
    private enum Next {
        case nothing
        case slice        // run a slice here (already on the job queue)
        case enqueueSlice
        case expire       // here
        case enqueueExpire
        case destroy      // here
        case enqueueDestroy
        case delay(nanoseconds: Int64)
    }

    let grant: Grant
    /// Called around each chunk, for `curfew test`; `nil` in a run.
    private let chunkProbe: ChunkProbe?
    /// When the grant starts, if not as the job does (see ``RunConfiguration/grantStart``).
    private let grantStart: CurfewInstant?
    private let clock: any CurfewClock
    private let timeSliceNanoseconds: UInt64
    /// The job's hooks, one at a time: `create`, slices, `expire`, `destroy`.
    private let queue: SerialQueue
    /// Its tasks' expiration handlers (the grant's handler queue).
    private let handlers: SerialQueue
    private let events: EventChannel
    private let onFinish: @Sendable (JobResult) -> Void
    private let control: Mutex<Control>
    private let checkpoints: (any CheckpointKeeper)?
    /// The policy's stall time, if it has one.
    private let stall: Duration?
    /// The jobs this one may ask to run; `nil`: none, the host takes no such request.
    private let submits: Set<String>?
    /// Whether the host holds runs to conditions (`require_conditions`).
    private let watchesConditions: Bool

    // Written by `create` and read by later hooks, all on the job's serial queue.
    private var jobState: UnsafeMutableRawPointer?
    /// The chunks the running slice has called, in memory a crash report
    /// can read (see ``HookThread/reportCrashes(on:)``). Job queue only.
    private let sliceCount = UnsafeMutablePointer<UInt64>.allocate(capacity: 1)
    /// The job's name as a C string, for crash reports: kept, as contexts are.
    private let cName: UnsafePointer<CChar>
    /// The refusal past the task limit has been logged.
    private let warnedTaskLimit = Atomic<Bool>(false)
    /// A refused begin while expiring, and an end of an unknown task, are said once each.
    private let warnedNotActive = Atomic<Bool>(false)
    private let warnedUnknownEnd = Atomic<Bool>(false)
    /// A save without a state store has been logged.
    private let warnedNoState = Atomic<Bool>(false)

    /// - Throws: The grant's refusal (a continuous job the policy does not allow).
    init(
        job: PluginJob, manager: GrantManager, parameters: ParameterTable, timeSlice: Duration,
        events: EventChannel, checkpoints: (any CheckpointKeeper)? = nil, estimate: ChunkEstimate = .empty,
        appState: AppState = .background, grantStart: CurfewInstant? = nil, hooks: DispatchQueue = SerialQueue.hooks,
        chunkProbe: ChunkProbe? = nil, submits: Set<String>? = nil, watchesConditions: Bool = false, onFinish: @escaping @Sendable (JobResult) -> Void
    ) throws(CurfewError) {
        self.submits = submits
        self.watchesConditions = watchesConditions
        self.grantStart = grantStart
        self.chunkProbe = chunkProbe
        self.clock = manager.clock
        queue = SerialQueue(label: "curfew.job", target: hooks)
        handlers = SerialQueue(label: "curfew.job.handlers", target: hooks)
        self.timeSliceNanoseconds = UInt64(max(timeSlice.nanoseconds, 1))
        self.events = events
        self.onFinish = onFinish
        self.checkpoints = checkpoints
        self.control = Mutex(Control(estimate: estimate, appState: appState))
        self.stall = manager.policy.stall
        self.grant = try manager.makeGrant(
            name: job.name, continuous: job.isContinuous, modes: job.backgroundModes, handlerQueue: handlers)
        sliceCount.initialize(to: 0)
        cName = UnsafePointer(CStrings.copy(job.name))
        super.init(job: job, parameters: parameters)
    }

    // MARK: Starting

    /// Starts the job's grant and dispatches its `create`.
    func start() {
        control.withLock { c in
            precondition(c.stage == .pending, "JobRun.start called twice")
            c.stage = .creating
            c.startedAt = clock.now()
            c.waitingSince = c.startedAt
            events.post(.started(job: job.name, pluginPath: job.pluginPath, budget: grant.budget))
            // In the foreground the grant's clock waits for the background.
            if !c.appState.runsGrantClocks { grant.hold() }
        }
        grant.start(observer: GrantObserver(
            expiring: { [self] reason in requestExpire(reason) },
            drained: { [self] in tasksDrained() },
            deadline: { [self] open in reachDeadline(openTasks: open) }), at: grantStart)
        if let stall {
            let now = clock.now()
            control.withLock { $0.progressMovedAt = now }
            watchStall(until: now.advanced(by: stall))
        }
        queue.enqueue { self.runCreate() }
    }

    /// Checks at `deadline` whether the progress moved in the stall time
    /// before it: if not, the grant expires `stalled`; else the check moves
    /// to a stall time after the last move. One timer a job, whatever its
    /// progress reports, so reporting costs no timer.
    private func watchStall(until deadline: CurfewInstant) {
        let timer = clock.schedule(at: deadline) { [self] in
            guard let stall else { return }
            let due = control.withLock { c -> CurfewInstant? in
                c.stallTimer = nil
                guard !c.isOver, c.expiredBy == nil, c.pendingExpire == nil, let moved = c.progressMovedAt else { return nil }
                return moved.advanced(by: stall)
            }
            guard let due else { return }
            if due > clock.now() {
                watchStall(until: due)
            } else {
                grant.expireNow(.stalled)
            }
        }
        let armed = control.withLock { c -> Bool in
            guard !c.isOver else { return false }
            c.stallTimer = timer
            return true
        }
        if !armed { timer.cancel() }
    }

    /// Expires the job now, for a shutdown or a cancellation (kept until the
    /// grant starts, if it has not yet).
    func expireNow(_ reason: ExpirationReason) {
        grant.expireNow(reason)
    }

    // MARK: Hooks, on the job queue

    private func runCreate() {
        guard control.withLock({ $0.stage == .creating }) else { return }
        if case .failure(let refusal) = CheckpointCheck.read(job, checkpoints) {
            let next = control.withLock { c -> Next in
                guard c.stage == .creating else { return .nothing }
                c.createFailed = true  // no destroy: create never ran
                c.refusal = refusal.reason
                c.stage = .waiting
                return finishIfDrained(&c, onQueue: true)
            }
            return perform(next)
        }
        var state: UnsafeMutableRawPointer?
        guard let status = callHook(.create, of: .creating, { job.hooks.create.map { $0(context, &state) } ?? CURFEW_OK }) else { return }
        jobState = state
        let next = control.withLock { c -> Next in
            guard c.stage == .creating else { return .nothing }  // terminated meanwhile
            // The grant may have begun to expire a moment before it tells this run.
            if c.expiredBy == nil, let reason = grant.expirationReason { c.expiredBy = reason }
            if status != CURFEW_OK {
                // At once: the tasks it began are ended here, their handlers not called.
                c.createFailed = true
                c.failure = c.lastError.map { "create failed: \($0)" } ?? "create returned an error"
                let ended = grant.endAllTasks()
                if !ended.isEmpty { tasksEndedByHost(ended) }
                c.stage = .waiting
                return finishIfDrained(&c, onQueue: true)
            }
            // (Not when the grant expired before or during `create`: a begin was refused then.)
            if !job.isChunked && grant.tasksBegun == 0 && c.pendingExpire == nil && !grant.isExpiring {
                // A task-driven job that began no task: nothing keeps it alive
                // past this point, and a task a thread of its begins later is
                // refused (a port of `dispatch_async { beginBackgroundTask … }`
                // that does nothing). One that began and ended its tasks in
                // `create` did its work there, and completes.
                c.failure = Self.noTaskOpen
                c.stage = .waiting
                return finishIfDrained(&c, onQueue: true)
            }
            if c.pendingExpire != nil, job.isChunked || job.hooks.expire != nil {
                c.stage = .expiring
                c.expireCalled = true
                return .expire
            }
            if job.isChunked {
                c.stage = .queued
                return .slice
            }
            c.stage = .waiting
            return finishIfDrained(&c, onQueue: true)
        }
        if status == CURFEW_OK && control.withLock({ c in
            // A job that is over already (failed, completed in create) is not launched.
            guard c.failure == nil, !c.isOver, c.stage != .destroying else { return false }
            c.launched = true
            return true
        }) {
            deliverAppEvents(launching: true)
        }
        perform(next)
    }

    /// Calls the job's `app_event` hook with the events not yet delivered
    /// (after `launch`, when `launching`), on the job queue, while the job is alive.
    private func deliverAppEvents(launching: Bool = false) {
        guard let hook = job.hooks.appEvent else { return }
        let pending = control.withLock { c -> [AppEvent] in
            guard c.launched else { return [] }
            defer { c.appEvents.removeAll() }
            return (launching ? [.launch] : []) + c.appEvents
        }
        for event in pending {
            guard control.withLock({ c in
                guard !c.isOver && c.stage != .destroying else { return false }
                c.inAppEvent = true
                return true
            }) else { return }
            hookStarting("app_event", event.rawValue)
            HookThread.running(self, at: place(.appEvent)) { hook(context, jobState, event.cValue) }
            hookReturned("app_event", status: CURFEW_OK)
            control.withLock { $0.inAppEvent = false }
        }
    }

    /// The host's app state changed (`event` led to `state`): the grant's
    /// clock stops in the foreground and starts in the background (the whole
    /// budget, or up to `deadline`), and the job's hook hears of it.
    func appEvent(_ event: AppEvent, state: AppState, deadline: CurfewInstant?) {
        if event != .willTerminate {
            if state.runsGrantClocks { grant.release(deadline: deadline) } else { grant.hold() }
        }
        let deliver = control.withLock { c -> Bool in
            c.appState = state
            guard job.hooks.appEvent != nil, !c.isOver, c.stage != .destroying else { return false }
            c.appEvents.append(event)
            return true
        }
        if deliver { queue.enqueue { self.deliverAppEvents() } }
    }

    /// Calls chunks back to back for up to one time slice, checking before
    /// each that the grant is not expiring. No lock, allocation or dispatch
    /// per chunk: one clock read and one relaxed atomic load.
    private func runSlice() {
        guard let (before, learnt) = control.withLock({ c -> (UInt64, ChunkEstimate)? in
            guard c.stage == .queued else { return nil }
            c.stage = .running
            // Zeroed under the lock that marks the slice running: a deadline
            // that reads it then never sees the last slice's count.
            sliceCount.pointee = 0
            return (c.chunks, c.estimate)
        }) else { return }

        let chunk = job.hooks.chunk!
        let context = self.context
        let state = jobState
        let grant = self.grant
        let expirationPoint = grant.expirationPointNanoseconds
        var now = clock.now().nanoseconds
        let sliceEnd = now &+ timeSliceNanoseconds
        // The count lives in memory, not a register: one store a chunk, so
        // that a worker's crash report can say which chunk crashed.
        let count = sliceCount
        var result: curfew_chunk_result = 0
        var estimate = learnt
        // Budget-aware: no chunk starts once what is left before the expiration
        // point is less than the prediction (one that would end on it still
        // starts). One comparison a chunk, as before: `stopAt` is never after
        // the expiration point.
        let margin = min(UInt64(estimate.predicted), expirationPoint)
        let stopAt = margin == 0 ? expirationPoint : expirationPoint - margin + 1
        // The slice's longest chunk: the estimate learns one sample a slice,
        // so a chunk longer than a slice (the ones that matter) is a sample of its own.
        var longest: UInt64 = 0
        // Each chunk's time, by bucket: kept on the stack, added to the run's after the slice.
        var buckets = InlineArray<8, UInt64>(repeating: 0)
        var sliceNanoseconds: UInt64 = 0
        enum Stop { case expiring, overrun, sliceOver, result }
        let probe = chunkProbe
        let stop: Stop = HookThread.running(self, at: place(.chunk, base: before)) {
            while true {
                if now >= stopAt || grant.isExpiring { return now >= expirationPoint || grant.isExpiring ? .expiring : .overrun }
                if count.pointee > 0 && now >= sliceEnd { return .sliceOver }
                if let probe { probe.before(before &+ count.pointee &+ 1) }
                result = chunk(context, state)
                // Before the count: a deadline the probe's time reaches finds this chunk running.
                if let probe { probe.after(before &+ count.pointee &+ 1, result) }
                count.pointee &+= 1
                let after = clock.now().nanoseconds
                let took = after &- now
                longest = max(longest, took)
                buckets[RunMeasures.bucket(took)] &+= 1
                sliceNanoseconds &+= took
                now = after
                if result != 0 { return .result }
            }
        }
        let ran = count.pointee
        if ran > 0 { estimate.add(Int64(clamping: longest)) }
        var declined: Int64?

        let next = control.withLock { c -> Next in
            guard c.stage == .running else { return .nothing }  // terminated meanwhile: counted then
            c.chunks &+= ran
            c.estimate = estimate
            if ran > 0 { c.measures.add(buckets, nanoseconds: sliceNanoseconds) }
            if stop == .result && result < 0 {
                if result == -1 {
                    return workEnded(&c, failure: nil)
                }
                let why =
                    switch result {
                    case -2: "chunk returned failed"
                    case -3: Reason.failedForGood
                    default: "chunk returned \(result), not a valid result"
                    }
                return workEnded(&c, failure: c.lastError.map { "\(why): \($0)" } ?? why)
            }
            if c.pendingExpire != nil {
                c.stage = .expiring
                c.expireCalled = true
                return .expire
            }
            switch stop {
            case .expiring:
                // The grant's expiration is due or under way; it calls `expire`.
                c.stage = .idle
                return .nothing
            case .overrun:
                // The expiration begins now, so `expire` runs in time. Said
                // when the chunk would have run past the hard deadline (it
                // saved the job from termination); else it only brings the
                // expiration a little forward.
                c.stage = .idle
                let deadline = grant.deadline?.nanoseconds ?? .max
                if deadline &- now < UInt64(estimate.predicted) { c.declined = estimate.predicted }
                declined = c.declined
                // Declined before any chunk, on what earlier runs learnt: that
                // may be stale, so it counts for less each time, and a later
                // run tries a chunk and learns afresh.
                if before == 0 && ran == 0 { estimate.decay() }
                c.estimate = estimate
                return .nothing
            case .sliceOver:
                c.stage = .queued
                return .enqueueSlice
            case .result:
                c.stage = .delayed
                return .delay(nanoseconds: result)
            }
        }
        if stop == .overrun {
            if let declined {
                let left = Int64(bitPattern: expirationPoint &- now)
                hostLog(.info, "the next chunk, about \(Self.milliseconds(declined)), would overrun the expiration point (\(Self.milliseconds(max(left, 0))) left): expiring now")
            }
            grant.expireNow(.timeout)
        }
        perform(next)
    }

    /// Nanoseconds, in words for a reason: "40 s", "700 ms", "2.25 ms".
    static func milliseconds(_ nanoseconds: Int64) -> String {
        let value = Double(nanoseconds) / 1e6
        if value >= 10_000 {
            let tenths = Int64((value / 100).rounded())
            return tenths % 10 == 0 ? "\(tenths / 10) s" : "\(tenths / 10).\(tenths % 10) s"
        }
        return value >= 10 ? "\(Int(value.rounded())) ms" : "\((value * 100).rounded() / 100) ms"
    }

    /// Where a crash in `hook` would be, for a worker's crash report.
    /// Calls a hook of `stage`'s, which counts as started (no longer waiting
    /// for a thread) only as plugin code is called: on a busy machine the
    /// host's own steps before it take a while, and a hard deadline then
    /// said "still running" of a hook that had not said a word. `nil`: the
    /// stage moved on (terminated) and the hook was not called.
    private func callHook<T>(_ hook: HookThread.Hook, of stage: Stage, starting: (inout Control) -> Void = { _ in }, _ body: () -> T) -> T? {
        callHook(hook, of: stage, status: { _ in CURFEW_OK }, starting: starting, body)
    }

    /// As above, for a hook that returns a status (`create`), which the probe sees.
    private func callHook(_ hook: HookThread.Hook, of stage: Stage, _ body: () -> curfew_status) -> curfew_status? {
        callHook(hook, of: stage, status: { $0 }, body)
    }

    private func callHook<T>(
        _ hook: HookThread.Hook, of stage: Stage, status: (T) -> curfew_status, starting: (inout Control) -> Void = { _ in }, _ body: () -> T
    ) -> T? {
        HookThread.running(self, at: place(hook)) { () -> T? in
            let started = control.withLock { c -> Bool in
                guard c.stage == stage else { return false }
                c.waitingSince = nil
                starting(&c)
                return true
            }
            guard started else { return nil }
            hookStarting(hook.name, "")
            let result = body()
            hookReturned(hook.name, status: status(result))
            return result
        }
    }

    // MARK: What `curfew test` watches: nothing here (see ``TracedRun``)

    /// A hook of the job's is about to be called (`detail`: the app event, or the task's name).
    func hookStarting(_ hook: String, _ detail: String) {}
    /// It returned (`status`: create's).
    func hookReturned(_ hook: String, status: curfew_status) {}
    /// The host ended these tasks, their handlers not called (`create` failed).
    func tasksEndedByHost(_ names: [String]) {}
    /// Whether nothing of the job's is queued or running on its queues.
    var isQuiet: Bool { !queue.isBusy && !handlers.isBusy }
    /// Whether the run has reported its result (or is past its hard deadline).
    var hasEnded: Bool { control.withLock { $0.isOver } }

    private func place(_ hook: HookThread.Hook, base: UInt64 = 0) -> HookThread.Place {
        HookThread.Place(job: cName, hook: hook, base: base, count: hook == .chunk ? UnsafePointer(sliceCount) : nil)
    }

    private func workEnded(_ c: inout Control, failure: String?) -> Next {
        c.failure = failure
        c.stage = .waiting
        return finishIfDrained(&c, onQueue: true)
    }

    private func delayFired() {
        let resume = control.withLock { c -> Bool in
            guard c.stage == .delayed else { return false }
            c.delayTimer = nil
            c.stage = .queued
            return true
        }
        if resume { runSlice() }
    }

    private func runExpire() {
        // Events that came before the expiration are heard before it (will-terminate, say).
        deliverAppEvents()
        guard let reason = control.withLock({ c -> ExpirationReason? in
            guard c.stage == .expiring else { return nil }
            return c.pendingExpire ?? c.expiredBy
        }) else {
            return
        }
        let lateness: (inout Control) -> Void = { [grant, clock, job] c in
            // Measured as the hook starts: against the point a timeout was due at.
            guard reason == .timeout, job.hooks.expire != nil else { return }
            let point = grant.expirationPointNanoseconds
            guard point != .max else { return }
            let now = clock.now().nanoseconds
            c.measures.expireLateness = .nanoseconds(Int64(clamping: now >= point ? now - point : 0))
        }
        guard callHook(.expire, of: .expiring, starting: lateness, { job.hooks.expire?(context, jobState, reason.cValue) }) != nil else { return }
        let next = control.withLock { c -> Next in
            guard c.stage == .expiring else { return .nothing }
            c.stage = .waiting
            // `destroy` waits its turn behind other jobs' expirations, which are due now.
            return finishIfDrained(&c, onQueue: false)
        }
        perform(next)
    }

    private func runDestroy() {
        guard let skip = control.withLock({ c in c.stage == .destroying ? c.createFailed : nil }) else { return }
        // A task's expiration handler may still be returning after it ended the
        // last task: destroy comes after it, so the two never overlap. The
        // job's thread does not wait for it: destroy is enqueued behind it.
        // (A job that began no task never had a handler enqueued: the grant,
        // closed now, begins none, and its lock is the job's own.)
        if grant.tasksBegun > 0 && handlers.isBusy {
            // Behind the job's own handler, not the host's threads: a wait
            // there is the job's, not the host's lateness.
            control.withLock { $0.waitingSince = nil }
            handlers.enqueue { self.queue.enqueue { self.destroy(skip: skip) } }
        } else {
            destroy(skip: skip)
        }
    }

    private func destroy(skip: Bool) {
        guard control.withLock({ $0.stage == .destroying }) else { return }  // terminated meanwhile
        if skip {
            control.withLock { $0.waitingSince = nil }
        } else if callHook(.destroy, of: .destroying, { job.hooks.destroy?(context, jobState) }) == nil {
            return
        }
        control.withLock { c in
            guard c.stage == .destroying else { return }  // terminated meanwhile
            c.stage = .finished
            grant.finish()
            guard !c.reportedBeforeDestroy else { return }
            let (outcome, reason) = outcomeAndReason(c)
            finish(makeResult(c, outcome: outcome, reason: reason), &c)
        }
    }

    /// The failure of a task-driven job whose `create` returned without
    /// having begun a task.
    static let noTaskOpen = "create returned with no background task open; begin the task before create returns"

    private func outcomeAndReason(_ c: Control) -> (Outcome, String) {
        if let refusal = c.refusal { return (.refused, refusal) }
        if let failure = c.failure { return (.failed, failure) }
        if let reason = c.expiredBy, c.expireCalled || !job.isChunked {
            return (.expired, c.expireCalled ? "\(Reason.expired(reason, declined: c.declined)); cleanup ran" : "\(reason); tasks ended")
        }
        return (.completed, job.isChunked ? "work done" : "all tasks ended")
    }

    // MARK: Grant callbacks

    /// The grant started to expire: call `expire` at once when no chunk is in
    /// flight, else right after it returns.
    func requestExpire(_ reason: ExpirationReason) {
        let next = control.withLock { c -> Next in
            if c.isOver || c.stage == .destroying { return .nothing }
            if c.expiredBy == nil { c.expiredBy = reason }
            events.post(.expiring(job: job.name, reason: reason))
            switch c.stage {
            case .pending, .creating, .running:
                c.pendingExpire = reason
                return .nothing
            case .queued, .delayed, .idle:
                c.delayTimer?.cancel()
                c.delayTimer = nil
                c.pendingExpire = reason
                c.stage = .expiring
                c.expireCalled = true
                c.waitingSince = clock.now()
                return .enqueueExpire
            case .waiting:
                guard job.hooks.expire != nil && !c.expireCalled && !c.createFailed else { return .nothing }
                c.pendingExpire = reason
                c.stage = .expiring
                c.expireCalled = true
                c.waitingSince = clock.now()
                return .enqueueExpire
            case .expiring, .destroying, .finished, .terminated:
                return .nothing
            }
        }
        perform(next)
    }

    private func tasksDrained() {
        let next = control.withLock { c -> Next in
            finishIfDrained(&c, onQueue: false)
        }
        perform(next)
    }

    /// The hard deadline passed and the job is not over: stop waiting for it.
    func reachDeadline(openTasks: [String]) {
        control.withLock { c in
            var what: String
            switch c.stage {
            case .finished, .terminated: return
            case .destroying where c.reportedBeforeDestroy: return
            case .destroying where c.waitingSince != nil && !c.inAppEvent:
                // The job's hooks returned in time and the host was late to
                // call `destroy`: not the job's failure. Its result goes out
                // now; `destroy` runs if it gets a thread before the process
                // ends (a worker, or a run, may end first).
                c.reportedBeforeDestroy = true
                let (outcome, reason) = outcomeAndReason(c)
                finish(makeResult(c, outcome: outcome, reason: "\(reason); destroy was waiting for a thread at the hard deadline\(hostLate(c))"), &c)
                return
            case .pending, .creating:
                what = c.waitingSince != nil ? "create was waiting for a thread" : "create was still running"
            case .running:
                // The slice's chunks so far count: the stuck one is the next.
                c.chunks &+= curfew_shim_load_count(sliceCount)
                what = "chunk \(c.chunks &+ 1) was still running"
            case .expiring:
                what = c.waitingSince != nil ? "expire was waiting for a thread" : "expire was still running"
            case .destroying: what = "destroy was still running"
            case .waiting where !openTasks.isEmpty:
                what = Reason.neverEnded(openTasks)
            case .queued, .delayed, .idle, .waiting: what = "did not stop"
            }
            if c.inAppEvent { what = "app_event was still running" }
            c.delayTimer?.cancel()
            c.delayTimer = nil
            let late = [.creating, .expiring].contains(c.stage) && !c.inAppEvent ? hostLate(c) : ""
            c.stage = .terminated
            grant.finish()
            finish(makeResult(c, outcome: .terminated, reason: "\(what) at the hard deadline\(late)"), &c)
        }
    }

    /// " (the host was N ms late)" while the stage's hook waits for a thread
    /// (it was due, and the host had none to run it), else "".
    private func hostLate(_ c: Control) -> String {
        guard let since = c.waitingSince else { return "" }
        return " (the host was \(max(0, since.duration(to: clock.now()).nanoseconds / 1_000_000)) ms late)"
    }

    /// With the control lock held: if the hooks are done and no task is open,
    /// closes the grant and moves on to `destroy`.
    private func finishIfDrained(_ c: inout Control, onQueue: Bool) -> Next {
        guard c.stage == .waiting, grant.closeIfDrained() else { return .nothing }
        c.stage = .destroying
        c.waitingSince = onQueue ? nil : clock.now()
        return onQueue ? .destroy : .enqueueDestroy
    }

    private func perform(_ next: Next) {
        switch next {
        case .nothing: break
        case .slice: runSlice()
        case .enqueueSlice: queue.enqueueAfterOthers { self.runSlice() }
        case .expire: runExpire()
        case .enqueueExpire: queue.enqueue { self.runExpire() }
        case .destroy: runDestroy()
        case .enqueueDestroy: queue.enqueueAfterOthers { self.runDestroy() }
        case .delay(let nanoseconds):
            let timer = clock.schedule(at: clock.now().advanced(by: .nanoseconds(nanoseconds))) {
                self.queue.enqueue { self.delayFired() }
            }
            let armed = control.withLock { c -> Bool in
                guard c.stage == .delayed else { return false }
                c.delayTimer = timer
                return true
            }
            if !armed { timer.cancel() }
        }
    }

    private func makeResult(_ c: Control, outcome: Outcome, reason: String) -> JobResult {
        let elapsed = c.startedAt.map { $0.duration(to: clock.now()) } ?? .zero
        return JobResult(
            job: job.name, pluginPath: job.pluginPath, loadPath: job.loadPath, isChunked: job.isChunked, outcome: outcome, chunks: c.chunks,
            elapsed: elapsed, reason: Reason.bounded(reason), progress: c.progress,
            estimate: c.estimate.samples > 0 ? c.estimate : nil, measures: c.measures)
    }

    /// With the control lock held, the stage already final: the job's last event.
    private func finish(_ result: JobResult, _ c: inout Control) {
        c.stallTimer?.cancel()
        c.stallTimer = nil
        events.post(.finished(result)) { [onFinish] in onFinish(result) }
    }

    // MARK: Host services

    override var timeRemainingSeconds: Double {
        // Not `map(\.seconds)`, which goes through the runtime's generic key
        // path code: a chunk loop may ask for the time left on every chunk.
        guard let remaining = grant.timeRemaining else { return Double.greatestFiniteMagnitude }
        return remaining.seconds
    }

    override var isExpiring: Bool {
        grant.isExpiring
    }

    override var appState: AppState {
        control.withLock { $0.appState }
    }

    override func beginTask(
        name: String, handler: curfew_expiration_handler?, userData: UnsafeMutableRawPointer?
    ) -> BackgroundTaskIdentifier {
        let callback = handler.map { handler in
            let userData = UserData(pointer: userData)
            return { @Sendable [self] (reason: ExpirationReason) in
                hookStarting("handler", name)
                handler(userData.pointer, reason.cValue)
                hookReturned("handler", status: CURFEW_OK)
            }
        }
        switch grant.tryBeginTask(name: name, expirationHandler: callback) {
        case .success(let id):
            return id
        case .failure(.notActive):
            guard !warnedNotActive.exchange(true, ordering: .relaxed) else { return .invalid }
            hostLog(.debug, "begin_background_task('\(Reason.shortened(name))') refused: the grant is expiring or over")
        case .failure(.tooManyTasks):
            // Once: a job that keeps asking must not flood the log.
            guard !warnedTaskLimit.exchange(true, ordering: .relaxed) else { return .invalid }
            hostLog(.warning, "begin_background_task('\(Reason.shortened(name))') refused: the job has \(Grant.maximumOpenTasks) tasks open, the most a job may have")
        }
        return .invalid
    }

    override func endTask(_ id: BackgroundTaskIdentifier) {
        // Ending CURFEW_TASK_INVALID is the header's harmless `end(begin())`.
        // An unknown id is said once a job: in a worker each log line is a
        // channel message, and 90,000 of them outlasted a 5 s grant.
        if !grant.endTask(id), id != .invalid, !warnedUnknownEnd.exchange(true, ordering: .relaxed) {
            hostLog(.debug, "end_background_task(\(id.rawValue)): no such open task (harmless; said once)")
        }
    }

    override func log(_ level: LogLevel, _ message: String) {
        post(level, message)
    }

    /// A line the host writes about the job, not the job's own.
    func hostLog(_ level: LogLevel, _ message: String) {
        post(level, message)
    }

    private func post(_ level: LogLevel, _ message: String) {
        control.withLock { c in
            guard !c.isOver else { return }
            if level == .error { c.lastError = message }
            events.post(.log(job: job.name, level: level, message: message))
        }
    }

    /// The least time between two progress events of one job.
    static let progressInterval: Duration = .milliseconds(100)

    override func reportProgress(_ progress: JobProgress) {
        let now = clock.now()
        control.withLock { c in
            guard !c.isOver else { return }
            if c.progress != progress { c.progressMovedAt = now }
            c.progress = progress
            if let last = c.lastProgressEvent, last.duration(to: now) < Self.progressInterval,
                progress.completed != progress.total
            {
                return
            }
            c.lastProgressEvent = now
            events.post(.progress(job: job.name, progress))
        }
    }

    override var keepsCheckpoints: Bool { checkpoints != nil }

    override func requestNextRun(after delay: Duration) -> curfew_status {
        control.withLock { c in
            guard !c.isOver else { return CURFEW_UNAVAILABLE }
            events.post(.nextRunRequested(job: job.name, after: delay))
            return CURFEW_OK
        }
    }

    override func requireConditions(_ conditions: Set<Condition>) -> curfew_status {
        guard watchesConditions else { return CURFEW_UNAVAILABLE }
        let answer = control.withLock { c -> (status: curfew_status, problem: String?) in
            guard !c.isOver else { return (CURFEW_UNAVAILABLE, nil) }
            // The host has these already: asking again costs it nothing.
            guard c.conditions != conditions else { return (CURFEW_OK, nil) }
            c.conditionChanges += 1
            guard c.conditionChanges <= Condition.maximumChangesPerRun else {
                let first = c.conditionChanges == Condition.maximumChangesPerRun + 1
                return (CURFEW_ERROR, first ? "conditions not required: a run may change them \(Condition.maximumChangesPerRun) times" : nil)
            }
            c.conditions = conditions
            events.post(.conditionsRequired(job: job.name, conditions: conditions))
            return (CURFEW_OK, nil)
        }
        if let problem = answer.problem { hostLog(.error, problem) }
        return answer.status
    }

    override func submitRun(_ run: SubmittedRun) -> curfew_status {
        guard let submits else { return CURFEW_UNAVAILABLE }
        let answer = control.withLock { c -> (status: curfew_status, problem: String?) in
            guard !c.isOver else { return (CURFEW_UNAVAILABLE, nil) }
            guard submits.contains(run.job) else {
                return (CURFEW_ERROR, "run of '\(run.job)' not submitted: the config does not let this job start it (its \"submits\")")
            }
            // A run that asks in a loop asks no more: what a host keeps stays bounded.
            let first = c.submitted == SubmittedRun.maximumPerRun
            c.submitted += 1
            guard c.submitted <= SubmittedRun.maximumPerRun else {
                // Said once a run.
                return (CURFEW_ERROR, first ? "runs not submitted: a run may submit \(SubmittedRun.maximumPerRun)" : nil)
            }
            events.post(.runSubmitted(job: job.name, run: run))
            return (CURFEW_OK, nil)
        }
        if let problem = answer.problem { hostLog(.error, problem) }
        return answer.status
    }

    override func saveCheckpoint(_ bytes: UnsafeRawBufferPointer) -> curfew_status {
        guard let checkpoints else {
            if !warnedNoState.exchange(true, ordering: .relaxed) {
                hostLog(.warning, "checkpoint not saved: this host keeps no state (run it with a state folder)")
            }
            return CURFEW_UNAVAILABLE
        }
        // A job past its end (a thread of its own, say) must not bring back what its completion cleared.
        guard !control.withLock({ $0.isOver }) else { return CURFEW_UNAVAILABLE }
        do throws(CurfewError) {
            try checkpoints.saveCheckpoint(job.stateKey, bytes: Array(bytes))
            return CURFEW_OK
        } catch {
            hostLog(.error, "checkpoint not saved: \(error.description)")
            return error.checkpointStatus
        }
    }

    override func loadCheckpoint() -> [UInt8]? {
        do throws(CurfewError) {
            return try checkpoints?.checkpoint(job.stateKey)
        } catch {
            hostLog(.error, "checkpoint not loaded: \(error.description)")
            return nil
        }
    }

    /// A point-in-time view for live displays.
    func status() -> JobStatus {
        let (chunks, progress, expiring) = control.withLock { ($0.chunks, $0.progress, $0.expiredBy != nil) }
        return JobStatus(
            job: job.name, isChunked: job.isChunked, timeRemaining: grant.timeRemaining, progress: progress,
            chunks: chunks, isExpiring: expiring, isContinuous: job.isContinuous)
    }
}

/// A plugin's `user_data` pointer, passed back to it untouched.
struct UserData: @unchecked Sendable {
    // Safe because the host never dereferences it; it only hands it back to
    // the plugin's own handler, which owns its thread safety.
    let pointer: UnsafeMutableRawPointer?
}

/// What `curfew test` is told around each chunk: its number in the run,
/// from 1, and after it returns, its result. The chunk loop's only cost for
/// it in a run is a test of `nil`.
struct ChunkProbe: Sendable {
    var before: @Sendable (UInt64) -> Void
    var after: @Sendable (UInt64, curfew_chunk_result) -> Void
}
