import Curfew
import CurfewHost
import Dispatch
import Synchronization

/// What `curfew run` shows of a ``RunHost``'s run: the console and its
/// reporter, and in process the capture of plugin code's stdout and
/// stderr, the watches that name a job which ends the process, and the
/// live lines on a terminal.
final class RunOutput: Sendable {
    let console: Console
    private let reporter: Reporter
    private let router = OutputRouter()
    private let capture: OutputCapture?
    private let paths: [String]
    private let inProcess: Bool
    private let json: Bool
    private let verbose: Bool
    /// The run, once its jobs start (for a fault's report and the live lines).
    private let runner = Mutex<Runner?>(nil)
    private let live = Mutex<LiveLines?>(nil)

    /// The timer that redraws the live lines.
    private struct LiveLines: @unchecked Sendable {
        // Safe because a dispatch source may be cancelled from any thread.
        let timer: any DispatchSourceTimer
    }

    /// How long a fault's report waits at most for the events posted before
    /// it (the job's last log line) to be delivered: the faulting thread is
    /// held, and events go out on the host's own queue, apart from the
    /// hooks' workers; within the second the signal handler gives the report.
    static let faultDeliveryLimit: Duration = .milliseconds(500)

    /// `nil` once the console has said why the output cannot be set up.
    init?(_ options: RunOptions) {
        paths = options.effectivePaths
        inProcess = options.isolation == .none
        json = options.json
        verbose = options.verbose
        var capture: OutputCapture?
        if inProcess {
            // In process, plugin code shares this process's stdout and
            // stderr: take them over before any plugin is loaded, so what it
            // prints becomes its jobs' log lines and the host's own output
            // stays whole. It reads nothing from stdin either (workers start
            // with /dev/null there).
            if let null = try? Syscalls.open("/dev/null", .read) {
                try? Syscalls.duplicate(null, onto: Syscalls.standardInput)
                Syscalls.close(null)
            }
            let router = self.router
            do throws(CurfewError) {
                capture = try OutputCapture { stream, line in router.route(stream, line) }
            } catch {
                Console(json: false).error("Error: \(error.description)")
                return nil
            }
        }
        self.capture = capture
        console = Console(json: options.json, output: capture?.hostOutput ?? Syscalls.standardOutput, error: capture?.hostError ?? Syscalls.standardError)
        reporter = Reporter(console: console, json: options.json, verbose: options.verbose)
        router.start(reporting: reporter)
        if let capture { watchTheProcessEnd(capture) }
    }

    private func watchTheProcessEnd(_ capture: OutputCapture) {
        ProcessExitWatch.arm { [router, reporter] status, job in
            capture.finish()
            reporter.hostExit(status: status, job: job ?? router.soleRunningJob())
            ChildProcesses.endAll()
        }
        _ = HookThread.reportFaults(human: capture.hostError, machine: json ? capture.hostOutput : -1, status: ExitCode.jobCrashedHost) {
            [self] fault in
            // What the job printed and logged before the fault comes first:
            // its output is read, and the events already posted get a
            // moment for the threads that deliver them.
            capture.finish()
            _ = runner.withLock { $0 }?.waitForEvents(upTo: Self.faultDeliveryLimit)
            reporter.hostCrash(fault)
            ChildProcesses.endAll()
        }
    }

    func handle(_ event: RunHost.Event) {
        switch event {
        case .warning(let warning):
            console.error("Warning: " + Self.text(warning))
        case .scanned(let scan):
            reporter.scanned(scan)
        case .running(let runner):
            router.attach(runner)
            self.runner.withLock { $0 = runner }
            startLiveLines(runner)
        case .processes(let setup):
            if verbose && !json { console.error(Self.text(setup)) }
        case .stopping(let reason, let lead):
            let again = reason.hasPrefix("SIG") ? " Send it again to stop at once." : ""
            console.error("\(reason): expiring every job now; they have up to \(format(lead)) to clean up.\(again)")
        case .run(let event, let time):
            if case .finished(let result) = event {
                // A job's last lines of output come before the line that says it ended.
                if let capture { router.jobFinishing(result.job, capture: capture) }
                // In process, the processes a job left are this process's children:
                // with no other job running, they can only be the ended job's.
                if inProcess && router.noJobRuns(besides: result.job) { ChildProcesses.endAll() }
            }
            reporter.event(event, at: time)
        }
    }

    /// Says how the run ended: the summary, or why nothing ran.
    func finish(_ outcome: RunHost.Outcome) {
        ProcessExitWatch.disarm()
        capture?.finish()
        // The runner's events hold this output: the cycle ends with the run.
        defer { runner.withLock { $0 = nil } }
        live.withLock { $0 }?.timer.cancel()
        console.setLive([])
        if let failure = outcome.failure {
            console.error("Error: " + text(failure))
            return
        }
        // Stopped before any job started: nothing to sum up.
        guard runner.withLock({ $0 }) != nil else { return }
        reporter.summary(outcome.results, rejected: outcome.scan.rejected.count, width: console.columns)
        for problem in outcome.stateProblems { console.error("Warning: \(Untrusted.line(problem))") }
    }

    private func startLiveLines(_ runner: Runner) {
        guard !json && console.humanIsTerminal else { return }
        let timer = DispatchSource.makeTimerSource(queue: .global())
        timer.schedule(deadline: .now(), repeating: .milliseconds(250))
        timer.setEventHandler { [console, reporter] in
            console.setLive(reporter.liveLines(runner.status(), width: console.columns))
        }
        timer.activate()
        live.withLock { $0 = LiveLines(timer: timer) }
    }

    private func text(_ failure: RunHost.Failure) -> String {
        switch failure {
        case .unknownJob(let name, let loaded):
            let list = loaded.joined(separator: ", ")
            return "No loaded job is named '\(name)' (loaded: \(list.isEmpty ? "none" : list))."
        case .noPlugin:
            return "No plugin (a .so file or a .curfew.json manifest) in \(CurfewMain.pathList(paths))"
        case .everyPluginRejected:
            return "Nothing to run: every plugin file was rejected."
        case .store(let message):
            return "\(Untrusted.line(message)). (--no-state runs without checkpoints or history.)"
        case .signals(let message):
            return message
        }
    }

    /// Where what jobs start ends, in a line.
    static func text(_ setup: WorkerCgroups.Setup) -> String {
        switch setup {
        case .on(let cgroups):
            "workers get \(Untrusted.line(cgroups.description)): what a job starts ends with its worker."
        case .off(let reason):
            "workers get no cgroup (\(Untrusted.line(reason))): what a job starts ends by the subreaper walk."
        }
    }

    static func text(_ warning: RunHost.Warning) -> String {
        switch warning {
        case .noSnapshots(let problem):
            "plugins load from their own files, not snapshots (\(Untrusted.line(problem))): one overwritten in place crashes its job."
        case .snapshot(let note), .madePrivate(let note):
            "\(Untrusted.line(note))."
        case .interrupted(let count):
            CurfewMain.interruptedNote(count)
        case .strays(let count):
            "ended \(count) process\(count == 1 ? "" : "es") a host before this one left running (it was killed)."
        case .sandboxUnenforced(let missing):
            "the sandbox does not confine \(missing.joined(separator: "; ")) here; the rest of it holds."
        }
    }
}
