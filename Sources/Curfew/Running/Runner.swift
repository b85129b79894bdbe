import Dispatch
import Synchronization

/// Runs jobs, each under its own grant, at most a given number at once,
/// and reports what happens to them as ``RunEvent``s.
///
/// ```swift
/// let scan = PluginLoader().scan(["plugins"])
/// let runner = Runner(jobs: scan.jobs) { event in print(event) }
/// let results = await runner.run()
/// ```
///
/// - Important: The runner prints nothing and never calls plugin code
///   itself: each job's ``JobExecution`` does, in process or in a worker.
public final class Runner: Sendable {
    private struct State {
        /// The next job to start: every job before it has started or been refused.
        var next = 0
        var running: [Int: any JobExecution] = [:]
        /// The jobs that count against `maxConcurrentJobs`: a job's slot is
        /// free once its worker reports its end, before the worker exits.
        var holdingSlots: Set<Int> = []
        var results: [JobResult?]
        var unfinished: Int
        var shutdown: ExpirationReason?
        /// An expiration asked for through `expireRunning` before every job had started.
        var expireOnStart: ExpirationReason?
        /// Called once with the results, after the last event was handled.
        var completion: (@Sendable ([JobResult]) -> Void)?
        var started = false
        /// The app state jobs start in, kept as the lifecycle moves.
        var appState: AppState
        /// The runner's subscription to the lifecycle, while it runs.
        var lifecycleToken: UInt64?
        /// The lifecycle said will-terminate: no job starts after it.
        var terminated = false
    }

    public let jobs: [PluginJob]
    public let configuration: RunConfiguration
    /// Writes the run into the state store, when there is one.
    private let recorder: RunRecorder?
    private let manager: GrantManager
    private let parameters: ParameterTable
    private let events: EventChannel
    private let state: Mutex<State>
    /// Where isolated jobs get their workers.
    private let workers: WorkerSource?
    /// Under `--isolate plugin`, where a job is admitted when a shared
    /// worker's word frees a slot: not on the thread that read the word,
    /// which is that worker's only reader and may have to write the next
    /// job's `run` to it.
    private let admissions: SerialQueue?

    /// - Parameters:
    ///   - jobs: The jobs to run, in the order they start.
    ///   - configuration: Budgets and limits.
    ///   - clock: Where time is read and timers are armed.
    ///   - events: Called for every event, one at a time and in order, on a
    ///     serial queue of the runner's; a job's `finished` is its last event,
    ///     and ``run()`` returns after every event has been handled.
    public convenience init(
        jobs: [PluginJob], configuration: RunConfiguration = RunConfiguration(),
        clock: any CurfewClock = MonotonicClock(), events: @escaping @Sendable (RunEvent) -> Void = { _ in }
    ) {
        self.init(jobs: jobs, configuration: configuration, clock: clock, timedEvents: { event, _ in events(event) })
    }

    /// - Parameters:
    ///   - timedEvents: As `events`, with the instant on `clock` at which each
    ///     event happened (for a job in a worker, read by the worker).
    public init(
        jobs: [PluginJob], configuration: RunConfiguration = RunConfiguration(),
        clock: any CurfewClock = MonotonicClock(), timedEvents: @escaping @Sendable (RunEvent, CurfewInstant) -> Void
    ) {
        self.jobs = jobs
        var configuration = configuration
        if let store = configuration.state {
            // What earlier runs learnt of each job's chunks: its first predictions (one query).
            let known = (try? store.estimates()) ?? [:]
            for job in jobs where configuration.estimates[job.name] == nil {
                configuration.estimates[job.name] = known[job.stateKey]
            }
            recorder = RunRecorder(
                store: store, isolation: configuration.isolation, sandbox: configuration.isolation == .none ? nil : configuration.sandbox)
        } else {
            recorder = nil
        }
        self.configuration = configuration
        self.manager = GrantManager(clock: clock, policy: configuration.policy)
        self.parameters = ParameterTable(configuration.parameters)
        self.events = EventChannel(clock: clock, handler: timedEvents)
        switch configuration.isolation {
        case .none:
            workers = nil
        case .job, .plugin:
            let distinct = configuration.isolation == .job ? jobs.count : Set(jobs.map(\.loadPath)).count
            let pool = WorkerPool(
                executable: configuration.workerExecutable, environment: WorkerRun.environment(for: configuration),
                capacity: min(configuration.maxConcurrentJobs, max(distinct, 1)))
            workers = WorkerSource(
                pool: pool, isolation: configuration.isolation, forking: configuration.usesForkServer, expected: distinct,
                jobs: jobs, scratchAhead: configuration.sandbox != nil, reusesScratch: configuration.sandbox?.network == .off,
                confineAhead: WorkerSource.confinement(for: jobs, configuration), kept: configuration.forkServers)
        }
        admissions = configuration.isolation == .plugin ? SerialQueue(label: "curfew.admissions", target: SerialQueue.host) : nil
        self.state = Mutex(State(
            results: Array(repeating: nil, count: jobs.count), unfinished: jobs.count, appState: configuration.appState))
    }

