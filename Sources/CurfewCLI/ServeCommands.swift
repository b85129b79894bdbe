import Curfew
import CurfewHost
import CurfewFormats
import Synchronization

extension CurfewMain {
    static func serve(_ options: ServeOptions) async -> Int32 {
        let environment = ServiceNotifier.processEnvironment()
        let console = Console(json: options.run.json, environment: environment)
        if let problem = missingPath(options.run.paths) ?? notAFolder(options.run.paths) {
            console.error(problem)
            return ExitCode.failure
        }
        var server = Server.Options(folders: options.run.paths.map(absolute))
        server.run = options.run.configuration
        server.allowsInsecurePlugins = options.run.allowInsecurePlugins
        if let path = options.config {
            do throws(CurfewError) {
                server.config = try ServeConfig.load(path: path)
                server.configPath = absolute(path)
            } catch {
                console.error("Error: \(Untrusted.line(error.description))")
                return ExitCode.failure
            }
        }
        var host = ServeHost.Options(server: server, socketPath: options.socket.map(absolute) ?? ControlSocket.defaultPath())
        host.keepsState = !options.run.noState
        host.stateFolder = options.run.stateFolder.map(absolute)
        host.ownsProcess = true
        host.metrics = options.metrics.map { address in
            if case .local(let path) = address { return .local(path: absolute(path)) }
            return address
        }
        let output = ServeOutput(console: console, options: options, service: ServiceLink(environment: environment), socketPath: host.socketPath)
        defer { output.service.cancel() }
        let outcome = await ServeHost(host) { output.handle($0) }.run()
        output.finish(outcome)
        return outcome.status
    }

    /// "Error: … is not a folder" for the first path that is not one.
    private static func notAFolder(_ paths: [String]) -> String? {
        for path in paths {
            guard (try? Syscalls.fileStatus(path))?.isDirectory == true else {
                return "Error: \(Untrusted.line(path)) is not a folder; serve watches folders."
            }
        }
        return nil
    }

    static func control(_ options: ControlOptions) -> Int32 {
        let console = Console(json: options.json)
        let path = options.socket.map(absolute) ?? ControlSocket.clientPath()
        if let events = options.events { return Self.events(events, json: options.json, path: path, console: console) }
        var request = JSONLine("command", options.action?.verb ?? (options.metrics ? "metrics" : "status"))
        if let job = options.action?.job { request.add("job", job) }
        if case .runOnce(_, let parameters, let at)? = options.action {
            request.addRaw("params", JSONLine.object(parameters))
            if let at { request.add("at", at.milliseconds) }
        }
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
        if options.metrics {
            guard let text = answer["metrics"]?.stringValue else {
                console.error("Error: the host's answer has no metrics.")
                return ExitCode.failure
            }
            // Line by line, each made safe for a terminal: the host is another process.
            for line in Untrusted.lines(text) where !line.isEmpty { console.machine(line) }
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
            if case .array(let names)? = job["waiting_for"] {
                // What it waits for, in the host's words: "waiting: external power".
                let said = names.compactMap { $0.stringValue.flatMap(Condition.init(rawValue:))?.description }
                if !said.isEmpty { parts[0] += ": " + said.joined(separator: ", ") }
            }
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
            // Said only when it is not confined, the exception.
            if job["sandbox"]?.stringValue == "none" { parts.append("not sandboxed") }
            console.human("\(name)  " + parts.joined(separator: ", "))
        }
        return ExitCode.success
    }
}

