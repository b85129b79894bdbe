import Curfew
import CurfewFormats
import Glibc
import Synchronization

extension CurfewMain {
    static func serve(_ options: ServeOptions) async -> Int32 {
        let environment = ServiceNotifier.processEnvironment()
        let console = Console(json: options.run.json, environment: environment)
        if let missing = missingPath(options.run.paths) {
            console.error(missing)
            return ExitCode.failure
        }
        for path in options.run.paths {
            var info = stat()
            guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
                console.error("Error: \(Untrusted.line(path)) is not a folder; serve watches folders.")
                return ExitCode.failure
            }
        }
        let reporter = Reporter(console: console, json: options.run.json, verbose: options.run.verbose)
        // Stop requests are caught before anything else happens.
        let stop = StopRequest()
        let reloads = Mutex<(@Sendable () -> Void)?>(nil)
        let signals: SignalMonitor
        do throws(CurfewError) {
            let signalled = Atomic<Bool>(false)
            signals = try SignalMonitor(signals: [SIGINT, SIGTERM, SIGHUP]) { number in
                if number == SIGHUP {
                    reloads.withLock { $0 }?()
                    return
                }
                // A second signal stops waiting for cleanups.
                if signalled.exchange(true, ordering: .relaxed) { _exit(128 + number) }
                stop.request(status: ExitCode.success, reason: number == SIGINT ? "SIGINT" : "SIGTERM")
            }
        } catch {
            console.error("Error: \(error.description)")
            return ExitCode.failure
        }
        defer { signals.cancel() }
        ChildProcesses.adoptOrphans()

