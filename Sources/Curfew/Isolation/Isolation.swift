
/// Where a job's code runs.
public enum Isolation: String, Sendable, CaseIterable {
    /// In the host process: fastest; a crashing plugin takes the host down.
    case none
    /// In a worker process per plugin file, shared by that plugin's jobs: a
    /// crash takes down that plugin's running jobs, no others.
    case plugin
    /// In a worker process of its own: a crash, a hang or a limit takes down
    /// only that job, and the host kills it at its hard deadline.
    case job
}

/// Limits a worker process applies to itself before it loads a plugin
/// (`setrlimit`), together with `PR_SET_NO_NEW_PRIVS`.
public struct ResourceLimits: Sendable, Equatable {
    /// Address space, in bytes (`RLIMIT_AS`).
    public var memoryBytes: UInt64?
    /// CPU time, in seconds (`RLIMIT_CPU`): SIGXCPU at the limit.
    public var cpuSeconds: UInt64?
    /// Open file descriptors (`RLIMIT_NOFILE`).
    public var openFiles: UInt64?

    public init(memoryBytes: UInt64? = nil, cpuSeconds: UInt64? = nil, openFiles: UInt64? = nil) {
        self.memoryBytes = memoryBytes
        self.cpuSeconds = cpuSeconds
        self.openFiles = openFiles
    }

    /// The smallest address space a worker can load a plugin in: the
    /// runtime's own mappings and its threads' stacks take most of it
    /// (measured: a worker of a debug build loads a C plugin in 160 MiB, and
    /// fails in 128 MiB).
    public static let minimumMemoryBytes: UInt64 = 192 << 20

    /// The most descriptors a worker may ask for: this process's hard limit
    /// on them, which an unprivileged worker cannot raise, and never more
    /// than the kernel's `fs.nr_open`.
    public static var maximumOpenFiles: UInt64 {
        guard let limit = Syscalls.openFileHardLimit() else { return 1024 }
        let kernel = (try? Syscalls.readPrefix("/proc/sys/fs/nr_open", count: 64)).flatMap { bytes in
            UInt64(String(decoding: bytes.prefix { $0 != 0x0A }, as: UTF8.self))
        } ?? 1 << 20
        return min(limit, kernel)
    }

    /// Which limit a worker killed by `signal` most likely hit, in words.
    func explain(signal: Int32) -> String? {
        // SIGXCPU at the soft CPU limit, SIGKILL at the hard one a second later.
        if let cpuSeconds, signal == Signal.cpuLimit || signal == Signal.kill { return "it used up its CPU time limit (--cpu-time \(cpuSeconds)s)" }
        if let memoryBytes, [Signal.segmentationFault, Signal.abort, Signal.busError, Signal.kill].contains(signal) {
            return "it may have hit its memory limit (--memory \(memoryBytes / (1024 * 1024))MiB)"
        }
        return nil
    }
}
