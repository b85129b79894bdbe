import Curfew
import CurfewFormats
import Dispatch
import Glibc
import Synchronization
import _CurfewShims

/// Exit codes, as `curfew run --help` documents them.
public enum ExitCode {
    public static let success: Int32 = 0
    public static let failure: Int32 = 1
    public static let jobNotClean: Int32 = 2
    public static let pluginRejected: Int32 = 3
    public static let usage: Int32 = 64
    /// Stdout or stderr was closed by its reader (`| head`): the jobs were
    /// expired and cleaned up. 128 + SIGPIPE, as the shell expects.
    public static let outputClosed: Int32 = 141
    /// In process, plugin code called `exit()`: the run was cut short.
    public static let jobEndedHost: Int32 = 4
    /// In process, plugin code crashed (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
    /// SIGABRT): the run was cut short, and the host said which job.
    public static let jobCrashedHost: Int32 = 5

    /// The code for a finished run: a stop (a signal's 128 + N, or
    /// ``outputClosed``) outranks a job's failure, which outranks a rejected file.
    public static func forRun(_ results: [JobResult], rejected: Int, stop: Int32?) -> Int32 {
        if let stop { return stop }
        if results.contains(where: { !$0.outcome.isClean }) { return jobNotClean }
        if rejected > 0 { return pluginRejected }
        return success
    }
}

/// The `curfew` tool: parses the arguments and runs the subcommand.
public enum CurfewMain {
    /// Runs the tool and returns its exit code.
    public static func main(_ arguments: [String]) async -> Int32 {
        let status = await command(arguments)
        return Console.outputWasClosed && status == ExitCode.success ? ExitCode.outputClosed : status
    }

    /// Runs, on the calling thread, a command that loads no plugin code in
    /// this process and awaits nothing (`list`, `help`, `--version`, the
    /// manual, completions): its exit status, or `nil` for any other
    /// command (and for arguments that do not parse), which ``main(_:)``
    /// runs. A listing then costs no thread start and no hand-off to the
    /// cooperative pool and back.
    public static func mainAtOnce(_ arguments: [String]) -> Int32? {
        guard let invocation = try? Invocation(parsing: arguments) else { return nil }
        curfew_shim_catch_sigpipe()  // as command(_:) does first
        guard let status = atOnce(invocation) else { return nil }
        return Console.outputWasClosed && status == ExitCode.success ? ExitCode.outputClosed : status
    }

    /// The commands ``mainAtOnce(_:)`` runs; `nil` for the others.
    private static func atOnce(_ invocation: Invocation) -> Int32? {
        switch invocation {
        case .help(let command):
            Console(json: false).machine(String(Help.text(command).dropLast()))
            return ExitCode.success
        case .version:
            Console(json: false).machine(Help.version)
            return ExitCode.success
        case .manual:
            Console(json: false).machine(String(Manual.roff().dropLast()))
            return ExitCode.success
        case .markdown:
            Console(json: false).machine(String(Reference.markdown().dropLast()))
            return ExitCode.success
        case .completions(let shell):
            Console(json: false).machine(String(Completions.script(for: shell).dropLast()))
            return ExitCode.success
        case .list(let options):
            return list(options)
        default:
            return nil
        }
    }

    private static func command(_ arguments: [String]) async -> Int32 {
        // A reader that goes away (`| head`) is an EPIPE the console handles,
        // not a signal that ends the host before its jobs clean up. Caught by a
        // handler that does nothing, not ignored: exec resets a handler, so a
        // program an in-process plugin runs gets SIGPIPE as usual (workers
        // start with every signal at its default anyway).
        curfew_shim_catch_sigpipe()
        let invocation: Invocation
        do throws(UsageError) {
            invocation = try Invocation(parsing: arguments)
        } catch {
            Console(json: false).error(String(Help.errorText(error).dropLast()))
            return ExitCode.usage
        }
        if let status = atOnce(invocation) { return status }
        switch invocation {
        case .help, .version, .manual, .markdown, .completions, .list:
            return ExitCode.success  // answered above
        case .run(let options):
            return await run(options)
        case .serve(let options):
            return await serve(options)
        case .control(let options):
            return control(options)
        case .new(let options):
            return new(options)
        case .test(let options):
            return test(options)
        case .state(let options):
            return state(options)
        case .history(let options):
            return history(options)
        }
    }

