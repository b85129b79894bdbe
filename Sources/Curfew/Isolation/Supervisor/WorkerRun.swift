import CurfewFormats
import Dispatch
import Synchronization
import _CurfewShims

/// Runs one job in a worker process: the host side.
///
/// The host owns the job's ``Grant``; the worker builds the same one from
/// the policy and the start instant it is sent, on the monotonic clock both
/// read. As the host's grant expires, it tells the worker to expire the job
/// (the cleanup hook runs there); at the hard deadline the worker's own
/// runner gives the job up and says what was running, and the host kills
/// the worker's process group (a shared one only if the job was not given up).
///
/// - Important: It never runs plugin code in the host, and never leaves a
///   job's worker running past its hard deadline by more than
///   ``deadlineGrace``, the time the worker gets to say what was running.
final class WorkerRun: JobExecution, @unchecked Sendable {
    // Safe because the mutable state is the `control` Mutex (the worker
    // process too: the grant's timers may read it before it is set).
    struct Control {
        var started = false
        var finished = false
        /// The runs of other jobs its worker said the job submitted.
        var submitted = 0
        /// The conditions its worker last said the job asked for, and how often they changed.
        var conditions: Set<Condition>?
        var conditionChanges = 0
        var reported: (outcome: Outcome, reason: String)?
        /// When the worker says the job ended.
        var reportedAt: CurfewInstant?
        var expiredBy: ExpirationReason?
        var chunks: UInt64 = 0
        var progress: JobProgress?
        var startedAt = CurfewInstant(nanoseconds: 0)
        /// The grant's deadline the kill was for.
        var killedFor: CurfewInstant?
        var killedAt: CurfewInstant?
        var stderrTail: [String] = []
        /// Where the worker's crash handler said it was dying: the hook, and the chunks run.
        var crashedIn: (hook: String, chunks: UInt64)?
        var timers: [any CurfewTimer] = []
        /// Set once the run message is sent; messages before wait in `unsent`.
        var channelReady = false
        var unsent: [String] = []
        /// What the worker said the job's chunks took.
        var estimate: ChunkEstimate?
        /// What the worker said its chunks took (`measures`), checked as the run ends.
        var measured: (counts: [UInt64], nanoseconds: UInt64, late: UInt64?)?
        var process: WorkerProcess?
    }

    let job: PluginJob
    private let configuration: RunConfiguration
    private let workers: WorkerSource
    /// The clock the worker reads too: its grant is this one, seen from there.
    private let clock = MonotonicClock()
    private let grant: Grant
    /// The host's app state as the run was made; later moves follow the run message.
    private let appState: AppState
    /// Where this run's timers' and grant's work goes, in the order they fire:
    /// it writes to the worker's socket, which a stopped worker can leave
    /// full, and the timer thread must not wait behind that write.
    private let timerWork = DispatchQueue(label: "curfew.worker-run", target: SerialQueue.host)
    private let events: EventChannel
    private let onFinish: @Sendable (JobResult) -> Void
    private let onSlotFree: @Sendable () -> Void
    private let control: Mutex<Control>
    private var process: WorkerProcess? { control.withLock { $0.process } }

    /// - Parameter manager: Issues the grant: its task ids are the runner's,
    ///   its clock is not (see ``clock``).
    /// - Throws: The refusal of a continuous job the policy does not allow.
    init(
        job: PluginJob, configuration: RunConfiguration, manager: GrantManager, workers: WorkerSource, events: EventChannel,
        appState: AppState = .background, onSlotFree: @escaping @Sendable () -> Void = {},
        onFinish: @escaping @Sendable (JobResult) -> Void
    ) throws(CurfewError) {
        let monotonic = manager.clock is MonotonicClock ? manager : GrantManager(clock: MonotonicClock(), policy: manager.policy)
        grant = try monotonic.makeGrant(
            name: job.name, continuous: job.isContinuous, modes: job.backgroundModes, handlerQueue: timerWork)
        // In the foreground the grant's clock waits for the background.
        if !appState.runsGrantClocks { grant.hold() }
        self.appState = appState
        self.job = job
        self.configuration = configuration
        self.workers = workers
        self.events = events
        self.onFinish = onFinish
        self.onSlotFree = onSlotFree
        self.control = Mutex(Control())
    }

    /// With one job per worker, the job ends when its worker does, so that
    /// every line it printed is in; a shared worker outlives its jobs.
    private var endsWithItsWorker: Bool { configuration.isolation == .job }

