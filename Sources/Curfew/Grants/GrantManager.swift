import Dispatch
import Synchronization

/// Issues grants under one policy and one clock, like `UIApplication` issues
/// background tasks; task identifiers are unique across all its grants.
public final class GrantManager: Sendable {
    public let clock: any CurfewClock
    public let policy: GrantPolicy
    /// Where an expiration asked for from outside (`Grant.expireNow`)
    /// happens: ``Grant/timerQueue``, off the caller's locks; or, for
    /// `curfew test` (``InlineQueue``), at once on the caller's thread, so a
    /// caller there must hold no lock the grant's observer takes (none does:
    /// `JobRun` asks with its control lock released).
    let expiryQueue: any HookQueue
    private let lastTaskID = Atomic<UInt64>(0)

    public convenience init(clock: any CurfewClock = MonotonicClock(), policy: GrantPolicy = GrantPolicy()) {
        self.init(clock: clock, policy: policy, expiryQueue: Grant.timerQueue)
    }

    init(clock: any CurfewClock, policy: GrantPolicy, expiryQueue: any HookQueue) {
        self.clock = clock
        self.policy = policy
        self.expiryQueue = expiryQueue
    }

    /// Makes a grant that has not started: its budget runs from ``Grant/start(observer:at:)``.
    ///
    /// - Parameters:
    ///   - name: The job's name, for messages.
    ///   - continuous: The job has a background mode and wants no budget.
    ///   - handlerQueue: The serial queue the tasks' expiration handlers run on.
    /// - Throws: ``CurfewError/Code/continuousNotAllowed`` for a continuous
    ///   job when the policy does not allow those.
    public func makeGrant(
        name: String, continuous: Bool = false, modes: [String] = [], handlerQueue: any HookQueue
    ) throws(CurfewError) -> Grant {
        if let refusal = policy.refusal(job: name, continuous: continuous, modes: modes) { throw refusal }
        return Grant(
            name: name, manager: self, budget: continuous ? nil : policy.budget,
            lead: continuous ? policy.shutdownLead : policy.lead, handlerQueue: handlerQueue)
    }

    /// Makes a grant and starts it now.
    public func beginGrant(
        name: String, continuous: Bool = false, handlerQueue: any HookQueue, observer: GrantObserver = GrantObserver()
    ) throws(CurfewError) -> Grant {
        let grant = try makeGrant(name: name, continuous: continuous, handlerQueue: handlerQueue)
        grant.start(observer: observer)
        return grant
    }

    func nextTaskID() -> BackgroundTaskIdentifier {
        BackgroundTaskIdentifier(rawValue: lastTaskID.add(1, ordering: .relaxed).newValue)
    }
}
