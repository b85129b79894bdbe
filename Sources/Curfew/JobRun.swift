import CCurfew
import Dispatch
import Synchronization

/// Runs one job under its grant: calls its hooks on the job's serial queue,
/// drives its chunk loop, routes the grant's expiration to its `expire` hook
/// without ever overlapping a chunk, and decides its outcome.
///
/// Its address is the job's `curfew_context *`. A run is never freed: a
/// plugin's own threads may still hold the context after the job ends, and a
/// call through it must find a run that answers "over" rather than freed
/// memory. It costs a few hundred bytes per job run.
final class JobRun: Sendable {
    /// Where the job is in its life. Guarded by `control`.
    enum Stage {
        case pending      // not started
        case creating     // `create` is running
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
        var delayTimer: (any CurfewTimer)?
        var chunks: UInt64 = 0
        var progress: Progress?
        var lastProgressEvent: CurfewInstant?
        var lastError: String?
        var startedAt: CurfewInstant?

        var isOver: Bool { stage == .finished || stage == .terminated }
    }

    /// What to do once the control lock is released.
    private enum Next {
        case nothing
        case slice        // run a slice here (already on the job queue)
        case enqueueSlice
        case expire(ExpirationReason)        // here
        case enqueueExpire(ExpirationReason)
        case destroy      // here
        case enqueueDestroy
        case delay(nanoseconds: Int64)
    }

    let job: PluginJob
    let parameters: ParameterTable
    private let manager: GrantManager
    private let clock: any CurfewClock
    private let timeSliceNanoseconds: UInt64
    private let queue: DispatchQueue
    private let expirationQueue: DispatchQueue
    private let emit: @Sendable (RunEvent) -> Void
    private let onFinish: @Sendable (JobResult) -> Void
    private let control = Mutex(Control())
    /// Set to stop the chunk loop after the in-flight chunk: read once per chunk.
    private let stopRequested = Atomic<Bool>(false)

    // Safe because both are written once in `start()`, before the first hook
    // is dispatched (which orders the write before every read), and never after.
    private nonisolated(unsafe) var grantStorage: Grant?
    private nonisolated(unsafe) var expirationNanoseconds: UInt64 = .max
    // Safe because it is written by `create` and read by later hooks, all on
    // the job's serial queue.
    private nonisolated(unsafe) var jobState: UnsafeMutableRawPointer?
    // Safe because it is set in init and never changed.
    private nonisolated(unsafe) var context: OpaquePointer!

    init(
        job: PluginJob, manager: GrantManager, parameters: ParameterTable, timeSlice: Duration,
        emit: @escaping @Sendable (RunEvent) -> Void, onFinish: @escaping @Sendable (JobResult) -> Void
    ) {
        self.job = job
        self.manager = manager
        self.clock = manager.clock
        self.parameters = parameters
        self.timeSliceNanoseconds = UInt64(max(timeSlice.nanoseconds, 1))
        self.queue = DispatchQueue(label: "curfew.job.\(job.name)")
        self.expirationQueue = DispatchQueue(label: "curfew.expiration.\(job.name)")
        self.emit = emit
        self.onFinish = onFinish
        // Retained for the life of the process: see the type's discussion.
        context = OpaquePointer(Unmanaged.passRetained(self).toOpaque())
    }

    static func from(_ context: OpaquePointer?) -> JobRun? {
        guard let context else { return nil }
        return Unmanaged<JobRun>.fromOpaque(UnsafeRawPointer(context)).takeUnretainedValue()
    }

    private var grant: Grant { grantStorage! }

    // MARK: Starting