    /// The environment workers start with: a helper's (see
    /// ``WorkerProtocol/helperEnvironment()``) and, under a memory limit,
    /// glibc's malloc arenas capped (each reserves 64 MiB of address space,
    /// so a small --memory would stop the worker's own threads, not the job);
    /// and the sandbox a worker applies ahead of its job, if any.
    static func environment(for configuration: RunConfiguration) -> [String] {
        // Not the host's runtime folder, where its control socket is: a job
        // has no business there (the socket refuses jobs all the same).
        var environment = WorkerProtocol.helperEnvironment().filter { !$0.hasPrefix("RUNTIME_DIRECTORY=") }
        if configuration.limits.memoryBytes != nil {
            environment.removeAll { $0.hasPrefix("MALLOC_ARENA_MAX=") }
            environment.append("MALLOC_ARENA_MAX=2")
        }
        if let ahead = WorkerSandbox.aheadValue(for: configuration.sandbox, limits: configuration.limits) {
            environment.append("\(WorkerSandbox.aheadVariable)=\(ahead)")
        }
        return environment
    }

    func start() {
        let now = clock.now()
        control.withLock { c in
            c.started = true
            c.startedAt = now
            events.post(.started(job: job.name, pluginPath: job.pluginPath, budget: grant.budget))
        }
        // First: whatever happens to the worker from here, the deadline holds,
        // and what the grant says before the run message is sent follows it.
        grant.start(
            observer: GrantObserver(
                expiring: { [self] reason in timerWork.async { self.tell(self.expireMessage(reason)) } },
                deadline: { [self] _ in timerWork.async { self.killAtDeadline() } }),
            at: now)
        let saved: [UInt8]?
        switch CheckpointCheck.read(job, configuration.checkpoints) {
        case .success(let bytes): saved = bytes
        case .failure(let refusal): return conclude(.refused, refusal.reason)
        }
        let process: WorkerProcess
        do throws(SystemError) {
            process = try workers.worker(for: job)
        } catch {
            return conclude(.crashed, "cannot start a worker (\(configuration.workerExecutable)): \(error.message)")
        }
        var sandbox: HostMessage.Sandbox?
        if let policy = configuration.sandbox {
            do throws(SystemError) {
                sandbox = policy.message(for: job, scratch: try process.scratchFolder())
            } catch {
                if endsWithItsWorker { process.close() }
                workers.replaceSpares()
                return conclude(.crashed, "cannot make a scratch folder for its worker in \(Syscalls.temporaryFolder): \(error.message)")
            }
        }
        // Before the run message: no plugin code runs outside it.
        if let problem = process.confine(configuration.limits) { warn(problem) }
        control.withLock { $0.process = process }
        let sent = process.host(self, message: runMessage(started: now, checkpoint: saved, sandbox: sandbox))
        workers.replaceSpares()
        guard sent else { return conclude(.crashed, "its worker had already exited") }
        // What was said while the worker was starting follows the run message, in
        // order; an app message says the grant's deadline as it is now.
        while true {
            let unsent = control.withLock { c -> [String] in
                defer { c.unsent.removeAll() }
                if c.unsent.isEmpty { c.channelReady = true }
                return c.unsent
            }
            if unsent.isEmpty { break }
            unsent.forEach { process.send($0) }
        }
    }

    /// Sends a message to the worker, or keeps it until the run message is sent.
    private func tell(_ message: String) {
        let ready = control.withLock { c -> Bool in
            guard !c.finished else { return false }
            if !c.channelReady { c.unsent.append(message) }
            return c.channelReady
        }
        if ready { process?.send(message) }
    }

    /// The host's word about this job's worker, as a warning in the job's log.
    func warn(_ text: String) {
        events.post(.log(job: job.name, level: .warning, message: text))
    }

    func appEvent(_ event: AppEvent, state: AppState, deadline _: CurfewInstant?) {
        // The grant's clock stops in the foreground and runs again in the
        // background, the whole budget from then; the worker's grant ends then too.
        if event != .willTerminate {
            if state.runsGrantClocks { grant.release() } else { grant.hold() }
        }
        let deadline = state.runsGrantClocks ? grant.deadline : nil
        tell(HostMessage.app(job: job.name, event: event.name, state: state.name, deadline: deadline?.nanoseconds).line)
    }