    /// Starts, now, the fork server that a run with `configuration` forks its
    /// workers from (an isolated run's), so that its start (a process start
    /// and a warm-up, some milliseconds) overlaps what the caller does before
    /// the run: scanning, opening the store. The next runner made with the
    /// same worker executable and environment takes it;
    /// ``discardEarlyWorkers()`` closes one that none took.
    public static func startWorkersEarly(for configuration: RunConfiguration) {
        guard configuration.isolation != .none, configuration.usesForkServer else { return }
        WorkerSource.startEarly(executable: configuration.workerExecutable, environment: WorkerRun.environment(for: configuration))
    }

    /// Closes the fork server ``startWorkersEarly(for:)`` started, if no runner took it.
    public static func discardEarlyWorkers() {
        WorkerSource.discardEarly()
    }

    /// Runs every job and returns their results, in the jobs' order.
    ///
    /// - Important: Call it once.
    public func run() async -> [JobResult] {
        await withCheckedContinuation { continuation in
            start { continuation.resume(returning: $0) }
        }
    }

    /// Starts every job and returns at once; `completion` gets their results,
    /// in the jobs' order, once every event has been handled. What ``run()``
    /// does, for a caller with no task to wait in (a worker process, which
    /// starts no task runtime for it).
    ///
    /// - Important: Call it, or ``run()``, once.
    public func start(completion: @escaping @Sendable ([JobResult]) -> Void) {
        // Jobs in this process expire here: the first expiration pays no first-use cost.
        if workers == nil { Grant.warmUp() }
        let done = state.withLock { state -> Bool in
            precondition(!state.started, "Runner.run() called twice")
            state.started = true
            state.completion = completion
            if let lifecycle = configuration.lifecycle, state.unfinished > 0 {
                // Under the lock that admits jobs: each starts in the state it
                // reads here or hears every transition after.
                let subscription = lifecycle.subscribe { [weak self] event, appState in
                    self?.appEvent(event, state: appState, deadline: nil)
                }
                state.lifecycleToken = subscription.token
                state.appState = subscription.state
                state.terminated = subscription.terminated
            }
            return state.unfinished == 0
        }
        recorder?.begin()
        if done { resume() } else { admit() }
    }

    /// Expires every running job now with the shutdown reason, giving each at
    /// most its lead time to clean up, and refuses the jobs not started yet.
    public func shutdown() {
        stopAll(.shutdown)
    }

    /// Cancels the run: like ``shutdown()`` with the cancelled reason.
    public func cancel() {
        stopAll(.cancelled)
    }

    /// Expires one running job now with the cancelled reason.
    ///
    /// - Returns: Whether a job of that name was running.
    @discardableResult
    public func cancel(job name: String) -> Bool {
        expire(job: name, reason: .cancelled)
    }

    /// Expires one running job now with `reason`.
    ///
    /// - Returns: Whether a job of that name was running.
    @discardableResult
    public func expire(job name: String, reason: ExpirationReason) -> Bool {
        let run = state.withLock { $0.running.values.first { $0.job.name == name } }
        run?.expireNow(reason)
        return run != nil
    }

    /// How many isolated workers were forked by the fork server, and how many
    /// started with posix_spawn.
    package var workerStarts: WorkerStarts {
        workers?.starts.withLock { $0 } ?? WorkerStarts()
    }

    /// Whether the plugin at `path` has a worker open under `--isolate plugin` (for tests).
    func hasSharedWorker(for path: String) -> Bool { workers?.hasWorker(for: path) ?? false }

