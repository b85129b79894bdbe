import CurfewFormats
import Dispatch
import Synchronization
import _CurfewShims

/// The worker role: `curfew __worker`, started by a host with `--isolate job`
/// or `--isolate plugin`, or to scan plugin files.
///
/// It reads messages from fd 3. A `run` starts a job with the in-process
/// runner and reports its events back, tagged with the job; an `expire`
/// expires one. The first `run` applies the worker's limits before any plugin
/// is loaded. The worker exits when its last job ends: after the job whose
/// `run` said `last`, or once the host has closed the socket and no job is
/// left. It prints nothing itself: stdout and stderr belong to the plugins.
///
/// - Important: Plugin code runs in this process and can write on fd 3, so
///   nothing the host reads from it is more than a claim.
public enum IsolationWorker {
    /// The hidden first argument that starts `curfew` as a worker.
    public static let argument = WorkerProtocol.workerArgument
    /// The hidden first argument that starts `curfew` as a fork server.
    public static let forkServerArgument = ForkServer.workerArgument

    /// For a helper the host started (a worker, the fork server, a
    /// scanner): asks for SIGKILL when the host dies, then checks that the
    /// host, named in the environment, is still its parent — it may have
    /// died before the request, and then no signal would come.
    ///
    /// - Returns: `false` when the host is gone: leave at once.
    public static func bindToHost() -> Bool {
        guard let text = Syscalls.environmentValue(Syscalls.parentVariable), let host = Int32(text) else {
            return true  // not started by a host (by hand, or by an older one)
        }
        return curfew_shim_die_with_parent(host) == 0
    }

    /// Serves forks on fd 3, and returns when the host is done, or at once
    /// when the process is not single-threaded and forking it would be
    /// unsafe. Each forked child goes on as a worker (``main()``) and exits;
    /// it never returns here.
    ///
    /// The forks come from a thread that has run no Swift
    /// (`curfew_shim_fork_server_on_fresh_thread`), not from this one: Swift
    /// keeps each thread's id the first time the thread takes one of its
    /// locks (a `Mutex`, or the runtime's for making a lazy global), a
    /// forked child's one thread inherits its parent's copy, and a lock the
    /// child then takes holds the parent's id. Another thread that waits
    /// for it spins in the kernel's refusal for good, as does the holder's
    /// unlock: a worker's job whose `create` made a global another thread
    /// waited for ran until its deadline killed it. When the thread cannot
    /// be made, or the server cannot watch its children, it returns as when
    /// the host is done: the host then spawns each worker instead.
    public static func serveForks() {
        // Before the warm-up, which asks whether namespaces are needed.
        WorkerSandbox.actAsWithoutLandlockIfAsked()
        warmUp()
        // Its workers prepare a sandbox: each makes its rules from the paths
        // this opens once, under the call filter this installs once.
        if let spec = WorkerSandbox.aheadSpec() {
            Sandbox.openCommonPaths()
            Sandbox.prepareServer(network: spec.network, allowsExec: spec.allowsExec)
        }
        _ = curfew_shim_fork_server_on_fresh_thread(WorkerProtocol.channelDescriptor) { Syscalls.exit(IsolationWorker.main()) }
    }

    /// Kept so that making the metadata of each cannot be optimized away.
    nonisolated(unsafe) static var warmedTypes: [Any.Type] = []

