/// A message the host sends a worker, encoded and decoded here and nowhere
/// else, checked field by field as ``WorkerMessage`` is.
///
/// The worker is the host's own image, but its channel is a socket a
/// plugin's code shares: a line is read as a claim, every number it yields
/// fits the worker's types, and every status is one of a few words.
package enum HostMessage: Equatable, Sendable {
    /// Run one job (the first message, or a later one to a plugin's worker).
    case run(Run)
    /// Apply this sandbox now, before the job that comes with a `run`
    /// naming the same (a worker forked ahead of need: the first message).
    case confine(Sandbox)
    /// Scan these files (a scanner's first and only message).
    case scan(files: [String])
    /// The job's grant expires now, for `reason`.
    case expire(job: String, reason: ExpireReason)
    /// The host's app state moved; `deadline` is the job's grant's end on the
    /// shared monotonic clock when it runs again (`nil`: it holds).
    case app(job: String, event: AppEventName, state: AppStateName, deadline: UInt64?)
    /// The answer to the worker's checkpoint `id`.
    case checkpointSaved(job: String, id: UInt64, status: SaveStatus, message: String)
    /// The host closes the worker: no more jobs come.
    case close

    /// A job to run, with all it needs from the host.
    package struct Run: Equatable, Sendable {
        package var plugin: String
        package var job: String
        /// The job's entry in the plugin's table, as the scan found it.
        package var index: Int?
        /// The host's grant policy: its budget and its grace as given (`nil`:
        /// the default lead), in nanoseconds. The worker builds the same grant.
        package var budgetNanoseconds: Int64
        package var graceNanoseconds: Int64?
        /// The policy's stall time (`nil`: none), in nanoseconds.
        package var stallNanoseconds: Int64?
        /// The jobs the job may ask to run (`nil`: the host takes no such request).
        package var submits: [String]?
        /// Whether the host holds runs to conditions (`require_conditions` is available).
        package var watchesConditions: Bool
        /// When the host started the job's grant, on the shared monotonic clock.
        package var started: UInt64
        package var app: AppStateName
        /// Whether the host keeps state (checkpoints go to it).
        package var keepsState: Bool
        package var checkpoint: [UInt8]?
        package var estimate: Estimate?
        package var continuous: Bool
        /// The worker exits when this job ends.
        package var last: Bool
        package var parameters: [String: String]
        package var limits: Limits
        /// The sandbox the worker applies to itself before it loads the
        /// plugin (the first `run` to a worker only); `nil`: none.
        package var sandbox: Sandbox?

        package init(
            plugin: String, job: String, index: Int?, budgetNanoseconds: Int64, graceNanoseconds: Int64?, started: UInt64,
            app: AppStateName,
            keepsState: Bool, checkpoint: [UInt8]?, estimate: Estimate?, continuous: Bool, last: Bool,
            parameters: [String: String], limits: Limits, sandbox: Sandbox? = nil, stallNanoseconds: Int64? = nil, submits: [String]? = nil,
            watchesConditions: Bool = false
        ) {
            self.submits = submits
            self.watchesConditions = watchesConditions
            self.stallNanoseconds = stallNanoseconds
            self.plugin = plugin
            self.job = job
            self.index = index
            self.budgetNanoseconds = budgetNanoseconds
            self.graceNanoseconds = graceNanoseconds
            self.started = started
            self.app = app
            self.keepsState = keepsState
            self.checkpoint = checkpoint
            self.estimate = estimate
            self.continuous = continuous
            self.last = last
            self.parameters = parameters
            self.limits = limits
            self.sandbox = sandbox
        }
    }

    /// A worker's sandbox as the host sends it: what the job's policy grants
    /// beyond what any worker needs (the system's libraries, its devices).
    package struct Sandbox: Equatable, Sendable {
        package var network: SandboxNetwork
        /// Paths the job may read beneath: the plugin, its library, the policy's.
        package var read: [String]
        /// Paths the job may change beneath: the policy's.
        package var write: [String]
        /// The worker's own folder to write in, which the host removes after it.
        package var scratch: String
        package var exec: Bool

        package init(network: SandboxNetwork, read: [String], write: [String], scratch: String, exec: Bool) {
            self.network = network
            self.read = read
            self.write = write
            self.scratch = scratch
            self.exec = exec
        }

        /// The most paths a policy may name, each way.
        package static let maximumPaths = 256

        /// As a JSON object, for a message's `sandbox` field.
        var object: String {
            var rules = JSONLine("network", network.rawValue)
            rules.add("read", read)
            rules.add("write", write)
            rules.add("scratch", scratch)
            rules.addRaw("exec", exec ? "true" : "false")
            return rules.text
        }

        static func decode(_ rules: MessageFields) throws(MessageInvalid) -> Sandbox {
            try rules.only(["network", "read", "write", "scratch", "exec"])
            let scratch = try rules.string("scratch")
            guard scratch.hasPrefix("/"), scratch.utf8.count <= HostMessage.maximumPathBytes else {
                throw MessageInvalid(reason: "\"scratch\" must be an absolute path of at most \(HostMessage.maximumPathBytes) bytes")
            }
            return Sandbox(
                network: try rules.word("network", SandboxNetwork.self),
                read: try rules.strings("read", most: maximumPaths, longest: HostMessage.maximumPathBytes),
                write: try rules.strings("write", most: maximumPaths, longest: HostMessage.maximumPathBytes),
                scratch: scratch, exec: try rules.bool("exec"))
        }
    }

    /// What a job's chunks were seen to take, in nanoseconds.
    package struct Estimate: Equatable, Sendable {
        package var mean: Int64
        package var deviation: Int64
        package var samples: UInt64
        package init(mean: Int64, deviation: Int64, samples: UInt64) {
            self.mean = mean
            self.deviation = deviation
            self.samples = samples
        }
    }

    /// The worker's limits; 0 is none.
    package struct Limits: Equatable, Sendable {
        package var memoryBytes: UInt64
        package var cpuSeconds: UInt64
        package var openFiles: UInt64
        package init(memoryBytes: UInt64, cpuSeconds: UInt64, openFiles: UInt64) {
            self.memoryBytes = memoryBytes
            self.cpuSeconds = cpuSeconds
            self.openFiles = openFiles
        }
    }

    package enum ExpireReason: String, Sendable, CaseIterable { case timeout, shutdown, cancelled, stalled, conditions }
    package enum AppEventName: String, Sendable, CaseIterable {
        case launch, willEnterForeground = "will-enter-foreground", didBecomeActive = "did-become-active"
        case willResignActive = "will-resign-active", didEnterBackground = "did-enter-background", willTerminate = "will-terminate"
    }
    package enum AppStateName: String, Sendable, CaseIterable { case active, inactive, background }
    package enum SaveStatus: String, Sendable, CaseIterable { case ok, tooLarge = "too-large", unavailable }

    /// The version both ends must speak: a `run` or `scan` of another is refused.
    package static let version: Int64 = 4
    /// The most files a scan may name, and the longest path, in bytes.
    package static let maximumScanFiles = 1 << 16
    package static let maximumPathBytes = 4096
    /// The most jobs one job may ask to run: its policy's `submits` and
    /// the defaults', 256 each.
    package static let maximumSubmits = 512
    /// The longest message an answer to a checkpoint may carry, in bytes.
    package static let maximumAnswerBytes = 64 * 1024

    /// The message as one line of the channel, without its newline.
    package var line: String {
        switch self {
        case .run(let run):
            var line = JSONLine("type", "run")
            line.add("protocol", Self.version)
            line.add("plugin", run.plugin)
            line.add("job", run.job)
            if let index = run.index { line.add("index", Int64(index)) }
            line.add("budget_ns", run.budgetNanoseconds)
            if let grace = run.graceNanoseconds { line.add("grace_ns", grace) }
            if let stall = run.stallNanoseconds { line.add("stall_ns", stall) }
            if let submits = run.submits { line.add("submits", submits) }
            if run.watchesConditions { line.addRaw("conditions", "true") }
            line.add("started", Int64(clamping: run.started))
            line.add("app", run.app.rawValue)
            line.addRaw("state", run.keepsState ? "true" : "false")
            if let checkpoint = run.checkpoint { line.add("checkpoint", Base64.encode(checkpoint)) }
            if let estimate = run.estimate {
                line.addRaw("estimate", "{\"mean\":\(estimate.mean),\"deviation\":\(estimate.deviation),\"samples\":\(estimate.samples)}")
            }
            line.addRaw("continuous", run.continuous ? "true" : "false")
            line.addRaw("last", run.last ? "true" : "false")
            line.addRaw("parameters", JSONLine.object(run.parameters))
            let limits = run.limits
            line.addRaw("limits", "{\"memory\":\(limits.memoryBytes),\"cpu\":\(limits.cpuSeconds),\"files\":\(limits.openFiles)}")
            if let sandbox = run.sandbox { line.addRaw("sandbox", sandbox.object) }
            return line.text
        case .confine(let sandbox):
            var line = JSONLine("type", "confine")
            line.add("protocol", Self.version)
            line.addRaw("sandbox", sandbox.object)
            return line.text
        case .scan(let files):
            var line = JSONLine("type", "scan")
            line.add("protocol", Self.version)
            line.add("files", files)
            return line.text
        case .expire(let job, let reason):
            var line = JSONLine("type", "expire")
            line.add("job", job)
            line.add("reason", reason.rawValue)
            return line.text
        case .app(let job, let event, let state, let deadline):
            var line = JSONLine("type", "app")
            line.add("job", job)
            line.add("event", event.rawValue)
            line.add("state", state.rawValue)
            if let deadline { line.add("deadline", Int64(clamping: deadline)) }
            return line.text
        case .checkpointSaved(let job, let id, let status, let message):
            var line = JSONLine("type", "checkpoint-saved")
            line.add("job", job)
            line.add("id", Int64(clamping: id))
            line.add("status", status.rawValue)
            if !message.isEmpty { line.add("message", message) }
            return line.text
        case .close:
            return #"{"type":"close"}"#
        }
    }

    /// The message on one line of the host's channel.
    package static func decode(_ line: [UInt8]) throws(MessageInvalid) -> HostMessage {
        let reader = try MessageFields.object(line)
        let type = try reader.string("type")
        if type == "close" {
            try reader.only(["type"])
            return .close
        }
        if type == "confine" {
            try reader.only(["type", "protocol", "sandbox"])
            try reader.version(version)
            return .confine(try Sandbox.decode(try reader.object("sandbox")))
        }
        if type == "scan" {
            try reader.only(["type", "protocol", "files"])
            try reader.version(version)
            let files = try reader.strings("files", most: maximumScanFiles, longest: maximumPathBytes)
            return .scan(files: files)
        }
        let job = try reader.jobName()
        switch type {
        case "run":
            try reader.only([
                "type", "protocol", "plugin", "job", "index", "budget_ns", "grace_ns", "stall_ns", "submits", "conditions", "started", "app", "state", "checkpoint", "estimate",
                "continuous", "last", "parameters", "limits", "sandbox",
            ])
            try reader.version(version)
            let plugin = try reader.string("plugin")
            guard !plugin.isEmpty, plugin.utf8.count <= maximumPathBytes else {
                throw MessageInvalid(reason: "\"plugin\" must be a path of 1 to \(maximumPathBytes) bytes")
            }
            var index: Int?
            if reader.has("index") {
                let value = try reader.count("index")
                guard value <= UInt64(Int32.max) else { throw MessageInvalid(reason: "an index past any plugin's table") }
                index = Int(value)
            }
            // Whether the two make a grant is the worker's to say (`GrantPolicy`).
            let budget = try reader.integer("budget_ns")
            let grace = reader.has("grace_ns") ? try reader.integer("grace_ns") : nil
            let stall = reader.has("stall_ns") ? try reader.integer("stall_ns") : nil
            let submits = reader.has("submits") ? try reader.strings("submits", most: maximumSubmits, longest: 64) : nil
            let watchesConditions = reader.has("conditions") ? try reader.bool("conditions") : false
            let started = try reader.count("started")
            let app = try reader.word("app", AppStateName.self)
            var checkpoint: [UInt8]?
            if reader.has("checkpoint") {
                let text = try reader.string("checkpoint")
                guard text.utf8.count <= (WorkerMessage.maximumCheckpointBytes + 2) / 3 * 4 else {
                    throw MessageInvalid(reason: "a checkpoint of more than \(WorkerMessage.maximumCheckpointBytes >> 20) MiB")
                }
                guard let data = Base64.decode(text) else { throw MessageInvalid(reason: "\"checkpoint\" is not base64") }
                checkpoint = data
            }
            var estimate: Estimate?
            if reader.has("estimate") {
                let known = try reader.object("estimate")
                try known.only(["mean", "deviation", "samples"])
                estimate = Estimate(mean: try known.integer("mean"), deviation: try known.integer("deviation"), samples: try known.count("samples"))
            }
            // As many and as long as the host took: the line's own limit bounds them.
            let parameters = try reader.object("parameters")
            var table: [String: String] = [:]
            for key in parameters.keys { table[key] = try parameters.string(key) }
            let limits = try reader.object("limits")
            try limits.only(["memory", "cpu", "files"])
            let sandbox = reader.has("sandbox") ? try Sandbox.decode(try reader.object("sandbox")) : nil
            return .run(Run(
                plugin: plugin, job: job, index: index, budgetNanoseconds: budget, graceNanoseconds: grace, started: started, app: app,
                keepsState: try reader.bool("state"), checkpoint: checkpoint, estimate: estimate,
                continuous: try reader.bool("continuous"), last: try reader.bool("last"), parameters: table,
                limits: Limits(memoryBytes: try limits.count("memory"), cpuSeconds: try limits.count("cpu"), openFiles: try limits.count("files")),
                sandbox: sandbox, stallNanoseconds: stall, submits: submits,
                watchesConditions: watchesConditions))
        case "expire":
            try reader.only(["type", "job", "reason"])
            return .expire(job: job, reason: try reader.word("reason", ExpireReason.self))
        case "app":
            try reader.only(["type", "job", "event", "state", "deadline"])
            return .app(
                job: job, event: try reader.word("event", AppEventName.self), state: try reader.word("state", AppStateName.self),
                deadline: reader.has("deadline") ? try reader.count("deadline") : nil)
        case "checkpoint-saved":
            try reader.only(["type", "job", "id", "status", "message"])
            let message = reader.has("message") ? try reader.string("message") : ""
            guard message.utf8.count <= maximumAnswerBytes else { throw MessageInvalid(reason: "an answer of more than \(maximumAnswerBytes >> 10) KiB") }
            return .checkpointSaved(job: job, id: try reader.count("id"), status: try reader.word("status", SaveStatus.self), message: message)
        default:
            throw MessageInvalid(reason: "unknown type \(WorkerMessage.quoted(type))")
        }
    }
}
