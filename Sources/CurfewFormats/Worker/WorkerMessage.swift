import CCurfew

/// A message a worker sends the host, checked field by field.
///
/// Plugin code runs in the worker and can write on its channel, so a line
/// from a worker is a claim: ``decode(_:)`` accepts only what the worker
/// itself would send, and every number it returns fits the host's types.
package enum WorkerMessage: Equatable, Sendable {
    /// An error of the worker's own, before any job (no `job`).
    case error(message: String)
    case log(job: String, time: UInt64?, level: String, message: String)
    case progress(job: String, time: UInt64?, completed: Int64, total: Int64)
    case expiring(job: String, time: UInt64?, reason: String)
    case finished(job: String, time: UInt64?, outcome: String, reason: String, chunks: UInt64, progress: Progress?)
    /// How many chunks the job has run so far (sent while it runs).
    case status(job: String, time: UInt64?, chunks: UInt64)
    /// The worker is dying of a signal inside one of the job's hooks, with
    /// this many chunks run (written by its crash handler).
    case crashing(job: String, hook: String, chunks: UInt64)
    /// What the job's chunks were seen to take (sent before `finished`), in nanoseconds.
    case estimate(job: String, mean: Int64, deviation: Int64, samples: UInt64)
    /// What the job's chunks took, by bucket (``chunkBuckets`` counts, or
    /// none), and in all, and how late its `expire` hook was called, in
    /// nanoseconds (sent before `finished`, for metrics).
    case measures(job: String, chunkCounts: [UInt64], chunkNanoseconds: UInt64, expireLateNanoseconds: UInt64?)
    /// The job saves a checkpoint (`data`, at most ``maximumCheckpointBytes``);
    /// the worker waits for the host's `checkpoint-saved` with the same `id`.
    case checkpoint(job: String, id: UInt64, data: [UInt8])
    /// As `checkpoint`, its `size` bytes in a sealed memory file sent with the
    /// message's first byte (SCM_RIGHTS): a large one crosses without base64.
    case attachedCheckpoint(job: String, id: UInt64, size: Int)
    /// The job asks for its next run `milliseconds` from now (at most
    /// ``maximumNextRunMilliseconds``).
    case nextRun(job: String, time: UInt64?, milliseconds: UInt64)
    /// The job asks for a run of `target` `milliseconds` from now, with
    /// `parameters` (`submit_run`; the host checks it may).
    case submit(job: String, time: UInt64?, target: String, parameters: [String: String], milliseconds: UInt64)
    /// The job asks that its runs be held to the conditions in `mask`
    /// (`require_conditions`; bits the host checks it knows).
    case conditions(job: String, time: UInt64?, mask: UInt32)

    /// Work done out of work to do, as a job reported it.
    package struct Progress: Equatable, Sendable {
        package let completed: Int64
        package let total: Int64
    }

    /// Why a line is no message.
    package typealias Invalid = MessageInvalid

    /// The log levels a worker may name.
    package static let levels: Set<String> = ["debug", "info", "warning", "error"]
    /// The outcomes a worker may report.
    package static let outcomes: Set<String> = ["completed", "failed", "expired", "terminated", "crashed", "refused"]
    /// The hooks a crash report may name.
    package static let hooks: Set<String> = ["create", "chunk", "expire", "destroy", "app_event"]
    /// The expiration reasons a worker may report.
    package static let expirationReasons: Set<String> = ["timeout", "shutdown", "cancelled", "stalled", "conditions"]
    /// The longest job name a message may carry, in bytes (names are at most 64).
    package static let maximumJobNameBytes = 256
    /// The longest reason a `finished` message may carry, in bytes.
    package static let maximumReasonBytes = 64 * 1024
    /// The longest delay a `next-run` message may ask for: ten years of 366 days.
    package static let maximumNextRunMilliseconds: UInt64 = 10 * 366 * 24 * 3600 * 1000
    /// A submitted run's parameters: how many, and how long each name and value.
    package static let maximumSubmittedParameters = 64
    package static let maximumSubmittedParameterBytes = 1024
    /// The largest checkpoint a message may carry, in bytes (decoded): the
    /// header's, the one limit every hop checks (the host's services, both
    /// messages, the store, the SDK).
    package static let maximumCheckpointBytes = Int(CURFEW_MAX_CHECKPOINT)
    /// How many chunk-time buckets a `measures` message carries.
    package static let chunkBuckets = 8

    /// The message on one line of a worker's channel.
    package static func decode(_ line: [UInt8]) throws(Invalid) -> WorkerMessage {
        let reader = try MessageFields.object(line)
        let type = try reader.string("type")
        if type == "error" {
            try reader.only(["type", "message"])
            return .error(message: try reader.string("message"))
        }
        let job = try reader.jobName()
        let time = try reader.optionalTime()
        switch type {
        case "log":
            try reader.only(["type", "job", "t", "level", "message"])
            let level = try reader.string("level")
            guard levels.contains(level) else { throw Invalid(reason: "unknown log level \(quoted(level))") }
            return .log(job: job, time: time, level: level, message: try reader.string("message"))
        case "progress":
            try reader.only(["type", "job", "t", "completed", "total"])
            return .progress(job: job, time: time, completed: try reader.integer("completed"), total: try reader.integer("total"))
        case "expiring":
            try reader.only(["type", "job", "t", "reason"])
            let reason = try reader.string("reason")
            guard expirationReasons.contains(reason) else { throw Invalid(reason: "unknown expiration reason \(quoted(reason))") }
            return .expiring(job: job, time: time, reason: reason)
        case "finished":
            try reader.only(["type", "job", "t", "outcome", "reason", "chunks", "completed", "total"])
            let outcome = try reader.string("outcome")
            guard outcomes.contains(outcome) else { throw Invalid(reason: "unknown outcome \(quoted(outcome))") }
            let reason = try reader.string("reason")
            guard reason.utf8.count <= maximumReasonBytes else {
                throw Invalid(reason: "a reason of more than \(maximumReasonBytes) bytes")
            }
            let chunks = try reader.count("chunks")
            var progress: Progress?
            switch (reader.has("completed"), reader.has("total")) {
            case (false, false): break
            case (true, true): progress = Progress(completed: try reader.integer("completed"), total: try reader.integer("total"))
            default: throw Invalid(reason: "\"completed\" without \"total\", or the other way round")
            }
            return .finished(job: job, time: time, outcome: outcome, reason: reason, chunks: chunks, progress: progress)
        case "status":
            try reader.only(["type", "job", "t", "chunks"])
            return .status(job: job, time: time, chunks: try reader.count("chunks"))
        case "crashing":
            try reader.only(["type", "job", "hook", "chunks"])
            let hook = try reader.string("hook")
            guard hooks.contains(hook) else { throw Invalid(reason: "unknown hook \(quoted(hook))") }
            return .crashing(job: job, hook: hook, chunks: try reader.count("chunks"))
        case "estimate":
            try reader.only(["type", "job", "mean", "deviation", "samples"])
            return .estimate(
                job: job, mean: try reader.integer("mean"), deviation: try reader.integer("deviation"),
                samples: try reader.count("samples"))
        case "measures":
            try reader.only(["type", "job", "chunk_counts", "chunk_ns", "expire_late_ns"])
            let counts = try reader.counts("chunk_counts", most: chunkBuckets)
            guard counts.isEmpty || counts.count == chunkBuckets else {
                throw Invalid(reason: "\"chunk_counts\" holds other than none or \(chunkBuckets) counts")
            }
            return .measures(
                job: job, chunkCounts: counts, chunkNanoseconds: try reader.count("chunk_ns"),
                expireLateNanoseconds: reader.has("expire_late_ns") ? try reader.count("expire_late_ns") : nil)
        case "checkpoint" where reader.has("size"):
            try reader.only(["type", "job", "id", "size"])
            let size = try reader.count("size")
            guard size <= UInt64(maximumCheckpointBytes) else {
                throw Invalid(reason: "a checkpoint of more than \(maximumCheckpointBytes >> 20) MiB")
            }
            return .attachedCheckpoint(job: job, id: try reader.count("id"), size: Int(size))
        case "checkpoint":
            try reader.only(["type", "job", "id", "data"])
            let text = try reader.string("data")
            // Checked before decoding: the work a message causes stays bounded by the limit.
            guard text.utf8.count <= (maximumCheckpointBytes + 2) / 3 * 4 else {
                throw Invalid(reason: "a checkpoint of more than \(maximumCheckpointBytes >> 20) MiB")
            }
            guard let data = Base64.decode(text) else { throw Invalid(reason: "\"data\" is not base64") }
            return .checkpoint(job: job, id: try reader.count("id"), data: data)
        case "next-run":
            try reader.only(["type", "job", "t", "ms"])
            let milliseconds = try reader.count("ms")
            guard milliseconds <= maximumNextRunMilliseconds else { throw Invalid(reason: "a next run more than ten years away") }
            return .nextRun(job: job, time: time, milliseconds: milliseconds)
        case "conditions":
            try reader.only(["type", "job", "t", "mask"])
            let mask = try reader.count("mask")
            guard mask <= UInt64(UInt32.max) else { throw Invalid(reason: "a condition mask wider than 32 bits") }
            return .conditions(job: job, time: time, mask: UInt32(mask))
        case "submit":
            try reader.only(["type", "job", "t", "target", "parameters", "ms"])
            let target = try reader.string("target")
            guard (1...64).contains(target.utf8.count) else { throw Invalid(reason: "a target job's name of other than 1 to 64 bytes") }
            let milliseconds = try reader.count("ms")
            guard milliseconds <= maximumNextRunMilliseconds else { throw Invalid(reason: "a submitted run more than ten years away") }
            let fields = try reader.object("parameters")
            guard fields.keys.count <= maximumSubmittedParameters else { throw Invalid(reason: "more than \(maximumSubmittedParameters) parameters") }
            var parameters: [String: String] = [:]
            for key in fields.keys {
                let value = try fields.string(key)
                guard !key.isEmpty, key.utf8.count <= maximumSubmittedParameterBytes, value.utf8.count <= maximumSubmittedParameterBytes else {
                    throw Invalid(reason: "a parameter of other than 1 to \(maximumSubmittedParameterBytes) bytes")
                }
                parameters[key] = value
            }
            return .submit(job: job, time: time, target: target, parameters: parameters, milliseconds: milliseconds)
        default:
            throw Invalid(reason: "unknown type \(quoted(type))")
        }
    }

    /// At most 64 characters of `text`, quoted.
    package static func quoted(_ text: String) -> String {
        let scalars = text.unicodeScalars
        let shown = scalars.count > 64 ? String(String.UnicodeScalarView(scalars.prefix(64))) + "…" : text
        return "'" + shown.unicodeScalars.map { $0.isASCII && $0.value >= 0x20 && $0.value != 0x7F ? String($0) : $0.escaped(asASCII: true) }.joined() + "'"
    }
}

extension WorkerMessage {
    /// The job a message is about; `nil` for the worker's own error.
    package var job: String? {
        switch self {
        case .error: nil
        case .log(let job, _, _, _), .progress(let job, _, _, _), .expiring(let job, _, _), .finished(let job, _, _, _, _, _),
            .status(let job, _, _), .crashing(let job, _, _), .estimate(let job, _, _, _), .measures(let job, _, _, _), .checkpoint(let job, _, _),
            .attachedCheckpoint(let job, _, _), .nextRun(let job, _, _), .submit(let job, _, _, _, _),
            .conditions(let job, _, _):
            job
        }
    }
}