    /// Does once, in the server, the first-time work every child would do
    /// (type metadata, protocol conformances, the JSON reader and writer, the
    /// runner's types), so each fork inherits it. Starts no thread: the server
    /// serves only while it has one (and the thread it forks from).
    static func warmUp() {
        let sample = HostMessage.run(HostMessage.Run(
            plugin: "/p.so", job: "j", index: 0, budgetNanoseconds: 5, graceNanoseconds: 1, started: 1, app: .background, keepsState: true,
            checkpoint: [1], estimate: HostMessage.Estimate(mean: 1, deviation: 1, samples: 1), continuous: false, last: true,
            parameters: ["k": "v"], limits: HostMessage.Limits(memoryBytes: 0, cpuSeconds: 0, openFiles: 0),
            sandbox: HostMessage.Sandbox(network: .off, read: ["/p.so"], write: [], scratch: "/s", exec: false)))
        if case .run(let run)? = try? HostMessage.decode(Array(sample.line.utf8)), let sandbox = run.sandbox {
            // What a sandboxed worker does before it applies its sandbox, short of applying it.
            let rules = WorkerSandbox.rules(for: sandbox)
            Sandbox.withSpec(rules) { _ in }
            _ = Sandbox.Applied(layers: [.files, .systemCalls], landlockABI: 1).missing(for: rules)
            _ = Sandbox.takeDenials()
        }
        // The channel's reader, as a worker's first wait takes it: poll, read, decode.
        if let pair = try? Syscalls.socketPair(.stream) {
            if (try? Syscalls.writeAll(pair[1], Array((sample.line + "\n").utf8))) != nil {
                _ = MessageReader(descriptor: pair[0]).next()
            }
            pair.forEach { Syscalls.close($0) }
        }
        _ = JobNaming.summaryProblem(Array("s".utf8))
        // Types a worker's first message and first run copy, which the code
        // above only makes: their metadata, made once here.
        warmedTypes = [Result<HostMessage, MessageInvalid>.self, (any CheckpointKeeper)?.self]
        var estimates: [String: ChunkEstimate] = [:]
        estimates["j"] = .empty
        precondition(estimates.count == 1)
        EventChannel.warmUp()
        // One throwaway child now, none per worker: whether user namespaces
        // work here, where workers make them (the kernel has no Landlock).
        if Sandbox.landlockABI <= 0 { _ = Sandbox.namespacesUsable }
        let job = PluginJob(scannedName: "j", summary: "s", pluginPath: "/p.so", isContinuous: false, isChunked: true, foreignLibrary: nil, index: 0)
        let policy = GrantPolicy()
        let runner = Runner(jobs: [job], configuration: RunConfiguration(policy: policy, maxConcurrentJobs: 1, parameters: ["k": "v"]))
        _ = message(for: .log(job: "j", level: .info, message: "m"), at: CurfewInstant(nanoseconds: 1))
        _ = finished(job: "j", outcome: .completed, reason: "r", chunks: 1, progress: JobProgress(completed: 1, total: 1))
        // The scanner's path, on a file dlopen refuses before any code of it
        // could run (an empty one), and both kinds of verdict it sends.
        let scan = PluginLoader(parameters: [:], allowsInsecurePlugins: true).scan(["/proc/self/cmdline"])
        _ = FileResult.rejected(code: scan.rejected.first?.error.code.rawValue ?? "", reason: "r").message(file: "/p.so")
        _ = FileResult.jobs([ScannedJob(job)]).message(file: "/p.so")
        _ = ScanCache.shardName(for: "/p.so")
        Runner.warmUp(job)
        WorkerHost.warmUp(runner)
        Grant.warmUp()
        _ = RunConfiguration.cpuLimit  // the CPU limit's files, read here once for every fork
    }

