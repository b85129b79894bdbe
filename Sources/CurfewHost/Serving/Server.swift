import Curfew
import CurfewFormats
import Dispatch
import Synchronization

/// `curfew serve`: a resident host over live plugin folders. It scans the
/// folders, keeps each job on its ``Schedule``, runs each due job under a
/// ``Runner`` of its own (in a fresh worker, so a replaced plugin file runs
/// its new code while a run of the old one finishes its grant), rescans
/// when inotify says a file was written or removed, and keeps schedules in
/// the state store so a restart goes on where the last host stopped.
///
/// Everything the server decides happens on one serial queue; plugin code
/// never runs in this process.
public final class Server: @unchecked Sendable {
    // Safe because every mutable property is used on `queue` only.

    /// What the server tells its user, besides its runs' events.
    public enum Notice: Sendable {
        case info(String)
        case warning(String)
        /// Something was lost (a history row, a schedule): for the journal's `err`.
        case error(String)
    }

    /// What the server was started with.
    public struct Options: Sendable {
        public var folders: [String]
        public var config = ServeConfig()
        /// Where `config` came from, for `reload`; `nil`: none.
        public var configPath: String?
        /// The grant, isolation, limits, parameters and `--jobs` of every
        /// run, before the config's policy for the job.
        public var run = RunConfiguration()
        public var allowsInsecurePlugins = false
        /// Seeds the schedule's jitter.
        public var seed: UInt64 = UInt64.random(in: 0...UInt64.max)
        /// The app state the host starts in: the background, where grants run down.
        public var appState: AppState = .background
        /// The wall clock: schedules read it once, at start (see ``ScheduleClock``).
        public var wallClock: @Sendable () -> WallTime = { .now() }
        /// Where jobs' conditions are read (a test gives a folder of fake
        /// kernel files); its storage paths, when it names none: the state
        /// store's folder and the scratch folders'.
        public var machine = MachineReader()

        public init(folders: [String]) {
            self.folders = folders
            run.isolation = .job
        }
    }

    /// A job's line in `curfew status`.
    public struct JobState: Sendable {
        public let job: String
        public let pluginPath: String
        public let entry: Schedule.Entry
        /// While it runs.
        public let running: JobStatus?
        /// Due, waiting for a `--jobs` slot.
        public let isWaiting: Bool
        /// Due, held until these conditions hold (empty: none).
        public let heldFor: [Condition]
        /// The sandbox its runs get (`nil`: none).
        public let sandbox: SandboxPolicy?
        /// How its runs are isolated.
        public let isolation: Isolation
    }

    public let options: Options
    /// The host's app state: every run hears its events (`ctl foreground|background`).
    public let lifecycle: AppLifecycle
    private let queue = DispatchQueue(label: "curfew.serve", target: SerialQueue.host)
    private let onEvent: @Sendable (RunEvent, CurfewInstant) -> Void
    /// What `curfew events` reads.
    let eventStream: EventStream
    private let onNotice: @Sendable (Notice) -> Void

    private var config: ServeConfig
    private var schedule: Schedule
    private var clock: ScheduleClock
    private var catalog: [String: PluginJob] = [:]
    /// Each plugin file's identity when last scanned: a change is an upgrade.
    private var identities: [String: ScanCache.Key] = [:]
    private var rejections: [String: String] = [:]
    /// Whether the scans were said to load plugins in place (said once),
    /// and each file said to (once each).
    private var warnedSnapshots = false
    private var saidSnapshotNotes: Set<String> = []
    /// Continuous jobs not served (no `--allow-continuous`): said once each.
    private var refusedContinuous: Set<String> = []
    /// Jobs the config names that no loaded plugin declares, as last said.
    private var unmatched: Set<String> = []
    /// Files written to and not closed yet: never loaded until they are.
    private var writing: Set<String> = []
    private var active: [String: ActiveRun] = [:]
    /// Due jobs waiting for a slot, in the order they came due.
    private var waiting = WaitingJobs()
    /// Due jobs held until their conditions hold, in the order they came
    /// due, and what each waits for.
    private var held = WaitingJobs()
    private var heldFor: [String: [Condition]] = [:]
    /// The conditions each job asked for itself (`require_conditions`).
    private var askedConditions: [String: Set<Condition>] = [:]
    /// Runs expired for a lost condition, not ended yet.
    private var lostConditions: Set<String> = []
    private let machine: MachineReader
    /// Reads the machine again while a job is held or runs under
    /// conditions; netlink events (``Syscalls/netlinkSocket(_:)``) read it at once.
    private var conditionTimer: (any DispatchSourceTimer)?
    private var conditionTimerArmed = false
    private var machineEvents: [any DispatchSourceRead] = []
    /// What `curfew metrics` reports, and its last text, for a second.
    private var metrics = ServeMetrics()
    private let metricsCache = Mutex<[Exposition.Format: (text: String, at: ContinuousClock.Instant)]>([:])
    private let startedAt = WallTime.now()
    private var machineEventPending = false
    private var watcher: FolderWatcher?
    private var timer: (any DispatchSourceTimer)?
    private var rescanPending = false
    private var stopping = false
    /// `stopping`, for a scan off the queue to read (it stops at once).
    private let stopRequested = Atomic<Bool>(false)
    /// Whether a rescan runs off the queue now, and what was asked for
    /// meanwhile: one more rescan (a full one if any asked), not one each.
    private var scanning = false
    private var rescanAfter: Bool? = nil
    /// Jobs said to have asked for a next run sooner than the floor.
    private var flooredRequests: Set<String> = []
    /// Scans started since `start`, the first included.
    private var scansStarted = 0
    /// Writes the state store refused (a full disk, a broken store), each
    /// said as it happened: `status` shows the count.
    private var storeFailures = 0
    /// Jobs whose cleanup overran at the stop (terminated, or crashed).
    private var uncleanAtStop: [String] = []
    private var onStopped: (@Sendable () -> Void)?
    private var started = false

    private final class ActiveRun: Sendable {
        let runner: Runner
        let notes: RunNotes
        /// The one-off run this run carries out, forgotten when it ends.
        let request: RunRequest?
        /// Whether it is held to its job's conditions (a run started by hand is not).
        let keepsConditions: Bool
        init(runner: Runner, notes: RunNotes, request: RunRequest?, keepsConditions: Bool) {
            self.runner = runner
            self.notes = notes
            self.request = request
            self.keepsConditions = keepsConditions
        }
    }

    /// One-off runs not yet run, by job, earliest first (the store's, read
    /// at the first scan, and those asked since).
    private var requests: [String: [RunRequest]] = [:]
    private var requestsRead = false
    /// When a one-off run refused once (its plugin would not load) may be
    /// tried again, by id.
    private var requestRetries: [Int64: WallTime] = [:]
    /// The ids of requests no store keeps: -1, -2, …
    private var localRequestIDs: Int64 = 0

