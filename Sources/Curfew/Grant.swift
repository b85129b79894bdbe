import Dispatch
import Synchronization

/// Identifies a background task, like `UIBackgroundTaskIdentifier`.
public struct BackgroundTaskIdentifier: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }

    /// No task: what `beginTask` returns when it cannot begin one.
    public static let invalid = BackgroundTaskIdentifier(rawValue: 0)

    public var description: String { self == .invalid ? "invalid" : "task-\(rawValue)" }
}

/// Why a grant expires.
public enum ExpirationReason: String, Sendable, CustomStringConvertible {
    /// The expiration point was reached: the budget is about to run out.
    case timeout
    /// The host is shutting down.
    case shutdown
    /// The job was cancelled.
    case cancelled

    public var description: String {
        switch self {
        case .timeout: "time ran out"
        case .shutdown: "host shutting down"
        case .cancelled: "cancelled"
        }
    }
}

/// How much background time grants get, and whether continuous jobs may run.
public struct GrantPolicy: Sendable, Equatable {
    /// The default budget, as iOS 7 and later give: 180 seconds.
    public static let defaultBudget: Duration = .seconds(180)
    /// The default lead time of the expiration handler before the deadline.
    public static let defaultGrace: Duration = .seconds(5)

    /// The time from a grant's start to its hard deadline.
    public var budget: Duration
    /// The lead of the expiration point before the deadline, as given; `nil`
    /// uses ``defaultGrace`` scaled down for small budgets (see ``lead``).
    public var grace: Duration?
    /// Whether jobs flagged continuous may run (without a budget).
    public var allowsContinuous: Bool

    public init(budget: Duration = GrantPolicy.defaultBudget, grace: Duration? = nil, allowsContinuous: Bool = false) {
        precondition(budget > .zero, "a grant's budget must be positive")
        precondition(grace.map { $0 >= .zero && $0 < budget } ?? true, "the grace must be shorter than the budget")
        self.budget = budget
        self.grace = grace
        self.allowsContinuous = allowsContinuous
    }

    /// The effective lead: the grace if given, else the default 5 s, but
    /// never more than a quarter of the budget, so a tiny budget still
    /// leaves most of its time to work (a 400 ms budget expires at 300 ms).
    public var lead: Duration {
        if let grace { return grace }
        return min(Self.defaultGrace, budget / 4)
    }

    /// The lead a continuous job gets to clean up when the host shuts down.
    public var shutdownLead: Duration {
        grace ?? Self.defaultGrace
    }
}

/// Issues grants under one policy and one clock, like `UIApplication` issues
/// background tasks; task identifiers are unique across all its grants.
public final class GrantManager: Sendable {
    public let clock: any CurfewClock
    public let policy: GrantPolicy
    private let lastTaskID = Atomic<UInt64>(0)

    public init(clock: any CurfewClock = MonotonicClock(), policy: GrantPolicy = GrantPolicy()) {
        self.clock = clock
        self.policy = policy
    }

    /// Starts a grant now.
    ///
    /// - Parameters:
    ///   - name: The job's name, for messages.
    ///   - continuous: The job has a background mode and wants no budget.
    ///   - queue: The serial queue the grant's timers and expiration handlers run on.
    ///   - observer: Told when the grant expires, drains and reaches its deadline.
    /// - Throws: ``CurfewError/Code/continuousNotAllowed`` for a continuous
    ///   job when the policy does not allow those.
    public func beginGrant(
        name: String, continuous: Bool = false, queue: DispatchQueue, observer: GrantObserver = GrantObserver()
    ) throws(CurfewError) -> Grant {
        if continuous && !policy.allowsContinuous {
            throw CurfewError(
                .continuousNotAllowed,
                "Job '\(name)' is continuous (it runs without a budget, like an iOS background mode); run it with --allow-continuous."
            )
        }
        let start = clock.now()
        let timing: Grant.Timing =
            continuous
            ? .unlimited(shutdownLead: policy.shutdownLead)
            : .limited(
                expirationPoint: start.advanced(by: policy.budget - policy.lead),
                deadline: start.advanced(by: policy.budget), lead: policy.lead)
        let grant = Grant(name: name, manager: self, start: start, timing: timing, queue: queue, observer: observer)
        grant.armTimers()
        return grant
    }

