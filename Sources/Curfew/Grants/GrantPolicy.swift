import Dispatch
import Synchronization

/// How much background time grants get, and whether continuous jobs may run.
public struct GrantPolicy: Sendable, Equatable {
    /// The default budget, as iOS 7 and later give: 180 seconds.
    public static let defaultBudget: Duration = .seconds(180)
    /// The least budget a grant may have: below a millisecond, the lead and
    /// the host's own steps take all of it (a budget of a few nanoseconds
    /// passed validation and trapped every worker).
    public static let minimumBudget: Duration = .milliseconds(1)
    /// The default lead time of the expiration handler before the deadline.
    public static let defaultGrace: Duration = .seconds(5)

    /// The time from a grant's start to its hard deadline.
    public private(set) var budget: Duration
    /// The lead of the expiration point before the deadline, as given; `nil`
    /// uses ``defaultGrace`` scaled down for small budgets (see ``lead``).
    public private(set) var grace: Duration?
    /// Whether jobs flagged continuous may run (without a budget), whatever their modes.
    public var allowsContinuous: Bool
    /// The background modes allowed (`--allow-mode`): a continuous job runs
    /// when it declares modes and every one of them is here.
    public var allowedModes: Set<String> = []
    /// A job whose progress does not move for this long is expired
    /// (``ExpirationReason/stalled``), continuous or not, as iOS expires a
    /// continued-processing task whose progress stops; `nil`: never.
    public var stall: Duration?

    /// The least stall time: progress events reach the host at most every 100 ms.
    public static let minimumStall: Duration = .milliseconds(100)

    /// The default budget and lead.
    public init(allowsContinuous: Bool = false) {
        budget = Self.defaultBudget
        grace = nil
        self.allowsContinuous = allowsContinuous
    }

    /// A budget and, optionally, a grace: the one place their rules live.
    ///
    /// - Throws: ``CurfewError/Code/invalidGrant`` when the budget is below
    ///   ``minimumBudget``, or the grace is not positive and shorter than the
    ///   budget: a zero lead would put the expiration and the deadline at one
    ///   instant, and a job could be terminated before its expire hook ran.
    public init(budget: Duration, grace: Duration? = nil, allowsContinuous: Bool = false) throws(CurfewError) {
        guard budget >= Self.minimumBudget else {
            throw CurfewError(.invalidGrant, "The budget \(format3(budget.seconds * 1000))ms is below the least a grant may have, 1ms.")
        }
        if let grace, !(grace > .zero && grace < budget) {
            throw CurfewError(.invalidGrant, "The grace \(format3(grace.seconds))s must be positive and shorter than the budget \(format3(budget.seconds))s.")
        }
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

    /// Why a job may not run under this policy, or `nil`: a continuous job
    /// (no budget) runs where the policy allows every mode, or every mode it
    /// declares.
    public func refusal(job name: String, continuous: Bool, modes: [String] = []) -> CurfewError? {
        guard continuous && !allowsContinuous else { return nil }
        let missing = modes.filter { !allowedModes.contains($0) }
        if !modes.isEmpty && missing.isEmpty { return nil }
        if modes.isEmpty {
            return CurfewError(
                .continuousNotAllowed,
                "Job '\(name)' is continuous (it runs without a budget) and declares no background mode; run it with --allow-continuous.")
        }
        let flags = missing.map { "--allow-mode \($0)" }.joined(separator: " ")
        return CurfewError(
            .continuousNotAllowed,
            "Job '\(name)' is continuous in background mode\(modes.count == 1 ? "" : "s") \(modes.joined(separator: ", ")); allow \(missing.count == 1 ? "it" : "them") with \(flags) (or --allow-continuous).")
    }

    /// The lead a continuous job gets to clean up when the host shuts down.
    public var shutdownLead: Duration {
        grace ?? Self.defaultGrace
    }
}