    /// What a run's events leave for its end: the runner's event handler
    /// holds this, not the ``ActiveRun`` (which holds the runner).
    private final class RunNotes: Sendable {
        /// The next run the job asked for during its run.
        let delay = Mutex<Duration?>(nil)
        /// The job's `finished` event, held back until its outcome is in the
        /// schedule, so a `status` asked for after it shows the outcome.
        let finished = Mutex<FinishedEvent?>(nil)
        /// Why its grant expired, if it did.
        let expiredBy = Mutex<ExpirationReason?>(nil)
    }

    private struct FinishedEvent: Sendable {
        let event: RunEvent
        let time: CurfewInstant
    }

    public init(
        options: Options, onEvent: @escaping @Sendable (RunEvent, CurfewInstant) -> Void,
        onNotice: @escaping @Sendable (Notice) -> Void
    ) throws(CurfewError) {
        try Self.check(options.config, base: options.run)
        var options = options
        // One fork server a worker environment for every run, not one started inside each run's grant.
        if options.run.forkServers == nil { options.run.forkServers = WorkerForkServers() }
        self.options = options
        self.lifecycle = AppLifecycle(state: options.appState)
        self.config = options.config
        self.schedule = Schedule(seed: options.seed)
        self.clock = ScheduleClock(wall: options.wallClock)
        var machine = options.machine
        if machine.storagePaths.isEmpty {
            machine.storagePaths = [options.run.state.map { Syscalls.folder(of: $0.path) }, Syscalls.temporaryFolder].compactMap { $0 }
        }
        self.machine = machine
        // Every event and notice goes to the followers of `curfew events` too.
        let stream = EventStream()
        let wall = options.wallClock
        self.eventStream = stream
        self.onEvent = { event, time in
            onEvent(event, time)
            // Progress comes often and is not kept: made only for a follower.
            let isProgress = if case .progress = event { true } else { false }
            if isProgress && !stream.isFollowed { return }
            // Stamped when it happened, not when it reached the server.
            let now = MonotonicClock().now().nanoseconds
            let ago = now > time.nanoseconds ? now - time.nanoseconds : 0
            let at = WallTime(milliseconds: wall().milliseconds &- Int64(clamping: ago / 1_000_000))
            stream.publish(event, at: at, keep: !isProgress)
        }
        self.onNotice = { notice in
            onNotice(notice)
            stream.publish(notice, at: wall())
        }
    }

    deinit { eventStream.close() }

    /// Refuses what serve cannot do: a job in process could never load a
    /// replaced plugin's new code.
    static func check(_ config: ServeConfig, base: RunConfiguration) throws(CurfewError) {
        if base.isolation == .none {
            throw CurfewError(
                .badConfig, "serve runs every job in a worker, so a replaced plugin loads its new code: use --isolate job or plugin")
        }
        for (name, policy) in [("defaults", config.defaults)] + config.jobs.map({ ("job '\($0.key)'", $0.value) })
        where policy.isolation == Isolation.none {
            throw CurfewError(.badConfig, "\(name): \"isolate\": serve runs every job in a worker; use \"job\" or \"plugin\"")
        }
    }

    /// Scans the folders, starts watching them and schedules every job.
    /// Returns once the first scan is done (the jobs run on).
    public func start() throws(CurfewError) {
        let outcome = queue.sync { () -> Result<Void, CurfewError> in
            precondition(!started, "Server.start() called twice")
            started = true
            do throws(CurfewError) {
                watcher = try FolderWatcher(folders: options.folders, queue: queue) { [unowned self] changes in
                    self.changed(changes)
                }
            } catch {
                return .failure(error)
            }
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.setEventHandler { [unowned self] in self.tick() }
            timer.activate()
            self.timer = timer
            let conditionTimer = DispatchSource.makeTimerSource(queue: queue)
            conditionTimer.setEventHandler { [unowned self] in self.checkConditions() }
            conditionTimer.activate()
            self.conditionTimer = conditionTimer
            if machine.isLive { listenToMachine() }
            // The first scan on this thread: the server is ready once it is done.
            scansStarted += 1
            apply(scan(full: false), full: false)
            return .success(())
        }
        try outcome.get()
    }

    /// Scans every folder again, ignoring the scan cache (SIGHUP, `curfew ctl reload`),
    /// and reads the config file again when there is one.
    public func reload() {
        queue.async { [self] in
            guard !stopping else { return }
            if let path = options.configPath {
                do throws(CurfewError) {
                    let fresh = try ServeConfig.load(path: path)
                    try Self.check(fresh, base: options.run)
                    config = fresh
                    for name in catalog.keys { schedule.update(job: name, policy: policy(for: name), now: clock.now()) }
                    onNotice(.info("Read \(path) again."))
                } catch {
                    onNotice(.warning("\(error.description); the config in use stays."))
                }
            }
            if let watcher { _ = rewatch(watcher) }
            rescan(full: true)
        }
    }

    /// Expires every running job with `reason` (shutdown for SIGTERM),
    /// starts nothing more, and calls `completion` once every run has ended
    /// and its history is written.
    public func stop(reason: ExpirationReason = .shutdown, completion: @escaping @Sendable () -> Void) {
        queue.async { [self] in
            if !stopping {
                stopping = true
                stopRequested.store(true, ordering: .relaxed)
                watcher?.cancel()
                watcher = nil
                timer?.cancel()
                conditionTimer?.cancel()
                machineEvents.forEach { $0.cancel() }
                machineEvents = []
                waiting.removeAll()
                held.removeAll()
                heldFor = [:]
                // Each running job hears will-terminate before its grant expires.
                if reason == .shutdown { lifecycle.terminate() }
                for run in active.values {
                    if reason == .shutdown { run.runner.shutdown() } else { run.runner.cancel() }
                }
            }
            onStopped = completion
            finishStopIfIdle()
        }
    }

    // MARK: Control

    /// What `curfew ctl` asks.
    public enum Command: Sendable, Equatable {
        case run(String)
        /// Run the job once with these parameters over its own, no sooner
        /// than the wall time (`nil`: now); kept in the store until it ran.
        case runOnce(String, parameters: [String: String], at: WallTime?)
        case cancel(String)
        case pause(String)
        case resume(String)
        case reload
        /// Move the host to the foreground (active): grants stop running down.
        case foreground
        /// Move the host to the background: each running grant's clock starts.
        case background
    }

    /// Carries out `command`; the answer is a sentence, or an error's.
    public func perform(_ command: Command) -> Result<String, CurfewError> {
        let result = carryOut(command)
        // What an operator asked is in the host's log, as the host's own moves are.
        if case .success(let said) = result { onNotice(.info("control socket: \(said)")) }
        return result
    }