    static func test(_ options: TestOptions) -> Int32 {
        // The job runs in this process: what it prints is captured, as in
        // `run --isolate none`, and shown tagged; a JSON trace stays JSON.
        let lines = Mutex<(@Sendable (OutputCapture.Stream, String) -> Void)?>(nil)
        let capture: OutputCapture
        do throws(CurfewError) {
            capture = try OutputCapture { stream, line in lines.withLock { $0 }?(stream, line) }
        } catch {
            Console(json: false).error("Error: \(error.description)")
            return ExitCode.failure
        }
        let console = Console(json: options.json, output: capture.hostOutput, error: capture.hostError)
        lines.withLock { sink in
            sink = { stream, line in
                if options.json {
                    var event = JSONLine(event: "output")
                    event.add("stream", stream.rawValue)
                    event.add("line", line)
                    console.machine(event.text)
                } else {
                    console.human("[\(stream.rawValue)] \(Untrusted.line(line))")
                }
            }
        }
        defer { capture.finish() }
        ProcessExitWatch.arm { status, job in
            capture.finish()
            console.error("Error: \(job.map { "Job '\($0)'" } ?? "Plugin code") called exit(\(status)); the test ends here.")
        }
        defer { ProcessExitWatch.disarm() }
        let scan = PluginLoader(parameters: options.parameters).scan([options.plugin])
        if let rejected = scan.rejected.first {
            console.error("Error: \(Untrusted.line(rejected.path)): \(Untrusted.line(rejected.error.description))")
            return ExitCode.failure
        }
        let jobs = scan.jobs
        let job: PluginJob
        if let name = options.job {
            guard let found = jobs.first(where: { $0.name == name }) else {
                console.error("Error: \(options.plugin) has no job named '\(name)' (it has: \(jobs.map(\.name).joined(separator: ", "))).")
                return ExitCode.failure
            }
            job = found
        } else {
            guard jobs.count == 1 else {
                console.error("Error: \(options.plugin) has \(jobs.count) jobs; choose one with --job (\(jobs.map(\.name).joined(separator: ", "))).")
                return ExitCode.failure
            }
            job = jobs[0]
        }
        var policy = options.policy
        policy.allowsContinuous = true
        let report = JobHarness(job: job, policy: policy, mode: options.mode, parameters: options.parameters).run()
        capture.finish()
        if options.json {
            for event in report.trace {
                var line = JSONLine(event: "trace")
                line.add("time", event.time.seconds)
                line.add("kind", event.kind)
                if let chunk = event.chunk { line.add("chunk", Int64(chunk)) }
                line.add("detail", event.detail)
                if event.fromJobThread { line.addRaw("varies", "true") }
                console.machine(line.text)
            }
            var line = JSONLine(event: "result")
            line.add("job", report.job)
            line.add("outcome", report.outcome.rawValue)
            line.add("reason", report.reason)
            line.add("chunks", Int64(report.chunks))
            line.add("violations", report.violations)
            console.machine(line.text)
        } else {
            let mode: String
            switch options.mode {
            case .chunkCost(let cost): mode = "each chunk costs \(format(cost))"
            case .expireAtChunk(let chunk): mode = "the grant expires before chunk \(chunk)"
            }
            let grant = job.isContinuous ? "no budget (continuous)" : "budget \(format(policy.budget)), expires at \(format(policy.budget - policy.lead))"
            console.human("Testing \(job.name) from \(Untrusted.line(job.pluginPath)): \(grant); \(mode).")
            for event in report.trace { console.human(Untrusted.line(event.description)) }
            console.human("Outcome: \(report.outcome) (\(Untrusted.line(report.reason))) after \(report.chunks) chunk\(report.chunks == 1 ? "" : "s").")
            if report.violations.isEmpty {
                console.human("No contract violations.")
            } else {
                console.human("\(report.violations.count) contract violation\(report.violations.count == 1 ? "" : "s"):")
                for violation in report.violations { console.human("  - \(Untrusted.line(violation))") }
            }
        }
        // A job that cannot complete or expire cleanly fails the test, as in a run.
        if report.violations.isEmpty && report.outcome.isClean { return ExitCode.success }
        // A hook that never returned is still running: leave without exit handlers.
        if report.outcome == .terminated { _exit(ExitCode.jobNotClean) }
        return ExitCode.jobNotClean
    }

    static func new(_ options: NewOptions) -> Int32 {
        let console = Console(json: false)
        do throws(ScaffoldError) {
            let files = try Scaffold.write(options)
            let directory = options.effectiveDirectory
            console.human("Created \(directory)/ with \(files.joined(separator: ", ")).")
            switch options.language {
            case .c: console.human("Build: cd \(directory) && make")
            case .swift: console.human("Build: cd \(directory) && swift build")
            }
            return ExitCode.success
        } catch {
            console.error("Error: \(error.message)")
            return ExitCode.failure
        }
    }

