import Synchronization
import _CurfewShims

/// Which job's hook the calling thread is running, so that when plugin code
/// ends the process in process (`exit()`), the host can say whose it was.
///
/// Set once per hook call or chunk slice, not per chunk: a thread-local
/// store and a load, nothing more.
public enum HookThread {
    // Made once and never deleted; each thread reads and writes only its own slot.
    private static let slot = ThreadLocalPointer()

    /// The name of the job whose hook this thread is in, or `nil`.
    public static var currentJob: String? {
        guard let pointer = slot.value else { return nil }
        // Contexts are never freed (see HostContext), so the pointer stays valid.
        return Unmanaged<HostContext>.fromOpaque(pointer).takeUnretainedValue().job.name
    }

    private static let unblocksSignals = Atomic<Bool>(false)

    /// From now on, plugin code runs with no signal blocked, as in a program
    /// of its own: Dispatch's threads block most signals, and a process a
    /// plugin forks would inherit that and ignore SIGTERM. For workers, whose
    /// process is the plugin's; the host's own threads keep their masks.
    static func unblockSignalsInPluginCode() {
        unblocksSignals.store(true, ordering: .relaxed)
    }

    private static let reportsCrashes = Atomic<Bool>(false)


    /// From now on, a hook that crashes the process first writes where it
    /// was (job, hook, chunks run) on `descriptor`: for workers, whose host
    /// then says more than "died of SIGSEGV".
    static func reportCrashes(on descriptor: Int32) {
        if curfew_shim_install_crash_reporter(descriptor) == 0 { reportsCrashes.store(true, ordering: .relaxed) }
        // This thread may run hooks too (a worker's main thread runs its first job's).
        _ = curfew_shim_give_thread_alt_stack()
    }

    /// A hook, as a crash report names it.
    enum Hook: Int32 {
        case create = 0, chunk, expire, destroy, appEvent

        /// As the header names it.
        var name: String {
            switch self {
            case .create: "create"
            case .chunk: "chunk"
            case .expire: "expire"
            case .destroy: "destroy"
            case .appEvent: "app_event"
            }
        }
    }

    /// Where a crash happened: the job's name as a C string (kept for the
    /// process's life), the hook, and for a chunk slice the chunks before
    /// it and the slice's running count.
    struct Place {
        let job: UnsafePointer<CChar>
        let hook: Hook
        var base: UInt64 = 0
        var count: UnsafePointer<UInt64>?
    }

    /// Runs `body` with `context` recorded as this thread's job, and in a
    /// worker that reports crashes, `place` as where a crash would be.
    @inline(__always)
    static func running<T>(_ context: HostContext, at place: @autoclosure () -> Place? = nil, _ body: () -> T) -> T {
        let previous = slot.value
        slot.value = Unmanaged.passUnretained(context).toOpaque()
        defer { slot.value = previous }
        let reporting = reportsCrashes.load(ordering: .relaxed)
        if reporting {
            // For a hook that overflows its stack: one per thread, kept.
            _ = curfew_shim_give_thread_alt_stack()
            if let place = place() { curfew_shim_crash_where(place.job, place.hook.rawValue, place.base, place.count) }
        }
        defer { if reporting { curfew_shim_crash_where(nil, 0, 0, nil) } }
        guard unblocksSignals.load(ordering: .relaxed) else { return body() }
        let kept = SignalMask.unblockAll()
        defer { kept.restore() }
        return body()
    }
}

extension HookThread {
    /// A fault (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) in plugin code
    /// that ran in this process.
    public struct Fault: Sendable, Equatable {
        public let job: String
        /// "create", "chunk", "expire", "destroy" or "app_event".
        public let hook: String
        /// The chunk that faulted (counting from 1), for a chunk.
        public let chunk: UInt64?
        /// "SIGSEGV", say.
        public let signal: String
    }

    /// From now on, a fault in a hook run in this process ends the process
    /// with `status`, reported: `report` runs on a thread of its own while
    /// the faulting thread waits, and the process ends as it returns. Should
    /// it not return within a second (the fault left a lock of malloc's
    /// held, say), the signal handler writes its own line to `human` (and a
    /// JSON line to `machine`, when that is not -1) and ends the process.
    ///
    /// - Returns: false when the handlers could not be installed.
    public static func reportFaults(
        human: Int32, machine: Int32, status: Int32, _ report: @escaping @Sendable (Fault) -> Void
    ) -> Bool {
        guard let ends = try? Syscalls.pipe() else { return false }
        let reader = ends[0]
        let started = OSThread.detach {
            var byte: UInt8 = 0
            _ = withUnsafeMutableBytes(of: &byte) { try? Syscalls.read(reader, into: $0) }
            var job: UnsafePointer<CChar>?
            var hook: UnsafePointer<CChar>?
            var signal: UnsafePointer<CChar>?
            var chunk: UInt64 = 0
            guard curfew_shim_fault(&job, &hook, &chunk, &signal) == 1, let job, let hook, let signal else { return }
            report(Fault(
                job: String(cString: job), hook: String(cString: hook), chunk: chunk > 0 ? chunk : nil,
                signal: String(cString: signal)))
            Syscalls.exitNow(status)
        }
        guard started, curfew_shim_install_fault_reporter(human, machine, status, ends[1]) == 0 else { return false }
        reportsCrashes.store(true, ordering: .relaxed)
        _ = curfew_shim_give_thread_alt_stack()
        return true
    }

    /// Blocks for ever if a fault is being reported: its report ends the
    /// process, and the host must not end it first with a status of its own
    /// (a job whose hook faulted is over at its hard deadline, say).
    public static func waitIfFaulting() {
        var job: UnsafePointer<CChar>?
        var hook: UnsafePointer<CChar>?
        var signal: UnsafePointer<CChar>?
        var chunk: UInt64 = 0
        guard curfew_shim_fault(&job, &hook, &chunk, &signal) == 1 else { return }
        Syscalls.waitForever()
    }
}