    private func carryOut(_ command: Command) -> Result<String, CurfewError> {
        if command == .reload {
            reload()
            return .success("Rescanning the plugin folders.")
        }
        return queue.sync { () -> Result<String, CurfewError> in
            guard !stopping else { return .failure(CurfewError(.badConfig, "the host is shutting down")) }
            switch command {
            case .run(let name):
                guard catalog[name] != nil else { return .failure(unknown(name)) }
                if heldFor[name] != nil {
                    // Asked for by hand, it runs now whatever its conditions.
                    held.remove(name)
                    heldFor[name] = nil
                    schedule.takeByHand(job: name)
                    launch([name])
                    return .success("Started '\(name)', which was waiting for its conditions.")
                }
                guard schedule.startNow(job: name, now: clock.now()) else {
                    return .failure(CurfewError(.badConfig, "job '\(name)' is running already; one run of a job at a time"))
                }
                launch([name])
                return .success("Started '\(name)'.")
            case .runOnce(let name, let parameters, let at):
                return request(name, parameters: parameters, at: at)
            case .cancel(let name):
                guard catalog[name] != nil else { return .failure(unknown(name)) }
                guard let run = active[name] else {
                    return .failure(CurfewError(.badConfig, "job '\(name)' is not running"))
                }
                run.runner.cancel(job: name)
                return .success("Cancelling '\(name)': its grant expires now with the cancelled reason.")
            case .pause(let name), .resume(let name):
                guard schedule.setPaused(job: name, command == .pause(name)) else { return .failure(unknown(name)) }
                save(name)  // kept across a restart
                armTimer()
                return .success(command == .pause(name) ? "Paused '\(name)': it runs only when asked." : "Resumed '\(name)'.")
            case .foreground, .background:
                let target: AppState = command == .foreground ? .active : .background
                let events = lifecycle.move(to: target)
                let what = target == .active
                    ? "in the foreground (active): grants do not run down" : "in the background: each grant runs down from its whole budget"
                return .success(events.isEmpty ? "The host is \(what) already." : "The host is \(what) (\(events.map(\.rawValue).joined(separator: ", "))).")
            case .reload:
                preconditionFailure("handled above")
            }
        }
    }

    /// Keeps a one-off run and puts it on the job's schedule: it starts at
    /// its time, or when the run going then ends, paused or not. On the
    /// server's queue.
    private func request(_ name: String, parameters: [String: String], at: WallTime?) -> Result<String, CurfewError> {
        guard let job = catalog[name] else { return .failure(unknown(name)) }
        guard !job.isContinuous else {
            return .failure(CurfewError(.badConfig, "job '\(name)' is continuous: it runs until stopped, so a one-off run of it would never end"))
        }
        let pending = requests.values.reduce(0) { $0 + $1.count }
        guard pending < RunRequest.maximumPending else {
            return .failure(CurfewError(.badConfig, "\(pending) one-off runs wait already; no more are kept"))
        }
        let wallNow = options.wallClock()
        let earliest = at ?? wallNow
        var request = RunRequest(id: 0, job: name, parameters: parameters, earliest: earliest)
        if let store = options.run.state {
            do throws(CurfewError) {
                request.id = try store.addRunRequest(job: name, parameters: parameters, earliest: earliest)
            } catch {
                storeFailed("a one-off run of '\(name)' could not be kept: \(error.description)")
                return .failure(CurfewError(.stateUnavailable, "the one-off run could not be kept in the state store: \(error.description)"))
            }
        } else {
            // Never reused, so forgetting one never forgets another.
            localRequestIDs -= 1
            request.id = localRequestIDs
        }
        requests[name, default: []].append(request)
        requests[name]!.sort { ($0.earliest, $0.id) < ($1.earliest, $1.id) }
        // Said of the job as it was asked, before it may start below.
        let running = (active[name] != nil ? "; it runs once the run going now ends" : "")
            + (options.run.state == nil ? " (not kept across a restart: this server keeps no state)" : "")
        armRequest(name)
        tick()
        let with = parameters.isEmpty ? "" : " with \(parameters.count) parameter\(parameters.count == 1 ? "" : "s")"
        if earliest <= wallNow { return .success("Asked for a run of '\(name)'\(with) now\(running).") }
        let when = TimeZones.local().stamp(earliest.milliseconds.multipliedClamped(by: 1000))
        return .success("Asked for a run of '\(name)'\(with) at \(when)\(running).")
    }

    /// The one-off run of `name` to come next, and when it may: the one
    /// whose time (or, refused once, its time to be tried again) is
    /// soonest, but the one the run going now carries.
    private func nextRequest(_ name: String) -> (request: RunRequest, at: WallTime)? {
        let carried = active[name]?.request?.id
        var best: (request: RunRequest, at: WallTime)?
        for request in requests[name] ?? [] where request.id != carried {
            let at = max(request.earliest, requestRetries[request.id] ?? request.earliest)
            if best.map({ at < $0.at }) ?? true { best = (request, at) }
        }
        return best
    }

    /// Tells the schedule when `name`'s next one-off run is due (or that
    /// none is): the server's list is the one place that says.
    private func armRequest(_ name: String) {
        schedule.setRequest(job: name, at: nextRequest(name).map { clock.scheduleTime($0.at) })
    }

    /// The one-off run a run of `name` starting now carries out, when the
    /// schedule started the run for it: the one it was told of.
    private func dueRequest(_ name: String) -> RunRequest? {
        schedule.entries[name]?.carriesRequest == true ? nextRequest(name)?.request : nil
    }

    /// A run that carried out `request` ended: forgotten, and the job's next
    /// request goes on its schedule.
    private func forget(_ request: RunRequest?, of name: String) {
        if let request {
            requests[name]?.removeAll { $0.id == request.id }
            requestRetries[request.id] = nil
            if requests[name]?.isEmpty == true { requests[name] = nil }
            if request.id > 0, let store = options.run.state {
                do throws(CurfewError) {
                    try store.removeRunRequest(id: request.id)
                } catch {
                    storeFailed("a one-off run of '\(name)' ran but could not be forgotten; it may run again after a restart: \(error.description)")
                }
            }
        }
        armRequest(name)
    }

    private func unknown(_ name: String) -> CurfewError {
        let known = catalog.keys.sorted()
        return CurfewError(.badConfig, "no job is named '\(name)' (serving: \(known.isEmpty ? "none" : known.joined(separator: ", ")))")
    }

    /// Every job served, by name.
    public func states() -> [JobState] {
        queue.sync { currentStates() }
    }