    /// The first path given that does not exist or cannot be read, as an
    /// error line: a mistyped folder is the user's error (exit 1), not a
    /// plugin rejected.
    static func missingPath(_ paths: [String]) -> String? {
        for path in paths {
            var info = stat()
            if stat(path, &info) != 0 {
                let why = errno == ENOENT ? "no such file or folder" : String(cString: strerror(errno))
                return "Error: \(Untrusted.line(path)): \(why)."
            }
        }
        return nil
    }

    /// Paths as an error names them: "./" for the current folder, so that no
    /// sentence ends in "..".
    static func pathList(_ paths: [String]) -> String {
        paths.map { $0 == "." ? "./" : Untrusted.line($0) }.joined(separator: ", ")
    }

    static func list(_ options: ListOptions) -> Int32 {
        let console = Console(json: options.json)
        if let missing = missingPath(options.effectivePaths) {
            console.error(missing)
            return ExitCode.failure
        }
        // A scanner worker whose fork server died comes here and is seen through.
        ChildProcesses.adoptOrphans()
        // Loaded in a scanner worker (and cached): a crashing plugin cannot take `list` down.
        let loader = PluginLoader(allowsInsecurePlugins: options.allowInsecurePlugins)
        var scanner = SafeScanner()
        scanner.rescan = options.rescan
        let scan = scanner.scan(options.effectivePaths, loader: loader).scan
        // The listing goes out in one write.
        var lines: [String] = []
        if options.json {
            for plugin in scan.plugins {
                for job in plugin.jobs {
                    var line = JSONLine(event: "job")
                    line.add("job", job.name)
                    line.add("plugin", plugin.path)
                    line.add("summary", job.summary)
                    line.add("kind", job.foreignLibrary != nil ? "foreign" : job.isChunked ? "chunked" : "task-driven")
                    if let library = job.foreignLibrary { line.add("library", library) }
                    line.addRaw("continuous", job.isContinuous ? "true" : "false")
                    if !job.backgroundModes.isEmpty { line.add("modes", job.backgroundModes) }
                    lines.append(line.text)
                }
            }
            for rejected in scan.rejected {
                var line = JSONLine(event: "rejected")
                line.add("plugin", rejected.path)
                line.add("code", rejected.error.code.rawValue)
                line.add("reason", rejected.error.description)
                lines.append(line.text)
            }
            console.machine(lines: lines)
        } else {
            for plugin in scan.plugins {
                lines.append(Untrusted.line(plugin.path))
                let width = plugin.jobs.map(\.name.count).max() ?? 0
                for job in plugin.jobs {
                    var notes: [String] = []
                    if !job.isChunked { notes.append("task-driven") }
                    if let library = job.foreignLibrary { notes.append("foreign: \(library)") }
                    if job.isContinuous {
                        notes.append(job.backgroundModes.isEmpty ? "continuous" : "continuous: " + job.backgroundModes.joined(separator: ", "))
                    }
                    let suffix = notes.isEmpty ? "" : " [\(notes.joined(separator: ", "))]"
                    lines.append("  " + job.name + String(repeating: " ", count: width - job.name.count + 2) + Untrusted.line(job.summary + suffix))
                }
            }
            for rejected in scan.rejected {
                lines.append(console.paint("rejected", .red) + "  \(Untrusted.line(rejected.path)): \(Untrusted.line(rejected.error.description))")
            }
            console.human(lines: lines)
        }
        if scan.plugins.isEmpty && scan.rejected.isEmpty {
            console.error("Error: No plugin (a .so file or a .curfew.json manifest) in \(Self.pathList(options.effectivePaths))")
            return ExitCode.failure
        }
        return scan.rejected.isEmpty ? ExitCode.success : ExitCode.pluginRejected
    }

    /// How long a fault's report waits at most for the events posted before
    /// it (the job's last log line) to be delivered: the faulting thread is
    /// held, and events go out on the host's own queue, apart from the
    /// hooks' workers; within the second the signal handler gives the report.
    static let faultDeliveryLimit: Duration = .milliseconds(500)

