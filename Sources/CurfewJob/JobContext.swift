import CCurfew
import Synchronization

/// The host, as one job sees it: time, logging, progress, parameters and
/// background tasks. Valid from the job's `init(context:)` until its
/// `teardown(context:)` returns; every method may be called from any thread.
public struct JobContext: @unchecked Sendable {
    // Safe because the host table and the context are valid, and thread-safe,
    // for the whole life of the job, and `tasks` is a Sendable class.
    let host: UnsafePointer<curfew_host>
    let raw: OpaquePointer
    let tasks: TaskHandlers

    /// What ``timeRemaining`` says when the grant has no budget (a continuous job).
    public static let unlimited: Duration = .seconds(Int64.max)

    /// The time left before the hard deadline, like `backgroundTimeRemaining`;
    /// zero once it has passed, ``unlimited`` without a budget.
    public var timeRemaining: Duration {
        let seconds = host.pointee.time_remaining(raw)
        return seconds >= CURFEW_TIME_UNLIMITED ? Self.unlimited : .seconds(seconds)
    }

    /// Whether the grant has started to expire.
    public var isExpiring: Bool {
        host.pointee.is_expiring(raw)
    }

    /// The host's app state now: ``AppState/background`` unless the host
    /// was moved to the foreground, where the grant's clock does not run.
    public var appState: AppState {
        AppState(host.pointee.app_state(raw))
    }

    /// Logs a message for the job.
    public func log(_ message: String, level: LogLevel = .info) {
        message.withCString { host.pointee.log(raw, level.cValue, $0) }
    }

    /// Reports progress: `completed` of `total` units (`total` 0 when unknown).
    public func reportProgress(completed: Int64, total: Int64) {
        host.pointee.report_progress(raw, completed, total)
    }

    /// The folder the job may write in when its worker is sandboxed, its
    /// worker's and removed after the worker ends; `nil` without a sandbox.
    public var scratchFolder: String? {
        // A host table that ends before the entry (an older host's) has none.
        let end = MemoryLayout<curfew_host>.offset(of: \curfew_host.scratch_dir)! + MemoryLayout<UnsafeRawPointer>.size
        guard Int(host.pointee.struct_size) >= end else { return nil }
        return host.pointee.scratch_dir(raw).map { String(cString: $0) }
    }

    /// The value of `--param key=value`, or `nil`.
    public func parameter(_ key: String) -> String? {
        key.withCString { host.pointee.param(raw, $0) }.map { String(cString: $0) }
    }

    /// Begins a background task that keeps the job alive until it ends, like
    /// `beginBackgroundTask(withName:expirationHandler:)`.
    ///
    /// - Parameters:
    ///   - name: A name for messages.
    ///   - expirationHandler: Called once, on the job's expiration queue, if
    ///     the grant starts to expire while the task is open, with the reason
    ///     (UIKit's handler gets none). End the task there.
    /// - Returns: The task's identifier.
    /// - Throws: ``TaskError/refused`` once the grant is expiring or over,
    ///   or while the job has 10,000 tasks open (`CURFEW_MAX_OPEN_TASKS`);
    ///   where UIKit returns `.invalid`.
    public func beginBackgroundTask(
        name: String? = nil, expirationHandler: (@Sendable (ExpirationReason) -> Void)? = nil
    ) throws(TaskError) -> BackgroundTaskIdentifier {
        var userData: UnsafeMutableRawPointer?
        var handler: curfew_expiration_handler?
        if let expirationHandler {
            userData = tasks.keep(expirationHandler)
            handler = { userData, reason in
                // Copy the closure out under the slot's lock (retaining it), then call it.
                let handler = Unmanaged<HandlerSlot>.fromOpaque(userData!).takeUnretainedValue().handler
                handler?(ExpirationReason(reason))
            }
        }
        let id: curfew_task_id =
            if let name {
                name.withCString { host.pointee.begin_background_task(raw, $0, handler, userData) }
            } else {
                host.pointee.begin_background_task(raw, nil, handler, userData)
            }
        guard id != CURFEW_TASK_INVALID else {
            // The host keeps no pointer to a refused task's handler: its slot
            // goes now, so a job that asks again and again (say, while its
            // grant expires) holds no more memory for it.
            if let userData { tasks.forget(userData) }
            throw .refused
        }
        return BackgroundTaskIdentifier(rawValue: id)
    }

