import Curfew
import CurfewHost

/// What `curfew run` was asked to do.
public struct RunOptions: Equatable, Sendable {
    public var paths: [String] = []
    /// `--budget` and `--grace`.
    public var policy = GrantPolicy()
    public var jobs: Int = RunConfiguration.activeProcessorCount
    public var only: [String] = []
    public var parameters: [String: String] = [:]
    public var allowContinuous = false
    /// `--allow-mode`: background modes allowed by name.
    public var allowedModes: Set<String> = []
    public var json = false
    public var verbose = false
    public var isolation: Isolation = .none
    public var limits = ResourceLimits()
    /// The workers' sandbox (`nil`: none).
    public var sandbox: SandboxPolicy?
    public var allowInsecurePlugins = false
    /// Ignore the scan cache (its entries are replaced by the new answers).
    public var rescan = false
    /// Where checkpoints and history are kept (`nil`: the default folder).
    public var stateFolder: String?
    /// Keep no state: no checkpoints, no history.
    public var noState = false

    public init() {}

    /// The folder or files to load, `.` when none was given.
    public var effectivePaths: [String] { paths.isEmpty ? ["."] : paths }

    /// The grant, `--jobs`, parameters, isolation and limits these options
    /// ask for (the state store is opened by the command).
    var configuration: RunConfiguration {
        var configuration = RunConfiguration(policy: policy, maxConcurrentJobs: jobs, parameters: parameters)
        configuration.policy.allowsContinuous = allowContinuous
        configuration.policy.allowedModes = allowedModes
        configuration.isolation = isolation
        configuration.limits = limits
        configuration.sandbox = sandbox
        return configuration
    }
}

/// What `curfew serve` was asked to do.
public struct ServeOptions: Equatable, Sendable {
    /// The grant, isolation (default: job), limits, state and output options `run` has.
    public var run = RunOptions()
    /// The operator's per-job policy file.
    public var config: String?
    /// The control socket (default: see ``ControlSocket/defaultPath``).
    public var socket: String?
    /// Where to serve metrics over HTTP.
    public var metrics: MetricsAddress?

    public init() { run.isolation = .job }
}

/// What `curfew status` or `curfew ctl` was asked to do.
public struct ControlOptions: Equatable, Sendable {
    /// `ctl`'s action; `nil` for `status` and `metrics`.
    public var action: Server.Command?
    /// `curfew metrics`: the host's metrics, not its status.
    public var metrics = false
    /// `curfew events`: its events (`nil`: not asked for).
    public var events: EventsRequest?
    public var json = false
    public var socket: String?

    public init() {}
}

/// What `curfew events` asks for.
public struct EventsRequest: Equatable, Sendable {
    /// Stay, printing each event as it comes, until the host stops.
    public var follow = false
    /// Only this job's events (`nil`: every event, the host's notices too).
    public var job: String?

    public init() {}
}

/// What `curfew list` was asked to do.
public struct ListOptions: Equatable, Sendable {
    public var paths: [String] = []
    public var json = false
    public var allowInsecurePlugins = false
    /// Ignore the scan cache (its entries are replaced by the new answers).
    public var rescan = false

    public init() {}

    public var effectivePaths: [String] { paths.isEmpty ? ["."] : paths }
}

/// What `curfew state` was asked to do.
public struct StateOptions: Equatable, Sendable {
    public enum Action: String, Sendable, CaseIterable {
        case list, show, clear, backup
    }

    public var action: Action = .list
    public var job: String?
    /// `backup FILE`: the new file the store is copied to.
    public var destination: String?
    /// `clear --all`: every job's checkpoint.
    public var all = false
    public var json = false
    public var stateFolder: String?

    public init() {}
}

/// What `curfew history` was asked to do.
public struct HistoryOptions: Equatable, Sendable {
    public var job: String?
    public var since: Duration?
    public var limit = 20
    public var json = false
    public var stateFolder: String?

    public init() {}
}

/// What `curfew calendar` was asked to do.
public struct CalendarOptions: Equatable, Sendable {
    public var expressions: [String] = []
    public var iterations = 1
    /// `--base-time`, as given; `nil`: now.
    public var baseTime: String?

    public init() {}
}

/// What `curfew test` was asked to do.
public struct TestOptions: Equatable, Sendable {
    public var plugin: String = ""
    public var job: String?
    /// `--budget` and `--grace`.
    public var policy = GrantPolicy()
    public var mode: JobHarness.Mode = .chunkCost(.seconds(1))
    public var parameters: [String: String] = [:]
    public var json = false

    public init() {}
}

/// The milliseconds from `now` until `next`: 0 once it has passed, and
/// saturating, for either may come from outside.
func millisecondsUntil(_ next: Int64, from now: Int64) -> Int64 {
    let (wait, overflow) = next.subtractingReportingOverflow(now)
    return overflow ? (next > now ? .max : 0) : max(0, wait)
}

/// A duration as people write it: `180s`, `500ms`, `2.5s`.
public func format(_ duration: Duration) -> String {
    let nanoseconds = duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
    if nanoseconds % 1_000_000_000 == 0 { return "\(nanoseconds / 1_000_000_000)s" }
    if nanoseconds < 1_000_000_000 && nanoseconds % 1_000_000 == 0 { return "\(nanoseconds / 1_000_000)ms" }
    return formatSeconds(duration.seconds) + "s"
}

/// Seconds with two decimals, e.g. `6.02`; bounded to 0 … 10^12 s, for a
/// value may come from outside (a serving host's answer) and be any number.
func formatSeconds(_ seconds: Double) -> String {
    let bounded = seconds.isFinite ? min(max(seconds, 0), 1e12) : 0
    let hundredths = Int64((bounded * 100).rounded())
    let fraction = hundredths % 100
    return "\(hundredths / 100).\(fraction < 10 ? "0" : "")\(fraction)"
}
