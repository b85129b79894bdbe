import Dispatch
import Synchronization

/// Callbacks a grant makes to whoever runs the job under it.
public struct GrantObserver: Sendable {
    /// The grant started to expire; called once, before the tasks' own
    /// expiration handlers: from the grant's clock (on ``MonotonicClock``,
    /// its timer thread, real-time where the process may be: keep it short
    /// and enqueue the rest), or for an expiration asked for, on the grant's
    /// expiry queue.
    public var expiring: @Sendable (ExpirationReason) -> Void
    /// The last open task ended; called on the thread that ended it.
    public var drained: @Sendable () -> Void
    /// The hard deadline passed before the grant was closed; called from the
    /// grant's clock, as `expiring` is, with the names of the tasks still open.
    public var deadline: @Sendable ([String]) -> Void

    public init(
        expiring: @escaping @Sendable (ExpirationReason) -> Void = { _ in },
        drained: @escaping @Sendable () -> Void = {},
        deadline: @escaping @Sendable ([String]) -> Void = { _ in }
    ) {
        self.expiring = expiring
        self.drained = drained
        self.deadline = deadline
    }
}

/// One job's background time: a budget, an expiration point a lead time
/// before its end, a hard deadline, and the background tasks that keep the
/// job alive, each with its own expiration handler.
///
/// Time is read from the manager's clock. With ``MonotonicClock`` its
/// timers fire on the ``TimerThread``, apart from the hooks' workers, so a
/// blocked expiration handler or a spinning chunk cannot hold up the
/// deadline; the handlers run on the grant's handler queue. With a
/// ``ManualClock`` the timers fire inside `advance(by:)`.
///
/// - Important: A grant never calls plugin code from a timer and
///   expires at most once; after its deadline it never fires again.
public final class Grant: Sendable {
    enum Phase: Equatable {
        case idle                        // made, not started
        case active
        case expiring(ExpirationReason)
        case closed                      // no task can begin; the deadline still holds
        case finished                    // timers disarmed
    }

    struct OpenTask {
        let name: String
        let handler: (@Sendable (ExpirationReason) -> Void)?
    }

    /// The most background tasks a job may have open at once; past it,
    /// `beginTask` refuses (``BackgroundTaskIdentifier/invalid``).
    public static let maximumOpenTasks = 10_000

    /// Why a task could not begin.
    public enum Refusal: Error, Sendable, Equatable {
        /// The grant has not started, is expiring, or is over.
        case notActive
        /// ``maximumOpenTasks`` are open.
        case tooManyTasks
    }

    struct State {
        var phase: Phase = .idle
        var observer = GrantObserver()
        var tasks = OpenTasks<OpenTask>()
        /// How many tasks have begun, ended or not.
        var begun = 0
        var expirationTimer: (any CurfewTimer)?
        var deadlineTimer: (any CurfewTimer)?
        /// An expiration asked for before the grant started.
        var earlyExpiration: ExpirationReason?
        var startedAt: CurfewInstant?
        /// The host is in the foreground: the clock does not run (see ``hold()``).
        var held = false
        /// Counts each arming and disarming of the timers. A timer carries
        /// the count it was armed at and is ignored once it changed: a cancel
        /// can come after the timer is due, while it waits for this lock.
        var armed: UInt64 = 0
    }

    /// Where an expiration asked for from outside (``expireNow(_:)``)
    /// happens, off the caller's locks. Its work is short and takes no
    /// plugin code: state changes and enqueues.
    static let timerQueue = DispatchQueue(label: "curfew.grant-timers", qos: .userInitiated)

    /// The job's name.
    public let name: String
    /// The budget, or `nil` for a continuous job's grant.
    public let budget: Duration?
    /// The lead of the expiration point before the deadline (for a continuous
    /// job: the time it gets to clean up after an early expiration).
    public let lead: Duration
    let handlerQueue: any HookQueue
    private let manager: GrantManager
    private let state = Mutex(State())
    // Read on every chunk and `timeRemaining`/`isExpiring` without the lock.
    private let deadlineNanoseconds = Atomic<UInt64>(.max)
    private let expirationNanoseconds = Atomic<UInt64>(.max)
    private let expiringFlag = Atomic<Bool>(false)

    init(name: String, manager: GrantManager, budget: Duration?, lead: Duration, handlerQueue: any HookQueue) {
        self.name = name
        self.manager = manager
        self.budget = budget
        self.lead = lead
        self.handlerQueue = handlerQueue
    }

