import CCurfew
import Dispatch
import Synchronization

/// A ``JobRun`` that `curfew test` watches: each hook called and returned,
/// each host call the job makes, at its time on the harness's clock, and
/// the calls that come after the job ended. It changes nothing the run
/// does: every override records, then defers to the run.
final class TracedRun: JobRun, @unchecked Sendable {
    // Safe because its own mutable state is the trace's, under its lock.
    let trace: HarnessTrace

    init(
        job: PluginJob, manager: GrantManager, parameters: [String: String], checkpoints: any CheckpointKeeper,
        estimate: ChunkEstimate, hooks: DispatchQueue, chunkProbe: ChunkProbe, trace: HarnessTrace,
        onFinish: @escaping @Sendable (JobResult) -> Void
    ) throws(CurfewError) {
        self.trace = trace
        try super.init(
            job: job, manager: manager, parameters: ParameterTable(parameters), timeSlice: RunConfiguration().timeSlice,
            events: EventChannel(clock: manager.clock) { _, _ in }, checkpoints: checkpoints, estimate: estimate,
            hooks: hooks, chunkProbe: chunkProbe, onFinish: onFinish)
    }

    /// Notes a host call; false (leave it out of the trace) once the job is over.
    private func called(_ name: String) -> Bool {
        trace.hostCall(name, afterEnd: hasEnded)
    }

    override func hookStarting(_ hook: String, _ detail: String) {
        guard isTraced(hook) else { return }
        switch hook {
        case "handler": trace.hookStarting(hook, "task '\(Reason.shortened(detail))'")
        case "app_event": trace.hookStarting(hook, "\(detail) (\(super.appState))")
        default: trace.hookStarting(hook, detail)
        }
    }

    override func hookReturned(_ hook: String, status: curfew_status) {
        if isTraced(hook) { trace.hookReturned(hook, status: status) }
    }

    /// A hook the job has (`create` always: its line says how the job began).
    private func isTraced(_ hook: String) -> Bool {
        switch hook {
        case "expire": job.hooks.expire != nil
        case "destroy": job.hooks.destroy != nil
        default: true
        }
    }

    override func tasksEndedByHost(_ names: [String]) {
        trace.allTasksEnded()
        trace.record("end tasks", "\(Reason.quoted(names)): ended by the host, their handlers not called", byHost: true)
    }

    override func hostLog(_ level: LogLevel, _ message: String) {
        if !hasEnded { trace.record("log", "\(level): \(message)", byHost: true) }
        super.hostLog(level, message)
    }

    override func requestExpire(_ reason: ExpirationReason) {
        if !hasEnded { trace.record("expiring", reason.description) }
        super.requestExpire(reason)
    }

    override func reachDeadline(openTasks: [String]) {
        if !hasEnded { trace.record("deadline", "") }
        super.reachDeadline(openTasks: openTasks)
    }

    override var timeRemainingSeconds: Double {
        _ = called("time_remaining")
        return super.timeRemainingSeconds
    }

    override var isExpiring: Bool {
        _ = called("is_expiring")
        return super.isExpiring
    }

    override func parameter(_ key: String) -> UnsafePointer<CChar>? {
        _ = called("param")
        return super.parameter(key)
    }

    override func beginTask(
        name: String, handler: curfew_expiration_handler?, userData: UnsafeMutableRawPointer?
    ) -> BackgroundTaskIdentifier {
        let traced = called("begin_background_task")
        let id = super.beginTask(name: name, handler: handler, userData: userData)
        guard traced else { return id }
        if id == .invalid {
            let why = grant.openTaskCount >= Grant.maximumOpenTasks
                ? "\(Grant.maximumOpenTasks) tasks are open, the most a job may have" : "the grant is expiring"
            trace.record("begin task", "'\(name)' refused: \(why)")
        } else {
            trace.taskBegan(id, name)
        }
        return id
    }

    override func endTask(_ id: BackgroundTaskIdentifier) {
        let traced = called("end_background_task")
        // From the task's removal to the run's next step being queued, the
        // run looks quiet with no task open: the harness must not move time then.
        endingTasks.add(1, ordering: .sequentiallyConsistent)
        super.endTask(id)
        endingTasks.subtract(1, ordering: .sequentiallyConsistent)
        if traced { trace.taskEnded(id) }
    }

    /// How many `end_background_task` calls are under way.
    private let endingTasks = Atomic<Int>(0)
    var isEndingTask: Bool { endingTasks.load(ordering: .sequentiallyConsistent) > 0 }

    override func log(_ level: LogLevel, _ message: String) {
        if called("log") { trace.record("log", "\(level): \(message)") }
        super.log(level, message)
    }

    override func reportProgress(_ progress: JobProgress) {
        if called("report_progress") { trace.progress(progress) }
        super.reportProgress(progress)
    }

    override func requestNextRun(after delay: Duration) -> curfew_status {
        let traced = called("request_next_run")
        let status = super.requestNextRun(after: delay)
        if traced && status == CURFEW_OK { trace.record("next-run", "asks to run again in \(delay.seconds) s") }
        return status
    }

    override func saveCheckpoint(_ bytes: UnsafeRawBufferPointer) -> curfew_status {
        let traced = called("checkpoint_save")
        let status = super.saveCheckpoint(bytes)
        if traced {
            trace.record("checkpoint", status == CURFEW_OK ? "saved \(bytes.count) bytes" : "refused (status \(status.rawValue))")
        }
        return status
    }

    override func loadCheckpoint() -> [UInt8]? {
        _ = called("checkpoint_load")
        return super.loadCheckpoint()
    }
}

/// What `curfew test` saw of one run: the trace on virtual time, the
/// contract violations, the hook running now (for the watchdog) and the
/// tasks open.
final class HarnessTrace: Sendable {
    struct OpenTask {
        let name: String
        let began: Duration
    }

