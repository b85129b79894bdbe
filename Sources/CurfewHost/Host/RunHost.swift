import Curfew
import Synchronization

/// A batch run as `curfew run` makes it, for any program that embeds
/// Curfew: the plugins scanned, the jobs run under their grants, and the
/// host's end taken care of — stop requests (the first signal expires every
/// job and waits for their cleanup, a second ends the process), processes
/// jobs leave behind, the state store, and the exit status.
///
/// ```swift
/// var options = RunHost.Options(paths: ["plugins"])
/// options.ownsProcess = true   // a program that is only this run
/// let outcome = await RunHost(options) { event in print(event) }.run()
/// outcome.jobStillRunning ? _exit(outcome.status) : exit(outcome.status)
/// ```
///
/// What it prints is the caller's: every line it would say is an ``Event``.
/// Events come on the runner's queue, and `.stopping` on the thread that
/// asked for the stop: the closure may be called from two threads at once.
/// Run it once.
public final class RunHost: Sendable {
    public struct Options: Sendable {
        /// Plugin folders, `.so` files and manifests.
        public var paths: [String]
        public var configuration = RunConfiguration()
        /// Run only these jobs (all, when empty).
        public var only: [String] = []
        public var allowsInsecurePlugins = false
        /// How the plugins are scanned: by default, scanners of this
        /// process's own executable (or `curfew-scanner` beside it), with the
        /// per-user scan cache (`scanner.rescan`: every file again, whatever the
        /// cache remembers). It takes snapshots.
        public var scanner = SafeScanner()
        /// Keep checkpoints and history.
        public var keepsState = true
        /// The state store's folder, absolute; `nil` for the default one.
        public var stateFolder: String?
        /// The process is this run's alone, as `curfew run`'s is: SIGINT,
        /// SIGTERM and SIGHUP stop the run (a second one ends the process at
        /// once); the process adopts orphaned descendants, and in process
        /// ends every child it has when the jobs are over (the processes
        /// jobs start are its children, and nothing tells them apart from
        /// an embedder's own). Off (the default), the caller handles its
        /// signals (and calls ``stop(status:reason:)``) and its children.
        /// The signals stay caught, and ignored, after the run.
        public var ownsProcess = false

        public init(paths: [String]) {
            self.paths = paths
        }
    }

    /// What the host has to say, in the order it happens.
    public enum Event: Sendable {
        /// Something the operator should know that does not stop the run.
        case warning(Warning)
        case scanned(PluginScan)
        /// The jobs are about to start: for a caller that shows their status.
        case running(Runner)
        /// A stop was asked for: every job expires now and has `lead` to clean up.
        case stopping(reason: String, lead: Duration)
        case run(RunEvent, at: CurfewInstant)
        /// How what the jobs start is ended: in a cgroup per worker, or by
        /// the subreaper walk (the reason there is no cgroup). Before the scan.
        case processes(WorkerCgroups.Setup)
    }

    public enum Warning: Sendable, Equatable {
        /// Plugins load from their own files: snapshots could not be taken.
        case noSnapshots(String)
        case snapshot(String)
        /// The state store or its folder was made private.
        case madePrivate(String)
        /// Runs a host before left running, now marked interrupted.
        case interrupted(Int)
        /// Processes a killed host before left running, ended now.
        case strays(Int)
        /// What this kernel cannot confine of a sandboxed worker.
        case sandboxUnenforced([String])
    }

    /// Why nothing ran.
    public enum Failure: Error, Sendable, Equatable {
        /// `only` named a job no plugin has.
        case unknownJob(String, loaded: [String])
        /// No plugin file was found.
        case noPlugin
        /// Every plugin file was rejected.
        case everyPluginRejected
        /// The state store cannot be used.
        case store(String)
        /// The signal handlers could not be installed.
        case signals(String)
    }

