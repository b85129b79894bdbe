import Dispatch
import Glibc
import Synchronization
import _CurfewShims

/// Runs one job in a worker process of its own: the host side.
///
/// The host owns the grant's clock. At the expiration point it tells the
/// worker to expire the job (the cleanup hook runs there); at the hard
/// deadline it kills the worker's process group if the job has not finished.
/// One thread per worker reads its messages and its stdout and stderr until
/// they close, then reaps it, so the outcome is decided once, from everything
/// the worker said and how it ended.
final class WorkerRun: JobExecution, @unchecked Sendable {
    // Safe because the mutable state is the `control` Mutex; the descriptors
    // and pid are written in start() before the supervising thread begins.
    struct Control {
        var started = false
        var finished = false
        var reported: (outcome: Outcome, reason: String)?
        var expiredBy: ExpirationReason?
        var chunks: UInt64 = 0
        var progress: Progress?
        var lastProgressEvent: CurfewInstant?
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
    private let pool: WorkerPool
    private let clock = MonotonicClock()
    private let events: EventChannel
    private let onFinish: @Sendable (JobResult) -> Void
    private let control = Mutex(Control())
    private var pid: pid_t = 0
    private var channel: Int32 = -1

    /// - Throws: The refusal of a continuous job the policy does not allow.
    init(
        job: PluginJob, configuration: RunConfiguration, pool: WorkerPool, events: EventChannel,
        onFinish: @escaping @Sendable (JobResult) -> Void
    ) throws(CurfewError) {
        if job.isContinuous && !configuration.policy.allowsContinuous {
            throw CurfewError(
                .continuousNotAllowed,
                "Job '\(job.name)' is continuous (it runs without a budget, like an iOS background mode); run it with --allow-continuous.")
        }
        self.job = job
        self.configuration = configuration
        self.pool = pool
        self.events = events
        self.onFinish = onFinish
    }