    /// Runs the worker on the calling thread (the process's first) and
    /// returns its exit status. Synchronous: a scanner starts no thread at
    /// all. The thread reads the channel for good; the jobs' hooks run on
    /// libdispatch's workers.
    public static func main() -> Int32 {
        _ = SignalMask.unblockAll()
        // This process is its plugin's: no thread of it is real-time.
        TimerThread.staysInNormalClass()
        let channel = WorkerProtocol.channelDescriptor
        // A process a plugin starts must not inherit the socket (it would keep it open).
        Syscalls.setCloseOnExec(channel)
        let messages = MessageReader(descriptor: channel)
        // Made before the first message, which a worker forked ahead of need
        // waits for: what every run needs first is done while it waits, not
        // between the host's `run` and the job's start. Nothing is loaded.
        let host = WorkerHost(channel: channel)
        host.prepare()
        // While this thread is the process's only one, as the job's sandbox needs.
        WorkerSandbox.prepareAhead()
        // A worker the host started ahead of need and no longer needs: the socket just closes.
        guard var received = messages.next() else { return 0 }
        // Its job's sandbox, when the host knew it before the job (a run of
        // one plugin's jobs): applied while the worker waits, then kept for
        // the `run` that names the same.
        var confined = Confinement.none
        if case .success(.confine(let sandbox)) = received {
            do throws(Sandbox.Failure) {
                try WorkerSandbox.apply(sandbox)
                confined = .applied(sandbox)
            } catch {
                confined = .failed(error)
            }
            guard let next = messages.next() else { return 0 }
            received = next
        }
        let first: HostMessage.Run
        switch received {
        case .failure(let invalid):
            send(error: "the first message is no message: \(invalid.reason)", to: channel)
            return 2
        case .success(.scan(let files)) where confined.isNone:
            Syscalls.exitNow(SafeScanner.serve(files, channel: channel))  // plugins' exit handlers are not ours to run
        case .success(.run(let run)):
            first = run
        case .success:
            send(error: confined.isNone ? "the first message was neither 'run' nor 'scan'" : "'confine' was followed by no 'run'", to: channel)
            return 2
        }
        let limits = first.limits
        let limited = curfew_shim_limit_worker(limits.memoryBytes, limits.cpuSeconds, limits.openFiles)
        // What a job starts is this worker's to end, even if it calls setsid().
        ChildProcesses.adoptOrphans()
        HookThread.unblockSignalsInPluginCode()
        // A hook that crashes says where on the channel first: the host's reason names it.
        HookThread.reportCrashes(on: channel)
        if limited != 0 {
            host.refuse(first.job, "the worker cannot apply its limits: \(SystemError(errno: limited).message)")
            Syscalls.exitNow(1)
        }
        // While this thread is the process's only one: Landlock binds only it
        // and the threads it starts later.
        switch (confined, first.sandbox) {
        case (.none, nil):
            break
        case (.none, let sandbox?):
            do throws(Sandbox.Failure) {
                try WorkerSandbox.apply(sandbox)
            } catch {
                host.refuse(first.job, "the worker cannot apply its sandbox: \(error.message)")
                Syscalls.exitNow(1)
            }
        case (.failed(let error), _):
            host.refuse(first.job, "the worker cannot apply its sandbox: \(error.message)")
            Syscalls.exitNow(1)
        case (.applied(let applied), let sandbox):
            // A sandbox cannot be widened: only the one applied may run.
            guard applied == sandbox else {
                host.refuse(first.job, "the worker was confined ahead for another sandbox than its job's")
                Syscalls.exitNow(1)
            }
        }
        // The job's hooks run on Dispatch's workers; this thread reads the channel.
        host.start(first)
        read(messages, for: host)
    }

    /// What a `confine` message left. Not a `Result`: a generic type's first
    /// use costs a forked worker a metadata search (see ``WorkerSandbox``).
    private enum Confinement {
        case none
        case applied(HostMessage.Sandbox)
        case failed(Sandbox.Failure)

        var isNone: Bool {
            if case .none = self { return true }
            return false
        }
    }

    /// Says, before any job, why this worker cannot go on.
    private static func send(error: String, to channel: Int32) {
        var line = JSONLine("type", "error")
        line.add("message", error)
        _ = WorkerProtocol.send(line.text, to: channel)
    }

    /// Reads the channel's messages after the first `run`, for good: the
    /// host's end of it closing is the host gone.
    private static func read(_ messages: MessageReader, for host: WorkerHost) -> Never {
        while let received = messages.next() {
            // Only the host writes to this end, and it sends only what decodes:
            // a line that does not means the two do not agree, and a job it
            // was about would wait for ever. Said, and the worker ends.
            guard case .success(let message) = received else {
                if case .failure(let invalid) = received {
                    send(error: "the host sent a line that is no message: \(invalid.reason)", to: WorkerProtocol.channelDescriptor)
                }
                Syscalls.exitNow(2)
            }
            switch message {
            case .run(let run): host.start(run)
            case .expire(let job, let reason): host.expire(job, ExpirationReason(reason))
            case .app(let job, let event, let state, let deadline):
                host.appEvent(job, AppEvent(event), state: AppState(state), deadline: deadline.map { CurfewInstant(nanoseconds: $0) })
            case .close: host.closed()
            case .checkpointSaved(_, let id, let status, let text): host.checkpoints.answered(id: id, status: status, message: text)
            case .scan, .confine: continue
            }
        }
        // The socket ended without a close: the host is gone. Nobody will kill
        // this worker at a deadline now, so expire its jobs and leave.
        host.hostGone()
        // The jobs end on their own threads; the last one to end exits the process.
        Syscalls.waitForever()
    }