    func nextTaskID() -> BackgroundTaskIdentifier {
        BackgroundTaskIdentifier(rawValue: lastTaskID.add(1, ordering: .relaxed).newValue)
    }
}

/// Callbacks a grant makes to whoever runs the job under it.
public struct GrantObserver: Sendable {
    /// The grant started to expire; called once, on the grant's queue,
    /// before the tasks' own expiration handlers.
    public var expiring: @Sendable (ExpirationReason) -> Void
    /// The last open task ended; called on the thread that ended it.
    public var drained: @Sendable () -> Void
    /// The hard deadline passed before the grant was closed; called on the
    /// grant's queue with the names of the tasks still open.
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
/// Time is read from the manager's clock and the timers fire on the grant's
/// queue, so a grant is tested exactly with a ``ManualClock``.
public final class Grant: Sendable {
    enum Timing: Sendable {
        case limited(expirationPoint: CurfewInstant, deadline: CurfewInstant, lead: Duration)
        case unlimited(shutdownLead: Duration)
    }

    enum Phase: Equatable {
        case active
        case expiring(ExpirationReason)
        case closed
    }

    struct OpenTask {
        let id: BackgroundTaskIdentifier
        let name: String
        let handler: (@Sendable (ExpirationReason) -> Void)?
    }

    struct State {
        var phase: Phase = .active
        var tasks: [OpenTask] = []
        var expirationTimer: (any CurfewTimer)?
        var deadlineTimer: (any CurfewTimer)?
    }

    /// The job's name.
    public let name: String
    /// When the grant began.
    public let start: CurfewInstant
    let timing: Timing
    let queue: DispatchQueue
    private let manager: GrantManager
    private let observer: GrantObserver
    private let state = Mutex(State())
    // Read on every `timeRemaining`/`isExpiring` without the lock.
    private let deadlineNanoseconds: Atomic<UInt64>
    private let expiringFlag = Atomic<Bool>(false)

    init(name: String, manager: GrantManager, start: CurfewInstant, timing: Timing, queue: DispatchQueue, observer: GrantObserver) {
        self.name = name
        self.manager = manager
        self.start = start
        self.timing = timing
        self.queue = queue
        self.observer = observer
        if case .limited(_, let deadline, _) = timing {
            deadlineNanoseconds = Atomic(deadline.nanoseconds)
        } else {
            deadlineNanoseconds = Atomic(.max)
        }
    }

    func armTimers() {
        guard case .limited(let expirationPoint, let deadline, _) = timing else { return }
        let clock = manager.clock
        let expirationTimer = clock.schedule(at: expirationPoint, on: queue) { [weak self] in
            self?.expire(.timeout)
        }
        let deadlineTimer = clock.schedule(at: deadline, on: queue) { [weak self] in
            self?.reachDeadline()
        }
        state.withLock {
            $0.expirationTimer = expirationTimer
            $0.deadlineTimer = deadlineTimer
        }
    }

    /// Whether the grant has no budget (a continuous job's).
    public var isUnlimited: Bool {
        if case .unlimited = timing { return true }
        return false
    }