    /// Begins the job's grant and dispatches its `create`.
    ///
    /// - Throws: The grant's refusal (a continuous job the policy does not allow).
    func start() throws(CurfewError) {
        let grant = try manager.beginGrant(
            name: job.name, continuous: job.isContinuous, queue: expirationQueue,
            observer: GrantObserver(
                expiring: { [self] reason in requestExpire(reason) },
                drained: { [self] in tasksDrained() },
                deadline: { [self] open in reachDeadline(openTasks: open) }))
        grantStorage = grant
        expirationNanoseconds = grant.expirationPoint?.nanoseconds ?? .max
        control.withLock {
            $0.stage = .creating
            $0.startedAt = grant.start
        }
        emit(.started(job: job.name, pluginPath: job.pluginPath, budget: grant.isUnlimited ? nil : manager.policy.budget))
        queue.async { self.runCreate() }
    }

    /// Expires the job now, for a shutdown or a cancellation.
    func expireNow(_ reason: ExpirationReason) {
        grantStorage?.expireNow(reason)
    }

    // MARK: Hooks, on the job queue

    private func runCreate() {
        var state: UnsafeMutableRawPointer?
        let status = job.hooks.create.map { $0(context, &state) } ?? CURFEW_OK
        jobState = state
        let next = control.withLock { c -> Next in
            guard c.stage == .creating else { return .nothing }
            if status != CURFEW_OK {
                c.createFailed = true
                c.failure = c.lastError.map { "create failed: \($0)" } ?? "create returned an error"
                c.stage = .waiting
                return finishIfDrained(&c, onQueue: true)
            }
            if let reason = c.pendingExpire, job.isChunked || job.hooks.expire != nil {
                c.stage = .expiring
                c.expireCalled = true
                return .expire(reason)
            }
            if job.isChunked {
                c.stage = .queued
                return .slice
            }
            c.stage = .waiting
            return finishIfDrained(&c, onQueue: true)
        }
        perform(next)
    }