    private var policy: GrantPolicy { configuration.policy }

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
        let worker: WorkerPool.Worker
        do throws(SystemError) {
            worker = try pool.take()
        } catch {
            return conclude(crashed: "cannot start a worker (\(pool.executable)): \(error.message)")
        }
        pid = worker.pid
        channel = worker.channel
        send(runMessage(remaining: deadline.map { clock.now().duration(to: $0) }))
        // Expirations asked for while the worker was starting follow the run message.
        let unsent = control.withLock { c -> [ExpirationReason] in
            c.channelReady = true
            defer { c.unsent.removeAll() }
            return c.unsent
        }
        for reason in unsent { send(#"{"type":"expire","reason":"\#(reason.rawValue)"}"#) }
        if let deadline {
            arm(at: deadline.advanced(by: .zero - policy.lead)) { [self] in expireNow(.timeout) }
            arm(at: deadline) { [self] in killAtDeadline() }
        }
        let out = worker.out
        let err = worker.err
        // A thread of its own: the loop blocks in poll and waitpid, and Dispatch's
        // pool is only as wide as the machine has cores.
        Thread.detach { self.supervise(out: out, err: err) }
    }

    func expireNow(_ reason: ExpirationReason) {
        let (move, ready) = control.withLock { c -> (CurfewInstant?, Bool) in
            guard c.started && !c.finished else { return (nil, false) }
            if c.expiredBy == nil { c.expiredBy = reason }
            if !c.channelReady { c.unsent.append(reason) }
            guard reason != .timeout else { return (nil, c.channelReady) }
            // An early expiration gets at most one lead time from now.
            let lead = job.isContinuous ? policy.shutdownLead : policy.lead
            let early = clock.now().advanced(by: lead)
            guard c.deadline.map({ early < $0 }) ?? true else { return (nil, c.channelReady) }
            c.deadline = early
            return (early, c.channelReady)
        }
        if ready { send(#"{"type":"expire","reason":"\#(reason.rawValue)"}"#) }
        if let move { arm(at: move) { [self] in killAtDeadline() } }
    }

    func status() -> JobStatus {
        control.withLock { c in
            JobStatus(
                job: job.name, isChunked: job.isChunked,
                timeRemaining: c.deadline.map { max(.zero, clock.now().duration(to: $0)) },
                progress: c.progress, chunks: c.chunks, isExpiring: c.expiredBy != nil)
        }
    }

    // MARK: Supervising

    private func runMessage(remaining: Duration?) -> String {
        var message = JSONLine("type", "run")
        message.add("protocol", WorkerProtocol.version)
        message.add("plugin", job.pluginPath)
        message.add("job", job.name)
        message.add("budget", remaining.map { max($0, .milliseconds(1)).seconds })
        message.add("lead", (job.isContinuous ? policy.shutdownLead : policy.lead).seconds)
        message.addRaw("continuous", job.isContinuous ? "true" : "false")
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

    private func send(_ line: String) {
        guard channel >= 0 else { return }
        WorkerProtocol.send(line, to: channel)
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

    private func killAtDeadline() {
        let kill = control.withLock { c -> Bool in
            guard !c.finished, c.killedAt == nil, let deadline = c.deadline,
                clock.now().advanced(by: .milliseconds(1)) >= deadline
            else { return false }
            c.killedAt = clock.now()
            return true
        }
        if kill { Glibc.kill(-pid, SIGKILL) }
    }

    /// Reads the worker's messages, stdout and stderr until all three close, then reaps it.
    private func supervise(out: Int32, err: Int32) {
        var buffers = [LineBuffer(), LineBuffer(), LineBuffer()]
        var descriptors = [channel, out, err]
        var open = [true, true, true]
        var chunk = [UInt8](repeating: 0, count: 65536)
        while open.contains(true) {
            var polls = descriptors.indices.filter { open[$0] }.map { pollfd(fd: descriptors[$0], events: Int16(POLLIN), revents: 0) }
            let ready = polls.withUnsafeMutableBufferPointer { poll($0.baseAddress, nfds_t($0.count), -1) }
            if ready < 0 {
                if errno == EINTR { continue }
                break
            }
            for entry in polls where entry.revents != 0 {
                let index = descriptors.firstIndex(of: entry.fd)!
                let count = chunk.withUnsafeMutableBytes { read(entry.fd, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                if count <= 0 {
                    open[index] = false
                    if let last = buffers[index].flush() { handle(last, from: index) }
                    continue
                }
                let lines = chunk.withUnsafeBytes { buffers[index].append(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
                for line in lines { handle(line, from: index) }
            }
        }
        descriptors.forEach { close($0) }
        descriptors.removeAll()
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        // Whatever the worker left in its group goes with it.
        Glibc.kill(-pid, SIGKILL)
        conclude(waitStatus: status)
    }

    private func handle(_ line: String, from stream: Int) {
        switch stream {
        case 0: handleMessage(line)
        case 1: output(line, level: .info, stream: "stdout")
        default:
            control.withLock { c in
                c.stderrTail.append(line)
                if c.stderrTail.count > 5 { c.stderrTail.removeFirst() }
            }
            output(line, level: .warning, stream: "stderr")
        }
    }

    /// A line the plugin printed, tagged with its job and stream.
    private func output(_ line: String, level: LogLevel, stream: String) {
        control.withLock { c in
            guard !c.finished else { return }
            events.post(.log(job: job.name, level: level, message: "[\(stream)] \(line)"))
        }
    }

    private func handleMessage(_ line: String) {
        guard let message = try? JSONReader.parse(Array(line.utf8)), let type = message["type"]?.stringValue else {
            return output("unreadable message from the worker: \(line)", level: .warning, stream: "worker")
        }
        control.withLock { c in
            guard !c.finished else { return }
            switch type {
            case "log":
                let level = message["level"]?.stringValue.flatMap { name in
                    [LogLevel.debug, .info, .warning, .error].first { $0.description == name }
                } ?? .info
                events.post(.log(job: job.name, level: level, message: message["message"]?.stringValue ?? ""))
            case "progress":
                let progress = Progress(
                    completed: Int64(message["completed"]?.numberValue ?? 0), total: Int64(message["total"]?.numberValue ?? 0))
                c.progress = progress
                events.post(.progress(job: job.name, progress))
            case "expiring":
                let reason = message["reason"]?.stringValue.flatMap(ExpirationReason.init(rawValue:)) ?? .timeout
                if c.expiredBy == nil { c.expiredBy = reason }
                events.post(.expiring(job: job.name, reason: reason))
            case "finished":
                c.chunks = UInt64(message["chunks"]?.numberValue ?? 0)
                if let completed = message["completed"]?.numberValue, let total = message["total"]?.numberValue {
                    c.progress = Progress(completed: Int64(completed), total: Int64(total))
                }
                let outcome = message["outcome"]?.stringValue.flatMap(Outcome.init(rawValue:)) ?? .failed
                c.reported = (outcome, message["reason"]?.stringValue ?? "")
            default:
                break
            }
        }
    }

    private func conclude(waitStatus status: Int32) {
        control.withLock { c in
            guard !c.finished else { return }
            let signaled = status & 0x7F != 0 && status & 0x7F != 0x7F
            let signal = status & 0x7F
            let code = (status >> 8) & 0xFF
            let outcome: Outcome
            let reason: String
            if let killedAt = c.killedAt, let deadline = c.deadline, c.reported == nil || signaled {
                outcome = .terminated
                let late = deadline.duration(to: killedAt).seconds * 1000
                reason = "still running at the hard deadline; its worker was killed \(formatMilliseconds(late)) ms after it"
            } else if let reported = c.reported {
                (outcome, reason) = reported
            } else if signaled {
                outcome = .crashed
                var why = "its worker died of \(WorkerProtocol.signalName(signal))"
                if let limit = configuration.limits.explain(signal: signal) { why += "; \(limit)" }
                if !c.stderrTail.isEmpty { why += "; stderr: " + c.stderrTail.joined(separator: " | ") }
                reason = why
            } else {
                outcome = .crashed
                var why = "its worker exited with status \(code) before the job finished"
                if !c.stderrTail.isEmpty { why += "; stderr: " + c.stderrTail.joined(separator: " | ") }
                reason = why
            }
            finishLocked(&c, outcome: outcome, reason: reason)
        }
    }

    private func conclude(crashed reason: String) {
        control.withLock { c in
            guard !c.finished else { return }
            finishLocked(&c, outcome: .crashed, reason: reason)
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

private func formatMilliseconds(_ value: Double) -> String {
    let tenths = Int64((value * 10).rounded())
    return "\(tenths / 10).\(abs(tenths % 10))"
}