    func expireNow(_ reason: ExpirationReason) {
        grant.expireNow(reason)
    }

    func status() -> JobStatus {
        control.withLock { c in
            JobStatus(
                job: job.name, isChunked: job.isChunked,
                timeRemaining: grant.timeRemaining,
                progress: c.progress, chunks: c.chunks, isExpiring: grant.isExpiring || c.expiredBy != nil,
                isContinuous: job.isContinuous)
        }
    }

    // MARK: Messages

    /// The run message; `checkpoint` is the job's, as ``start()`` read it.
    private func runMessage(started: CurfewInstant, checkpoint: [UInt8]?, sandbox: HostMessage.Sandbox?) -> String {
        let policy = configuration.policy
        let limits = configuration.limits
        let estimate = configuration.estimates[job.name]
        return HostMessage.run(HostMessage.Run(
            plugin: job.loadPath, job: job.name,
            // Where the scan found it: the worker checks that entry, not the whole plugin again.
            index: job.index,
            // The policy and the start on the clock both processes read: the worker's
            // grant ends when the host's does, whenever the worker gets to start it.
            budgetNanoseconds: Int64(clamping: policy.budget.nanoseconds), graceNanoseconds: policy.grace.map { Int64(clamping: $0.nanoseconds) },
            started: started.nanoseconds,
            // In the foreground the worker's grant waits for an `app` message with its deadline.
            app: appState.name,
            // The job's checkpoint and chunk-time estimate: the worker answers loads itself.
            keepsState: configuration.checkpoints != nil, checkpoint: checkpoint,
            estimate: estimate.map { HostMessage.Estimate(mean: $0.mean, deviation: $0.deviation, samples: $0.samples) },
            continuous: job.isContinuous,
            // With one job per worker, the worker exits when this job ends.
            last: endsWithItsWorker, parameters: configuration.parameters,
            limits: HostMessage.Limits(
                memoryBytes: limits.memoryBytes ?? 0, cpuSeconds: limits.cpuSeconds ?? 0, openFiles: limits.openFiles ?? 0),
            sandbox: sandbox, stallNanoseconds: policy.stall.map { $0.nanoseconds },
            submits: configuration.submits.map { $0.sorted() }, watchesConditions: configuration.watchesConditions)
        ).line
    }

    /// Saves a checkpoint the job sent and answers the worker, which waits
    /// for the answer: the save is durable when the job hears "ok".
    private func saveCheckpoint(id: UInt64, data: [UInt8]) {
        var status = HostMessage.SaveStatus.ok
        var problem = ""
        if control.withLock({ $0.finished || $0.reported != nil }) {
            (status, problem) = (.unavailable, "the job is over")
        } else if let checkpoints = configuration.checkpoints {
            do throws(CurfewError) {
                try checkpoints.saveCheckpoint(job.stateKey, bytes: data)
            } catch {
                (status, problem) = (error.code == .checkpointTooLarge ? .tooLarge : .unavailable, error.description)
            }
        } else {
            (status, problem) = (.unavailable, "this host keeps no state (run it with a state folder)")
        }
        process?.send(HostMessage.checkpointSaved(job: job.name, id: id, status: status, message: problem).line)
    }

    private func expireMessage(_ reason: ExpirationReason) -> String {
        HostMessage.expire(job: job.name, reason: reason.name).line
    }

    /// Arms a timer, kept until the job finishes.
    private func arm(at instant: CurfewInstant, _ work: @escaping @Sendable () -> Void) {
        let timer = clock.schedule(at: instant) { [timerWork] in timerWork.async(execute: work) }
        let keep = control.withLock { c -> Bool in
            guard !c.finished else { return false }
            c.timers.append(timer)
            return true
        }
        if !keep { timer.cancel() }
    }

    /// How long a worker gets, past a job's deadline, to report the job
    /// terminated itself (its runner shares the deadline and says what was
    /// running: "chunk 31 was still running") before the host kills it, and
    /// a shared one's siblings with it.
    static let deadlineGrace: Duration = .milliseconds(100)

