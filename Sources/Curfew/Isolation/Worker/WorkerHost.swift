import CurfewFormats
import Dispatch
import Synchronization
import _CurfewShims

/// The jobs one worker runs, each with a runner of its own.
final class WorkerHost: Sendable {
    private struct State {
        var runners: [String: Runner] = [:]
        var live = 0
        var closed = false
        var last = false
        /// The chunk count last sent for each job.
        var sentChunks: [String: UInt64] = [:]
        var statusTimerStarted = false
        /// Each plugin file opened so far (a plugin's jobs share a worker, and
        /// its entry is called once), or why it could not be.
        var opened: [String: Result<PluginLoader.OpenedPlugin, CurfewError>] = [:]
        /// Each manifest loaded so far.
        var loaded: [String: PluginScan] = [:]
    }

    /// How often the host hears how many chunks each job has run, while
    /// the count changes: its live display, and the count it reports for a
    /// worker that is killed or dies.
    static let statusInterval: Duration = .milliseconds(100)
    /// Where the status is sent from: a timer only enqueues it here, since
    /// a write on the channel may block and a timer's work must not.
    private let statusLane = SerialQueue(label: "curfew.worker.status", target: SerialQueue.host)

    private let writer: ChannelWriter
    private let state = Mutex(State())
    /// The jobs' checkpoints, which the host keeps.
    let checkpoints: WorkerCheckpoints
    /// Whether the processes left behind are ended whenever no job runs
    /// (false only for tests, whose process is not a worker's).
    private let endsLeftovers: Bool

    init(channel: Int32, endsLeftovers: Bool = true) {
        let writer = ChannelWriter(channel: channel)
        self.writer = writer
        checkpoints = WorkerCheckpoints(send: { writer.send($0) }, attaching: { writer.send($0, attaching: $1) })
        self.endsLeftovers = endsLeftovers
    }

    private func send(_ line: String) {
        writer.send(line)
    }

    func refuse(_ job: String, _ reason: String) {
        send(IsolationWorker.finished(job: job, outcome: .failed, reason: reason, chunks: 0, progress: nil))
    }

    /// Loads the plugin and starts the job a `run` message names.
    func start(_ run: HostMessage.Run) {
        let parameters = run.parameters
        let jobName = run.job
        let last = run.last
        // The host's policy and the instant it started the job's grant: this
        // grant is the same one, on the clock both processes read.
        var policy: GrantPolicy
        do throws(CurfewError) {
            policy = try GrantPolicy(
                budget: .nanoseconds(run.budgetNanoseconds), grace: run.graceNanoseconds.map { .nanoseconds($0) },
                allowsContinuous: run.continuous)
            if let stall = run.stallNanoseconds {
                guard stall >= GrantPolicy.minimumStall.nanoseconds else {
                    throw CurfewError(.invalidGrant, "A stall time of \(stall) ns is below the least, 100 ms.")
                }
                policy.stall = .nanoseconds(stall)
            }
        } catch {
            refuse(jobName, "the host sent a grant the worker cannot keep: \(error.description)")
            return ended(job: nil, last: last, counted: false)
        }
        let job: PluginJob
        switch load(run.plugin, job: jobName, index: run.index.map(Int64.init), parameters: parameters) {
        case .job(let loaded): job = loaded
        case .refused(let why):
            refuse(jobName, why)
            return ended(job: nil, last: last, counted: false)
        }
        checkpoints.seed(job: jobName, bytes: run.checkpoint)
        var configuration = RunConfiguration(policy: policy, maxConcurrentJobs: 1, parameters: parameters)
        configuration.grantStart = CurfewInstant(nanoseconds: run.started)
        configuration.submits = run.submits.map(Set.init)
        configuration.watchesConditions = run.watchesConditions
        // In the foreground, the job's grant waits for the host's word that the app is in the background.
        configuration.appState = AppState(run.app)
        // A host that keeps no state says so: the job hears it as in process.
        configuration.checkpoints = run.keepsState ? checkpoints : nil
        if let known = run.estimate, let estimate = ChunkEstimate(mean: known.mean, deviation: known.deviation, samples: known.samples) {
            configuration.estimates[jobName] = estimate
        }
        let runner = Runner(jobs: [job], configuration: configuration) { [self] event, time in
            // What the job printed reaches its pipe before the word that it ended:
            // the host drains the pipes before it acts on a channel message.
            if case .finished = event {
                curfew_shim_flush_stdout()
                sendDenials(else: jobName)
            }
            if let line = IsolationWorker.message(for: event, at: time) { send(line) }
        }
        let startTimer = state.withLock { state -> Bool in
            state.runners[jobName] = runner
            state.live += 1
            defer { state.statusTimerStarted = true }
            return !state.statusTimerStarted
        }
        if startTimer { startStatusTimer() }
        runner.start { _ in self.ended(job: jobName, last: last, counted: true) }
    }

