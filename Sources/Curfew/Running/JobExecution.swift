import Dispatch
import Synchronization

/// How one job runs: in process (``JobRun``) or in a worker (``WorkerRun``).
protocol JobExecution: AnyObject, Sendable {
    var job: PluginJob { get }
    /// Starts the job's grant and its work.
    func start()
    /// Expires the job now (kept until it starts, if it has not yet).
    func expireNow(_ reason: ExpirationReason)
    /// A view for live displays.
    func status() -> JobStatus
    /// The host's app state changed: `event` led to `state`. Entering the
    /// background starts the grant's clock (up to `deadline`, when given).
    func appEvent(_ event: AppEvent, state: AppState, deadline: CurfewInstant?)
}