    /// The grant's deadline passed: the worker gets ``deadlineGrace`` to say
    /// the job was given up, then the host kills it.
    private func killAtDeadline() {
        guard let deadline = grant.deadline, clock.now().advanced(by: .milliseconds(1)) >= deadline else { return }
        arm(at: clock.now().advanced(by: Self.deadlineGrace)) { [self] in
            let kill = control.withLock { c -> WorkerProcess?? in
                guard !c.finished, c.killedAt == nil else { return nil }
                c.killedAt = clock.now()
                c.killedFor = deadline
                return .some(c.process)
            }
            guard let kill else { return }
            if let process = kill {
                process.kill(.deadline(job: job.name))
            } else {
                // Its worker never came: nothing of the job ran.
                conclude(.terminated, "its worker had not started by the hard deadline")
            }
        }
    }

    /// The worker gave up its only job at the deadline: it cannot stop the
    /// hook that overran, so the host ends it now.
    private func killGivenUp() {
        let kill = control.withLock { c -> Bool in
            guard !c.finished, c.killedAt == nil else { return false }
            c.killedAt = clock.now()
            c.killedFor = grant.deadline
            return true
        }
        if kill { process?.kill(.deadline(job: job.name)) }
    }

    /// A line the plugin printed, tagged with its job and stream.
    /// With `alone` false, the line is recorded (a crash's reason quotes
    /// the stderr tail) but reported once, by the caller, as the plugin's.
    func output(_ line: String, stream: String, alone: Bool = true) {
        control.withLock { c in
            guard !c.finished else { return }
            if stream == "stderr" {
                c.stderrTail.append(line)
                if c.stderrTail.count > 5 { c.stderrTail.removeFirst() }
            }
            guard alone else { return }
            events.post(.log(job: job.name, level: stream == "stdout" ? .info : .warning, message: "[\(stream)] \(line)"))
        }
    }

    /// Waits while the run's events are backed up (see ``EventChannel/waitForRoom()``).
    func waitForRoom() {
        events.waitForRoom()
    }

    /// A line of the worker's output that belongs to the plugin, not to one of its jobs.
    func pluginOutput(_ line: String, stream: String) {
        events.post(.output(pluginPath: job.pluginPath, stream: stream, line: line))
    }

    /// How long a worker that reported its only job's end may take to exit
    /// before the host kills it and reports the job terminated.
    static let exitGrace: Duration = .seconds(1)

