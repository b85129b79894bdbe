import Curfew
import CurfewHost
import CurfewFormats
import Dispatch
import Synchronization
import _CurfewShims

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
        case .calendar(let options):
            return CalendarCommand.run(options)
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
        if report.outcome == .terminated { Syscalls.exitNow(ExitCode.jobNotClean) }
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
            do throws(SystemError) {
                _ = try Syscalls.fileStatus(path)
            } catch {
                let why = error == .noEntry ? "no such file or folder" : error.message
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
        // Listing runs each file's constructors, confined: it may list plugins nobody here wrote.
        scanner.sandboxed = true
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

    static func run(_ options: RunOptions) async -> Int32 {
        if let missing = missingPath(options.effectivePaths) {
            Console(json: options.json).error(missing)
            return ExitCode.failure
        }
        guard let output = RunOutput(options) else { return ExitCode.failure }
        var host = RunHost.Options(paths: options.effectivePaths)
        host.configuration = options.configuration
        host.only = options.only
        host.allowsInsecurePlugins = options.allowInsecurePlugins
        host.scanner.rescan = options.rescan
        host.keepsState = !options.noState
        host.stateFolder = options.stateFolder.map(absolute)
        host.ownsProcess = true
        let run = RunHost(host) { output.handle($0) }
        output.console.onOutputClosed { _ in run.stop(status: ExitCode.outputClosed, reason: "Output closed") }
        let outcome = await run.run()
        output.finish(outcome)
        // A stop while the summary was written (its reader gone) counts.
        let status = outcome.failure == nil ? run.stopStatus ?? outcome.status : outcome.status
        // A terminated job may still be running on a worker thread: do not
        // run exit handlers (the plugin's among them) under its feet.
        if outcome.jobStillRunning { Syscalls.exitNow(status) }
        return status
    }

    /// What opening a store as its writer found `count` runs a host before had left running.
    static func interruptedNote(_ count: Int) -> String {
        return "\(count) job run\(count == 1 ? "" : "s") a host before left running (it was killed, or its machine went down) "
            + "\(count == 1 ? "is" : "are") marked interrupted in the history."
    }
}