extension CurfewMain {
    /// `curfew events`: the host's lines as they come, as JSON or one
    /// line each for a person.
    static func events(_ events: EventsRequest, json: Bool, path: String, console: Console) -> Int32 {
        var request = JSONLine("command", "events")
        if let job = events.job { request.add("job", job) }
        if events.follow { request.addRaw("follow", "true") }
        var refused: String?
        let zone = TimeZones.local()
        do throws(CurfewError) {
            try ControlSocket.stream(path: path, request: request.text, follows: events.follow) { bytes in
                guard let value = try? JSONReader.parse(Array(bytes)) else { return }
                if value["ok"] == .bool(false) {
                    refused = value["error"]?.stringValue ?? "the host refused"
                    return
                }
                if value["event"]?.stringValue == "cut-off" {
                    refused = "this reader fell too far behind and was cut off; events were lost"
                    return
                }
                if json {
                    console.machine(Untrusted.line(String(decoding: bytes, as: UTF8.self)))
                } else {
                    console.human(Untrusted.line(eventText(value, zone: zone)))
                }
            }
        } catch {
            console.error("Error: \(Untrusted.line(error.description))")
            return ExitCode.failure
        }
        if let refused {
            console.error("Error: \(Untrusted.line(refused))")
            return ExitCode.failure
        }
        return ExitCode.success
    }

    /// One event for a person: its time, what happened, the job and the rest.
    static func eventText(_ value: JSONValue, zone: ZoneRules) -> String {
        let time = value["time"]?.integerValue.map { zone.stamp($0.multipliedClamped(by: 1000)) } ?? "?"
        var parts = [time, value["event"]?.stringValue ?? "?"]
        if let job = value["job"]?.stringValue { parts.append(job) }
        for key in ["outcome", "reason", "level", "message", "completed", "total", "after", "target", "for", "conditions", "line"] {
            guard let field = value[key] else { continue }
            switch field {
            case .string(let text): parts.append(text)
            case .number(let digits): parts.append("\(key) \(digits)")
            case .array(let items): parts.append(items.compactMap(\.stringValue).joined(separator: ", "))
            default: break
            }
        }
        return parts.joined(separator: "  ")
    }
}

/// What `curfew serve` shows of a ``ServeHost``, and what it tells the
/// service manager.
struct ServeOutput: Sendable {
    let console: Console
    let reporter: Reporter
    let service: ServiceLink
    let folders: [String]
    let socketPath: String

    init(console: Console, options: ServeOptions, service: ServiceLink, socketPath: String) {
        self.console = console
        reporter = Reporter(console: console, json: options.run.json, verbose: options.run.verbose)
        self.service = service
        folders = options.run.paths.map(CurfewMain.absolute)
        self.socketPath = socketPath
    }

    func handle(_ event: ServeHost.Event) {
        switch event {
        case .warning(let warning):
            console.error("Warning: " + RunOutput.text(warning))
        case .notice(let notice):
            reporter.notice(notice)
        case .run(let event, let time):
            reporter.event(event, at: time)
        case .serving(let server):
            reporter.notice(.info("serving \(CurfewMain.pathList(folders)); control socket \(socketPath)"))
            service.ready(server)
        case .metrics(let address, let port):
            switch address {
            case .tcp(let host, let given):
                let at = MetricsAddress.tcp(host: host, port: given == 0 ? port ?? 0 : given)
                reporter.notice(.info("metrics at http://\(at)/metrics" + (address.isExposed ? " (reachable from other machines)" : "")))
            case .local(let path):
                reporter.notice(.info("metrics at /metrics over HTTP on the Unix socket \(path)"))
            }
        case .processes(let setup):
            reporter.notice(.info(RunOutput.text(setup)))
        case .stopping(let reason):
            service.stopping(reason)
            console.error("\(reason): expiring every running job now; they have up to their lead time to clean up.")
        }
    }

    func finish(_ outcome: ServeHost.Outcome) {
        switch outcome.failure {
        case .store(let message)?:
            console.error("Error: \(Untrusted.line(message)). (--no-state serves without checkpoints, history or kept schedules.)")
        case .signals(let message)?:
            console.error("Error: \(message)")
        case .server(let message)?:
            console.error("Error: \(Untrusted.line(message))")
        case nil:
            break
        }
        for problem in outcome.stateProblems { console.error("Warning: \(Untrusted.line(problem))") }
        if !outcome.unclean.isEmpty {
            console.error("Error: the cleanup of \(outcome.unclean.map { "'\(Untrusted.line($0))'" }.joined(separator: ", ")) did not end in time at the stop.")
        }
    }
}
