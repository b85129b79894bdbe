import Glibc

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

    /// Which limit a worker killed by `signal` most likely hit, in words.
    func explain(signal: Int32) -> String? {
        // SIGXCPU at the soft CPU limit, SIGKILL at the hard one a second later.
        if let cpuSeconds, signal == SIGXCPU || signal == SIGKILL { return "it used up its CPU time limit (--cpu-time \(cpuSeconds)s)" }
        if let memoryBytes, [SIGSEGV, SIGABRT, SIGBUS, SIGKILL].contains(signal) {
            return "it may have hit its memory limit (--memory \(memoryBytes / (1024 * 1024))MiB)"
        }
        return nil
    }
}