    public struct Outcome: Sendable {
        public var results: [JobResult] = []
        public var scan = PluginScan()
        public var failure: Failure?
        /// What the state store refused during the run, and as the host left.
        public var stateProblems: [String] = []
        /// The status a process that is only this run exits with (see ``ExitCode``).
        public var status: Int32
        /// The reason of the stop request made while the host ran (a
        /// signal's name, or the caller's reason), or `nil` when none was.
        public var stopReason: String?
        /// A job was terminated and may still run on a thread of this
        /// process: exit without running exit handlers (`_exit`).
        public var jobStillRunning: Bool { results.contains { $0.outcome == .terminated } }
    }

    public let options: Options

    /// The status the first stop request asked for, whenever it came.
    public var stopStatus: Int32? { stop.status }
    private let events: @Sendable (Event) -> Void
    private let stop = StopRequest()

    public init(_ options: Options, events: @escaping @Sendable (Event) -> Void = { _ in }) {
        self.options = options
        self.events = events
    }

    /// Stops the run: the first request expires every job with the shutdown
    /// reason (or before the jobs start, starts none); later ones change
    /// nothing. `status` is the run's exit status.
    ///
    /// A request after the run (while its caller sums it up, say) changes no
    /// job: ``stopStatus`` keeps it for the caller.
    public func stop(status: Int32, reason: String) {
        stop.request(status: status, reason: reason)
    }

    /// Runs the jobs to their ends and says how it went.
    public func run() async -> Outcome {
        // Stop requests are caught before anything else happens, the scan
        // included: a signal never finds the host without its handler.
        var signals: SignalMonitor?
        if options.ownsProcess {
            do throws(CurfewError) {
                signals = try stop.catchSignals(status: { 128 + $0 })
            } catch {
                return Outcome(failure: .signals(error.description), status: ExitCode.failure)
            }
        }
        defer { signals?.cancel() }

        // Processes jobs start come back here if their parent dies, so none
        // outlives its job by calling setsid() or forking twice; nor does a
        // scanner worker whose fork server died.
        if options.ownsProcess { ChildProcesses.adoptOrphans() }
        // Before any other process starts: the host may move into a leaf.
        let cgroups = options.ownsProcess && options.configuration.isolation != .none
        if cgroups {
            let setup = WorkerCgroups.prepare()
            events(.processes(setup))
            // What a killed host before this one left, ended from its cgroup folder.
            if case .on(let made) = setup, made.ended > 0 { events(.warning(.strays(made.ended))) }
        }
        defer { if cgroups { WorkerCgroups.finish() } }
        // Isolated, the workers' fork server starts while the plugins are scanned.
        Runner.startWorkersEarly(for: options.configuration)
        defer { Runner.discardEarlyWorkers() }
        var outcome = Outcome(status: ExitCode.success)
        outcome.scan = scan()
        if let status = stop.status {
            outcome.status = status
            outcome.stopReason = stop.reason
            return outcome
        }
        events(.scanned(outcome.scan))
        let jobs: [PluginJob]
        switch chosenJobs(outcome.scan) {
        case .success(let chosen): jobs = chosen
        case .failure(let failure):
            outcome.failure = failure
            outcome.status = failure == .everyPluginRejected ? ExitCode.pluginRejected : ExitCode.failure
            return outcome
        }
        var configuration = options.configuration
        // Once a run, not once a job: the kernel is the same for each.
        if configuration.sandbox != nil, case let missing = SandboxPolicy.unenforced(), !missing.isEmpty {
            events(.warning(.sandboxUnenforced(missing)))
        }
        if options.keepsState {
            switch Self.openStore(options.stateFolder, writer: .current(), warn: { events(.warning($0)) }) {
            case .success(let store): configuration.state = store
            case .failure(let unusable):
                outcome.failure = .store(unusable.message)
                outcome.status = ExitCode.failure
                return outcome
            }
        }

        let runner = Runner(jobs: jobs, configuration: configuration) { [events] event, time in events(.run(event, at: time)) }
        events(.running(runner))
        let lead = configuration.policy.lead
        stop.onRequest { [events] reason in
            events(.stopping(reason: reason, lead: lead))
            runner.shutdown()
        }
        outcome.results = await runner.run()
        stop.dropAction()
        // A job whose hook faulted is over at its hard deadline: the fault's
        // report, not this outcome, ends the process.
        HookThread.waitIfFaulting()
        // In process, every job has ended: so does every process they started.
        // (A worker ends its own jobs' processes, the fork server a dead
        // worker's.)
        if configuration.isolation == .none && options.ownsProcess { ChildProcesses.endAll() }
        outcome.stateProblems = runner.stateProblems
        if let store = configuration.state {
            // The store's log folds into state.db as the host leaves, so the file alone holds the store.
            do throws(CurfewError) { try store.checkpointLog() } catch { outcome.stateProblems.append(error.description) }
        }
        outcome.status = ExitCode.forRun(outcome.results, rejected: outcome.scan.rejected.count, stop: stop.status)
        outcome.stopReason = stop.reason
        return outcome
    }