    /// The job a `run` names, or why the worker cannot run it. A plugin's
    /// job is checked alone, at the place the scan found it; a manifest (or a
    /// run that gives no place) is loaded whole.
    private func load(_ path: String, job name: String, index: Int64?, parameters: [String: String]) -> Loaded {
        // The host checked the file's ownership before it scheduled the job.
        let loader = PluginLoader(parameters: parameters, allowsInsecurePlugins: true)
        if let index, let place = Int(exactly: index), place >= 0, !path.hasSuffix(ForeignManifestReader.suffix) {
            let opened = state.withLock { $0.opened[path] } ?? {
                let opened = Result { () throws(CurfewError) in try loader.open(path) }
                state.withLock { $0.opened[path] = opened }
                return opened
            }()
            do throws(CurfewError) {
                return .job(try opened.get().job(place, named: name))
            } catch {
                return .refused("the worker could not load the plugin: \(error.description)")
            }
        }
        let scan = state.withLock { $0.loaded[path] } ?? {
            let scan = loader.scan([path])
            state.withLock { $0.loaded[path] = scan }
            return scan
        }()
        guard let job = scan.jobs.first(where: { $0.name == name }) else {
            return .refused(
                scan.rejected.first.map { "the worker could not load the plugin: \($0.error.description)" }
                    ?? "the worker found no job '\(name)' in \(path)")
        }
        return .job(job)
    }

    private enum Loaded {
        case job(PluginJob)
        case refused(String)
    }

    /// Runs, once, the loading path of a run on a file that does not exist
    /// (nothing is opened): see ``Runner/warmUp(_:)``.
    static func warmUp(_ runner: Runner) {
        let host = WorkerHost(channel: -1)
        host.prepare()
        host.state.withLock { $0.runners["j"] = runner }
    }

    /// Goes once through the loading path of a run, on a file that does not
    /// exist (nothing is opened, and nothing is kept): in the fork server,
    /// so each fork inherits what the runtime builds on first use; in a
    /// worker before its first message, so the pages that path touches are
    /// this process's before its job waits for them.
    func prepare() {
        let path = "/nonexistent/curfew-warm-up.so"
        if case .job = load(path, job: "j", index: 0, parameters: [:]) {
            preconditionFailure("a file that does not exist loaded")
        }
        state.withLock { _ = $0.opened.removeValue(forKey: path) }
    }

    /// Sends, every ``statusInterval``, each job's chunk count if it changed,
    /// for the rest of the process's life.
    private func startStatusTimer() {
        let clock = MonotonicClock()
        _ = clock.schedule(at: clock.now().advanced(by: Self.statusInterval)) { [self] in
            statusLane.enqueue { [self] in
                sendStatus()
                startStatusTimer()
            }
        }
    }

    private func sendStatus() {
        let runners = state.withLock { Array($0.runners.values) }
        if let job = runners.first?.jobs.first?.name { sendDenials(else: job) }
        let now = MonotonicClock().now()
        for status in runners.flatMap({ $0.status() }) {
            guard let chunks = status.chunks else { continue }
            let changed = state.withLock { state -> Bool in
                guard state.sentChunks[status.job] != chunks else { return false }
                state.sentChunks[status.job] = chunks
                return true
            }
            guard changed else { continue }
            var line = JSONLine("type", "status")
            line.add("job", status.job)
            line.add("chunks", Int64(clamping: chunks))
            line.add("t", Int64(clamping: now.nanoseconds))
            send(line.text)
        }
    }

    /// Says each call the sandbox denied since the last time, as a warning
    /// in the log of the job whose hook made it (else `job`'s: a thread of
    /// the plugin's own is in no hook).
    private func sendDenials(else job: String) {
        let (denials, dropped) = Sandbox.takeDenials()
        let now = MonotonicClock().now()
        for denial in denials {
            let event = RunEvent.log(job: denial.job ?? job, level: .warning, message: "denied: \(denial.call) (\(denial.why))")
            if let line = IsolationWorker.message(for: event, at: now) { send(line) }
        }
        if dropped > 0, let line = IsolationWorker.message(for: .log(job: job, level: .warning, message: "denied: \(dropped) more calls"), at: now) {
            send(line)
        }
    }

