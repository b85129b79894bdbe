import CCurfew

/// The host's services table, as `curfew_plugin_entry` receives it.
public typealias CurfewHostTable = UnsafePointer<curfew_host>
/// The plugin descriptor `curfew_plugin_entry` returns.
public typealias CurfewPluginDescriptor = UnsafePointer<curfew_plugin>

/// Exports Swift jobs as a Curfew plugin.
///
/// ```swift
/// @_cdecl("curfew_plugin_entry")
/// public func curfewPluginEntry(_ host: CurfewHostTable?) -> CurfewPluginDescriptor? {
///     CurfewPlugin.export(host: host, jobs: [PrimeCounter.self, Uploader.self])
/// }
/// ```
///
/// Only C types cross the plugin boundary, and the SDK keeps no registry of
/// jobs: each job's descriptor carries its type in `user_data`, so two
/// plugins that each link their own copy of this SDK run side by side.
public enum CurfewPlugin {
    /// Builds the plugin descriptor for `jobs` (`nil` without a host table).
    public static func export(host: CurfewHostTable?, jobs: [any BackgroundJob.Type]) -> CurfewPluginDescriptor? {
        guard let host else { return nil }
        hostTable = host
        let table = UnsafeMutablePointer<UnsafePointer<curfew_job>?>.allocate(capacity: jobs.count)
        for (index, type) in jobs.enumerated() {
            table[index] = UnsafePointer(JobEntry.descriptor(for: type))
        }
        let plugin = UnsafeMutablePointer<curfew_plugin>.allocate(capacity: 1)
        plugin.initialize(to: curfew_plugin(
            abi_version: CURFEW_ABI_VERSION, struct_size: UInt32(MemoryLayout<curfew_plugin>.size),
            job_count: UInt32(jobs.count), reserved: 0, jobs: table))
        // Never freed: the host never unloads a plugin.
        return UnsafePointer(plugin)
    }
}

/// The host table this copy of the SDK was given. One value per process (the
/// host has one table); not a registry.
// Safe because it is written in `export`, before the host can call a hook,
// and the host passes the same table every time.
nonisolated(unsafe) var hostTable: UnsafePointer<curfew_host>!

/// A job type, reachable from its descriptor's `user_data`.
final class JobEntry {
    let type: any BackgroundJob.Type

    init(_ type: any BackgroundJob.Type) {
        self.type = type
    }

    static func descriptor(for type: any BackgroundJob.Type) -> UnsafeMutablePointer<curfew_job> {
        let entry = Unmanaged.passRetained(JobEntry(type)).toOpaque()  // lives as long as the plugin
        let chunked = type is any Job.Type
        let job = UnsafeMutablePointer<curfew_job>.allocate(capacity: 1)
        job.initialize(to: curfew_job(
            struct_size: UInt32(MemoryLayout<curfew_job>.size),
            flags: type.isContinuous ? UInt32(CURFEW_JOB_CONTINUOUS) : 0,
            name: permanentCString(type.name),
            summary: permanentCString(type.summary),
            create: createHook,
            chunk: chunked ? chunkHook : nil,
            expire: expireHook,
            destroy: destroyHook,
            user_data: entry,
            background_modes: type.backgroundModes.isEmpty ? nil : permanentCString(type.backgroundModes.joined(separator: ",")),
            app_event: appEventHook))
        return job
    }

    static func of(_ context: OpaquePointer?) -> JobEntry {
        Unmanaged<JobEntry>.fromOpaque(hostTable.pointee.job_user_data(context)!).takeUnretainedValue()
    }
}

/// One live job: its value, its context and its handlers.
class JobInstance {
    let context: JobContext
    init(context: JobContext) { self.context = context }
    func chunk() -> ChunkResult { .done }
    func expire(_ reason: ExpirationReason) {}
    func appEvent(_ event: AppEvent) {}
    func teardown() {}
}