    private func currentStates() -> [JobState] {
        catalog.keys.sorted().compactMap { name -> JobState? in
            guard let job = catalog[name], let entry = schedule.entries[name] else { return nil }
            let running = active[name]?.runner.status().first { $0.job == name }
            // Shown on the wall clock.
            var shown = entry
            // What `status` calls the next run: the sooner of the schedule's and a one-off run's.
            shown.nextRun = (entry.requested.map { requested in entry.nextRun.map { min($0, requested) } ?? requested } ?? entry.nextRun)
                .map(clock.wallTime)
            shown.requested = entry.requested.map(clock.wallTime)
            shown.slot = entry.slot.map(clock.wallTime)
            shown.lastEnded = entry.lastEnded.map(clock.wallTime)
            shown.runningSince = entry.runningSince.map(clock.wallTime)
            return JobState(
                job: name, pluginPath: job.pluginPath, entry: shown, running: running, isWaiting: waiting.contains(name), heldFor: heldFor[name] ?? [],
                sandbox: sandbox(for: policy(for: name)), isolation: policy(for: name).isolation ?? options.run.isolation)
        }
    }

    /// The host's metrics in Prometheus' text exposition format (or
    /// OpenMetrics), its runs
    /// by job (counts, outcomes, expirations, durations), each job's state,
    /// next run and failures in a row, and the process's own use. Taken
    /// from the server's queue as a snapshot and written off it; a text
    /// less than a second old is given again, so scrapes cost the host
    /// little however many come.
    public func metricsText(_ format: Exposition.Format = .prometheus) -> String {
        let asked = ContinuousClock.now
        if let cached = metricsCache.withLock({ $0[format] }), asked - cached.at < .seconds(1) { return cached.text }
        let (metrics, states, storeFailures) = queue.sync { (self.metrics, currentStates(), self.storeFailures) }
        var out = Exposition(format)
        out.family("curfew_build_info", .info, "This curfew's version; always 1.")
        out.sample("curfew_build_info", [("version", HostInfo.version)], 1.0)
        metrics.write(into: &out, jobs: states.map(\.job))
        var counts: [String: UInt64] = ["running": 0, "waiting_slot": 0, "waiting_conditions": 0, "paused": 0, "disabled": 0, "idle": 0]
        for state in states {
            let word =
                if state.running != nil { "running" } else if state.isWaiting { "waiting_slot" } else if !state.heldFor.isEmpty {
                    "waiting_conditions"
                } else if state.entry.policy.enabled == false { "disabled" } else if state.entry.isPaused { "paused" } else { "idle" }
            counts[word, default: 0] += 1
        }
        out.family("curfew_jobs", .gauge, "Jobs served, by state (waiting: for a --jobs slot, or for their conditions).")
        for (state, count) in counts.sorted(by: { $0.key < $1.key }) { out.sample("curfew_jobs", [("state", state)], count) }
        let now = options.wallClock()
        let scheduled = states.filter { $0.entry.policy.enabled != false && !$0.entry.isPaused }
        out.family("curfew_job_next_run_seconds", .gauge, "Seconds until each scheduled job's next run (0 when due); absent when it has none.")
        for state in scheduled {
            guard let next = state.entry.nextRun else { continue }
            out.sample("curfew_job_next_run_seconds", [("curfew_job", state.job)], Double(max(0, next.milliseconds &- now.milliseconds)) / 1000)
        }
        out.family("curfew_job_period_seconds", .gauge, "Each scheduled job's \"every\" (not paused, not disabled).")
        for state in scheduled {
            guard let every = state.entry.policy.every else { continue }
            out.sample("curfew_job_period_seconds", [("curfew_job", state.job)], every.seconds)
        }
        out.family("curfew_job_last_run_end_timestamp_seconds", .gauge, "When each job's last run ended, in seconds since 1970.")
        for state in states {
            guard let ended = state.entry.lastEnded else { continue }
            out.sample("curfew_job_last_run_end_timestamp_seconds", [("curfew_job", state.job)], Double(ended.milliseconds) / 1000)
        }
        out.family("curfew_state_store_failures_total", .counter, "Writes the state store refused.")
        out.sample("curfew_state_store_failures_total", [], UInt64(max(0, storeFailures)))
        out.family("curfew_serve_start_time_seconds", .gauge, "When this serving host started, in seconds since 1970.")
        out.sample("curfew_serve_start_time_seconds", [], Double(startedAt.milliseconds) / 1000)
        if let resident = ProcessStatistics.residentBytes() {
            out.family("process_resident_memory_bytes", .gauge, "The host's resident memory.")
            out.sample("process_resident_memory_bytes", [], resident)
        }
        if let open = ProcessStatistics.openDescriptors() {
            out.family("process_open_fds", .gauge, "The host's open file descriptors.")
            out.sample("process_open_fds", [], UInt64(open))
        }
        if let threads = ProcessStatistics.threadCount() {
            out.family("curfew_threads", .gauge, "The host's threads.")
            out.sample("curfew_threads", [], UInt64(max(0, threads)))
        }
        let text = out.text
        metricsCache.withLock { $0[format] = (text, asked) }
        return text
    }

    /// The status page (`/` on the metrics address): a snapshot from the
    /// server's queue, written off it.
    public func statusPage() -> String {
        let (states, runs) = queue.sync { (currentStates(), metrics.recentRuns) }
        let now = options.wallClock()
        // A run going now shows on the timeline too, to the present.
        let running = states.compactMap { state -> StatusPage.Run? in
            guard state.running != nil, let since = state.entry.runningSince else { return nil }
            return StatusPage.Run(job: state.job, started: since, ended: now, outcome: "running")
        }
        return StatusPage.html(states: states, runs: runs + running, now: now)
    }

    /// Calls `answer` from the server's queue with every job's state, and
    /// whether the server is stopping: a check of the server's health (a
    /// queue that is stuck never answers), for a service manager's watchdog.
    public func probe(_ answer: @escaping @Sendable (_ states: [JobState], _ stopping: Bool) -> Void) {
        queue.async { [self] in answer(currentStates(), stopping) }
    }

    /// Holds the server's queue until `release` is signalled: a server that
    /// makes no progress, for a test of what watches it.
    func holdQueue(until release: DispatchSemaphore) {
        queue.async { release.wait() }
    }

    // MARK: Scanning

    /// Takes changes as the watcher reports them (a test feeds its own).
    func receive(_ changes: [FolderWatcher.Change]) {
        queue.async { [self] in changed(changes) }
    }

    private func changed(_ changes: [FolderWatcher.Change]) {
        var relevant = false
        for change in changes {
            switch change {
            case .writing(let path):
                writing.insert(path)
            case .created(let path):
                // A link is whole as it appears; a new file is scanned once written and closed.
                guard let status = try? Syscalls.linkStatus(path), status.isSymlink || status.links > 1 else { continue }
                writing.remove(path)
                relevant = true
            case .written(let path), .removed(let path):
                writing.remove(path)
                relevant = true
            case .overflow:
                onNotice(.warning("inotify dropped events (its queue overflowed); rescanning every folder"))
                writing.removeAll()
                relevant = true
            case .folderGone(let folder):
                onNotice(.warning("the plugin folder \(folder) was deleted or moved; its jobs run no more until it is back"))
                relevant = true
                lookForMissingFolders()
            }
        }
        guard relevant, !rescanPending else { return }
        // A burst of changes (a copy of many files) becomes one rescan.
        rescanPending = true
        queue.asyncAfter(deadline: .now() + .milliseconds(50)) { [self] in
            rescanPending = false
            rescan(full: false)
        }
    }

