import Dispatch
import Synchronization
import _CurfewShims

/// How a ``Runner`` runs jobs.
public struct RunConfiguration: Sendable {
    /// Budget, lead time and whether continuous jobs may run.
    public var policy: GrantPolicy
    /// At most this many jobs hold a grant at once; the rest wait their turn.
    public var maxConcurrentJobs: Int
    /// The `--param key=value` pairs every job can read.
    public var parameters: [String: String]
    /// How long a worker calls one job's chunks back to back before it
    /// hands the thread back.
    public var timeSlice: Duration
    /// Where each job's code runs.
    public var isolation: Isolation = .none
    /// Limits for each worker process (isolated modes only).
    public var limits = ResourceLimits()
    /// The sandbox each worker applies before it loads a plugin (isolated
    /// modes only); `nil`: none.
    public var sandbox: SandboxPolicy?
    /// The executable started as a worker: `curfew` itself.
    public var workerExecutable = "/proc/self/exe"
    /// Whether isolated workers are forked by a fork server (else each is
    /// started with posix_spawn, from a pool); the spawn path is also the
    /// fallback when the server cannot fork.
    public var usesForkServer = true
    /// Fork servers kept across runs (a serving host's, which closes them
    /// as it stops); `nil`: each run starts its own and ends it.
    package var forkServers: WorkerForkServers?
    /// Where checkpoints, run history and chunk-time estimates are kept;
    /// `nil` keeps none (a job's `checkpoint_save` returns unavailable).
    public var state: StateStore? {
        didSet { checkpoints = state }
    }
    /// The jobs these jobs may ask to run (`submit_run`); `nil`: the host
    /// takes no such request (a batch), and `submit_run` is unavailable.
    public var submits: Set<String>?
    /// Whether the host holds runs to conditions and takes a job's own
    /// (`require_conditions`, else unavailable): `curfew serve` does.
    public var watchesConditions = false
    /// The host's app state and its events (see ``AppLifecycle``); `nil`:
    /// the jobs stay in the background, as a batch of background jobs does.
    public var lifecycle: AppLifecycle?
    /// The app state jobs start in without a lifecycle (a worker's, told by its host).
    var appState: AppState = .background
    /// When jobs' grants start (a worker's: when its host started the
    /// grant); `nil`: as each job starts.
    var grantStart: CurfewInstant?
    /// Where jobs' checkpoints go: the state store (as ``state`` sets it,
    /// or a keeper in front of it), or (in a worker) the host.
    package var checkpoints: (any CheckpointKeeper)?
    /// What each job's chunks were last seen to take, by job name: the
    /// runner's first predictions (read from the state store when it has one).
    var estimates: [String: ChunkEstimate] = [:]
    /// Where in-process jobs' hooks run: a serial queue makes every job's
    /// hooks share one thread (tests of a host short of threads).
    var hooks: DispatchQueue = SerialQueue.hooks

    /// The processors this process may run on: its CPU affinity (`taskset`,
    /// a container's cpuset), not every processor the machine has online,
    /// and no more than its control group's CPU limit allows (a container's
    /// CPU limit, systemd's `CPUQuota=`; see ``CPUQuota``), rounded up. The
    /// affinity is read at each call, the limit once a process (the fork
    /// server reads it before it forks, so a worker reads no file for it).
    public static var activeProcessorCount: Int {
        let affinity = max(1, Int(curfew_shim_usable_cpus()))
        return min(affinity, cpuLimit ?? affinity)
    }

    /// The control group's CPU limit in whole processors, read at first use.
    static let cpuLimit: Int? = CPUQuota.processors()

    public init(
        policy: GrantPolicy = GrantPolicy(), maxConcurrentJobs: Int = RunConfiguration.activeProcessorCount,
        parameters: [String: String] = [:], timeSlice: Duration = .milliseconds(2)
    ) {
        precondition(maxConcurrentJobs >= 1, "at least one job must be able to run")
        self.policy = policy
        self.maxConcurrentJobs = maxConcurrentJobs
        self.parameters = parameters
        self.timeSlice = timeSlice
    }
}