    /// The jobs this worker still keeps a runner for (for tests).
    var keptJobCount: Int { state.withLock { $0.runners.count } }

    func appEvent(_ job: String, _ event: AppEvent, state appState: AppState, deadline: CurfewInstant?) {
        state.withLock { $0.runners[job] }?.appEvent(event, state: appState, deadline: deadline, job: job)
    }

    func expire(_ job: String, _ reason: ExpirationReason) {
        state.withLock { $0.runners[job] }?.expireRunning(reason)
    }

    /// The host is gone: expire every job as a shutdown, and leave when they
    /// have ended, or after the longest lead there is.
    func hostGone() {
        let runners = state.withLock { state -> [Runner] in
            state.closed = true
            return Array(state.runners.values)
        }
        checkpoints.hostGone()
        runners.forEach { $0.expireRunning(.shutdown) }
        closed()
        SerialQueue.host.asyncAfter(deadline: .now() + .seconds(Int(GrantPolicy.defaultGrace.seconds) + 1)) {
            Self.leave()
        }
    }

    /// Ends the process, and every process its jobs started before it.
    /// Without exit handlers: a terminated job may still hold a thread.
    static func leave() -> Never {
        ChildProcesses.endAll()
        Syscalls.exitNow(0)
    }

    /// No more jobs will come: leave once the running ones have ended.
    func closed() {
        let idle = state.withLock { state -> Bool in
            state.closed = true
            return state.live == 0
        }
        if idle { Self.leave() }
    }

    /// A job has ended (`job`: the one a runner ran), or a run was refused.
    /// A shared worker keeps nothing of an ended job: not its runner, not
    /// its checkpoint (up to 1 MiB), so a plugin's many jobs, one after
    /// another, hold no more than the ones running.
    private func ended(job: String?, last: Bool, counted: Bool) {
        if let job { checkpoints.forget(job: job) }
        let exit = state.withLock { state -> Bool in
            if let job {
                state.runners[job] = nil
                state.sentChunks[job] = nil
            }
            if counted { state.live -= 1 }
            if last { state.last = true }
            // No job runs here now: whatever processes are left, a job that
            // ended left them. Under the lock, so no new job's runner starts
            // meanwhile (a plugin constructor run while loading one could still
            // race this; its process would be ended with the rest).
            if state.live == 0 && endsLeftovers { ChildProcesses.endAll() }
            return state.live == 0 && (state.closed || state.last)
        }
        if exit { Self.leave() }
    }
}

/// Writes whole lines to the channel, one thread at a time.
final class ChannelWriter: Sendable {
    private let channel: Int32
    private let lock = Mutex(())

    init(channel: Int32) {
        self.channel = channel
    }

    func send(_ line: String) {
        lock.withLock { _ in _ = WorkerProtocol.send(line, to: channel) }
    }

    /// Sends `line` with `descriptor` attached to its first byte; false
    /// when it could not be sent.
    func send(_ line: String, attaching descriptor: Int32) -> Bool {
        let bytes = Array((line + "\n").utf8)
        return lock.withLock { _ in
            bytes.withUnsafeBytes { curfew_shim_send_with_descriptor(channel, $0.baseAddress, UInt($0.count), descriptor) } == 0
        }
    }
}

/// Reads JSON Lines from a descriptor, blocking.
final class MessageReader: @unchecked Sendable {
    // Safe because one thread at a time reads: the worker's first, up to the
    // first `run`, then the thread it starts for the channel.
    private let descriptor: Int32
    private var buffer = LineBuffer()
    private var ready: [String] = []

    init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    /// The next line, decoded, or `nil` at the end of the stream.
    func next() -> Result<HostMessage, MessageInvalid>? {
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            while ready.isEmpty {
                // Waits in poll, not in read: a read blocked on a stream socket
                // wakes each time the host reads a message this worker sent
                // (the socket has room again), and poll wakes only for input.
                _ = Syscalls.waitForInput(descriptor, milliseconds: -1)
                let count = chunk.withUnsafeMutableBytes { bytes in (try? Syscalls.read(descriptor, into: bytes)) ?? -1 }
                if count <= 0 { return nil }
                ready += chunk.withUnsafeBytes { buffer.append(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
            }
            let line = Array(ready.removeFirst().utf8)
            return Result { () throws(MessageInvalid) in try HostMessage.decode(line) }
        }
    }
}