    /// Whether a look for missing folders is due.
    private var lookingForFolders = false

    /// Once a second while a watched folder is missing: watches it again
    /// (and rescans) once it is back, made anew or moved back.
    private func lookForMissingFolders() {
        guard !lookingForFolders, !stopping else { return }
        lookingForFolders = true
        queue.asyncAfter(deadline: .now() + .seconds(1)) { [self] in
            lookingForFolders = false
            guard let watcher, !stopping else { return }
            if rewatch(watcher) { rescan(full: false) }
            if !watcher.missing.isEmpty { lookForMissingFolders() }
        }
    }

    /// Watches again the missing folders that are back; whether one was.
    private func rewatch(_ watcher: FolderWatcher) -> Bool {
        let back = watcher.rewatch()
        for folder in back { onNotice(.info("the plugin folder \(folder) is back; watching it again")) }
        return !back.isEmpty
    }

    /// Rescans on a thread of its own and applies what it found on the
    /// queue, which goes on scheduling, answering and feeding the watchdog
    /// meanwhile (15 reloads over 5,000 plugins held it 29.6 s). Asked again
    /// while one runs, it runs once more after it, however often it was asked.
    private func rescan(full: Bool) {
        guard !stopping else { return }
        guard !scanning else {
            rescanAfter = (rescanAfter ?? false) || full
            return
        }
        scanning = true
        scansStarted += 1
        let scanned = OSThread.detach { [self] in
            let report = scan(full: full)
            queue.async { [self] in
                scanning = false
                apply(report, full: full)
                if let again = rescanAfter {
                    rescanAfter = nil
                    rescan(full: again)
                }
            }
        }
        if !scanned {
            scanning = false
            apply(scan(full: full), full: full)
        }
    }

    /// How many scans started, and whether one runs now.
    func scans() -> (started: Int, running: Bool) {
        queue.sync { (scansStarted, scanning) }
    }

    /// Scans every folder (`full`: whatever the cache says). Reads only what
    /// `init` set: it runs off the queue.
    private func scan(full: Bool) -> SafeScanner.Report {
        var scanner = SafeScanner(workerExecutable: options.run.workerExecutable)
        scanner.rescan = full
        scanner.takesSnapshots = true
        // Confined unless `serve` was told --no-sandbox (a job's config is per job, a scan per file).
        scanner.sandboxed = options.run.sandbox != nil
        let loader = PluginLoader(allowsInsecurePlugins: options.allowsInsecurePlugins)
        return scanner.scan(options.folders, loader: loader) { [self] in stopRequested.load(ordering: .relaxed) }
    }

    /// Takes what a scan found: the jobs served from now on.
    private func apply(_ report: SafeScanner.Report, full: Bool) {
        guard !stopping else { return }
        metrics.scanned(fromCache: report.fromCache, loaded: report.scannedInWorker)
        if let problem = report.snapshotProblem, !warnedSnapshots {
            warnedSnapshots = true
            onNotice(.warning("plugins load from their own files, not snapshots (\(problem)): one overwritten in place crashes its job"))
        }
        for note in report.snapshotNotes where saidSnapshotNotes.insert(note).inserted { onNotice(.warning(note)) }
        let scan = report.scan
        var fresh: [String: PluginJob] = [:]
        var identities: [String: ScanCache.Key] = [:]
        for plugin in scan.plugins where !writing.contains(plugin.path) {
            identities[plugin.path] = ScanCache.key(for: plugin.path)
            for job in plugin.jobs { fresh[job.name] = job }
        }
        // A file still being written keeps the jobs of the version before it.
        for (name, job) in catalog where writing.contains(job.pluginPath) && fresh[name] == nil {
            fresh[name] = job
            identities[job.pluginPath] = self.identities[job.pluginPath]
        }
        var rejections: [String: String] = [:]
        for rejected in scan.rejected where !writing.contains(rejected.path) {
            rejections[rejected.path] = rejected.error.description
            if self.rejections[rejected.path] != rejected.error.description {
                onNotice(.warning("\(rejected.path) rejected: \(rejected.error.description)"))
            }
        }
        self.rejections = rejections
        // The one-off runs the store kept: read at the first scan, and at
        // each one after until a read succeeds; merged with those asked
        // for meanwhile.
        if !requestsRead, let store = options.run.state {
            do throws(CurfewError) {
                for request in try store.runRequests() where !(requests[request.job]?.contains { $0.id == request.id } ?? false) {
                    requests[request.job, default: []].append(request)
                }
                for name in requests.keys { requests[name]!.sort { ($0.earliest, $0.id) < ($1.earliest, $1.id) } }
                requestsRead = true
            } catch {
                storeFailed("the one-off runs asked for could not be read; they are read again at the next scan: \(error.description)")
            }
        }
        // What the store kept: read only when a job is new to this server.
        let known = fresh.keys.allSatisfy { catalog[$0] != nil }
        var persisted: [String: ScheduleRecord] = [:]
        var lastRuns: [String: (outcome: Outcome, ended: WallTime)] = [:]
        if !known, let store = options.run.state {
            do throws(CurfewError) {
                persisted = try store.schedules()
                lastRuns = try store.lastRuns()
            } catch {
                storeFailed("the kept schedules could not be read, so new jobs start on their defaults: \(error.description)")
            }
        }
        let now = clock.now()
        var added: [String] = []
        for name in fresh.keys.sorted() {
            let job = fresh[name]!
            if let refusal = grantPolicy(for: name).refusal(job: name, continuous: job.isContinuous, modes: job.backgroundModes) {
                // Refused at every start, it would only fill the log: said once, not scheduled.
                if !refusedContinuous.contains(name) { onNotice(.warning(refusal.description)) }
                refusedContinuous.insert(name)
                fresh[name] = nil
                continue
            }
            refusedContinuous.remove(name)
            if let old = catalog[name] {
                if old.pluginPath != job.pluginPath || self.identities[old.pluginPath] != identities[job.pluginPath] {
                    onNotice(.info("'\(name)' was replaced in \(job.pluginPath); its next run loads the new code"))
                }
            } else {
                onNotice(.info("serving '\(name)' from \(job.pluginPath)"))
                added.append(name)
            }
            schedule.add(
                job: name, policy: policy(for: name), isContinuous: job.isContinuous, persisted: remembered(name, persisted[name]),
                last: lastRuns[name].map { ($0.outcome, clock.scheduleTime($0.ended)) }, now: now)
            armRequest(name)
        }
        for name in catalog.keys where fresh[name] == nil {
            onNotice(.info("'\(name)' is gone from the folders; it runs no more"))
            schedule.remove(job: name)
            waiting.remove(name)
            held.remove(name)
            heldFor[name] = nil
            askedConditions[name] = nil
            active[name]?.runner.cancel(job: name)
        }
        catalog = fresh
        self.identities = identities
        warnUnmatched(again: full)
        for name in added { save(name) }
        tick()
    }