    /// The jobs running now, for a live display.
    /// Waits up to `limit` for the events posted so far to reach the
    /// handler: for a report that ends the process (a fault in plugin code),
    /// so that what a job said before it comes first. True once they have.
    public func waitForEvents(upTo limit: Duration) -> Bool {
        let end = ContinuousClock.now + limit
        while !events.isDrained {
            guard ContinuousClock.now < end else { return false }
            Syscalls.nap(microseconds: 1000)
        }
        return true
    }

    public func status() -> [JobStatus] {
        let runs = state.withLock { state in state.running.sorted { $0.key < $1.key }.map(\.value) }
        return runs.map { $0.status() }
    }

    /// The host's app state changed: every job starts in `appState` from now
    /// on, and the running ones (or the one named `job`) hear `event`. After
    /// `willTerminate` no job starts: those waiting are refused, as after
    /// ``shutdown()``, while the running ones go on until whoever stops
    /// the jobs does.
    func appEvent(_ event: AppEvent, state appState: AppState, deadline: CurfewInstant?, job: String? = nil) {
        let runs = state.withLock { state -> [any JobExecution] in
            state.appState = appState
            if event == .willTerminate { state.terminated = true }
            return state.running.sorted { $0.key < $1.key }.map(\.value).filter { job == nil || $0.job.name == job }
        }
        runs.forEach { $0.appEvent(event, state: appState, deadline: deadline) }
        if event == .willTerminate { admit() }  // refuses the waiting jobs now
    }

    /// Expires every running job now with `reason`; a job that has not
    /// started yet gets the expiration as it starts (a worker's one job may
    /// be told to expire before its runner has admitted it).
    func expireRunning(_ reason: ExpirationReason) {
        let runs = state.withLock { state -> [any JobExecution] in
            if state.expireOnStart == nil { state.expireOnStart = reason }
            return Array(state.running.values)
        }
        runs.forEach { $0.expireNow(reason) }
    }

    private func stopAll(_ reason: ExpirationReason) {
        let runs = state.withLock { state -> [any JobExecution] in
            if state.shutdown == nil { state.shutdown = reason }
            return Array(state.running.values)
        }
        runs.forEach { $0.expireNow(reason) }
        admit()
    }

    /// Starts waiting jobs while there is room; refuses them when stopping.
    private func admit() {
        while true {
            // A nominal type, not a tuple: a forked worker builds a tuple's
            // metadata from its mangled name on first use, at a cost.
            let next = state.withLock { state -> Admission in
                guard state.started, state.next < jobs.count else { return .none }
                if let reason = state.shutdown ?? (state.terminated ? .shutdown : nil) {
                    let why = reason == .cancelled
                        ? "the run was cancelled before the job started" : "the host was shutting down before the job started"
                    defer { state.next += 1 }
                    return .refuse(state.next, why)
                }
                guard state.holdingSlots.count < configuration.maxConcurrentJobs else { return .none }
                let index = state.next
                state.next += 1
                do throws(CurfewError) {
                    let onFinish: @Sendable (JobResult) -> Void = { [self] result in finished(index, result) }
                    let run: any JobExecution =
                        switch configuration.isolation {
                        case .none:
                            try JobRun(
                                job: jobs[index], manager: manager, parameters: parameters, timeSlice: configuration.timeSlice,
                                events: events, checkpoints: configuration.checkpoints,
                                estimate: configuration.estimates[jobs[index].name] ?? .empty, appState: state.appState,
                                grantStart: configuration.grantStart, hooks: configuration.hooks, submits: configuration.submits,
                                watchesConditions: configuration.watchesConditions,
                                onFinish: onFinish)
                        case .job, .plugin:
                            try WorkerRun(
                                job: jobs[index], configuration: configuration, manager: manager, workers: workers!, events: events,
                                appState: state.appState, onSlotFree: { [self] in freeSlot(index) }, onFinish: onFinish)
                        }
                    state.running[index] = run
                    state.holdingSlots.insert(index)
                    return .start(run)
                } catch {
                    return .refuse(index, error.description)
                }
            }
            switch next {
            case .none:
                return
            case .start(let run):
                recorder?.begin(run.job)
                run.start()
                // A stop that came while the job was being admitted reaches it here.
                if let reason = state.withLock({ $0.shutdown ?? $0.expireOnStart }) { run.expireNow(reason) }
            case .refuse(let index, let reason):
                refuse(index, reason: reason)
            }
        }
    }

