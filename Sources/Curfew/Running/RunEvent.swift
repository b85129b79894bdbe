/// How a job ended.
public enum Outcome: String, Sendable, CaseIterable, CustomStringConvertible {
    /// The job's work finished before its grant expired.
    case completed
    /// The job said its work failed (a chunk returned failed, or create did).
    case failed
    /// The grant expired while the job ran, and its cleanup ran in time.
    case expired
    /// The job overran its hard deadline; the host stopped waiting for it
    /// and never called into it again.
    case terminated
    /// The job was not run (a continuous job without permission, or the
    /// host was shutting down before its turn).
    case refused
    /// The job's worker process died before the job ended: a signal (a
    /// segfault, an abort, a resource limit) or an exit of its own. Only in
    /// isolated modes; the host and the other jobs carry on.
    case crashed
    /// In history only: the job's run has begun and not ended yet.
    case running
    /// In history only: the run's end was never recorded (its host was
    /// killed, its machine went down, or the store refused the row), so how
    /// the job ended is not known. A run's row is written `running` as it
    /// starts; the next host to open the store as its writer marks what is
    /// still `running` this way.
    case interrupted

    public var description: String { rawValue }

    /// Whether the outcome is a clean end: completed, or expired with its cleanup done.
    public var isClean: Bool { self == .completed || self == .expired }
}

/// A job's progress as it last reported it.
public struct JobProgress: Sendable, Equatable {
    public var completed: Int64
    /// Zero when the job does not know the total.
    public var total: Int64

    public init(completed: Int64, total: Int64) {
        self.completed = completed
        self.total = total
    }
}

/// How a job ended, with what the host measured.
public struct JobResult: Sendable {
    public let job: String
    public let pluginPath: String
    /// Where its code was loaded from (``PluginJob/loadPath``).
    public let loadPath: String
    /// Whether the job runs in chunks (else it is task-driven).
    public let isChunked: Bool
    public let outcome: Outcome
    /// Chunks called.
    public let chunks: UInt64
    /// From the job's start to its end (zero for a refused job).
    public let elapsed: Duration
    /// Why it ended, in a few words: "work done", "time ran out; cleanup ran", …
    public let reason: String
    public let progress: JobProgress?
    /// What the job's chunks were seen to take, this run and before
    /// (`nil` for a job that ran no chunk).
    public internal(set) var estimate: ChunkEstimate? = nil
    /// What the run measured of its chunks and its `expire` hook.
    public internal(set) var measures = RunMeasures()

    /// The job failed and said another run cannot help
    /// (CURFEW_CHUNK_FAILED_FINAL): a scheduler does not retry it.
    public var isFailedForGood: Bool {
        outcome == .failed && reason.hasPrefix(Reason.failedForGood)
    }
}

/// What happens to the jobs of a run, in order, per job.
public enum RunEvent: Sendable {
    /// The job's grant began and its `create` is about to run.
    case started(job: String, pluginPath: String, budget: Duration?)
    /// The job logged a message.
    case log(job: String, level: LogLevel, message: String)
    /// The job reported progress (rate-limited per job).
    case progress(job: String, JobProgress)
    /// The job's grant started to expire.
    case expiring(job: String, reason: ExpirationReason)
    /// The job asked for its next run no sooner than `after` from when it asked
    /// (`request_next_run`); the last request of a run is the one that counts.
    case nextRunRequested(job: String, after: Duration)
    /// The job asked for a run of another (`submit_run`), one its policy
    /// lets it start: the serving host keeps it as a one-off run.
    case runSubmitted(job: String, run: SubmittedRun)
    /// The job asked that its runs, this one included, be held to
    /// `conditions` besides its policy's (`require_conditions`).
    case conditionsRequired(job: String, conditions: Set<Condition>)
    /// The job ended. Its last event.
    case finished(JobResult)
    /// A line plugin code wrote to stdout or stderr (`stream`) that no single
    /// job can be named for: several jobs were running where it was written
    /// (the worker a plugin's jobs share, or the host in process). The
    /// plugin's path when that much is known.
    case output(pluginPath: String?, stream: String, line: String)
}

/// A running job as a live display shows it.
public struct JobStatus: Sendable {
    public let job: String
    public let isChunked: Bool
    /// `nil` for a job without a budget.
    public let timeRemaining: Duration?
    public let progress: JobProgress?
    /// Chunks called so far (updated once per time slice; from a worker,
    /// every 100 ms); `nil` when the host cannot know.
    public let chunks: UInt64?
    public let isExpiring: Bool
    /// A job without a budget (its `timeRemaining` is always `nil`).
    public var isContinuous = false

    public init(
        job: String, isChunked: Bool, timeRemaining: Duration?, progress: JobProgress?, chunks: UInt64?, isExpiring: Bool,
        isContinuous: Bool = false
    ) {
        self.job = job
        self.isChunked = isChunked
        self.timeRemaining = timeRemaining
        self.progress = progress
        self.chunks = chunks
        self.isExpiring = isExpiring
        self.isContinuous = isContinuous
    }
}