        var serverOptions = Server.Options(folders: options.run.paths.map(absolute))
        if let path = options.config {
            do throws(CurfewError) {
                serverOptions.config = try ServeConfig.load(path: path)
                serverOptions.configPath = absolute(path)
            } catch {
                console.error("Error: \(Untrusted.line(error.description))")
                return ExitCode.failure
            }
        }
        let socketPath = options.socket.map(absolute) ?? ControlSocket.defaultPath()
        var run = options.run.configuration
        if !options.run.noState {
            switch openStore(options.run.stateFolder, writer: .current(socket: socketPath)) {
            case .success(let store):
                run.state = store
                for change in store.madePrivate { console.error("Warning: \(Untrusted.line(change)).") }
                if store.interrupted > 0 { console.error("Warning: \(interruptedNote(store.interrupted))") }
            case .failure(let error):
                console.error("Error: \(Untrusted.line(error.message)). (--no-state serves without checkpoints, history or kept schedules.)")
                return ExitCode.failure
            }
        }
        serverOptions.run = run
        if let store = run.state {
            // What a host before this one on the store (held by this one
            // alone now) left running when it was killed: ended before this
            // one starts anything, which it marks in turn.
            let mark = ChildProcesses.mark(of: store.path)
            let strays = ChildProcesses.endMarked(mark)
            if strays > 0 {
                console.error("Warning: ended \(strays) process\(strays == 1 ? "" : "es") a host before this one left running (it was killed).")
            }
            ChildProcesses.mark = mark
        }
        serverOptions.allowsInsecurePlugins = options.run.allowInsecurePlugins
        let server: Server
        do throws(CurfewError) {
            server = try Server(options: serverOptions, onEvent: { event, time in reporter.event(event, at: time) }) { notice in
                reporter.notice(notice)
            }
        } catch {
            console.error("Error: \(Untrusted.line(error.description))")
            return ExitCode.failure
        }
        let socket: ControlSocket
        do throws(CurfewError) {
            socket = try ControlSocket(path: socketPath, refused: { reporter.notice(.warning($0)) }) { request in server.answer(request) }
        } catch {
            console.error("Error: \(Untrusted.line(error.description))")
            return ExitCode.failure
        }
        defer { socket.close() }
        reloads.withLock { $0 = { server.reload() } }
        do throws(CurfewError) {
            try server.start()
        } catch {
            console.error("Error: \(Untrusted.line(error.description))")
            return ExitCode.failure
        }
        reporter.notice(.info("serving \(pathList(serverOptions.folders)); control socket \(socketPath)"))
        let service = ServiceLink(environment: environment)
        service.ready(server)
        defer { service.cancel() }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            stop.onRequest { reason in
                service.stopping(reason)
                console.error("\(reason): expiring every running job now; they have up to their lead time to clean up.")
                server.stop { done.resume() }
            }
        }
        closeLog(of: run.state, console: console)
        let unclean = server.jobsUncleanAtStop()
        if !unclean.isEmpty {
            // A service manager sees the stop as failed: some work did not save.
            console.error("Error: the cleanup of \(unclean.map { "'\(Untrusted.line($0))'" }.joined(separator: ", ")) did not end in time at the stop.")
        }
        let status = stop.status ?? ExitCode.success
        return unclean.isEmpty || status != ExitCode.success ? status : ExitCode.jobNotClean
    }

    static func control(_ options: ControlOptions) -> Int32 {
        let console = Console(json: options.json)
        let path = options.socket.map(absolute) ?? ControlSocket.clientPath()
        var request = JSONLine("command", options.action?.verb ?? "status")
        if let job = options.action?.job { request.add("job", job) }
        let answer: JSONValue
        do throws(CurfewError) {
            let line = try ControlSocket.ask(path: path, request: request.text)
            do throws(JSONSyntaxError) {
                answer = try JSONReader.parse(line)
            } catch {
                console.error("Error: the host on \(Untrusted.line(path)) answered with something that is not JSON.")
                return ExitCode.failure
            }
        } catch {
            console.error("Error: \(Untrusted.line(error.description))")
            return ExitCode.failure
        }
        guard answer["ok"] == .bool(true) else {
            console.error("Error: \(Untrusted.line(answer["error"]?.stringValue ?? "the host refused"))")
            return ExitCode.failure
        }
        if options.action != nil {
            console.human(Untrusted.line(answer["message"]?.stringValue ?? "Done."))
            return ExitCode.success
        }
        guard case .array(let jobs)? = answer["jobs"] else {
            console.error("Error: the host's answer has no job list.")
            return ExitCode.failure
        }
        let appState = answer["app_state"]?.stringValue.flatMap(AppState.init(rawValue:))
        if options.json {
            // The host's line first (it has no "job"), then one per job.
            var host = JSONLine("app_state", appState?.rawValue ?? "unknown")
            host.add("store_failures", answer["store_failures"]?.integerValue ?? 0)
            host.add("jobs", Int64(jobs.count))
            console.machine(host.text)
            for job in jobs { console.machine(job.text) }
            return ExitCode.success
        }
        if let appState {
            console.human("App state: \(appState.rawValue)" + (appState.runsGrantClocks ? "" : " (foreground: grants do not run down)"))
        }
        if let failures = answer["store_failures"]?.integerValue, failures > 0 {
            console.human("The state store refused \(failures) write\(failures == 1 ? "" : "s") (see the host's log).")
        }
        if jobs.isEmpty { console.human("No job is served.") }
        let now = WallTime.now().milliseconds
        for job in jobs {
            let name = Untrusted.line(job["job"]?.stringValue ?? "?")
            let state = job["state"]?.stringValue ?? "?"
            var parts = [state]
            if state == "running", let remaining = job["remaining"]?.numberValue {
                parts[0] += " (\(formatSeconds(remaining))s left)"
            }
            if let progress = job["progress"], let done = progress["completed"]?.integerValue, let total = progress["total"]?.integerValue {
                parts.append(total > 0 ? "\(done)/\(total)" : "\(done) done")
            }
            if state == "disabled" || state == "paused" {
                // Its schedule is kept, but it does not run on it.
            } else if let next = job["next_run"]?.integerValue {
                let wait = millisecondsUntil(next, from: now)
                parts.append("next in \(formatSeconds(Double(wait) / 1000))s")
            } else {
                parts.append("no next run")
            }
            if let last = job["last_outcome"]?.stringValue { parts.append("last \(last)") }
            if let failures = job["failures"]?.integerValue, failures > 0 { parts.append("\(failures) failed in a row") }
            if let skipped = job["skipped"]?.integerValue, skipped > 0 { parts.append("\(skipped) skipped") }
            console.human("\(name)  " + parts.joined(separator: ", "))
        }
        return ExitCode.success
    }
}