    static func run(_ options: RunOptions) async -> Int32 {
        if let missing = missingPath(options.effectivePaths) {
            Console(json: options.json).error(missing)
            return ExitCode.failure
        }
        // In process, plugin code shares this process's stdout and stderr:
        // take them over before any plugin is loaded, so what it prints
        // becomes its jobs' log lines and the host's own output stays whole.
        let router = OutputRouter()
        var capture: OutputCapture?
        if options.isolation == .none {
            // `run` reads nothing from stdin, and plugin code in process gets
            // none of it either (workers start with /dev/null there).
            let null = open("/dev/null", O_RDONLY | O_CLOEXEC)
            if null >= 0 {
                dup2(null, STDIN_FILENO)
                close(null)
            }
            do throws(CurfewError) {
                capture = try OutputCapture { stream, line in router.route(stream, line) }
            } catch {
                Console(json: false).error("Error: \(error.description)")
                return ExitCode.failure
            }
        }
        let console = Console(
            json: options.json, output: capture?.hostOutput ?? STDOUT_FILENO, error: capture?.hostError ?? STDERR_FILENO)
        let reporter = Reporter(console: console, json: options.json, verbose: options.verbose)
        router.start(reporting: reporter)
        // The run whose events a fault's report waits for, once it exists.
        let faultRunner = Mutex<Runner?>(nil)
        if let capture {
            ProcessExitWatch.arm { status, job in
                capture.finish()
                reporter.hostExit(status: status, job: job ?? router.soleRunningJob())
                ChildProcesses.endAll()
            }
            _ = HookThread.reportFaults(
                human: capture.hostError, machine: options.json ? capture.hostOutput : -1, status: ExitCode.jobCrashedHost
            ) { fault in
                // What the job printed and logged before the fault comes first:
                // its output is read, and the events already posted get a
                // moment for the threads that deliver them.
                capture.finish()
                _ = faultRunner.withLock { $0 }?.waitForEvents(upTo: Self.faultDeliveryLimit)
                reporter.hostCrash(fault)
                ChildProcesses.endAll()
            }
        }
        defer { ProcessExitWatch.disarm() }
        // Stop requests are caught before anything else happens, the scan
        // included: a signal never finds the host without its handler.
        let stop = StopRequest()
        let signals: SignalMonitor
        do throws(CurfewError) {
            let signalled = Atomic<Bool>(false)
            signals = try SignalMonitor(signals: [SIGINT, SIGTERM, SIGHUP]) { number in
                // A second signal stops waiting for cleanups (a closed output before it does not count).
                if signalled.exchange(true, ordering: .relaxed) { _exit(128 + number) }
                stop.request(status: 128 + number, reason: signalName(number))
            }
        } catch {
            console.error("Error: \(error.description)")
            return ExitCode.failure
        }
        defer { signals.cancel() }
        console.onOutputClosed { _ in stop.request(status: ExitCode.outputClosed, reason: "Output closed") }

        // Processes jobs start come back here if their parent dies, so none
        // outlives its job by calling setsid() or forking twice; nor does a
        // scanner worker whose fork server died.
        ChildProcesses.adoptOrphans()
        // Isolated, the workers' fork server starts while the plugins are scanned.
        Runner.startWorkersEarly(for: options.configuration)
        defer { Runner.discardEarlyWorkers() }
        let scan = loadPlugins(options, stop: stop, console: console)
        if let status = stop.status { return status }
        reporter.scanned(scan)

        var jobs = scan.jobs
        if !options.only.isEmpty {
            let known = Set(jobs.map(\.name))
            if let unknown = options.only.first(where: { !known.contains($0) }) {
                let list = jobs.map(\.name).joined(separator: ", ")
                console.error("Error: No loaded job is named '\(unknown)' (loaded: \(list.isEmpty ? "none" : list)).")
                return ExitCode.failure
            }
            jobs = jobs.filter { options.only.contains($0.name) }
        }
        if jobs.isEmpty {
            if scan.rejected.isEmpty {
                console.error("Error: No plugin (a .so file or a .curfew.json manifest) in \(Self.pathList(options.effectivePaths))")
                return ExitCode.failure
            }
            console.error("Error: Nothing to run: every plugin file was rejected.")
            return ExitCode.pluginRejected
        }

        var configuration = options.configuration
        if !options.noState {
            switch openStore(options.stateFolder, writer: .current()) {
            case .success(let store):
                configuration.state = store
                for change in store.madePrivate { console.error("Warning: \(Untrusted.line(change)).") }
                if let interrupted = interruptedNote(store) { console.error("Warning: \(interrupted)") }
            case .failure(let error):
                console.error("Error: \(Untrusted.line(error.message)). (--no-state runs without checkpoints or history.)")
                return ExitCode.failure
            }
        }
        let lead = configuration.policy.lead
        let inProcess = options.isolation == .none
        let runner = Runner(jobs: jobs, configuration: configuration) { [capture] event, time in
            if case .finished(let result) = event {
                // A job's last lines of output come before the line that says it ended.
                if let capture { router.jobFinishing(result.job, capture: capture) }
                // In process, the processes a job left are this process's children:
                // with no other job running, they can only be the ended job's.
                if inProcess && router.noJobRuns(besides: result.job) { ChildProcesses.endAll() }
            }
            reporter.event(event, at: time)
        }
        router.attach(runner)
        faultRunner.withLock { $0 = runner }

        stop.onRequest { reason in
            let again = reason.hasPrefix("SIG") ? " Send it again to stop at once." : ""
            console.error("\(reason): expiring every job now; they have up to \(format(lead)) to clean up.\(again)")
            runner.shutdown()
        }

        let live = startLiveDisplay(runner: runner, reporter: reporter, console: console, enabled: !options.json)
        let results = await runner.run()
        // A job whose hook faulted is over at its hard deadline: the fault's
        // report, not the summary, ends the process.
        HookThread.waitIfFaulting()
        ProcessExitWatch.disarm()
        // In process, every job has ended: so does every process they started.
        // (A worker ends its own jobs' processes, the fork server a dead
        // worker's; here supervising threads may still reap workers.)
        if inProcess { ChildProcesses.endAll() }
        capture?.finish()
        live?.cancel()
        console.setLive([])

        reporter.summary(results, rejected: scan.rejected.count, width: console.columns)
        for problem in runner.stateProblems { console.error("Warning: \(Untrusted.line(problem))") }
        closeLog(of: configuration.state, console: console)
        let code = ExitCode.forRun(results, rejected: scan.rejected.count, stop: stop.status)
        if results.contains(where: { $0.outcome == .terminated }) {
            // A terminated job may still be running on a worker thread: do not
            // run exit handlers (the plugin's among them) under its feet.
            _exit(code)
        }
        return code
    }

