import CCurfew
// The words a job shares with its host (ExpirationReason, AppState,
// AppEvent, LogLevel, BackgroundTaskIdentifier), for every plugin that
// imports the SDK.
@_exported import CurfewVocabulary

/// What a chunk asks for next.
public enum ChunkResult: Sendable, Equatable {
    /// Call me again as soon as possible.
    case `continue`
    /// The work is complete.
    case done
    /// The work failed: log the reason at `.error` first, and the outcome
    /// reads `failed (chunk returned failed: <the reason>)`.
    case failed
    /// The work failed and another run cannot help (bad input, say):
    /// `curfew serve` does not retry it. The outcome reads `failed (chunk
    /// returned failed, not to be retried: <the reason>)`.
    case failedForGood
    /// Call me again after this long, without holding a worker thread meanwhile.
    case continueAfter(Duration)
}

/// A background job: a name, a summary, and a life from `init(context:)`
/// to `teardown(context:)`. Adopt ``Job`` for work in chunks, or
/// ``TaskDrivenJob`` for work on your own threads under tasks you begin.
public protocol BackgroundJob {
    /// Unique within the host: 1 to 64 bytes of `[a-z0-9._-]`.
    static var name: String { get }
    /// One line.
    static var summary: String { get }
    /// A continuous job has no budget (like an iOS background mode) and
    /// runs only where the host allows it. Default `false`.
    static var isContinuous: Bool { get }
    /// The background modes a continuous job runs in, as an iOS app's
    /// `UIBackgroundModes`: `"audio"`, `"location"`, … or `"x-NAME"` (see
    /// `background_modes` in curfew.h). The operator allows them by name
    /// (`--allow-mode`). Default: none.
    static var backgroundModes: [String] { get }

    /// Makes the job (the C ABI's `create`). Throw to fail it at once: the
    /// error's description is the reason, no other method is called, and
    /// the tasks it began are ended by the host (their handlers not called).
    init(context: JobContext) throws

    /// The cleanup hook: called once if the grant expires while the job is
    /// still alive. Save what must last and return promptly.
    mutating func expire(reason: ExpirationReason, context: JobContext)

    /// Hears an app event (the C ABI's `app_event`), never while another of
    /// the job's methods runs. Default: nothing.
    mutating func appEvent(_ event: AppEvent, context: JobContext)

    /// Called last, once the job is over (the C ABI's `destroy`): release
    /// here, not in `deinit`, which may never run (a terminated job's value
    /// is abandoned). Not called when `init` threw or the job was
    /// terminated. Default: nothing.
    mutating func teardown(context: JobContext)
}

extension BackgroundJob {
    public static var isContinuous: Bool { false }
    public static var backgroundModes: [String] { [] }
    public mutating func teardown(context: JobContext) {}
    public mutating func appEvent(_ event: AppEvent, context: JobContext) {}
}

/// A job whose work the host calls in chunks on libdispatch's worker threads (as many as the cores, shared by every job).
///
/// `init`, `chunk`, `expire` and `teardown` never run at the same time; no
/// chunk runs once the grant is expiring, and `expire` comes right after an
/// in-flight chunk returns.
public protocol Job: BackgroundJob {
    /// Does one bounded unit of work, well under the grant's lead time.
    mutating func chunk(_ context: JobContext) -> ChunkResult
}

/// A job that starts its own work in `init(context:)`, under background
/// tasks it begins with ``JobContext/beginBackgroundTask(name:expirationHandler:)``,
/// like the iOS code it comes from. The host keeps it alive until its tasks end.
///
/// Begin the task in `init`, before it returns, and hand its identifier to
/// the queue or thread that does the work, which ends it when done (the
/// expiration handler ends it if time runs out first). A job whose `init`
/// returns without having begun a task fails ("create returned with no
/// background task open"): a task begun later, from the queue, would be
/// refused. See `Plugins/ExampleSwiftTasks` and docs/writing-jobs.md.
public protocol TaskDrivenJob: BackgroundJob {}

extension TaskDrivenJob {
    /// Default: nothing; the tasks' own expiration handlers do the cleanup.
    public mutating func expire(reason: ExpirationReason, context: JobContext) {}
}