    /// Handles one message for this job; true when the job has ended with it.
    ///
    /// A worker's word is detail: with one job per worker, a reported end is
    /// kept until the worker exits, and what the host sees then (its exit
    /// status, a signal, the deadline) settles the outcome.
    func handle(_ message: WorkerMessage) -> Bool {
        if case .checkpoint(_, let id, let data) = message {
            saveCheckpoint(id: id, data: data)
            return false
        }
        var ended = false
        var lingerCheck: CurfewInstant?
        var givenUp = false
        control.withLock { c in
            guard !c.finished else { return }
            switch message {
            case .error, .checkpoint, .attachedCheckpoint:
                break  // (an attached one is read into a `checkpoint` before it comes here)
            case .estimate(_, let mean, let deviation, let samples):
                c.estimate = ChunkEstimate(mean: mean, deviation: deviation, samples: samples)
            case .measures(_, let counts, let nanoseconds, let late):
                c.measured = (counts, nanoseconds, late)
            case .status(_, _, let chunks):
                // A count sent before the job's last word may arrive after it.
                guard c.reported == nil && c.crashedIn == nil else { return }
                c.chunks = chunks
            case .crashing(_, let hook, let chunks):
                guard c.crashedIn == nil else { return }
                c.crashedIn = (hook, chunks)
                if hook == "chunk" { c.chunks = chunks }
            case .log(_, let t, let level, let text):
                let level = [LogLevel.debug, .info, .warning, .error].first { $0.description == level } ?? .info
                events.post(.log(job: job.name, level: level, message: text), at: reportedTime(t, c))
            case .progress(_, let t, let completed, let total):
                let progress = JobProgress(completed: completed, total: total)
                c.progress = progress
                events.post(.progress(job: job.name, progress), at: reportedTime(t, c))
            case .expiring(_, let t, let reason):
                let reason = ExpirationReason(rawValue: reason) ?? .timeout
                if c.expiredBy == nil { c.expiredBy = reason }
                // The worker's grant began to expire first (its runner brought
                // the expiration forward): so does this one, never to be held again.
                grant.expireNow(reason)
                events.post(.expiring(job: job.name, reason: reason), at: reportedTime(t, c))
            case .submit(_, let t, let target, let parameters, let milliseconds):
                // Bounded by the decoder; the name, whether this job may ask and
                // how often it did are checked here: the worker runs plugin code.
                c.submitted += 1
                guard JobNaming.isValidName(target), let allowed = configuration.submits, allowed.contains(target),
                    c.submitted <= SubmittedRun.maximumPerRun
                else {
                    if c.submitted <= SubmittedRun.maximumPerRun + 1 {
                        events.post(.log(job: job.name, level: .error, message: "its worker submitted a run it may not (a job it may not start, or past \(SubmittedRun.maximumPerRun) a run); ignored"), at: reportedTime(t, c))
                    }
                    return
                }
                let run = SubmittedRun(job: target, parameters: parameters, after: .milliseconds(Int64(milliseconds)))
                events.post(.runSubmitted(job: job.name, run: run), at: reportedTime(t, c))
            case .conditions(_, let t, let mask):
                // The worker runs plugin code: its mask is checked again here.
                guard configuration.watchesConditions, let conditions = Condition.set(of: mask) else {
                    events.post(.log(job: job.name, level: .error, message: "its worker asked for conditions this host does not hold runs to; ignored"), at: reportedTime(t, c))
                    return
                }
                // Bounded as in the worker: a flood of lines is not a flood of work for the server.
                guard c.conditions != conditions else { return }
                c.conditionChanges += 1
                guard c.conditionChanges <= Condition.maximumChangesPerRun else {
                    if c.conditionChanges == Condition.maximumChangesPerRun + 1 {
                        events.post(.log(job: job.name, level: .error, message: "its worker changed the conditions it asks for more than \(Condition.maximumChangesPerRun) times; ignored"), at: reportedTime(t, c))
                    }
                    return
                }
                c.conditions = conditions
                events.post(.conditionsRequired(job: job.name, conditions: conditions), at: reportedTime(t, c))
            case .nextRun(_, let t, let milliseconds):
                // Bounded by the decoder: ten years of milliseconds fits an Int64.
                events.post(.nextRunRequested(job: job.name, after: .milliseconds(Int64(milliseconds))), at: reportedTime(t, c))
            case .finished(_, let t, let outcome, let reason, let chunks, let progress):
                guard c.reported == nil else { return }
                c.chunks = chunks
                if let progress { c.progress = JobProgress(completed: progress.completed, total: progress.total) }
                let outcome = Outcome(rawValue: outcome) ?? .failed
                c.reported = (outcome, reason)
                c.reportedAt = reportedTime(t, c)
                // Given up at the deadline (both clocks are the system's monotonic
                // one): a "terminated" said before it is only a claim, and waits.
                if endsWithItsWorker && outcome == .terminated && grant.deadline.map({ clock.now() >= $0 }) == true {
                    givenUp = true
                } else if endsWithItsWorker {
                    // The job's work is over; its worker has a second to exit.
                    lingerCheck = clock.now().advanced(by: Self.exitGrace)
                } else {
                    finishLocked(&c, outcome: outcome, reason: reason, at: c.reportedAt)
                    ended = true
                }
            }
        }
        if let lingerCheck {
            arm(at: lingerCheck) { [self] in killLingering() }
        }
        // The job's work is over: the next job need not wait for this one's
        // end to be delivered (a shared worker's job) or for its worker to exit.
        if lingerCheck != nil || ended { onSlotFree() }
        if givenUp { killGivenUp() }
        return ended
    }

    /// The worker reported its only job's end and has not exited since (the
    /// host may only not have seen its exit yet, busy with its output).
    private func killLingering() {
        if process?.hasExited() == true { return }
        let kill = control.withLock { c -> Bool in
            guard !c.finished, c.killedAt == nil else { return false }
            c.killedAt = clock.now()
            return true
        }
        if kill { process?.kill(.lingered(job: job.name)) }
    }