    /// Ends a task. Ending a task twice, or ``BackgroundTaskIdentifier/invalid``, is harmless.
    public func endBackgroundTask(_ identifier: BackgroundTaskIdentifier) {
        host.pointee.end_background_task(raw, identifier.rawValue)
    }

    /// The largest checkpoint the host keeps, in bytes (1 MiB).
    public static let maximumCheckpointBytes = Int(CURFEW_MAX_CHECKPOINT)

    /// Saves the job's checkpoint, durably: when this returns, the bytes are
    /// on disk (in a worker, the host has acknowledged them). The job's next
    /// run, after an expiration, a failure, a crash or a host restart, gets
    /// them from ``loadCheckpoint()``; a job that completes has its
    /// checkpoint cleared. Empty bytes clear it now.
    ///
    /// - Throws: ``CheckpointError/tooLarge`` above ``maximumCheckpointBytes``;
    ///   ``CheckpointError/unavailable`` when the host keeps no state or the
    ///   job is over. The last saved checkpoint stays either way.
    public func saveCheckpoint(_ bytes: some Collection<UInt8>) throws(CheckpointError) {
        let bytes = Array(bytes)
        let status = bytes.withUnsafeBytes { host.pointee.checkpoint_save(raw, $0.baseAddress, $0.count) }
        switch status {
        case CURFEW_OK: return
        case CURFEW_TOO_LARGE: throw .tooLarge
        default: throw .unavailable
        }
    }

    /// The job's last saved checkpoint, from this run or an earlier one, or
    /// `nil` when it has none.
    ///
    /// - Throws: ``CheckpointError/unreadable`` when the host answers with
    ///   a size above ``maximumCheckpointBytes``.
    public func loadCheckpoint() throws(CheckpointError) -> [UInt8]? {
        // Asked twice at most: the size, then the bytes (only this job saves them).
        var bytes: [UInt8] = []
        while true {
            let size = bytes.withUnsafeMutableBytes { host.pointee.checkpoint_load(raw, $0.baseAddress, $0.count) }
            if size == 0 { return nil }
            if size <= bytes.count { return Array(bytes.prefix(size)) }
            guard size <= Self.maximumCheckpointBytes else { throw .unreadable }
            bytes = [UInt8](repeating: 0, count: size)
        }
    }

    /// Saves `value` as the job's checkpoint, as JSON text (so `curfew state
    /// show` reads it), durably, as ``saveCheckpoint(_:)`` does.
    ///
    /// - Throws: ``CheckpointError/notEncodable(_:)`` for a value JSON cannot
    ///   hold (a NaN, an object of more than 10,000 keys, more than 64 levels
    ///   deep), and what ``saveCheckpoint(_:)`` throws.
    public func saveCheckpoint(encoding value: some Encodable) throws(CheckpointError) {
        try saveCheckpoint(try CheckpointEncoding.encode(value))
    }

    /// The job's last saved checkpoint decoded as `type`, or `nil` when it has none.
    ///
    /// - Throws: ``CheckpointError/notDecodable(_:)`` when the checkpoint is
    ///   not JSON of that shape (one an older version of the job saved, say):
    ///   the job decides whether to start afresh.
    public func loadCheckpoint<Value: Decodable>(as type: Value.Type) throws(CheckpointError) -> Value? {
        guard let bytes = try loadCheckpoint() else { return nil }
        return try CheckpointDecoding.decode(type, from: bytes)
    }

    /// Asks for the job's next run no sooner than `delay` from now, as an iOS
    /// app submits a refresh request with an earliest begin date. `curfew
    /// serve` schedules it then, 100 ms from now at the soonest (or later,
    /// when the operator's `every` says so); a batch `curfew run` records
    /// nothing. The last request of a run counts.
    ///
    /// - Throws: ``NextRunError/invalidDelay`` for a negative delay or one
    ///   over ten years (the host logs it); ``NextRunError/unavailable`` once
    ///   the job is over.
    public func requestNextRun(after delay: Duration) throws(NextRunError) {
        let (seconds, attoseconds) = delay.components
        switch host.pointee.request_next_run(raw, Double(seconds) + Double(attoseconds) * 1e-18) {
        case CURFEW_OK: return
        case CURFEW_UNAVAILABLE: throw .unavailable
        default: throw .invalidDelay
        }
    }

