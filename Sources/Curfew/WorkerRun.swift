import Dispatch
import Glibc
import Synchronization
import _CurfewShims

/// One worker process, from the host's side: its pid, socket and pipes, the
/// jobs it hosts (one with `--isolate job`, a plugin's with `--isolate
/// plugin`), and a thread that reads its messages, stdout and stderr, routes
/// them to the jobs, and, when the worker exits, reaps it and tells each job
/// still on it how it ended.
final class WorkerProcess: @unchecked Sendable {
    // Safe because the mutable state is the `state` Mutex, and the socket is
    // written, shut and closed only under it; pid is set in init.
    private struct State {
        var jobs: [String: WorkerRun] = [:]
        /// The worker has exited: no message, kill or job may reach it (its
        /// descriptor numbers and, once reaped, its pid may belong to others).
        var exited = false
        var killedFor: String?
    }

    let pid: pid_t
    private let channel: Int32
    private let state = Mutex(State())
    /// The fork server that forked this worker (and reaps it), with the fork's
    /// number, or `nil` when this process started it and reaps it itself.
    private let server: ForkServer?
    private let forked: ForkServer.Child?
    /// For a forked worker: one byte is written when the server reports its end.
    private let exitPipe: [Int32]
    private let exitStatus = Mutex<Int32?>(nil)

    /// A worker this process started (and reaps).
    init(_ worker: WorkerPool.Worker) {
        pid = worker.pid
        channel = worker.channel
        server = nil
        forked = nil
        exitPipe = []
        let (out, err) = (worker.out, worker.err)
        Thread.detach { self.supervise(out: out, err: err) }
    }

    /// A worker the fork server forked (and reaps); `exitPipe` is this one's own.
    init(forked child: ForkServer.Child, by server: ForkServer, channel: Int32, out: Int32, err: Int32, exitPipe: [Int32]) {
        pid = child.pid
        self.channel = channel
        self.server = server
        forked = child
        self.exitPipe = exitPipe
        server.onExit(of: child.pid) { [self] code in
            exitStatus.withLock { $0 = code ?? -1 }
            var byte: UInt8 = 1
            _ = Glibc.write(exitPipe[1], &byte, 1)
        }
        // A thread of its own: the loop blocks in poll and waitpid, and Dispatch's
        // pool is only as wide as the machine has cores.
        Thread.detach { self.supervise(out: out, err: err) }
    }

    /// Whether a new job may join: not exited, not being killed.
    var isUsable: Bool { state.withLock { !$0.exited && $0.killedFor == nil } }

    /// Adds a job and sends its `run` message; false when the worker cannot take it.
    func host(_ run: WorkerRun, message: String) -> Bool {
        state.withLock { state in
            guard !state.exited && state.killedFor == nil else { return false }
            state.jobs[run.job.name] = run
            return WorkerProtocol.send(message, to: channel)
        }
    }

    @discardableResult
    func send(_ line: String) -> Bool {
        state.withLock { state in !state.exited && WorkerProtocol.send(line, to: channel) }
    }

    /// Kills the whole process group because `job` overran its deadline.
    func kill(for job: String) {
        let ask = state.withLock { state -> Bool in
            guard !state.exited && state.killedFor == nil else { return false }
            state.killedFor = job
            // This process's own child: its pid cannot be reused before we reap it.
            if server == nil { Glibc.kill(-pid, SIGKILL) }
            return server != nil
        }
        // A forked worker is the server's child: the server kills it if it has not reaped it.
        if ask, let server, let forked { server.kill(forked) }
    }

