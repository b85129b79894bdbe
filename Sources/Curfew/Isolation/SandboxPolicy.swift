import CurfewFormats

/// What a job in a worker may reach beyond its own code, the system's
/// libraries and a scratch folder of its own (see ARCHITECTURE.md's trust
/// model): the paths it may read and write, the network, and `exec`.
public struct SandboxPolicy: Sendable, Equatable {
    /// Which networks the job reaches.
    public typealias Network = SandboxNetwork

    /// The most paths a policy may name each way: a worker's message holds
    /// the plugin and its library beside them, within its own limit.
    public static let maximumPaths = 250

    public var network: Network
    /// Absolute paths the job may read beneath.
    public var read: [String]
    /// Absolute paths the job may read, write, make and remove beneath.
    public var write: [String]
    /// Whether the job may `exec` a program (one under a readable path).
    public var allowsExec: Bool

    public init(network: Network = .off, read: [String] = [], write: [String] = [], allowsExec: Bool = false) {
        self.network = network
        self.read = read
        self.write = write
        self.allowsExec = allowsExec
    }

    /// Whether this kernel enforces every layer, else what it does not, in
    /// words: a host says it once per run. The seccomp and namespace layers
    /// are the worker's to find out; this reads only what the host can.
    public static func unenforced() -> [String] {
        let abi = Syscalls.environmentValue(WorkerSandbox.refuseLandlockVariable) == "1" ? 0 : Sandbox.landlockABI
        if abi == 0 {
            return ["files, signals, abstract sockets and, where no user namespace can be made, other processes' memory (this kernel has no Landlock)"]
        }
        if abi < 6 { return ["signals and abstract sockets (Landlock ABI \(abi); 6 confines them)"] }
        return []
    }

    /// The sandbox as `status` and the history show it: `none` (`nil`), or
    /// `on` and what it grants beyond the default, e.g. `on; network on;
    /// write /data/out`; then `cgroup` where a worker under `isolation`
    /// gets one (``WorkerCgroups``). At most ``shownPaths`` paths are named each way.
    public static func summary(_ policy: SandboxPolicy?, isolation: Isolation) -> String {
        let cgroup = isolation != .none && WorkerCgroups.current != nil ? ["cgroup"] : []
        guard let policy else { return (["none"] + cgroup).joined(separator: "; ") }
        var parts = ["on"]
        if policy.network != .off { parts.append("network \(policy.network.rawValue)") }
        if policy.allowsExec { parts.append("exec") }
        for (verb, paths) in [("read", policy.read), ("write", policy.write)] where !paths.isEmpty {
            let more = paths.count - shownPaths
            parts.append("\(verb) " + paths.prefix(shownPaths).joined(separator: ", ") + (more > 0 ? " and \(more) more" : ""))
        }
        return (parts + cgroup).joined(separator: "; ")
    }

    /// How many paths ``summary(_:isolation:)`` names each way: a row stays short
    /// whatever a policy grants.
    static let shownPaths = 4

    /// `path` as a sandbox grants it: its real path (no link left in it, as
    /// the kernel's rule holds for what a path names), or `nil` when it
    /// names nothing.
    public static func resolve(_ path: String) -> String? {
        Syscalls.realPath(path)
    }

    /// The sandbox a worker applies for `job`, writing in `scratch`.
    func message(for job: PluginJob, scratch: String) -> HostMessage.Sandbox {
        var read = [job.loadPath]
        if let library = job.foreignLibrary, library.hasPrefix("/") { read.append(library) }
        return HostMessage.Sandbox(network: network, read: read + self.read, write: write, scratch: scratch, exec: allowsExec)
    }
}