    /// Starts the grant: its budget runs from now (or from `instant`, when
    /// another process started the same grant then), or, while it is held
    /// (the host is in the foreground), from when it is released.
    ///
    /// - Important: Call it once.
    public func start(observer: GrantObserver, at instant: CurfewInstant? = nil) {
        let startedAt = instant ?? manager.clock.now()
        let early = state.withLock { state -> ExpirationReason? in
            // Finished before it started (its run ended first): nothing to arm.
            if state.phase == .finished { return nil }
            precondition(state.phase == .idle, "Grant.start called twice")
            state.phase = .active
            state.observer = observer
            state.startedAt = startedAt
            if !state.held, let budget { arm(&state, deadline: startedAt.advanced(by: budget)) }
            return state.earlyExpiration
        }
        if let early { expireNow(early) }
    }

    /// With the lock held: arms the budget's timers to end at `deadline`,
    /// or a whole budget from now.
    private func arm(_ state: inout State, deadline: CurfewInstant?) {
        guard let budget else { return }
        let clock = manager.clock
        let deadline = deadline ?? clock.now().advanced(by: budget)
        let expirationPoint = CurfewInstant(nanoseconds: deadline.nanoseconds - min(deadline.nanoseconds, UInt64(clamping: lead.nanoseconds)))
        expirationNanoseconds.store(expirationPoint.nanoseconds, ordering: .relaxed)
        deadlineNanoseconds.store(deadline.nanoseconds, ordering: .relaxed)
        state.armed &+= 1
        let armed = state.armed
        state.expirationTimer = clock.schedule(at: expirationPoint) { [weak self] in
            self?.expire(.timeout, armed: armed)
        }
        state.deadlineTimer = clock.schedule(at: deadline) { [weak self] in
            self?.reachDeadline(armed: armed)
        }
    }

    /// Stops the clock, as the host enters the foreground: no expiration or
    /// deadline until ``release(deadline:)``, and ``timeRemaining`` is `nil`
    /// (unlimited). A grant already expiring keeps its deadline: an
    /// expiration is never undone. Before the start, the grant starts held.
    public func hold() {
        let timers = state.withLock { state -> TimersToCancel in
            guard !state.held else { return TimersToCancel() }
            switch state.phase {
            case .idle:
                state.held = true
                return TimersToCancel()
            case .active:
                state.held = true
                state.armed &+= 1
                expirationNanoseconds.store(.max, ordering: .relaxed)
                deadlineNanoseconds.store(.max, ordering: .relaxed)
                defer {
                    state.expirationTimer = nil
                    state.deadlineTimer = nil
                }
                return TimersToCancel(state.expirationTimer, state.deadlineTimer)
            case .expiring, .closed, .finished:
                return TimersToCancel()
            }
        }
        timers.cancel()
    }

    /// Starts the clock again, as the host enters the background: the whole
    /// budget from now, or up to `deadline` (a worker's grant ends when its
    /// host's does). Harmless unless held.
    public func release(deadline: CurfewInstant? = nil) {
        state.withLock { state in
            guard state.held else { return }
            state.held = false
            if state.phase == .active { arm(&state, deadline: deadline) }
        }
    }

    /// Whether the clock is stopped (see ``hold()``).
    public var isHeld: Bool {
        state.withLock { $0.held }
    }

    /// Whether the grant has no budget (a continuous job's).
    public var isUnlimited: Bool { budget == nil }

    /// When the grant started, or `nil` before.
    public var startedAt: CurfewInstant? {
        state.withLock { $0.startedAt }
    }

    /// The instant the expiration is due, or `nil` without a budget or before the start.
    public var expirationPoint: CurfewInstant? {
        let value = expirationNanoseconds.load(ordering: .relaxed)
        return value == .max ? nil : CurfewInstant(nanoseconds: value)
    }

    /// The expiration point in nanoseconds, `UInt64.max` for none: for the chunk loop.
    var expirationPointNanoseconds: UInt64 {
        expirationNanoseconds.load(ordering: .relaxed)
    }

    /// The hard deadline, or `nil` while there is none (an unlimited grant
    /// gets one only when it is told to expire).
    public var deadline: CurfewInstant? {
        let value = deadlineNanoseconds.load(ordering: .relaxed)
        return value == .max ? nil : CurfewInstant(nanoseconds: value)
    }

    /// The time left before the hard deadline, like `backgroundTimeRemaining`:
    /// zero once it has passed, `nil` when there is no deadline.
    public var timeRemaining: Duration? {
        let deadline = deadlineNanoseconds.load(ordering: .relaxed)
        if deadline == .max { return nil }
        let now = manager.clock.now().nanoseconds
        return now >= deadline ? .zero : .nanoseconds(Int64(clamping: deadline - now))
    }

