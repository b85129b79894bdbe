import CCurfew

/// What a `curfew_context *` points at: one job as the host services see it.
/// The runner's ``JobRun`` stands behind it, in `curfew run` and in
/// `curfew test` alike (there watched by ``TracedRun``).
///
/// A context is never freed: a plugin's own threads may still hold the
/// pointer after the job ends, and a call through it must find an object
/// that answers "over" rather than freed memory. It costs a few hundred bytes
/// per job run.
class HostContext: @unchecked Sendable {
    // Safe because the stored properties here never change after init;
    // subclasses keep their mutable state behind locks.
    let job: PluginJob
    let parameters: ParameterTable
    private(set) var context: OpaquePointer!

    init(job: PluginJob, parameters: ParameterTable) {
        self.job = job
        self.parameters = parameters
        // Retained for the life of the process: see the type's discussion.
        context = OpaquePointer(Unmanaged.passRetained(self).toOpaque())
    }

    static func from(_ context: OpaquePointer?) -> HostContext? {
        guard let context else { return nil }
        return Unmanaged<HostContext>.fromOpaque(UnsafeRawPointer(context)).takeUnretainedValue()
    }

    // The host services, one method each. The defaults answer as for a job that is over.

    /// Seconds to the hard deadline, `Double.greatestFiniteMagnitude` without one.
    var timeRemainingSeconds: Double { 0 }
    var isExpiring: Bool { true }
    /// The host's app state.
    var appState: AppState { .background }

    func beginTask(name: String, handler: curfew_expiration_handler?, userData: UnsafeMutableRawPointer?) -> BackgroundTaskIdentifier {
        .invalid
    }

    func endTask(_ id: BackgroundTaskIdentifier) {}
    func log(_ level: LogLevel, _ message: String) {}
    func reportProgress(_ progress: JobProgress) {}

    func parameter(_ key: String) -> UnsafePointer<CChar>? {
        parameters.value(for: key)
    }

    /// Whether the job's checkpoints are kept anywhere (not with `--no-state`).
    var keepsCheckpoints: Bool { false }
    /// Saves the job's checkpoint; `bytes` is at most the limit.
    func saveCheckpoint(_ bytes: UnsafeRawBufferPointer) -> curfew_status { CURFEW_UNAVAILABLE }
    /// The job's last saved checkpoint, `nil` when it has none.
    func loadCheckpoint() -> [UInt8]? { nil }
    /// Asks for the job's next run `delay` from now (checked by the caller).
    func requestNextRun(after delay: Duration) -> curfew_status { CURFEW_UNAVAILABLE }
    /// Asks for a run of another job (checked by the caller).
    func submitRun(_ run: SubmittedRun) -> curfew_status { CURFEW_UNAVAILABLE }
    /// Asks that the job's runs be held to `conditions` (checked by the caller).
    func requireConditions(_ conditions: Set<Condition>) -> curfew_status { CURFEW_UNAVAILABLE }
}

extension Condition {
    /// How often one run may change the conditions it asks for
    /// (`require_conditions`): each change is work for the serving host.
    package static let maximumChangesPerRun = 64
}

/// A run of another job a job asked for (`submit_run`), checked.
public struct SubmittedRun: Sendable, Equatable {
    public var job: String
    public var parameters: [String: String]
    public var after: Duration

    /// As a one-off run asked of the control socket takes them: one limit.
    package static let maximumParameters = RunRequest.maximumParameters
    package static let maximumParameterBytes = RunRequest.maximumParameterBytes
    /// The most runs one run of a job may submit.
    package static let maximumPerRun = 64

    public init(job: String, parameters: [String: String], after: Duration) {
        self.job = job
        self.parameters = parameters
        self.after = after
    }
}

/// `request_next_run`'s argument, checked: plugin code may pass anything.
package enum NextRunRequest {
    /// The longest delay a job may ask for.
    package static let maximum: Duration = .seconds(10 * 366 * 24 * 3600)

    /// `seconds` as a delay, or `nil` when it is negative, NaN, infinite or over ``maximum``.
    static func delay(seconds: Double) -> Duration? {
        guard seconds.isFinite, seconds >= 0, seconds <= Double(maximum.components.seconds) else { return nil }
        // Whole milliseconds: exact, and a Double this small converts without trapping.
        return .milliseconds(Int64((seconds * 1000).rounded(.down)))
    }
}