    /// The instant the expiration handlers are due, or `nil` without a budget.
    public var expirationPoint: CurfewInstant? {
        if case .limited(let point, _, _) = timing { return point }
        return nil
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

    /// Whether the grant has started to expire (or is closed).
    public var isExpiring: Bool {
        expiringFlag.load(ordering: .acquiring)
    }

    /// The reason the grant is expiring, if it is.
    public var expirationReason: ExpirationReason? {
        state.withLock {
            if case .expiring(let reason) = $0.phase { return reason }
            return nil
        }
    }

    /// The names of the tasks begun and not yet ended.
    public var openTaskNames: [String] {
        state.withLock { $0.tasks.map(\.name) }
    }

    /// Begins a background task that keeps the job alive until it ends, like
    /// `beginBackgroundTask(withName:expirationHandler:)`.
    ///
    /// - Parameters:
    ///   - name: A name for messages.
    ///   - expirationHandler: Called once, on the grant's queue, if the grant
    ///     starts to expire while the task is open.
    /// - Returns: The task's identifier, or ``BackgroundTaskIdentifier/invalid``
    ///   once the grant is expiring or closed.
    public func beginTask(
        name: String, expirationHandler: (@Sendable (ExpirationReason) -> Void)? = nil
    ) -> BackgroundTaskIdentifier {
        state.withLock { state in
            guard state.phase == .active else { return .invalid }
            let id = manager.nextTaskID()
            state.tasks.append(OpenTask(id: id, name: name, handler: expirationHandler))
            return id
        }
    }

    /// Ends a task. Ending a task twice, or an invalid or unknown id, is harmless.
    ///
    /// - Returns: Whether a task was open under that id.
    @discardableResult
    public func endTask(_ id: BackgroundTaskIdentifier) -> Bool {
        let (found, drained) = state.withLock { state -> (Bool, Bool) in
            guard let index = state.tasks.firstIndex(where: { $0.id == id }) else { return (false, false) }
            state.tasks.remove(at: index)
            return (true, state.tasks.isEmpty && state.phase != .closed)
        }
        if drained { observer.drained() }
        return found
    }

    /// Starts the expiration now, for a shutdown or a cancellation: the
    /// handlers run on the grant's queue, and the hard deadline moves to at
    /// most a lead time from now. Harmless once the grant is expiring.
    public func expireNow(_ reason: ExpirationReason) {
        queue.async { self.expire(reason) }
    }

    /// Closes the grant if no task is open: no task can begin after, and the
    /// timers are disarmed.
    ///
    /// - Returns: Whether the grant is closed now.
    public func closeIfDrained() -> Bool {
        let timers = state.withLock { state -> [any CurfewTimer]? in
            guard state.tasks.isEmpty else { return nil }
            return close(&state)
        }
        guard let timers else { return false }
        timers.forEach { $0.cancel() }
        return true
    }

    /// Closes the grant whatever is open (the job was terminated).
    func forceClose() {
        state.withLock { close(&$0) }.forEach { $0.cancel() }
    }

    private func close(_ state: inout State) -> [any CurfewTimer] {
        state.phase = .closed
        expiringFlag.store(true, ordering: .releasing)
        let timers = [state.expirationTimer, state.deadlineTimer].compactMap { $0 }
        state.expirationTimer = nil
        state.deadlineTimer = nil
        return timers
    }

    // Runs on the grant's queue.
    private func expire(_ reason: ExpirationReason) {
        let clock = manager.clock
        let rearm = state.withLock { state -> (old: (any CurfewTimer)?, new: CurfewInstant?)? in
            guard state.phase == .active else { return nil }
            state.phase = .expiring(reason)
            expiringFlag.store(true, ordering: .releasing)
            state.expirationTimer?.cancel()
            state.expirationTimer = nil
            guard reason != .timeout else { return (nil, nil) }
            // Early expiration: the job gets at most one lead time from now.
            let lead: Duration
            switch timing {
            case .limited(_, _, let limitedLead): lead = limitedLead
            case .unlimited(let shutdownLead): lead = shutdownLead
            }
            let newDeadline = clock.now().advanced(by: lead)
            guard newDeadline.nanoseconds < deadlineNanoseconds.load(ordering: .relaxed) else { return (nil, nil) }
            deadlineNanoseconds.store(newDeadline.nanoseconds, ordering: .relaxed)
            let old = state.deadlineTimer
            state.deadlineTimer = nil
            return (old, newDeadline)
        }
        guard let rearm else { return }
        if let newDeadline = rearm.new {
            rearm.old?.cancel()
            let timer = clock.schedule(at: newDeadline, on: queue) { [weak self] in
                self?.reachDeadline()
            }
            let stale = state.withLock { state -> Bool in
                guard state.phase != .closed else { return true }
                state.deadlineTimer = timer
                return false
            }
            if stale { timer.cancel() }
        }
        observer.expiring(reason)
        // Each open task's handler, in the order the tasks began; a task
        // ended by an earlier handler is skipped.
        let handled = state.withLock { $0.tasks.map(\.id) }
        for id in handled {
            let handler = state.withLock { state in state.tasks.first(where: { $0.id == id })?.handler }
            handler?(reason)
        }
    }

    // Runs on the grant's queue.
    private func reachDeadline() {
        let open = state.withLock { state -> [String]? in
            guard state.phase != .closed else { return nil }
            state.deadlineTimer = nil
            return state.tasks.map(\.name)
        }
        guard let open else { return }
        observer.deadline(open)
    }
}