/// A task-driven job's instance: the host never calls its chunk.
final class TypedInstance<J: BackgroundJob>: JobInstance {
    var job: J

    init(_ job: J, context: JobContext) {
        self.job = job
        super.init(context: context)
    }

    override func expire(_ reason: ExpirationReason) { job.expire(reason: reason, context: context) }
    override func appEvent(_ event: AppEvent) { job.appEvent(event, context: context) }
    override func teardown() { job.teardown(context: context) }
}

/// A chunked job's instance: a direct call on the per-chunk path, no casts.
final class ChunkedInstance<J: Job>: JobInstance {
    var job: J

    init(_ job: J, context: JobContext) {
        self.job = job
        super.init(context: context)
    }

    override func chunk() -> ChunkResult { job.chunk(context) }
    override func expire(_ reason: ExpirationReason) { job.expire(reason: reason, context: context) }
    override func appEvent(_ event: AppEvent) { job.appEvent(event, context: context) }
    override func teardown() { job.teardown(context: context) }
}

private func makeInstance<J: BackgroundJob>(_ type: J.Type, context: JobContext) throws -> JobInstance {
    TypedInstance(try J(context: context), context: context)
}

private func makeChunkedInstance<J: Job>(_ type: J.Type, context: JobContext) throws -> JobInstance {
    ChunkedInstance(try J(context: context), context: context)
}

private func instance(_ state: UnsafeMutableRawPointer?) -> Unmanaged<JobInstance> {
    Unmanaged<JobInstance>.fromOpaque(state!)
}

private let createHook: curfew_create_fn = { context, state in
    guard let context, let state else { return CURFEW_ERROR }
    let type = JobEntry.of(context).type
    let jobContext = JobContext(host: hostTable, raw: context, tasks: TaskHandlers())
    do {
        let made =
            if let chunked = type as? any Job.Type {
                try makeChunkedInstance(chunked, context: jobContext)
            } else {
                try makeInstance(type, context: jobContext)
            }
        state.pointee = Unmanaged.passRetained(made).toOpaque()
        return CURFEW_OK
    } catch {
        jobContext.log("\(error)", level: .error)
        jobContext.tasks.releaseAll()
        return CURFEW_ERROR
    }
}

private let chunkHook: curfew_chunk_fn = { _, state in
    // The instance lives until destroy: no retain or release per chunk.
    switch instance(state)._withUnsafeGuaranteedRef({ $0.chunk() }) {
    case .continue: return 0
    case .done: return -1
    case .failed: return -2
    case .failedForGood: return -3
    case .continueAfter(let delay): return delayNanoseconds(delay)
    }
}

/// A delay as a positive `curfew_chunk_result`: at least 1 ns, at most `Int64.max`.
func delayNanoseconds(_ delay: Duration) -> Int64 {
    if delay <= .nanoseconds(1) { return 1 }
    if delay >= .nanoseconds(Int64.max) { return .max }
    let (seconds, attoseconds) = delay.components
    return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
}

private let expireHook: curfew_expire_fn = { _, state, reason in
    instance(state)._withUnsafeGuaranteedRef { $0.expire(ExpirationReason(reason)) }
}

private let appEventHook: curfew_app_event_fn = { _, state, event in
    guard let event = AppEvent(event) else { return }
    instance(state)._withUnsafeGuaranteedRef { $0.appEvent(event) }
}

private let destroyHook: curfew_destroy_fn = { _, state in
    let job = instance(state)
    job._withUnsafeGuaranteedRef { instance in
        instance.teardown()
        instance.context.tasks.releaseAll()
    }
    job.release()
}

/// `text` as a C string that lives as long as the plugin: a descriptor's
/// strings are never freed (the host never unloads a plugin).
private func permanentCString(_ text: String) -> UnsafePointer<CChar> {
    let bytes = text.utf8CString
    let copy = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count)
    bytes.withUnsafeBufferPointer { copy.initialize(from: $0.baseAddress!, count: $0.count) }
    return UnsafePointer(copy)
}