    /// Asks `curfew serve` to run the job named `job` once, no sooner than
    /// `delay` from now, with `parameters` over its own, as BGTaskScheduler's
    /// `submit`: kept until it ran. Only a job the operator's config lets
    /// this one start (its "submits") may be asked for.
    ///
    /// - Throws: ``SubmitError/refused`` for a job this one may not start, a
    ///   bad name, parameter or delay (the host logs which);
    ///   ``SubmitError/unavailable`` when the host takes no such request (a
    ///   batch `curfew run`, an older host) or the job is over.
    public func submitRun(of job: String, parameters: [String: String] = [:], after delay: Duration = .zero) throws(SubmitError) {
        // A host table that ends before the entry (an older host's) has none.
        let end = MemoryLayout<curfew_host>.offset(of: \curfew_host.submit_run)! + MemoryLayout<UnsafeRawPointer>.size
        guard Int(host.pointee.struct_size) >= end else { throw .unavailable }
        let (seconds, attoseconds) = delay.components
        // key, value, key, value, …, NULL: copies that live through the call.
        let strings = parameters.sorted { $0.key < $1.key }.flatMap { [$0.key, $0.value] }.map { text in
            let bytes = Array(text.utf8CString)
            let copy = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count)
            copy.initialize(from: bytes, count: bytes.count)
            return copy
        }
        defer { strings.forEach { $0.deallocate() } }
        let pairs: [UnsafePointer<CChar>?] = strings.map { UnsafePointer($0) } + [nil]
        let status = pairs.withUnsafeBufferPointer { list in
            host.pointee.submit_run(raw, job, list.baseAddress, Double(seconds) + Double(attoseconds) * 1e-18)
        }
        switch status {
        case CURFEW_OK: return
        case CURFEW_UNAVAILABLE: throw .unavailable
        default: throw .refused
        }
    }
}

extension JobContext {
    /// Asks `curfew serve` to hold this job's runs to `conditions` besides
    /// those its policy names, at the host's thresholds, as
    /// BGProcessingTaskRequest's `requiresExternalPower`: this run (unless
    /// `ctl run` started it) is expired (``ExpirationReason/conditions``)
    /// when one stops holding, and later runs wait until all hold. The last
    /// call wins (an empty set: the policy's only), until the host restarts
    /// or the job leaves its folder; asking for the same again is free.
    ///
    /// - Throws: ``ConditionsError/refused`` when the host does not know a
    ///   condition asked for (an older host), or this run changed them 64
    ///   times already (the host logs which);
    ///   ``ConditionsError/unavailable`` when it holds runs to no
    ///   conditions (a batch `curfew run`, an older host) or the job is over.
    public func requireConditions(_ conditions: Set<Condition>) throws(ConditionsError) {
        // A host table that ends before the entry (an older host's) has none.
        let end = MemoryLayout<curfew_host>.offset(of: \curfew_host.require_conditions)! + MemoryLayout<UnsafeRawPointer>.size
        guard Int(host.pointee.struct_size) >= end else { throw .unavailable }
        switch host.pointee.require_conditions(raw, Condition.mask(of: conditions)) {
        case CURFEW_OK: return
        case CURFEW_UNAVAILABLE: throw .unavailable
        default: throw .refused
        }
    }
}

/// Why `requireConditions(_:)` was not taken.
public enum ConditionsError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The host does not know a condition asked for, or the run changed them too often.
    case refused
    /// The host holds runs to no conditions, or the job is over.
    case unavailable

    public var description: String {
        switch self {
        case .refused: "the host does not know a condition asked for, or this run changed them 64 times already"
        case .unavailable: "this host holds runs to no conditions (a batch, or an older host), or the job is over"
        }
    }
}