    /// Whether the grant has started to expire, or is closed.
    public var isExpiring: Bool {
        expiringFlag.load(ordering: .relaxed)
    }

    /// The reason the grant is expiring, if it is.
    public var expirationReason: ExpirationReason? {
        state.withLock {
            if case .expiring(let reason) = $0.phase { return reason }
            return nil
        }
    }

    /// The names of the tasks begun and not yet ended, oldest first.
    public var openTaskNames: [String] {
        state.withLock { $0.tasks.orderedNames }
    }

    /// How many tasks are open.
    public var openTaskCount: Int {
        state.withLock { $0.tasks.count }
    }

    /// How many tasks have begun so far, ended or not.
    public var tasksBegun: Int {
        state.withLock { $0.begun }
    }

    /// Begins a background task that keeps the job alive until it ends, like
    /// `beginBackgroundTask(withName:expirationHandler:)`.
    ///
    /// - Parameters:
    ///   - name: A name for messages.
    ///   - expirationHandler: Called once, on the handler queue, if the grant
    ///     starts to expire while the task is open.
    /// - Returns: The task's identifier, or ``BackgroundTaskIdentifier/invalid``
    ///   unless the grant is active (started, not expiring, not closed).
    public func beginTask(
        name: String, expirationHandler: (@Sendable (ExpirationReason) -> Void)? = nil
    ) -> BackgroundTaskIdentifier {
        (try? tryBeginTask(name: name, expirationHandler: expirationHandler).get()) ?? .invalid
    }

    /// ``beginTask(name:expirationHandler:)``, saying why it refused.
    public func tryBeginTask(
        name: String, expirationHandler: (@Sendable (ExpirationReason) -> Void)? = nil
    ) -> Result<BackgroundTaskIdentifier, Refusal> {
        state.withLock { state in
            guard state.phase == .active else { return .failure(.notActive) }
            guard state.tasks.count < Self.maximumOpenTasks else { return .failure(.tooManyTasks) }
            let id = manager.nextTaskID()
            state.tasks.append(id.rawValue, OpenTask(name: name, handler: expirationHandler))
            state.begun += 1
            return .success(id)
        }
    }

    /// Ends every open task without calling its handler (the job failed and
    /// is over): their names, oldest first.
    @discardableResult
    func endAllTasks() -> [String] {
        state.withLock { $0.tasks.removeAll().map(\.task.name) }
    }

    /// Ends a task. Ending a task twice, or an invalid or unknown id, is harmless.
    ///
    /// - Returns: Whether a task was open under that id.
    @discardableResult
    public func endTask(_ id: BackgroundTaskIdentifier) -> Bool {
        let (found, drained) = state.withLock { state -> (Bool, (@Sendable () -> Void)?) in
            guard state.tasks.remove(id.rawValue) != nil else { return (false, nil) }
            let live = state.phase != .idle && state.phase != .closed && state.phase != .finished
            return (true, state.tasks.isEmpty && live ? state.observer.drained : nil)
        }
        drained?()
        return found
    }

    /// Starts the expiration now, for a shutdown or a cancellation: the hard
    /// deadline moves to at most one lead time from now. Before the start, the
    /// expiration is kept and happens as the grant starts. Harmless once the
    /// grant is expiring.
    public func expireNow(_ reason: ExpirationReason) {
        let started = state.withLock { state -> Bool in
            guard state.phase == .idle else { return true }
            if state.earlyExpiration == nil { state.earlyExpiration = reason }
            return false
        }
        guard started else { return }
        manager.expiryQueue.enqueue { self.expire(reason) }
    }

    /// Closes the grant if no task is open: no task can begin after, and the
    /// expiration is off. The deadline still holds until ``finish()``.
    ///
    /// - Returns: Whether the grant is closed now.
    public func closeIfDrained() -> Bool {
        let timer = state.withLock { state -> (any CurfewTimer)?? in
            guard state.tasks.isEmpty else { return nil }
            if state.phase != .finished { state.phase = .closed }
            expiringFlag.store(true, ordering: .relaxed)
            defer { state.expirationTimer = nil }
            return .some(state.expirationTimer)
        }
        guard let timer else { return false }
        timer?.cancel()
        return true
    }

