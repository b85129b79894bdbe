import Curfew
import CurfewFormats

/// The control socket's requests and answers: one JSON object each way.
///
/// Requests: `{"command": "status" | "metrics"}`, `{"command": "run" | "cancel" |
/// "pause" | "resume", "job": NAME}`, `{"command": "reload" | "foreground"
/// | "background"}`. Answers: `{"ok": true, "message": …}`, `{"ok": true,
/// "app_state": …, "store_failures": N, "jobs": [...]}` for status, or `{"ok": false, "error": …}`.
extension Server.Command {
    /// The verbs that take a job.
    public static let jobVerbs = ["run", "cancel", "pause", "resume"]

    /// The verbs that take no job.
    public static let hostVerbs = ["reload", "foreground", "background"]

    /// The command `verb` names, for `job`: a job for run, cancel, pause and
    /// resume, none for reload, foreground and background; `nil` for any other verb.
    public init?(verb: String, job: String?) {
        switch (verb, job) {
        case ("run", let job?): self = .run(job)
        case ("cancel", let job?): self = .cancel(job)
        case ("pause", let job?): self = .pause(job)
        case ("resume", let job?): self = .resume(job)
        case ("reload", nil): self = .reload
        case ("foreground", nil): self = .foreground
        case ("background", nil): self = .background
        default: return nil
        }
    }

    /// Its verb, as a request names it.
    public var verb: String {
        switch self {
        case .run, .runOnce: "run"
        case .cancel: "cancel"
        case .pause: "pause"
        case .resume: "resume"
        case .reload: "reload"
        case .foreground: "foreground"
        case .background: "background"
        }
    }

    /// The job it acts on; `nil` for the host's verbs.
    public var job: String? {
        switch self {
        case .run(let job), .runOnce(let job, _, _), .cancel(let job), .pause(let job), .resume(let job): job
        case .reload, .foreground, .background: nil
        }
    }
}

extension Server {
    /// The answer to one request line.
    public func answer(_ request: [UInt8]) -> String {
        let value: JSONValue
        do throws(JSONSyntaxError) {
            value = try JSONReader.parse(request)
        } catch {
            return Self.failure("the request is not JSON: \(error.message)")
        }
        guard case .object(let members) = value else { return Self.failure("the request must be an object") }
        for member in members where !["command", "job", "params", "at", "follow"].contains(member.key) {
            return Self.failure("unknown key \"\(Reason.cut(member.key, to: 64))\" in the request")
        }
        guard let verb = value["command"]?.stringValue else { return Self.failure("the request has no \"command\"") }
        if verb == "status" { return status() }
        // Answered here only when the stream did not take the reader (``takeReader(_:client:)``).
        if verb == "events" {
            switch Self.eventsRequest(value) {
            case .failure(let problem): return Self.failure(problem.description)
            case .success: return Self.failure("at most \(EventStream.maximumReaders) readers read the events at once, or the host is stopping")
            }
        }
        if verb == "metrics" {
            var line = JSONLine("metrics", metricsText())
            line.addRaw("ok", "true")
            return line.text
        }
        if let command = Command(verb: verb, job: nil) {
            guard value["job"] == nil else { return Self.failure("\(verb) takes no job") }
            return Self.reply(perform(command))
        }
        guard Command.jobVerbs.contains(verb) else { return Self.failure("unknown command \"\(Reason.cut(verb, to: 64))\"") }
        guard let job = value["job"]?.stringValue, JobNaming.isValidName(job), let command = Command(verb: verb, job: job) else {
            return Self.failure("\(verb) needs a job name")
        }
        if value["params"] != nil || value["at"] != nil {
            guard verb == "run" else { return Self.failure("only run takes \"params\" and \"at\"") }
            let (once, problem) = Self.runOnce(job, value)
            guard let once else { return Self.failure(problem) }
            return Self.reply(perform(once))
        }
        return Self.reply(perform(command))
    }

