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
    public var budget: Duration
    /// The lead of the expiration point before the deadline, as given; `nil`
    /// uses ``defaultGrace`` scaled down for small budgets (see ``lead``).
    public var grace: Duration?
    /// Whether jobs flagged continuous may run (without a budget), whatever their modes.
    public var allowsContinuous: Bool
    /// The background modes allowed (`--allow-mode`): a continuous job runs
    /// when it declares modes and every one of them is here.
    public var allowedModes: Set<String> = []

    public init(budget: Duration = GrantPolicy.defaultBudget, grace: Duration? = nil, allowsContinuous: Bool = false) {
        precondition(budget > .zero, "a grant's budget must be positive")
        // A zero lead would put the expiration and the deadline at one instant:
        // a job could be terminated before its expire hook ran.
        precondition(grace.map { $0 > .zero && $0 < budget } ?? true, "the grace must be positive and shorter than the budget")
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