    /// Runs, once, the generic code a forked worker's runner runs on its
    /// first job: the runtime builds its type metadata from mangled names
    /// on first use, a cost each fork pays unless its server paid it first.
    /// Starts no thread (the fork server forks only while it has one).
    static func warmUp(_ job: PluginJob) {
        final class Idle: JobExecution {
            let job: PluginJob
            init(job: PluginJob) { self.job = job }
            func start() {}
            func expireNow(_ reason: ExpirationReason) {}
            func status() -> JobStatus { preconditionFailure("a warm-up job has no status") }
            func appEvent(_ event: AppEvent, state: AppState, deadline: CurfewInstant?) {}
        }
        var running: [Int: any JobExecution] = [:]
        var holdingSlots: Set<Int> = []
        running[0] = Idle(job: job)
        holdingSlots.insert(0)
        precondition(running.removeValue(forKey: 0) != nil && holdingSlots.remove(0) != nil)
    }

    private enum Admission {
        case none
        case start(any JobExecution)
        case refuse(Int, String)
    }

    private func refuse(_ index: Int, reason: String) {
        let job = jobs[index]
        let result = JobResult(
            job: job.name, pluginPath: job.pluginPath, loadPath: job.loadPath, isChunked: job.isChunked, outcome: .refused, chunks: 0,
            elapsed: .zero, reason: reason, progress: nil)
        workers?.jobEnded(job, refused: true)
        events.post(.finished(result)) { [self] in record(index, result) }
    }

    private func finished(_ index: Int, _ result: JobResult) {
        let ended = WallTime.now()
        // In process, the next job's code runs in this process: the row, and
        // a completed job's checkpoint clear with it, is on disk before the
        // job gives up its slot (an admission under way elsewhere takes a
        // free slot at once). In workers, the next job first: the row ends
        // with an fdatasync when it clears a checkpoint, and may wait for
        // another process's hold on the store.
        let inProcess = workers == nil
        if inProcess { recorder?.record(result, endedAt: ended) }
        let held = state.withLock { state -> Bool in
            _ = state.running.removeValue(forKey: index)
            return state.holdingSlots.remove(index) != nil
        }
        // A job whose worker's word freed its slot was counted as ended then.
        if held { workers?.jobEnded(jobs[index]) }
        admit()
        if !inProcess {
            // An admission the job's early end queued (a shared worker's job)
            // may be starting the next job on another thread: its start reads
            // that job's checkpoint from the store, which this row's write holds
            // while it waits for another process's hold, the next job's grant
            // running. The row waits for the admissions queued before it.
            if let admissions {
                let admitted = DispatchSemaphore(value: 0)
                admissions.enqueue { admitted.signal() }
                admitted.wait()
            }
            recorder?.record(result, endedAt: ended)
        }
        keep(index, result)
    }

    /// A job's work is over (its worker said so), though its outcome waits
    /// for its worker's exit (a worker's own job) or to be delivered (a
    /// shared worker's): the next job may start, and a plugin's worker whose
    /// last job this was is closed now, so workers do not outnumber `--jobs`
    /// while deliveries wait (on a slow reader of the output, or the store).
    private func freeSlot(_ index: Int) {
        guard state.withLock({ $0.holdingSlots.remove(index) }) != nil else { return }
        workers?.jobEnded(jobs[index])
        if let admissions {
            admissions.enqueue { [self] in admit() }
        } else {
            admit()
        }
    }

    /// What the state store refused during the run (it does not stop the
    /// run): each a sentence, for the caller to show.
    public var stateProblems: [String] { recorder?.problems ?? [] }

    /// Keeps a job's result, in the history too, and completes the run after the last.
    private func record(_ index: Int, _ result: JobResult) {
        recorder?.record(result)
        keep(index, result)
    }

    /// Keeps a job's result (its history row is written), and completes the run after the last.
    private func keep(_ index: Int, _ result: JobResult) {
        let done = state.withLock { state -> Bool in
            state.results[index] = result
            state.unfinished -= 1
            return state.unfinished == 0
        }
        if done { resume() }
    }

    private func resume() {
        if let token = state.withLock({ $0.lifecycleToken }) { configuration.lifecycle?.unsubscribe(token) }
        workers?.close()
        recorder?.end()
        // Not a tuple out of the lock: see ``warmUp(_:)``.
        var completion: (@Sendable ([JobResult]) -> Void)?
        var results: [JobResult] = []
        state.withLock { state in
            completion = state.completion
            state.completion = nil
            results = state.results.compactMap { $0 }
        }
        completion?(results)
    }
}