    /// A `run` with `params` (an object of strings) and `at` (milliseconds
    /// since the epoch), each checked: they are kept, and given to a job.
    private static func runOnce(_ job: String, _ value: JSONValue) -> (Command?, String) {
        var parameters: [String: String] = [:]
        if let given = value["params"] {
            guard case .object(let pairs) = given else { return (nil, "\"params\" must be an object of strings") }
            guard pairs.count <= RunRequest.maximumParameters else { return (nil, "a run takes at most \(RunRequest.maximumParameters) parameters") }
            for (name, text) in pairs {
                guard let text = text.stringValue, RunRequest.isParameter(name, text) else {
                    return (nil, "each parameter is a name and a string of up to \(RunRequest.maximumParameterBytes) bytes, no NUL")
                }
                parameters[name] = text
            }
        }
        var at: WallTime?
        if let given = value["at"] {
            // From 1970 to the year 2200, as a calendar reaches.
            guard let milliseconds = given.integerValue, milliseconds >= 0, milliseconds <= RunRequest.latest.milliseconds else {
                return (nil, "\"at\" must be milliseconds since 1970, before the year 2200")
            }
            at = WallTime(milliseconds: milliseconds)
        }
        return (Command.runOnce(job, parameters: parameters, at: at), "")
    }

    /// Takes the client of an `events` request as a reader of the event
    /// stream (the kept events, then each new one with `"follow": true`):
    /// whether it did. A request that is not one, or is malformed, is left
    /// to ``answer(_:)``.
    public func takeReader(_ request: [UInt8], client: Int32) -> Bool {
        guard let value = try? JSONReader.parse(request), value["command"]?.stringValue == "events",
            case .success(let asked) = Self.eventsRequest(value)
        else { return false }
        return eventStream.attach(client, job: asked.job, follows: asked.follows)
    }

    /// An `events` request's job (`nil`: every event) and whether it follows, or what is wrong with it.
    static func eventsRequest(_ value: JSONValue) -> Result<(job: String?, follows: Bool), CurfewError> {
        guard case .object(let members) = value else { return .failure(CurfewError(.badConfig, "the request must be an object")) }
        if let key = members.first(where: { !["command", "job", "follow"].contains($0.key) })?.key {
            return .failure(CurfewError(.badConfig, "events takes \"job\" and \"follow\", not \"\(Reason.cut(key, to: 64))\""))
        }
        var job: String?
        if let given = value["job"] {
            guard let name = given.stringValue, JobNaming.isValidName(name) else { return .failure(CurfewError(.badConfig, "\"job\" must be a job name")) }
            job = name
        }
        var follows = false
        if let given = value["follow"] {
            guard case .bool(let flag) = given else { return .failure(CurfewError(.badConfig, "\"follow\" must be true or false")) }
            follows = flag
        }
        return .success((job, follows))
    }

    private func status() -> String {
        let jobs = states().map { state -> String in
            var line = JSONLine("job", state.job)
            line.add("plugin", state.pluginPath)
            let word =
                if state.running != nil { "running" } else if state.isWaiting || !state.heldFor.isEmpty { "waiting" } else if state.entry.policy.enabled == false {
                    "disabled"
                } else if state.entry.isPaused { "paused" } else { "idle" }
            line.add("state", word)
            if !state.heldFor.isEmpty { line.add("waiting_for", state.heldFor.map(\.rawValue)) }
            if let next = state.entry.nextRun { line.add("next_run", next.milliseconds) } else { line.addRaw("next_run", "null") }
            line.add("last_outcome", state.entry.lastOutcome?.rawValue)
            line.add("failures", Int64(state.entry.failures))
            line.add("skipped", Int64(state.entry.skipped))
            line.add("sandbox", SandboxPolicy.summary(state.sandbox, isolation: state.isolation))
            line.add("remaining", state.running?.timeRemaining?.seconds)
            if let chunks = state.running?.chunks { line.add("chunks", Int64(clamping: chunks)) }
            if let progress = state.running?.progress {
                line.addRaw("progress", "{\"completed\":\(progress.completed),\"total\":\(progress.total)}")
            }
            return line.text
        }
        return "{\"ok\":true,\"app_state\":\"\(lifecycle.current.rawValue)\",\"store_failures\":\(storeFailureCount()),\"jobs\":[\(jobs.joined(separator: ","))]}"
    }

    private static func reply(_ result: Result<String, CurfewError>) -> String {
        switch result {
        case .success(let message):
            var line = JSONLine("message", message)
            line.addRaw("ok", "true")
            return line.text
        case .failure(let error):
            return failure(error.description)
        }
    }

    static func failure(_ message: String) -> String {
        var line = JSONLine("error", message)
        line.addRaw("ok", "false")
        return line.text
    }
}