    private struct State {
        var events: [HarnessEvent] = []
        var violations: [String] = []
        /// The hook running, since when in real time, and on which thread.
        var hook: (name: String, since: ContinuousClock.Instant, thread: OSThread.ID)?
        /// Where the running chunk's line goes (before what it did), and when it started.
        var chunkLine: (index: Int, number: UInt64, at: Duration)?
        var tasks = OpenTasks<OpenTask>()
        var callsAfterEnd: [String: Int] = [:]
    }

    private let clock: ManualClock
    private let start: CurfewInstant
    private let state = Mutex(State())
    private let createReturned = Mutex<(@Sendable () -> Void)?>(nil)

    /// Called as `create` returns, on its thread.
    var onCreateReturned: (@Sendable () -> Void)? {
        get { createReturned.withLock { $0 } }
        set { createReturned.withLock { $0 = newValue } }
    }

    init(clock: ManualClock) {
        self.clock = clock
        start = clock.now()
    }

    /// Virtual time since the grant began.
    var now: Duration { start.duration(to: clock.now()) }

    /// Records a line; `byHost`: the host's own (not a call of the job's).
    func record(_ kind: String, _ detail: String, chunk: UInt64? = nil, byHost: Bool = false) {
        let time = now
        state.withLock { state in
            // A call from a thread that is not in one of the job's hooks: the job's own.
            let own = state.hook.map { $0.thread != .current } ?? true
            let fromJobThread = own && !byHost && chunk == nil && kind != "expiring" && kind != "deadline"
            var event = HarnessEvent(time: time, kind: kind, detail: detail, fromJobThread: fromJobThread)
            event.chunk = chunk.map { Int(clamping: $0) }
            state.events.append(event)
        }
    }

    func violation(_ text: String) {
        state.withLock { $0.violations.append(text) }
    }

    /// Notes a host call by name; false once the job is over (it is counted as a violation).
    func hostCall(_ name: String, afterEnd: Bool) -> Bool {
        guard afterEnd else { return true }
        state.withLock { $0.callsAfterEnd[name, default: 0] += 1 }
        return false
    }

    func hookStarting(_ hook: String, _ detail: String) {
        state.withLock { $0.hook = (hook == "handler" ? "the expiration handler of \(detail)" : hook, .now, OSThread.ID.current) }
        if hook != "create" { record(hook, detail) }
    }

    func hookReturned(_ hook: String, status: curfew_status) {
        // Create's line says how it returned, at the time it was called (zero).
        state.withLock { $0.hook = nil }
        if hook == "create" {
            state.withLock { $0.events.insert(HarnessEvent(time: .zero, kind: "create", detail: status == CURFEW_OK ? "ok" : "error"), at: 0) }
            onCreateReturned?()
        }
    }

    func chunkStarting(_ number: UInt64) {
        let time = now
        state.withLock { state in
            state.chunkLine = (state.events.count, number, time)
            state.hook = ("chunk \(number)", .now, OSThread.ID.current)
        }
    }

    /// The chunk returned `result`: its line goes in; returns when it started.
    @discardableResult
    func chunkReturned(_ number: UInt64, _ detail: String) -> Duration {
        state.withLock { state in
            state.hook = nil
            guard let line = state.chunkLine, line.number == number else { return .zero }
            state.chunkLine = nil
            let event = HarnessEvent(time: line.at, kind: "chunk", detail: detail, chunk: Int(clamping: number))
            state.events.insert(event, at: min(line.index, state.events.count))
            return line.at
        }
    }

    func taskBegan(_ id: BackgroundTaskIdentifier, _ name: String) {
        record("begin task", "'\(name)'")
        let time = now
        state.withLock { $0.tasks.append(id.rawValue, OpenTask(name: name, began: time)) }
    }

    func taskEnded(_ id: BackgroundTaskIdentifier) {
        guard let task = state.withLock({ $0.tasks.remove(id.rawValue) }) else { return }
        record("end task", "'\(task.name)'")
    }

    func allTasksEnded() {
        state.withLock { _ = $0.tasks.removeAll() }
    }

    func progress(_ progress: JobProgress) {
        let chunk = state.withLock { $0.chunkLine?.number }
        let place = chunk.map { " in chunk \($0)" } ?? ""
        if progress.completed < 0 || progress.total < 0 {
            violation("Negative progress\(place): \(progress.completed) of \(progress.total).")
        } else if progress.total > 0 && progress.completed > progress.total {
            violation("Progress\(place) exceeds its total: \(progress.completed) of \(progress.total).")
        }
        record("progress", "\(progress.completed) of \(progress.total)")
    }

    /// The hook running longer than `limit` in real time, if one is.
    func overstayingHook(_ limit: Duration) -> String? {
        state.withLock { state in
            guard let hook = state.hook, ContinuousClock.now - hook.since > limit else { return nil }
            return hook.name
        }
    }

    /// The tasks still open, oldest first.
    var openTasks: [OpenTask] {
        state.withLock { $0.tasks.ordered.map(\.task) }
    }

    var events: [HarnessEvent] { state.withLock { $0.events } }

    /// The violations, then the host calls made after the job ended.
    var violations: [String] {
        state.withLock { state in
            state.violations + state.callsAfterEnd.sorted { $0.key < $1.key }.map { name, count in
                "\(name) was called \(count) time\(count == 1 ? "" : "s") after the job ended (after destroy returned)."
            }
        }
    }
}

/// Runs work at once, on the caller's thread: the harness's expirations
/// asked for from outside, so that they happen in virtual time order.
struct InlineQueue: HookQueue {
    func enqueue(_ work: @escaping @Sendable () -> Void) { work() }
}