    /// Scans in scanner workers first, so a plugin that crashes or hangs
    /// while loading is rejected, not fatal; in process, then loads what the
    /// scanners vouched for.
    private func scan() -> PluginScan {
        let loader = PluginLoader(parameters: options.configuration.parameters, allowsInsecurePlugins: options.allowsInsecurePlugins)
        var scanner = options.scanner
        scanner.takesSnapshots = true
        // Where the jobs' workers are confined, so are their scanners.
        scanner.sandboxed = options.configuration.isolation != .none && options.configuration.sandbox != nil
        // A stop during the scan kills the scanner: a plugin hanging in its
        // constructor does not hold the host for the scan's whole timeout.
        let report = scanner.scan(options.paths, loader: loader) { [stop] in stop.status != nil }
        if let problem = report.snapshotProblem { events(.warning(.noSnapshots(problem))) }
        for note in report.snapshotNotes { events(.warning(.snapshot(note))) }
        let safe = report.scan
        guard stop.status == nil, options.configuration.isolation == .none else { return safe }
        var scan = safe.plugins.isEmpty ? PluginScan() : loader.load(vouched: safe.plugins)
        scan.rejected = safe.rejected + scan.rejected
        return scan
    }

    private func chosenJobs(_ scan: PluginScan) -> Result<[PluginJob], Failure> {
        var jobs = scan.jobs
        if !options.only.isEmpty {
            let known = Set(jobs.map(\.name))
            if let unknown = options.only.first(where: { !known.contains($0) }) {
                return .failure(.unknownJob(unknown, loaded: jobs.map(\.name)))
            }
            jobs = jobs.filter { options.only.contains($0.name) }
        }
        if jobs.isEmpty { return .failure(scan.rejected.isEmpty ? .noPlugin : .everyPluginRejected) }
        return .success(jobs)
    }

    /// Why the state store cannot be used.
    struct StoreUnusable: Error {
        let message: String
    }

    /// The store in `folder` (absolute; `nil`: the default one), opened as its writer.
    static func openStore(
        _ folder: String?, writer: StoreLock.Holder, warn: (Warning) -> Void
    ) -> Result<StateStore, StoreUnusable> {
        guard let folder = folder ?? StateStore.defaultFolder() else {
            return .failure(StoreUnusable(
                message: "No state folder: give one with --state, or set STATE_DIRECTORY, XDG_STATE_HOME or HOME to an absolute path"))
        }
        do throws(CurfewError) {
            let store = try StateStore(folder: folder, writer: writer)
            for change in store.madePrivate { warn(.madePrivate(change)) }
            if store.interrupted > 0 { warn(.interrupted(store.interrupted)) }
            return .success(store)
        } catch {
            return .failure(StoreUnusable(message: error.description))
        }
    }
}