/// Why `submitRun(of:parameters:after:)` was not taken.
public enum SubmitError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A job this one may not start, or a bad name, parameter or delay.
    case refused
    /// The host takes no such request, or the job is over.
    case unavailable

    public var description: String {
        switch self {
        case .refused: "the run was refused: the config does not let this job start it, or its name, parameters or delay are not valid"
        case .unavailable: "this host takes no submitted runs (a batch, or an older host), or the job is over"
        }
    }
}

/// Why a checkpoint was not saved, or not loaded.
public enum CheckpointError: Error, Equatable, Sendable, CustomStringConvertible {
    /// More than ``JobContext/maximumCheckpointBytes``.
    case tooLarge
    /// The host keeps no state, or the job is over.
    case unavailable
    /// The value cannot be saved as JSON; the text says where and why.
    case notEncodable(String)
    /// The saved checkpoint is not JSON of the type asked for; the text says where and why.
    case notDecodable(String)
    /// The host answered with a checkpoint larger than any it keeps.
    case unreadable

    public var description: String {
        switch self {
        case .tooLarge: "the checkpoint is over \(JobContext.maximumCheckpointBytes) bytes"
        case .unavailable: "no checkpoint can be kept: the host keeps no state, or the job is over"
        case .notEncodable(let why): "the value cannot be saved as JSON: \(why)"
        case .notDecodable(let why): "the checkpoint cannot be read: \(why)"
        case .unreadable: "the host answered with a checkpoint larger than any it keeps"
        }
    }
}

/// Why `beginBackgroundTask` began no task.
public enum TaskError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The grant is expiring or over, or the job has the most tasks open
    /// a job may have (the host logged which).
    case refused

    public var description: String { "no background task: the grant is expiring or over, or too many tasks are open" }
}

/// Why `requestNextRun(after:)` was not taken.
public enum NextRunError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Negative, or over ten years.
    case invalidDelay
    /// The job is over.
    case unavailable

    public var description: String {
        switch self {
        case .invalidDelay: "the next run's delay is negative or over ten years"
        case .unavailable: "the job is over: no next run can be asked for"
        }
    }
}

/// An expiration handler as the host holds it: the slot itself is never
/// freed (a few dozen bytes per task begun with a handler), so the host's
/// pointer stays valid even if the handler runs as the job ends; the closure
/// in it is released when the job ends, which also breaks the cycle of a
/// handler that captures its context.
final class HandlerSlot: Sendable {
    private let slot: Mutex<(@Sendable (ExpirationReason) -> Void)?>

    init(_ handler: @escaping @Sendable (ExpirationReason) -> Void) { slot = Mutex(handler) }

    /// The handler, retained for the caller, or `nil` once released.
    var handler: (@Sendable (ExpirationReason) -> Void)? { slot.withLock { $0 } }

    func release() { slot.withLock { $0 = nil } }
}

/// The expiration handlers one job run has given the host.
final class TaskHandlers: Sendable {
    private let slots = Mutex<[HandlerSlot]>([])

    /// Keeps `handler` and returns the pointer the host hands back to it.
    func keep(_ handler: @escaping @Sendable (ExpirationReason) -> Void) -> UnsafeMutableRawPointer {
        let slot = HandlerSlot(handler)
        slots.withLock { $0.append(slot) }
        return Unmanaged.passRetained(slot).toOpaque()  // never released: see HandlerSlot
    }

    /// Lets go of the slot at `pointer`, which the host refused and so
    /// never holds: its closure and the slot itself.
    func forget(_ pointer: UnsafeMutableRawPointer) {
        let slot = Unmanaged<HandlerSlot>.fromOpaque(pointer)
        let kept = slot.takeUnretainedValue()
        kept.release()
        // The last kept, unless another thread began a task since: found from the end.
        slots.withLock { slots in
            if let index = slots.lastIndex(where: { $0 === kept }) { slots.remove(at: index) }
        }
        slot.release()
    }

    /// How many handlers are kept.
    var count: Int { slots.withLock { $0.count } }

    /// Releases every handler: the job has ended.
    func releaseAll() {
        slots.withLock { slots in
            slots.forEach { $0.release() }
            slots.removeAll()
        }
    }
}