    /// What the store kept of `name`'s schedule, on the schedules' timeline;
    /// a next run further ahead than any schedule or request can set is
    /// corrupt, said and not obeyed (the job runs as if new; its pause and
    /// counts are kept).
    private func remembered(_ name: String, _ record: ScheduleRecord?) -> ScheduleRecord? {
        guard var record, let next = record.nextRun else { return record }
        let policy = policy(for: name)
        let reach = [NextRunRequest.maximum, policy.every, policy.earliestBegin, policy.retry?.maximumDelay].compactMap { $0 }.max()!
        let wallNow = options.wallClock()
        // A calendar may name a day years ahead.
        let elapse = policy.calendar.flatMap { CalendarEvent.next(of: $0, after: wallNow) } ?? wallNow
        let farthest = max(wallNow.later(by: reach), elapse).later(by: policy.jitter ?? .zero).later(by: .seconds(24 * 3600))
        guard next <= farthest else {
            let year = 1970 + next.milliseconds / 31_556_952_000  // Gregorian years
            onNotice(.warning("the store's next run of '\(name)' (in the year \(year)) is further ahead than any schedule sets; ignored as corrupt"))
            record.nextRun = clock.now()
            return record
        }
        record.nextRun = clock.scheduleTime(next)
        return record
    }

    /// Warns of each job the config names that no loaded plugin declares (a
    /// misspelling would otherwise run the real job on the defaults): when it
    /// first goes unmatched, and `again` on every reload.
    private func warnUnmatched(again: Bool) {
        let missing = Set(config.jobs.keys).subtracting(catalog.keys).subtracting(refusedContinuous)
        let fresh = again ? missing : missing.subtracting(unmatched)
        unmatched = missing
        guard !fresh.isEmpty else { return }
        let known = catalog.keys.sorted()
        let shown = Self.knownLimit
        var list = known.isEmpty ? "none" : known.prefix(shown).map { "'\($0)'" }.joined(separator: ", ")
        if known.count > shown { list += " and \(known.count - shown) more" }
        let source = options.configPath ?? "the config"
        for name in fresh.sorted() {
            onNotice(.warning("\(source): job '\(name)' matches no loaded job; known: \(list)"))
        }
    }

    /// How many loaded jobs a warning of an unmatched one lists.
    static let knownLimit = 10

    private func policy(for name: String) -> JobPolicy {
        config.policy(for: name)
    }

    /// The sandbox a job's runs get: its policy's, over `serve`'s own.
    private func sandbox(for policy: JobPolicy) -> SandboxPolicy? {
        policy.sandbox.map { $0.over(options.run.sandbox) } ?? options.run.sandbox
    }

    /// The grant a job's runs get: `--budget`, `--grace` and the modes
    /// allowed, under the job's policy.
    private func grantPolicy(for name: String, warn: Bool = false) -> GrantPolicy {
        let policy = policy(for: name)
        let base = options.run.policy
        var grant: GrantPolicy
        do throws(CurfewError) {
            grant = try GrantPolicy(budget: policy.budget ?? base.budget, grace: policy.grace ?? base.grace)
        } catch {
            // A job's budget and grace in the config were checked together as it was
            // read; this is one merged with the other's default (the command line's or the config's).
            if warn { onNotice(.warning("'\(name)': \(error.description) Using the default lead.")) }
            grant = (try? GrantPolicy(budget: policy.budget ?? base.budget)) ?? GrantPolicy()
        }
        grant.allowsContinuous = base.allowsContinuous
        grant.allowedModes = base.allowedModes.union(policy.allowedModes)
        // Zero is a job's own "stall": false, over the defaults' or the command line's.
        grant.stall = (policy.stall ?? base.stall).flatMap { $0 > .zero ? $0 : nil }
        return grant
    }

    // MARK: Running

    /// Starts what is due and arms the timer for what comes next.
    private func tick() {
        guard !stopping else { return }
        if let jump = clock.jump() {
            // In whole seconds: the two clocks are read a moment apart.
            let seconds = Int64((jump > .zero ? jump : .zero - jump).seconds.rounded())
            onNotice(.info("The wall clock jumped \(jump > .zero ? "forward" : "back") by \(seconds) s; schedules keep their periods, calendars follow it."))
        }
        // Calendars follow the wall clock: stepped, or slewed a second away
        // since they were last found (NTP slews up to half a second an hour).
        let lead = clock.currentLead()
        let drift = lead - schedule.wallLead
        if drift >= ScheduleClock.smallestJump || drift <= .zero - ScheduleClock.smallestJump {
            for name in schedule.wallClockMoved(lead: lead, now: clock.now()) { save(name) }
        }
        for due in schedule.takeDue(now: clock.now()) {
            switch due {
            case .start(let name):
                waiting.append(name)
            case .skip(let name):
                onNotice(.info("'\(name)' came due while its last run was still going; this run is skipped"))
                save(name)
            case .merged:
                break  // still waiting for a slot: its one run is this one too
            case .queued(let name):
                onNotice(.info("'\(name)' came due while its last run was still going; it runs again once that run ends"))
            case .replace(let name):
                onNotice(.info("'\(name)' came due while its last run was still going; that run is cancelled and a new one follows"))
                active[name]?.runner.cancel(job: name)
            case .late(let name):
                onNotice(.info("'\(name)' came due longer ago than its starting deadline; this run is skipped"))
                save(name)
            }
        }
        launch([])
        armTimer()
    }

    /// Starts `names` now, then waiting jobs while `--jobs` allows; one
    /// whose conditions do not hold is held (a run asked for by hand is not).
    private func launch(_ names: [String]) {
        waiting.putFirst(names)
        var reading = MachineReading()
        var read: Set<Condition> = []
        while active.count < options.run.maxConcurrentJobs, let name = waiting.popFirst() {
            guard let job = catalog[name] else { continue }
            // `ctl run`: now, or once a slot is free, whatever the deadline and conditions.
            let byHand = names.contains(name) || schedule.entries[name]?.byHand == true
            if !byHand, pastDeadline(name) {
                onNotice(.info("'\(name)' waited for a --jobs slot longer than its starting deadline; this run is skipped"))
                save(name)
                continue
            }
            let needs = byHand ? JobConditions() : conditions(for: name)
            if !needs.isEmpty {
                // Read once a launch, and only what its jobs need.
                if !needs.required.isSubset(of: read) {
                    read.formUnion(needs.required)
                    reading = machine.read(for: read)
                }
                let unmet = needs.unmet(on: reading)
                if !unmet.isEmpty {
                    if heldFor.updateValue(unmet, forKey: name) == nil {
                        held.append(name)
                        var line = JSONLine("event", "waiting")
                        line.add("time", options.wallClock().milliseconds)
                        line.add("job", name)
                        line.add("for", unmet.map(\.rawValue))
                        eventStream.publish(line.text, job: name)
                    }
                    continue
                }
            }
            // A job that asks for conditions mid-run holds this run to them too.
            start(job, keepsConditions: !byHand)
        }
        watchConditions()
    }