    /// The worker exited (or was killed) while this job was on it.
    func workerExited(status: Int32, killedFor: WorkerProcess.Kill?) {
        control.withLock { c in
            guard !c.finished else { return }
            let whose = endsWithItsWorker ? "its worker" : "its plugin's worker, shared by the plugin's jobs,"
            // What the worker said, as detail after what the host saw.
            let claim = c.reported.map { "; it had reported the job \($0.outcome)" } ?? ""
            var stderr: String { c.stderrTail.isEmpty ? "" : "; stderr: " + c.stderrTail.joined(separator: " | ") }
            if status == -1 && c.reported == nil {
                // A forked worker whose fork server died: how it ended is not known.
                return finishLocked(&c, outcome: .crashed, reason: "its worker ended, and how is not known: its fork server is gone")
            }
            let signaled = status & 0x7F != 0 && status & 0x7F != 0x7F
            let signal = status & 0x7F
            let code = (status >> 8) & 0xFF
            let outcome: Outcome
            var reason: String
            switch killedFor {
            case .invalidMessage(let problem):
                outcome = .crashed
                reason = "\(whose) sent an invalid message (\(problem)) and was killed"
            case .lingered(let name) where name == job.name:
                outcome = .terminated
                let (reported, _) = c.reported ?? (.completed, "")
                reason = "its worker reported the job \(reported) but did not exit within \(formatSeconds(Self.exitGrace)) s; it was killed"
            case .deadline(let name) where name == job.name:
                outcome = .terminated
                if let reported = c.reported, reported.outcome == .terminated {
                    // The worker's runner said what was running, in the words of a run in process.
                    reason = reported.reason
                } else {
                    let late = c.killedAt.flatMap { at in c.killedFor.map { $0.duration(to: at).seconds * 1000 } } ?? 0
                    reason = "still running at the hard deadline; its worker was killed \(formatMilliseconds(late)) ms after it\(claim)"
                }
            case .deadline(let name), .lingered(let name):
                if let reported = c.reported {
                    (outcome, reason) = reported
                } else {
                    outcome = .crashed
                    reason = "its worker, shared with '\(name)', was killed when that job overran its hard deadline"
                }
            case nil:
                if signaled {
                    outcome = .crashed
                    let place = c.crashedIn.map { crash in crash.hook == "chunk" ? " in chunk \(crash.chunks &+ 1)" : " in \(crash.hook)" } ?? ""
                    reason = "\(whose) died of \(SignalMonitor.name(of: signal))\(place)\(claim)"
                    if let limit = configuration.limits.explain(signal: signal) { reason += "; \(limit)" }
                    reason += stderr
                } else if let reported = c.reported, code == 0 {
                    (outcome, reason) = reported
                } else if c.reported != nil {
                    outcome = .crashed
                    reason = "\(whose) exited with status \(code)\(claim)" + stderr
                } else {
                    outcome = .crashed
                    reason = "\(whose) exited with status \(code) before the job finished" + stderr
                }
            }
            finishLocked(&c, outcome: outcome, reason: reason, at: killedFor == nil && !signaled && code == 0 ? c.reportedAt : nil)
        }
    }

    private func conclude(_ outcome: Outcome, _ reason: String) {
        control.withLock { c in
            guard !c.finished else { return }
            finishLocked(&c, outcome: outcome, reason: reason)
        }
    }

    private func finishLocked(_ c: inout Control, outcome: Outcome, reason: String, at time: CurfewInstant? = nil) {
        c.finished = true
        grant.finish()
        c.timers.forEach { $0.cancel() }
        c.timers.removeAll()
        let end = time ?? clock.now()
        let elapsed = c.startedAt.duration(to: end)
        // A claim, for this job's own metrics: kept where it fits the run the host saw.
        let measures = c.measured.map {
            RunMeasures(chunkCounts: $0.counts, chunkNanoseconds: $0.nanoseconds, expireLatenessNanoseconds: $0.late, chunks: c.chunks, elapsed: elapsed)
        }
        let result = JobResult(
            job: job.name, pluginPath: job.pluginPath, loadPath: job.loadPath, isChunked: job.isChunked, outcome: outcome, chunks: c.chunks,
            elapsed: elapsed, reason: Reason.bounded(reason), progress: c.progress,
            estimate: c.estimate, measures: measures ?? RunMeasures())
        events.post(.finished(result), at: end) { [onFinish] in onFinish(result) }
    }

    /// When a message says its event happened (`t`, the worker's reading of
    /// the shared monotonic clock), kept between this job's start and now:
    /// a worker's word cannot move an event outside what the host saw.
    private func reportedTime(_ t: UInt64?, _ c: Control) -> CurfewInstant {
        let now = clock.now()
        guard let t else { return now }
        return min(max(CurfewInstant(nanoseconds: t), c.startedAt), now)
    }
}

private func formatSeconds(_ value: Duration) -> String {
    formatMilliseconds(value.seconds)
}

private func formatMilliseconds(_ value: Double) -> String {
    let tenths = Int64((value * 10).rounded())
    return "\(tenths / 10).\(abs(tenths % 10))"
}
