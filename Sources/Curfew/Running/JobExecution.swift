import Dispatch
import Glibc
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
}