    /// Whether `name`'s due run, not started yet, came due longer ago than
    /// its starting deadline: then it is dropped from the schedule.
    private func pastDeadline(_ name: String) -> Bool {
        guard let deadline = policy(for: name).startingDeadline, let due = schedule.entries[name]?.runningSince else { return false }
        return clock.now().milliseconds &- due.milliseconds > deadline.milliseconds && schedule.abandon(job: name)
    }

    // MARK: Conditions

    /// What `name`'s runs wait for: its policy's, and what it asked for.
    private func conditions(for name: String) -> JobConditions {
        policy(for: name).conditions.adding(askedConditions[name] ?? [])
    }

    /// The conditions the held jobs and the runs kept to them need read.
    private func watchedConditions() -> Set<Condition> {
        var needed: Set<Condition> = []
        for name in heldFor.keys { needed.formUnion(conditions(for: name).required) }
        for (name, run) in active where run.keepsConditions && !lostConditions.contains(name) {
            needed.formUnion(conditions(for: name).required)
        }
        return needed
    }

    /// Reads the machine: held jobs whose conditions hold go back in line
    /// (first come, first served), one held past its starting deadline is
    /// dropped, and each run whose condition stopped holding is expired
    /// (`conditions`).
    private func checkConditions() {
        guard !stopping else { return }
        let reading = machine.read(for: watchedConditions())
        var still = WaitingJobs()
        while let name = held.popFirst() {
            guard catalog[name] != nil else { continue }
            if pastDeadline(name) {
                heldFor[name] = nil
                onNotice(.info("'\(name)' waited for its conditions longer than its starting deadline; this run is skipped"))
                save(name)
                continue
            }
            let unmet = conditions(for: name).unmet(on: reading)
            if unmet.isEmpty {
                heldFor[name] = nil
                waiting.append(name)
            } else {
                heldFor[name] = unmet
                still.append(name)
            }
        }
        held = still
        for (name, run) in active where run.keepsConditions && !lostConditions.contains(name) {
            let unmet = conditions(for: name).unmet(on: reading)
            guard !unmet.isEmpty else { continue }
            lostConditions.insert(name)
            onNotice(.info("'\(name)' runs only with \(Self.list(unmet)), which stopped holding; its run expires (conditions)"))
            run.runner.expire(job: name, reason: .conditions)
        }
        launch([])
        armTimer()
    }

    /// Reads the machine every half second while a job is held or runs
    /// under conditions, and not at all otherwise.
    private func watchConditions() {
        guard let conditionTimer, !stopping else { return }
        let needed = !held.isEmpty
            || active.contains { $0.value.keepsConditions && !lostConditions.contains($0.key) && !conditions(for: $0.key).isEmpty }
        guard needed != conditionTimerArmed else { return }
        conditionTimerArmed = needed
        if needed {
            conditionTimer.schedule(deadline: .now() + Self.conditionPoll, repeating: Self.conditionPoll, leeway: .milliseconds(50))
        } else {
            conditionTimer.schedule(deadline: .distantFuture)
        }
    }

    /// How often the machine is read while it matters: a held run starts
    /// within this (and a scheduling delay) of its conditions holding.
    static let conditionPoll = DispatchTimeInterval.milliseconds(500)

    /// Listens to the kernel's route and device events, so a lost network
    /// or a charger plugged in is read at once; where netlink is closed
    /// (a seccomp filter, an old kernel) the half-second poll is all.
    private func listenToMachine() {
        for kind in [Syscalls.NetlinkKind.routes, .deviceEvents] {
            guard let fd = try? Syscalls.netlinkSocket(kind) else { continue }
            let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
            source.setEventHandler { [unowned self] in
                // A socket at its end or failed is heard no more (the poll goes on).
                if !Syscalls.drain(fd) { machineEvents.first { $0.handle == fd }?.cancel() }
                guard conditionTimerArmed, !machineEventPending else { return }
                // A burst of events (a link coming up brings several) is one read.
                machineEventPending = true
                queue.asyncAfter(deadline: .now() + .milliseconds(50)) { [self] in
                    machineEventPending = false
                    if conditionTimerArmed { checkConditions() }
                }
            }
            source.setCancelHandler { Syscalls.close(fd) }
            source.activate()
            machineEvents.append(source)
        }
    }

    /// Conditions as `status` names them: "external power, network".
    static func list(_ conditions: [Condition]) -> String {
        conditions.map(\.description).joined(separator: ", ")
    }

    private func start(_ job: PluginJob, keepsConditions: Bool) {
        // A continuous job's restarts count failures too: they are not retries.
        metrics.runStarted(job.name, isRetry: !job.isContinuous && (schedule.entries[job.name]?.failures ?? 0) > 0)
        schedule.started(job: job.name, now: clock.now())
        let policy = policy(for: job.name)
        var configuration = options.run
        configuration.policy = grantPolicy(for: job.name, warn: true)
        configuration.parameters.merge(policy.parameters) { _, own in own }
        let request = dueRequest(job.name)
        if let request { configuration.parameters.merge(request.parameters) { _, asked in asked } }
        configuration.isolation = policy.isolation ?? configuration.isolation
        configuration.limits = ResourceLimits(
            memoryBytes: policy.limits.memoryBytes ?? configuration.limits.memoryBytes,
            cpuSeconds: policy.limits.cpuSeconds ?? configuration.limits.cpuSeconds,
            openFiles: policy.limits.openFiles ?? configuration.limits.openFiles)
        configuration.sandbox = sandbox(for: policy)
        configuration.maxConcurrentJobs = 1
        configuration.lifecycle = lifecycle
        // This host takes runs a job asks for, of the jobs its policy names.
        configuration.submits = policy.submits
        configuration.watchesConditions = true
        if let store = configuration.state {
            configuration.checkpoints = MeasuredCheckpoints(store: store) { [self] job, bytes, seconds, kept in
                queue.async { self.metrics.checkpointSaved(job, bytes: bytes, seconds: seconds, kept: kept) }
            }
        }
        let notes = RunNotes()
        let forward = onEvent
        let runner = Runner(jobs: [job], configuration: configuration) { event, time in
            switch event {
            case .nextRunRequested(_, let delay):
                notes.delay.withLock { $0 = delay }
            case .runSubmitted(let asker, let run):
                self.queue.async { [self] in
                    guard !stopping else {
                        onNotice(.info("'\(asker)' submitted a run of '\(run.job)' as the host stopped; not kept"))
                        return
                    }
                    let at = options.wallClock().later(by: run.after)
                    switch self.request(run.job, parameters: run.parameters, at: at) {
                    case .success(let said): onNotice(.info("'\(asker)' submitted a run: \(said)"))
                    case .failure(let error): onNotice(.warning("'\(asker)' submitted a run that was not kept: \(error.description)"))
                    }
                }
            case .expiring(_, let reason):
                notes.expiredBy.withLock { $0 = reason }
            case .conditionsRequired(let name, let conditions):
                self.queue.async { [self] in
                    guard catalog[name] != nil, !stopping else { return }
                    askedConditions[name] = conditions.isEmpty ? nil : conditions
                    checkConditions()
                    watchConditions()
                }
            case .finished:
                notes.finished.withLock { $0 = FinishedEvent(event: event, time: time) }
                return  // said once the outcome is booked (``ended``)
            default:
                break
            }
            forward(event, time)
        }
        let run = ActiveRun(runner: runner, notes: notes, request: request, keepsConditions: keepsConditions)
        active[job.name] = run
        runner.start { [self] results in
            queue.async { self.ended(job.name, run, results.first) }
        }
    }