    /// Ends the grant: whatever is open, no task can begin and no timer fires.
    public func finish() {
        let timers = state.withLock { state -> TimersToCancel in
            state.phase = .finished
            // Never called again: its closures hold whoever runs the job (a
            // WorkerRun, which is freed), and that holds this grant.
            state.observer = GrantObserver()
            expiringFlag.store(true, ordering: .relaxed)
            defer {
                state.expirationTimer = nil
                state.deadlineTimer = nil
            }
            return TimersToCancel(state.expirationTimer, state.deadlineTimer)
        }
        timers.cancel()
    }

    // From a timer of the clock, on the timer queue, or inside ManualClock.advance.
    /// - Parameter armed: For the expiration timer, the arming it belongs to.
    private func expire(_ reason: ExpirationReason, armed: UInt64? = nil) {
        let clock = manager.clock
        let change = state.withLock { state -> (observer: GrantObserver, ids: [UInt64], old: TimersToCancel)? in
            guard state.phase == .active else { return nil }
            if let armed, armed != state.armed || state.held { return nil }  // a timer disarmed as it fired
            state.phase = .expiring(reason)
            expiringFlag.store(true, ordering: .relaxed)
            // From the expiration timer (`armed`), that timer has fired: nothing to cancel.
            var old = TimersToCancel(armed == nil ? state.expirationTimer : nil)
            state.expirationTimer = nil
            if reason != .timeout {
                // Early expiration: the job gets at most one lead time from now.
                let newDeadline = clock.now().advanced(by: lead)
                if newDeadline.nanoseconds < deadlineNanoseconds.load(ordering: .relaxed) {
                    deadlineNanoseconds.store(newDeadline.nanoseconds, ordering: .relaxed)
                    old.second = state.deadlineTimer
                    state.armed &+= 1
                    let armed = state.armed
                    state.deadlineTimer = clock.schedule(at: newDeadline) { [weak self] in
                        self?.reachDeadline(armed: armed)
                    }
                }
            }
            return (state.observer, state.tasks.orderedIDs, old)
        }
        guard let change else { return }
        change.old.cancel()
        change.observer.expiring(reason)
        guard !change.ids.isEmpty else { return }
        // Each open task's handler, in the order the tasks began, on the
        // handler queue; a task ended meanwhile (say, by an earlier handler) is skipped.
        handlerQueue.enqueue {
            for id in change.ids {
                let handler = self.state.withLock { state in state.tasks[id]?.handler }
                handler?(reason)
            }
        }
    }

    // From a timer of the clock, on the timer queue, or inside ManualClock.advance.
    private func reachDeadline(armed: UInt64) {
        let due = state.withLock { state -> (GrantObserver, [String])? in
            guard state.phase != .finished && state.phase != .idle, armed == state.armed else { return nil }
            state.deadlineTimer = nil
            return (state.observer, state.tasks.orderedNames)
        }
        guard let (observer, open) = due else { return }
        observer.deadline(open)
    }
}

extension Grant {
    /// Takes a grant through its life once, on a hand-stepped clock: started,
    /// expired, closed, finished. The runtime builds the type metadata that
    /// path uses from mangled names on first use, and that took a few
    /// hundred microseconds out of the first expiration of a run, which is
    /// the first of a burst when a run's jobs started together. Once per
    /// process; starts no thread and arms no timer of the scheduler.
    static func warmUp() {
        _ = warmedUp
    }

    private static let warmedUp: Void = {
        let clock = ManualClock()
        let manager = GrantManager(clock: clock, policy: GrantPolicy())
        guard let grant = try? manager.makeGrant(name: "warm-up", handlerQueue: WarmUpQueue()) else { return }
        grant.start(observer: GrantObserver())
        clock.advance(by: manager.policy.budget - manager.policy.lead)
        _ = grant.closeIfDrained()
        grant.finish()
    }()

    /// Where a warm-up grant's task handlers would run: it begins none.
    private struct WarmUpQueue: HookQueue {
        func enqueue(_ work: @escaping @Sendable () -> Void) { work() }
    }
}

extension OpenTasks where Task == Grant.OpenTask {
    /// The open tasks' names, oldest first.
    var orderedNames: [String] {
        isEmpty ? [] : ordered.map { $0.task.name }
    }
}

/// The timers a grant takes out of its state to cancel once its lock is
/// released: at most its two. Not an array, whose storage of existentials
/// the runtime builds from its mangled name on first use: the first grant
/// to expire in a process is the first of a burst, and paid for it.
private struct TimersToCancel {
    var first: (any CurfewTimer)?
    var second: (any CurfewTimer)?

    init(_ first: (any CurfewTimer)? = nil, _ second: (any CurfewTimer)? = nil) {
        self.first = first
        self.second = second
    }

    func cancel() {
        first?.cancel()
        second?.cancel()
    }
}