    /// The message for an event, with `t`: the instant it happened on the
    /// system's monotonic clock, which the host reads too.
    static func message(for event: RunEvent, at time: CurfewInstant) -> String? {
        var line: JSONLine
        switch event {
        case .started, .output:
            return nil
        case .log(let job, let level, let text):
            line = JSONLine("type", "log")
            line.add("job", job)
            line.add("level", level.description)
            line.add("message", WorkerProtocol.truncatedLogMessage(text))
        case .progress(let job, let progress):
            line = JSONLine("type", "progress")
            line.add("job", job)
            line.add("completed", progress.completed)
            line.add("total", progress.total)
        case .expiring(let job, let reason):
            line = JSONLine("type", "expiring")
            line.add("job", job)
            line.add("reason", reason.rawValue)
        case .nextRunRequested(let job, let delay):
            line = JSONLine("type", "next-run")
            line.add("job", job)
            line.add("ms", delay.milliseconds)
        case .conditionsRequired(let job, let conditions):
            line = JSONLine("type", "conditions")
            line.add("job", job)
            line.add("mask", Int64(Condition.mask(of: conditions)))
        case .runSubmitted(let job, let run):
            line = JSONLine("type", "submit")
            line.add("job", job)
            line.add("target", run.job)
            line.addRaw("parameters", JSONLine.object(run.parameters))
            line.add("ms", run.after.milliseconds)
        case .finished(let result):
            line = finishedLine(job: result.job, outcome: result.outcome, reason: result.reason, chunks: result.chunks, progress: result.progress)
            line.add("t", Int64(clamping: time.nanoseconds))
            // What the chunks took, for the host's store and metrics: the lines before the job's end.
            var before = ""
            if let estimate = result.estimate {
                var learnt = JSONLine("type", "estimate")
                learnt.add("job", result.job)
                learnt.add("mean", estimate.mean)
                learnt.add("deviation", estimate.deviation)
                learnt.add("samples", Int64(clamping: estimate.samples))
                before += learnt.text + "\n"
            }
            let measures = result.measures
            if !measures.chunkCounts.isEmpty || measures.expireLateness != nil {
                var measured = JSONLine("type", "measures")
                measured.add("job", result.job)
                measured.addRaw("chunk_counts", "[" + measures.chunkCounts.map { String(Int64(clamping: $0)) }.joined(separator: ",") + "]")
                measured.add("chunk_ns", Int64(clamping: measures.chunkNanoseconds))
                if let late = measures.expireLateness { measured.add("expire_late_ns", late.nanoseconds) }
                before += measured.text + "\n"
            }
            return before + line.text
        }
        line.add("t", Int64(clamping: time.nanoseconds))
        return line.text
    }

    static func finished(job: String, outcome: Outcome, reason: String, chunks: UInt64, progress: JobProgress?) -> String {
        finishedLine(job: job, outcome: outcome, reason: reason, chunks: chunks, progress: progress).text
    }

    private static func finishedLine(job: String, outcome: Outcome, reason: String, chunks: UInt64, progress: JobProgress?) -> JSONLine {
        var line = JSONLine("type", "finished")
        line.add("job", job)
        line.add("outcome", outcome.rawValue)
        line.add("reason", reason)
        line.add("chunks", Int64(clamping: chunks))
        if let progress {
            line.add("completed", progress.completed)
            line.add("total", progress.total)
        }
        return line
    }
}