    private func ended(_ name: String, _ run: ActiveRun, _ result: JobResult?) {
        let lost = active[name] === run && lostConditions.contains(name)
        if active[name] === run {
            active[name] = nil
            lostConditions.remove(name)
        }
        for problem in run.runner.stateProblems { storeFailed(problem) }
        if stopping, let result, result.outcome == .terminated || result.outcome == .crashed { uncleanAtStop.append(name) }
        if let result {
            metrics.runEnded(result, expiredBy: run.notes.expiredBy.withLock { $0 }, workers: run.runner.workerStarts, at: clock.wallTime(clock.now()))
            let requested = run.notes.delay.withLock { $0 }
            if let requested, requested < Schedule.minimumGap, flooredRequests.insert(name).inserted {
                onNotice(.info("'\(name)' asked for its next run in \(requested); runs are at least 100 ms apart (said once)"))
            }
            schedule.finished(
                job: name, outcome: result.outcome, requested: requested, stopped: stopping, retry: !result.isFailedForGood,
                lostConditions: lost, now: clock.now())
            // A one-off run is done once it ran, whatever its outcome. One
            // refused waits: for the next host when this one stops, else a
            // minute (its plugin would not load, its checkpoint not read),
            // not at once, again and again.
            if result.outcome == .refused, let request = run.request {
                if !stopping {
                    onNotice(.warning("a one-off run of '\(name)' was refused (\(result.reason)); it is tried again in a minute"))
                    requestRetries[request.id] = clock.wallTime(clock.now()).later(by: .seconds(60))
                }
                forget(nil, of: name)
            } else {
                forget(run.request, of: name)
            }
            save(name)
        }
        if let finished = run.notes.finished.withLock({ $0 }) { onEvent(finished.event, finished.time) }
        if stopping {
            finishStopIfIdle()
        } else {
            tick()
        }
    }

    private func finishStopIfIdle() {
        guard stopping, active.isEmpty, let done = onStopped else { return }
        onStopped = nil
        // Followers have heard the last run end: their streams end with the host.
        eventStream.close()
        options.run.forkServers?.close()
        done()
    }

    private func armTimer() {
        guard let timer, !stopping else { return }
        guard let next = schedule.nextWake else {
            timer.schedule(deadline: .distantFuture)
            return
        }
        // Re-armed at least once a minute: Dispatch's clock stops while the
        // system sleeps, the schedules' does not.
        let wait = min(max(next.milliseconds &- clock.now().milliseconds, 0), 60_000)
        timer.schedule(deadline: .now() + .milliseconds(Int(wait)), leeway: .milliseconds(1))
    }

    private func save(_ name: String) {
        guard let store = options.run.state, let entry = schedule.entries[name] else { return }
        do throws(CurfewError) {
            try store.saveSchedule(
                ScheduleRecord(
                    job: name, nextRun: entry.nextRun.map(clock.wallTime), failures: entry.failures, skipped: entry.skipped,
                    isPaused: entry.isPaused))
        } catch {
            storeFailed("the schedule of '\(name)' was not saved: \(error.description)")
        }
    }

    private func storeFailed(_ problem: String) {
        storeFailures += 1
        onNotice(.error(problem))
    }

    /// The jobs whose cleanup did not end cleanly at the stop (terminated
    /// past their deadline, or their worker crashed), by name: for the exit
    /// status, once ``stop(reason:completion:)`` completed.
    public func jobsUncleanAtStop() -> [String] {
        queue.sync { uncleanAtStop.sorted() }
    }

    /// How many writes the state store refused since `start`.
    public func storeFailureCount() -> Int {
        queue.sync { storeFailures }
    }
}

/// Jobs waiting for a slot, first come first served, each once: every step
/// O(1) (amortized), so ten thousand due at once cost no more a step than
/// ten (a list searched and shifted for each was seconds a status).
struct WaitingJobs {
    /// Names in order, each with the ticket it was queued with: one whose
    /// ticket is no longer its own was removed (or queued again later).
    private var order: [(name: String, ticket: Int)] = []
    private var head = 0
    private var tickets: [String: Int] = [:]
    private var issued = 0

    var isEmpty: Bool { tickets.isEmpty }
    func contains(_ name: String) -> Bool { tickets[name] != nil }

    /// Queues `name` last, unless it waits already.
    mutating func append(_ name: String) {
        guard tickets[name] == nil else { return }
        issued += 1
        tickets[name] = issued
        order.append((name, issued))
    }

    /// Queues `names` first, in their order (a job asked for by name),
    /// moving any that wait already.
    mutating func putFirst(_ names: [String]) {
        for name in names.reversed() {
            issued += 1
            tickets[name] = issued
            if head > 0 {
                head -= 1
                order[head] = (name, issued)
            } else {
                order.insert((name, issued), at: 0)
            }
        }
    }

    mutating func popFirst() -> String? {
        while head < order.count {
            let next = order[head]
            head += 1
            guard tickets[next.name] == next.ticket else { continue }
            tickets[next.name] = nil
            if head >= 1024 && head * 2 >= order.count {
                order.removeFirst(head)
                head = 0
            }
            return next.name
        }
        return nil
    }

    mutating func remove(_ name: String) {
        tickets[name] = nil
    }

    mutating func removeAll() {
        self = WaitingJobs()
    }
}