    /// No more jobs will come: the worker exits once its jobs have ended.
    func close() {
        send(#"{"type":"close"}"#)
    }

    private func supervise(out: Int32, err: Int32) {
        // A pidfd (or, for a forked worker, the server's word) tells when the
        // worker exits even if a process it started still holds its pipes
        // (then end-of-file would never come).
        let exit = server == nil ? curfew_shim_pidfd_open(pid) : exitPipe[0]
        var buffers = [LineBuffer(), LineBuffer(), LineBuffer()]
        let streams = [channel, out, err]
        var open = [true, true, true]
        var chunk = [UInt8](repeating: 0, count: 65536)
        var drainUntil: CurfewInstant?
        let clock = MonotonicClock()
        while open.contains(true) {
            var polls = streams.indices.filter { open[$0] }.map { pollfd(fd: streams[$0], events: Int16(POLLIN), revents: 0) }
            if exit >= 0 && drainUntil == nil { polls.append(pollfd(fd: exit, events: Int16(POLLIN), revents: 0)) }
            let wait = drainUntil.map { Int32(max(0, clock.now().duration(to: $0).nanoseconds / 1_000_000)) } ?? -1
            let ready = polls.withUnsafeMutableBufferPointer { poll($0.baseAddress, nfds_t($0.count), wait) }
            if ready < 0 {
                if errno == EINTR { continue }
                break
            }
            if ready == 0 && drainUntil != nil { break }  // what it left behind had 100 ms to flush
            for entry in polls where entry.revents != 0 {
                if entry.fd == exit {
                    workerExited()
                    drainUntil = clock.now().advanced(by: .milliseconds(100))
                    continue
                }
                let index = streams.firstIndex(of: entry.fd)!
                let count = chunk.withUnsafeMutableBytes { read(entry.fd, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                if count <= 0 {
                    open[index] = false
                    if let last = buffers[index].flush() { route(last, from: index) }
                    continue
                }
                let lines = chunk.withUnsafeBytes { buffers[index].append(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
                for line in lines { route(line, from: index) }
            }
        }
        workerExited()
        var status: Int32 = 0
        if server == nil {
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        } else {
            // The server's report writes one byte, exactly once: always take it
            // before closing, so the write never meets a closed (or reused) number.
            var byte: UInt8 = 0
            while Glibc.read(exitPipe[0], &byte, 1) < 0 && errno == EINTR {}
            status = exitStatus.withLock { $0 } ?? -1
        }
        ([out, err] + (server == nil && exit >= 0 ? [exit] : []) + exitPipe).forEach { Glibc.close($0) }
        let jobs = state.withLock { state -> [WorkerRun] in
            defer { state.jobs.removeAll() }
            return Array(state.jobs.values)
        }
        let killedFor = state.withLock { $0.killedFor }
        for run in jobs { run.workerExited(status: status, killedFor: killedFor) }
    }

    /// Once the worker has exited (not yet reaped, so its pid is still its
    /// own): no more messages or kills, and whatever it left in its group goes.
    private func workerExited() {
        // This process's own child is not reaped yet here: its pid is still its
        // own while its group is killed. (The server does the same for its children.)
        if server == nil { curfew_shim_wait_exited(pid) }
        state.withLock { state in
            guard !state.exited else { return }
            state.exited = true
            if server == nil { Glibc.kill(-pid, SIGKILL) }
            Glibc.close(channel)
        }
    }

    private func route(_ line: String, from stream: Int) {
        let jobs = state.withLock { Array($0.jobs.values) }
        switch stream {
        case 0:
            guard let message = try? JSONReader.parse(Array(line.utf8)) else {
                return jobs.forEach { $0.output("unreadable message from the worker: \(line)", stream: "worker") }
            }
            guard let name = message["job"]?.stringValue else {
                // A message for the whole worker (an error before any job): every job hears it.
                let text = message["message"]?.stringValue ?? line
                return jobs.forEach { $0.output(text, stream: "worker") }
            }
            guard let run = state.withLock({ $0.jobs[name] }) else { return }
            if run.handle(message) {
                // The job reported its end and leaves this worker (which may host others).
                state.withLock { _ = $0.jobs.removeValue(forKey: run.job.name) }
            }
        default:
            // A worker hosting several jobs cannot tell whose line it is: each hears it.
            for run in jobs { run.output(line, stream: stream == 1 ? "stdout" : "stderr") }
        }
    }
}

/// Runs one job in a worker process: the host side.
///
/// The host owns the grant's clock. At the expiration point it tells the
/// worker to expire the job (the cleanup hook runs there); at the hard
/// deadline it kills the worker's process group if the job has not finished.
final class WorkerRun: JobExecution, @unchecked Sendable {
    // Safe because the mutable state is the `control` Mutex; `process` is
    // written in start() before any message for this job can arrive.
    struct Control {
        var started = false
        var finished = false
        var reported: (outcome: Outcome, reason: String)?
        var expiredBy: ExpirationReason?
        var chunks: UInt64 = 0
        var progress: Progress?
        var startedAt = CurfewInstant(nanoseconds: 0)
        var deadline: CurfewInstant?
        var killedAt: CurfewInstant?
        var stderrTail: [String] = []
        var timers: [any CurfewTimer] = []
        /// Set once the run message is sent; expirations before wait in `unsent`.
        var channelReady = false
        var unsent: [ExpirationReason] = []
    }

    let job: PluginJob
    private let configuration: RunConfiguration
    private let workers: WorkerSource
    private let clock = MonotonicClock()
    private let events: EventChannel
    private let onFinish: @Sendable (JobResult) -> Void
    private let control = Mutex(Control())
    private var process: WorkerProcess?

    /// - Throws: The refusal of a continuous job the policy does not allow.
    init(
        job: PluginJob, configuration: RunConfiguration, workers: WorkerSource, events: EventChannel,
        onFinish: @escaping @Sendable (JobResult) -> Void
    ) throws(CurfewError) {
        if let refusal = configuration.policy.refusal(job: job.name, continuous: job.isContinuous) { throw refusal }
        self.job = job
        self.configuration = configuration
        self.workers = workers
        self.events = events
        self.onFinish = onFinish
    }

    private var policy: GrantPolicy { configuration.policy }
    /// With one job per worker, the job ends when its worker does, so that
    /// every line it printed is in; a shared worker outlives its jobs.
    private var endsWithItsWorker: Bool { configuration.isolation == .job }

    /// The environment workers start with: this process's, with the Swift
    /// backtracer off (it can hang a crashed worker and hold its pipes open)
    /// and, under a memory limit, glibc's malloc arenas capped (each reserves
    /// 64 MiB of address space, so a small --memory would stop the worker's
    /// own threads, not the job).
    static func environment(for configuration: RunConfiguration) -> [String] {
        var environment = Syscalls.environment().filter { !$0.hasPrefix("SWIFT_BACKTRACE=") }
        environment.append("SWIFT_BACKTRACE=enable=no")
        if configuration.limits.memoryBytes != nil {
            environment.removeAll { $0.hasPrefix("MALLOC_ARENA_MAX=") }
            environment.append("MALLOC_ARENA_MAX=2")
        }
        return environment
    }

    func start() {
        let now = clock.now()
        let deadline = job.isContinuous ? nil : now.advanced(by: policy.budget)
        control.withLock { c in
            c.started = true
            c.startedAt = now
            c.deadline = deadline
            events.post(.started(job: job.name, pluginPath: job.pluginPath, budget: job.isContinuous ? nil : policy.budget))
        }
        let process: WorkerProcess
        do throws(SystemError) {
            process = try workers.worker(for: job)
        } catch {
            return conclude(.crashed, "cannot start a worker (\(configuration.workerExecutable)): \(error.message)")
        }
        self.process = process
        guard process.host(self, message: runMessage(deadline: deadline)) else {
            return conclude(.crashed, "its worker had already exited")
        }
        // Expirations asked for while the worker was starting follow the run message.
        let unsent = control.withLock { c -> [ExpirationReason] in
            c.channelReady = true
            defer { c.unsent.removeAll() }
            return c.unsent
        }
        for reason in unsent { send(expire: reason) }
        if let deadline {
            arm(at: deadline.advanced(by: .zero - policy.lead)) { [self] in expireNow(.timeout) }
            arm(at: deadline) { [self] in killAtDeadline() }
        }
    }

    func expireNow(_ reason: ExpirationReason) {
        let (move, ready) = control.withLock { c -> (CurfewInstant?, Bool) in
            guard !c.finished else { return (nil, false) }
            if c.expiredBy == nil { c.expiredBy = reason }
            // Before the run message, it waits and follows it.
            if !c.channelReady { c.unsent.append(reason) }
            guard c.started, reason != .timeout else { return (nil, c.channelReady) }
            // An early expiration gets at most one lead time from now.
            let lead = job.isContinuous ? policy.shutdownLead : policy.lead
            let early = clock.now().advanced(by: lead)
            guard c.deadline.map({ early < $0 }) ?? true else { return (nil, c.channelReady) }
            c.deadline = early
            return (early, c.channelReady)
        }
        if ready { send(expire: reason) }
        if let move { arm(at: move) { [self] in killAtDeadline() } }
    }

    func status() -> JobStatus {
        control.withLock { c in
            JobStatus(
                job: job.name, isChunked: job.isChunked,
                timeRemaining: c.deadline.map { max(.zero, clock.now().duration(to: $0)) },
                progress: c.progress, chunks: nil, isExpiring: c.expiredBy != nil)
        }
    }

    // MARK: Messages

    private func runMessage(deadline: CurfewInstant?) -> String {
        var message = JSONLine("type", "run")
        message.add("protocol", WorkerProtocol.version)
        message.add("plugin", job.pluginPath)
        message.add("job", job.name)
        // The deadline itself, on the clock both processes read: the worker's
        // grant ends when the host's does, whenever the worker gets to start it.
        if let deadline {
            message.add("deadline", Int64(clamping: deadline.nanoseconds))
        } else {
            message.addRaw("deadline", "null")
        }
        message.add("lead", (job.isContinuous ? policy.shutdownLead : policy.lead).seconds)
        message.addRaw("continuous", job.isContinuous ? "true" : "false")
        // With one job per worker, the worker exits when this job ends.
        message.addRaw("last", endsWithItsWorker ? "true" : "false")
        message.addRaw(
            "parameters",
            "{" + configuration.parameters.sorted { $0.key < $1.key }.map { JSONLine.quote($0.key) + ":" + JSONLine.quote($0.value) }
                .joined(separator: ",") + "}")
        let limits = configuration.limits
        message.addRaw(
            "limits",
            "{\"memory\":\(limits.memoryBytes ?? 0),\"cpu\":\(limits.cpuSeconds ?? 0),\"files\":\(limits.openFiles ?? 0)}")
        return message.text
    }

    private func send(expire reason: ExpirationReason) {
        var message = JSONLine("type", "expire")
        message.add("job", job.name)
        message.add("reason", reason.rawValue)
        process?.send(message.text)
    }

    private func arm(at instant: CurfewInstant, _ work: @escaping @Sendable () -> Void) {
        let timer = clock.schedule(at: instant, on: Grant.timerQueue, work)
        let keep = control.withLock { c -> Bool in
            guard !c.finished else { return false }
            c.timers.append(timer)
            return true
        }
        if !keep { timer.cancel() }
    }

    /// How long a shared worker gets, past a job's deadline, to report the
    /// job terminated itself before the host kills it (and the siblings with it).
    static let sharedWorkerGrace: Duration = .milliseconds(100)

    private func killAtDeadline(graceGiven: Bool = false) {
        let kill = control.withLock { c -> Bool in
            guard !c.finished, c.killedAt == nil, let deadline = c.deadline,
                clock.now().advanced(by: .milliseconds(1)) >= deadline
            else { return false }
            guard endsWithItsWorker || graceGiven else { return false }
            c.killedAt = clock.now()
            return true
        }
        if kill {
            process?.kill(for: job.name)
        } else if !endsWithItsWorker && !graceGiven {
            // A shared worker's runner gives up on a stuck job by itself, sparing its
            // siblings: kill only if it has not said so shortly after the deadline.
            arm(at: clock.now().advanced(by: Self.sharedWorkerGrace)) { [self] in killAtDeadline(graceGiven: true) }
        }
    }

    /// A line the plugin printed, tagged with its job and stream.
    func output(_ line: String, stream: String) {
        control.withLock { c in
            guard !c.finished else { return }
            if stream == "stderr" {
                c.stderrTail.append(line)
                if c.stderrTail.count > 5 { c.stderrTail.removeFirst() }
            }
            events.post(.log(job: job.name, level: stream == "stdout" ? .info : .warning, message: "[\(stream)] \(line)"))
        }
    }

    /// Handles one message for this job; true when the job has ended with it.
    func handle(_ message: JSONValue) -> Bool {
        var ended = false
        control.withLock { c in
            guard !c.finished else { return }
            switch message["type"]?.stringValue {
            case "log":
                let level = message["level"]?.stringValue.flatMap { name in
                    [LogLevel.debug, .info, .warning, .error].first { $0.description == name }
                } ?? .info
                events.post(.log(job: job.name, level: level, message: message["message"]?.stringValue ?? ""))
            case "progress":
                let progress = Progress(
                    completed: message["completed"]?.integerValue ?? 0, total: message["total"]?.integerValue ?? 0)
                c.progress = progress
                events.post(.progress(job: job.name, progress))
            case "expiring":
                let reason = message["reason"]?.stringValue.flatMap(ExpirationReason.init(rawValue:)) ?? .timeout
                if c.expiredBy == nil { c.expiredBy = reason }
                events.post(.expiring(job: job.name, reason: reason))
            case "finished":
                c.chunks = UInt64(message["chunks"]?.integerValue ?? 0)
                if let completed = message["completed"]?.integerValue, let total = message["total"]?.integerValue {
                    c.progress = Progress(completed: completed, total: total)
                }
                let outcome = message["outcome"]?.stringValue.flatMap(Outcome.init(rawValue:)) ?? .failed
                c.reported = (outcome, message["reason"]?.stringValue ?? "")
                if !endsWithItsWorker {
                    finishLocked(&c, outcome: outcome, reason: c.reported!.reason)
                    ended = true
                }
            default:
                break
            }
        }
        return ended
    }

    /// The worker exited (or was killed) while this job was on it.
    func workerExited(status: Int32, killedFor: String?) {
        control.withLock { c in
            guard !c.finished else { return }
            if status == -1 && c.reported == nil {
                // A forked worker whose fork server died: how it ended is not known.
                return finishLocked(&c, outcome: .crashed, reason: "its worker ended, and how is not known: its fork server is gone")
            }
            let signaled = status & 0x7F != 0 && status & 0x7F != 0x7F
            let signal = status & 0x7F
            let code = (status >> 8) & 0xFF
            let outcome: Outcome
            var reason: String
            if let killedAt = c.killedAt, let deadline = c.deadline, killedFor == job.name, c.reported == nil {
                outcome = .terminated
                let late = deadline.duration(to: killedAt).seconds * 1000
                reason = "still running at the hard deadline; its worker was killed \(formatMilliseconds(late)) ms after it"
            } else if let reported = c.reported {
                (outcome, reason) = reported
            } else if let killedFor, killedFor != job.name {
                outcome = .crashed
                reason = "its worker, shared with '\(killedFor)', was killed when that job overran its hard deadline"
            } else if signaled {
                outcome = .crashed
                let whose = endsWithItsWorker ? "its worker" : "its plugin's worker, shared by the plugin's jobs,"
                reason = "\(whose) died of \(WorkerProtocol.signalName(signal))"
                if let limit = configuration.limits.explain(signal: signal) { reason += "; \(limit)" }
                if !c.stderrTail.isEmpty { reason += "; stderr: " + c.stderrTail.joined(separator: " | ") }
            } else {
                outcome = .crashed
                let whose = endsWithItsWorker ? "its worker" : "its plugin's worker, shared by the plugin's jobs,"
                reason = "\(whose) exited with status \(code) before the job finished"
                if !c.stderrTail.isEmpty { reason += "; stderr: " + c.stderrTail.joined(separator: " | ") }
            }
            finishLocked(&c, outcome: outcome, reason: reason)
        }
    }

    private func conclude(_ outcome: Outcome, _ reason: String) {
        control.withLock { c in
            guard !c.finished else { return }
            finishLocked(&c, outcome: outcome, reason: reason)
        }
    }

    private func finishLocked(_ c: inout Control, outcome: Outcome, reason: String) {
        c.finished = true
        c.timers.forEach { $0.cancel() }
        c.timers.removeAll()
        let result = JobResult(
            job: job.name, pluginPath: job.pluginPath, isChunked: job.isChunked, outcome: outcome, chunks: c.chunks,
            elapsed: c.startedAt.duration(to: clock.now()), reason: reason, progress: c.progress)
        events.post(.finished(result)) { [onFinish] in onFinish(result) }
    }
}

/// Where jobs get their workers: a new one from the pool per job, or one
/// per plugin file, shared by its jobs.
final class WorkerSource: Sendable {
    private let pool: WorkerPool
    private let isolation: Isolation
    private let shared = Mutex<[String: WorkerProcess]>([:])
    /// The fork server, started on first need; when it cannot fork, the pool serves.
    private let forks = Mutex<(server: ForkServer?, tried: Bool, works: Bool)>((nil, false, true))
    /// How many workers were forked, and how many started with posix_spawn.
    let starts = Mutex<(forked: Int, spawned: Int)>((0, 0))

    init(pool: WorkerPool, isolation: Isolation, forking: Bool) {
        self.pool = pool
        self.isolation = isolation
        forks.withLock { $0.works = forking }
    }

    /// A new worker: forked by the fork server, or else from the pool.
    private func newWorker() throws(SystemError) -> WorkerProcess {
        let server = forks.withLock { forks -> ForkServer? in
            if !forks.tried {
                forks.tried = true
                forks.server = ForkServer(executable: pool.executable, environment: pool.environment)
            }
            return forks.works ? forks.server : nil
        }
        if let server {
            let (channel, out, err) = try Syscalls.workerDescriptors()
            let exitPipe: [Int32]
            do throws(SystemError) {
                exitPipe = try Syscalls.pipe()
            } catch {
                (channel + out + err).forEach { Glibc.close($0) }
                throw error
            }
            let child = server.fork(channel: channel[1], out: out[1], err: err[1])
            [channel[1], out[1], err[1]].forEach { Glibc.close($0) }
            if let child {
                starts.withLock { $0.forked += 1 }
                return WorkerProcess(forked: child, by: server, channel: channel[0], out: out[0], err: err[0], exitPipe: exitPipe)
            }
            ([channel[0], out[0], err[0]] + exitPipe).forEach { Glibc.close($0) }
            forks.withLock { $0.works = false }  // refused or gone: the pool from now on
        }
        starts.withLock { $0.spawned += 1 }
        return WorkerProcess(try pool.take())
    }

    func worker(for job: PluginJob) throws(SystemError) -> WorkerProcess {
        guard isolation == .plugin else { return try newWorker() }
        // Looked up and made under one lock: two admissions never make two workers for one plugin.
        return try shared.withLock { workers throws(SystemError) -> WorkerProcess in
            if let live = workers[job.pluginPath], live.isUsable { return live }
            let process = try newWorker()
            workers[job.pluginPath] = process
            return process
        }
    }

    /// The run is over: idle workers exit, shared ones once their jobs end,
    /// the fork server once it reads the end of its socket.
    func close() {
        // Shared workers first (they leave when their jobs are done), then the
        // idle pool, then the fork server, which kills and reaps what is left.
        shared.withLock { workers in
            workers.values.forEach { $0.close() }
            workers.removeAll()
        }
        pool.close()
        forks.withLock { $0.server }?.close()
    }
}

private func formatMilliseconds(_ value: Double) -> String {
    let tenths = Int64((value * 10).rounded())
    return "\(tenths / 10).\(abs(tenths % 10))"
}