    /// What opening `store` as its writer found a host before had left running.
    static func interruptedNote(_ store: StateStore) -> String? {
        let count = store.interrupted
        guard count > 0 else { return nil }
        return "\(count) job run\(count == 1 ? "" : "s") a host before left running (it was killed, or its machine went down) "
            + "\(count == 1 ? "is" : "are") marked interrupted in the history."
    }

    /// Folds the store's log into `state.db` as the host leaves, so the
    /// file alone holds the store.
    static func closeLog(of store: StateStore?, console: Console) {
        do throws(CurfewError) {
            try store?.checkpointLog()
        } catch {
            console.error("Warning: \(Untrusted.line(error.description))")
        }
    }

    private static func signalName(_ number: Int32) -> String {
        switch number {
        case SIGINT: "SIGINT"
        case SIGTERM: "SIGTERM"
        case SIGHUP: "SIGHUP"
        default: "Signal \(number)"
        }
    }

    /// Scans in a scanner worker first, so a plugin that crashes or hangs
    /// while loading is rejected, not fatal. In process (`--isolate none`),
    /// then loads what the scanner vouched for.
    static func loadPlugins(_ options: RunOptions, stop: StopRequest, console: Console) -> PluginScan {
        let loader = PluginLoader(parameters: options.parameters, allowsInsecurePlugins: options.allowInsecurePlugins)
        var scanner = SafeScanner()
        scanner.rescan = options.rescan
        scanner.takesSnapshots = true
        // A stop during the scan kills the scanner: a plugin hanging in its
        // constructor does not hold the host for the scan's whole timeout.
        let report = scanner.scan(options.effectivePaths, loader: loader) { stop.status != nil }
        if let problem = report.snapshotProblem {
            console.error("Warning: plugins load from their own files, not snapshots (\(Untrusted.line(problem))): one overwritten in place crashes its job.")
        }
        for note in report.snapshotNotes { console.error("Warning: \(Untrusted.line(note)).") }
        let safe = report.scan
        if stop.status != nil { return safe }
        guard options.isolation == .none else { return safe }
        var scan = safe.plugins.isEmpty ? PluginScan() : loader.load(vouched: safe.plugins)
        scan.rejected = safe.rejected + scan.rejected
        return scan
    }

    private static func startLiveDisplay(
        runner: Runner, reporter: Reporter, console: Console, enabled: Bool
    ) -> (any DispatchSourceTimer)? {
        guard enabled && console.humanIsTerminal else { return nil }
        let timer = DispatchSource.makeTimerSource(queue: .global())
        timer.schedule(deadline: .now(), repeating: .milliseconds(250))
        timer.setEventHandler {
            console.setLive(reporter.liveLines(runner.status(), width: console.columns))
        }
        timer.activate()
        return timer
    }
}