    /// Calls chunks back to back for up to one time slice, checking before
    /// each that the grant is not expiring. No lock, allocation or dispatch
    /// per chunk: one clock read and one relaxed atomic load.
    private func runSlice() {
        guard control.withLock({ c -> Bool in
            guard c.stage == .queued else { return false }
            c.stage = .running
            return true
        }) else { return }

        let chunk = job.hooks.chunk!
        let context = self.context
        let state = jobState
        let expirationPoint = expirationNanoseconds
        var now = clock.now().nanoseconds
        let sliceEnd = now &+ timeSliceNanoseconds
        var count: UInt64 = 0
        var result: curfew_chunk_result = 0
        enum Stop { case requested, expirationPoint, sliceOver, result }
        let stop: Stop
        while true {
            if stopRequested.load(ordering: .relaxed) { stop = .requested; break }
            if now >= expirationPoint { stop = .expirationPoint; break }
            if count > 0 && now >= sliceEnd { stop = .sliceOver; break }
            result = chunk(context, state)
            count &+= 1
            if result != 0 { stop = .result; break }
            now = clock.now().nanoseconds
        }

        let next = control.withLock { c -> Next in
            c.chunks &+= count
            guard c.stage == .running else { return .nothing }  // terminated meanwhile
            if stop == .result && result < 0 {
                if result == -1 {
                    return workEnded(&c, failure: nil)
                }
                let why = result == -2 ? "chunk returned failed" : "chunk returned \(result), not a valid result"
                return workEnded(&c, failure: c.lastError.map { "\(why): \($0)" } ?? why)
            }
            if let reason = c.pendingExpire {
                c.stage = .expiring
                c.expireCalled = true
                return .expire(reason)
            }
            switch stop {
            case .expirationPoint, .requested:
                // The grant's expiration timer is due now; it calls `expire`.
                c.stage = .idle
                return .nothing
            case .sliceOver:
                c.stage = .queued
                return .enqueueSlice
            case .result:
                c.stage = .delayed
                return .delay(nanoseconds: result)
            }
        }
        perform(next)
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

    private func runExpire(_ reason: ExpirationReason) {
        job.hooks.expire?(context, jobState, reason.cValue)
        let next = control.withLock { c -> Next in
            guard c.stage == .expiring else { return .nothing }
            c.stage = .waiting
            return finishIfDrained(&c, onQueue: true)
        }
        perform(next)
    }

    private func runDestroy() {
        if !control.withLock({ $0.createFailed }) {
            job.hooks.destroy?(context, jobState)
        }
        let result = control.withLock { c -> JobResult in
            c.stage = .finished
            let (outcome, reason) = outcomeAndReason(c)
            return makeResult(c, outcome: outcome, reason: reason)
        }
        finish(result)
    }

    private func outcomeAndReason(_ c: Control) -> (Outcome, String) {
        if let failure = c.failure { return (.failed, failure) }
        if let reason = c.expiredBy, c.expireCalled || !job.isChunked {
            return (.expired, c.expireCalled ? "\(reason); cleanup ran" : "\(reason); tasks ended")
        }
        return (.completed, job.isChunked ? "work done" : "all tasks ended")
    }

    // MARK: Grant callbacks

    /// The grant started to expire: call `expire` at once when no chunk is in
    /// flight, else right after it returns.
    private func requestExpire(_ reason: ExpirationReason) {
        let (next, alive) = control.withLock { c -> (Next, Bool) in
            if c.isOver || c.stage == .destroying { return (.nothing, false) }
            if c.expiredBy == nil { c.expiredBy = reason }
            switch c.stage {
            case .pending, .creating:
                c.pendingExpire = reason
                return (.nothing, true)
            case .running:
                c.pendingExpire = reason
                stopRequested.store(true, ordering: .relaxed)
                return (.nothing, true)
            case .queued, .delayed, .idle:
                c.delayTimer?.cancel()
                c.delayTimer = nil
                c.stage = .expiring
                c.expireCalled = true
                return (.enqueueExpire(reason), true)
            case .waiting:
                guard job.hooks.expire != nil && !c.expireCalled && !c.createFailed else { return (.nothing, true) }
                c.stage = .expiring
                c.expireCalled = true
                return (.enqueueExpire(reason), true)
            case .expiring, .destroying, .finished, .terminated:
                return (.nothing, true)
            }
        }
        if alive { emit(.expiring(job: job.name, reason: reason)) }
        perform(next)
    }

    private func tasksDrained() {
        let next = control.withLock { c -> Next in
            finishIfDrained(&c, onQueue: false)
        }
        perform(next)
    }

    /// The hard deadline passed and the job is not over: stop waiting for it.
    private func reachDeadline(openTasks: [String]) {
        let result = control.withLock { c -> JobResult? in
            let what: String
            switch c.stage {
            case .finished, .terminated, .destroying: return nil
            case .pending, .creating: what = "create was still running"
            case .running: what = "chunk \(c.chunks + 1) was still running"
            case .expiring: what = "expire was still running"
            case .waiting where !openTasks.isEmpty:
                let names = openTasks.map { "'\($0)'" }.joined(separator: ", ")
                what = openTasks.count == 1 ? "background task \(names) was never ended" : "background tasks \(names) were never ended"
            case .queued, .delayed, .idle, .waiting: what = "did not stop"
            }
            c.delayTimer?.cancel()
            c.delayTimer = nil
            c.stage = .terminated
            return makeResult(c, outcome: .terminated, reason: "\(what) at the hard deadline")
        }
        guard let result else { return }
        stopRequested.store(true, ordering: .relaxed)
        grant.forceClose()
        finish(result)
    }

    /// With the control lock held: if the hooks are done and no task is open,
    /// closes the grant and moves on to `destroy`.
    private func finishIfDrained(_ c: inout Control, onQueue: Bool) -> Next {
        guard c.stage == .waiting, grant.closeIfDrained() else { return .nothing }
        c.stage = .destroying
        return onQueue ? .destroy : .enqueueDestroy
    }

    private func perform(_ next: Next) {
        switch next {
        case .nothing: break
        case .slice: runSlice()
        case .enqueueSlice: queue.async { self.runSlice() }
        case .expire(let reason): runExpire(reason)
        case .enqueueExpire(let reason): queue.async { self.runExpire(reason) }
        case .destroy: runDestroy()
        case .enqueueDestroy: queue.async { self.runDestroy() }
        case .delay(let nanoseconds):
            let timer = clock.schedule(at: clock.now().advanced(by: .nanoseconds(nanoseconds)), on: queue) {
                self.delayFired()
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
            job: job.name, pluginPath: job.pluginPath, isChunked: job.isChunked, outcome: outcome, chunks: c.chunks,
            elapsed: elapsed, reason: reason, progress: c.progress)
    }

    private func finish(_ result: JobResult) {
        emit(.finished(result))
        onFinish(result)
    }

    // MARK: Host services

    var timeRemainingSeconds: Double {
        guard let grant = grantStorage else { return 0 }
        return grant.timeRemaining.map(\.seconds) ?? Double.greatestFiniteMagnitude
    }

    var isExpiring: Bool {
        grantStorage?.isExpiring ?? true
    }

    func beginTask(
        name: String, handler: curfew_expiration_handler?, userData: UnsafeMutableRawPointer?
    ) -> BackgroundTaskIdentifier {
        guard let grant = grantStorage else { return .invalid }
        let callback = handler.map { handler in
            let userData = UserData(pointer: userData)
            return { @Sendable (reason: ExpirationReason) in handler(userData.pointer, reason.cValue) }
        }
        let id = grant.beginTask(name: name, expirationHandler: callback)
        if id == .invalid {
            log(.debug, "begin_background_task('\(name)') refused: the grant is expiring or over")
        }
        return id
    }

    func endTask(_ id: BackgroundTaskIdentifier) {
        guard let grant = grantStorage else { return }
        if !grant.endTask(id) {
            log(.debug, "end_background_task(\(id.rawValue)): no such open task (harmless)")
        }
    }

    func log(_ level: LogLevel, _ message: String) {
        let alive = control.withLock { c -> Bool in
            guard !c.isOver else { return false }
            if level == .error { c.lastError = message }
            return true
        }
        if alive { emit(.log(job: job.name, level: level, message: message)) }
    }

    /// The least time between two progress events of one job.
    static let progressInterval: Duration = .milliseconds(100)

    func reportProgress(_ progress: Progress) {
        let now = clock.now()
        let send = control.withLock { c -> Bool in
            guard !c.isOver else { return false }
            c.progress = progress
            if let last = c.lastProgressEvent, last.duration(to: now) < Self.progressInterval,
                progress.completed != progress.total
            {
                return false
            }
            c.lastProgressEvent = now
            return true
        }
        if send { emit(.progress(job: job.name, progress)) }
    }

    /// A point-in-time view for live displays.
    func status() -> JobStatus {
        let (chunks, progress, expiring) = control.withLock { ($0.chunks, $0.progress, $0.expiredBy != nil) }
        return JobStatus(
            job: job.name, isChunked: job.isChunked, timeRemaining: grantStorage?.timeRemaining, progress: progress, chunks: chunks,
            isExpiring: expiring)
    }
}

/// A running job as a live display shows it.
public struct JobStatus: Sendable {
    public let job: String
    public let isChunked: Bool
    /// `nil` for a job without a budget.
    public let timeRemaining: Duration?
    public let progress: Progress?
    /// Chunks called so far (updated once per time slice).
    public let chunks: UInt64
    public let isExpiring: Bool
}

/// A plugin's `user_data` pointer, passed back to it untouched.
private struct UserData: @unchecked Sendable {
    // Safe because the host never dereferences it; it only hands it back to
    // the plugin's own handler, which owns its thread safety.
    let pointer: UnsafeMutableRawPointer?
}
