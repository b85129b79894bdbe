import Glibc
import Synchronization
import _CurfewShims

/// The cgroup v2 subtree a host gives its workers, where one is delegated
/// to it: each worker runs in a cgroup of its own, `curfew.<host pid>/worker.<n>`
/// beneath the host's, its `memory.max` the run's memory limit where that
/// controller is delegated too, and killed whole
/// (`cgroup.kill`) when the worker ends, so nothing a job starts outlives
/// it, however it detached. Where none is delegated, the subreaper walk
/// (``ChildProcesses``) is all there is.
public final class WorkerCgroups: Sendable {
    /// Where the workers' cgroups are made.
    public let folder: String
    /// The controllers each worker's cgroup has: `memory`, or none.
    public let controllers: [String]
    /// The host moved itself into `folder/host` to give its workers controllers.
    private let hostInside: Bool
    private let made = Atomic<UInt64>(0)

    private init(folder: String, controllers: [String], hostInside: Bool) {
        self.folder = folder
        self.controllers = controllers
        self.hostInside = hostInside
    }

    /// What ``prepare()`` found: the subtree, or why there is none.
    public enum Setup: Sendable {
        case on(WorkerCgroups)
        case off(reason: String)
    }

    /// The subtree this process prepared, if any: its workers get cgroups.
    public static var current: WorkerCgroups? { shared.withLock { $0 } }
    private static let shared = Mutex<WorkerCgroups?>(nil)

    /// The controllers a worker's cgroup is given, where delegated.
    static let wanted = ["memory"]

    /// Finds the host's cgroup v2 and, where it is delegated (the root of
    /// the hierarchy this process sees, or a cgroup systemd marked with
    /// `Delegate=yes`), makes the workers' folder in it and ends what dead
    /// hosts left in theirs. Once per process, before it starts another
    /// process: to give its workers controllers the host may move itself
    /// into a leaf of its own, which its children would not follow.
    public static func prepare() -> Setup {
        if let current { return .on(current) }
        let setup = find()
        if case .on(let cgroups) = setup { shared.withLock { $0 = cgroups } }
        return setup
    }

    /// Removes the workers' folder (after killing what is left in it);
    /// `current` is `nil` from then on. For the end of the host.
    public static func finish() {
        guard let cgroups = shared.withLock({ state -> WorkerCgroups? in
            defer { state = nil }
            return state
        }) else { return }
        // The host's own leaf stays while the host is in it (its unit's end
        // removes it); a kill of the whole folder would end the host too.
        if cgroups.hostInside {
            for name in children(of: cgroups.folder) where name != "host" {
                _ = WorkerCgroup(path: "\(cgroups.folder)/\(name)").remove(allowed: .seconds(1))
            }
        } else {
            sweep(cgroups.folder)
        }
    }

    /// A new cgroup for one worker, with process `pid` (the worker, before
    /// it runs plugin code) moved in.
    package func make(with pid: Int32) throws(SystemError) -> WorkerCgroup {
        let path = "\(folder)/worker.\(made.add(1, ordering: .relaxed).newValue)"
        try Syscalls.makeFolder(path, permissions: 0o755)
        let group = WorkerCgroup(path: path)
        do throws(SystemError) {
            try group.add(pid)
        } catch {
            _ = group.remove(allowed: .zero)
            throw error
        }
        return group
    }

    /// Sets `group`'s `memory.max` to `memoryBytes` where the memory
    /// controller is delegated (`nil`: no limit): the limit a worker sets on
    /// its own address space then bounds, in resident bytes, the processes
    /// its job starts too.
    package func limit(_ group: WorkerCgroup, memoryBytes: UInt64?) throws(SystemError) {
        if let memoryBytes, controllers.contains("memory") { try group.set("memory.max", "\(memoryBytes)") }
    }

    /// What the workers get, in words: "a cgroup each under F (memory.max)".
    public var description: String {
        "a cgroup each under \(folder)" + (controllers.isEmpty ? " (no memory controller delegated: --memory bounds each process alone)" : " (--memory sets memory.max)")
    }

    /// The environment variable that, set to `off`, keeps a host from
    /// making cgroups (an operator's choice; the bench's comparison).
    public static let offVariable = "CURFEW_CGROUPS"

    private static func find() -> Setup {
        if Syscalls.environmentValue(offVariable) == "off" { return .off(reason: "\(offVariable)=off") }
        guard let (own, isRoot) = ownCgroup() else { return .off(reason: "this process has no cgroup v2") }
        // The hierarchy's root as this process sees it is a container's or
        // the machine's own; any other cgroup is the host's only if delegated.
        guard isRoot || isDelegated(own) else {
            return .off(reason: "its cgroup \(own) is not delegated to it, as systemd's Delegate=yes does")
        }
        for stale in staleFolders(in: own) { sweep(stale) }
        let pid = Syscalls.processID
        let folder = "\(own)/curfew.\(pid)"
        do throws(SystemError) {
            try Syscalls.makeFolder(folder, permissions: 0o755)
        } catch {
            return .off(reason: "cannot make \(folder): \(error.message)")
        }
        var hostInside = false
        let available = Set(words(own + "/cgroup.controllers"))
        var enabled = Set(words(own + "/cgroup.subtree_control"))
        // The root's controllers are the machine's (or the container
        // manager's) to give: only a delegated cgroup's are the host's.
        let missing = isRoot ? [] : wanted.filter { available.contains($0) && !enabled.contains($0) }
        // A cgroup with processes of its own cannot give its children
        // controllers: the host leaves for a leaf when it is alone in its
        // cgroup, as a delegated service should.
        if !missing.isEmpty, words(own + "/cgroup.procs") == ["\(pid)"] {
            let leaf = folder + "/host"
            if (try? Syscalls.makeFolder(leaf, permissions: 0o755)) != nil {
                if (try? write("\(pid)", to: leaf + "/cgroup.procs")) != nil {
                    hostInside = true
                } else {
                    try? Syscalls.removeFolder(leaf)
                }
            }
        }
        for controller in missing where (try? write("+\(controller)", to: own + "/cgroup.subtree_control")) != nil {
            enabled.insert(controller)
        }
        let given = wanted.filter { enabled.contains($0) && (try? write("+\($0)", to: folder + "/cgroup.subtree_control")) != nil }
        return .on(WorkerCgroups(folder: folder, controllers: given, hostInside: hostInside))
    }

    /// This process's cgroup v2 folder, and whether it is the hierarchy's
    /// root as this process sees it.
    package static func ownCgroup() -> (folder: String, isRoot: Bool)? {
        CPUQuota.ownGroups().first { $0.version == .v2 }.map { ($0.folder, $0.folder == $0.mountPoint) }
    }

    /// Whether `cgroup` was delegated to this process and it may write it:
    /// systemd marks a `Delegate=yes` unit's cgroup `trusted.delegate` (or
    /// `user.delegate`), and gives it to the unit's user (who cannot read a
    /// `trusted.` attribute).
    package static func isDelegated(_ cgroup: String) -> Bool {
        guard access(cgroup, W_OK) == 0 else { return false }
        let user = Syscalls.userID
        if user != 0, let status = try? Syscalls.fileStatus(cgroup), status.owner == user { return true }
        let names: [String] = ["trusted.delegate", "user.delegate"]
        return names.contains { name in curfew_shim_xattr_is_set(cgroup, name) == 1 }
    }

    /// The `curfew.<pid>` folders in `cgroup` whose host is gone.
    private static func staleFolders(in cgroup: String) -> [String] {
        guard let folder = try? Syscalls.openFolder(cgroup) else { return [] }
        defer { Syscalls.close(folder) }
        let entries = (try? Syscalls.directoryEntries(in: folder)) ?? []
        return entries.compactMap { entry in
            guard entry.name.hasPrefix("curfew."), let pid = Int32(entry.name.dropFirst(7)), pid > 0,
                pid != Syscalls.processID, Glibc.kill(pid, 0) != 0 && errno == ESRCH
            else { return nil }
            return "\(cgroup)/\(entry.name)"
        }
    }

    /// Kills everything in `folder` and removes it with its cgroups.
    private static func sweep(_ folder: String) {
        let all = WorkerCgroup(path: folder)
        all.kill()
        _ = all.waitUntilEmpty(allowed: .seconds(1))
        for name in children(of: folder) { try? Syscalls.removeFolder("\(folder)/\(name)") }
        try? Syscalls.removeFolder(folder)
    }

    /// The names of the cgroups directly beneath `folder`.
    private static func children(of folder: String) -> [String] {
        guard let handle = try? Syscalls.openFolder(folder) else { return [] }
        defer { Syscalls.close(handle) }
        let entries = (try? Syscalls.directoryEntries(in: handle)) ?? []
        return entries.filter { $0.isRegular == false && $0.name != "." && $0.name != ".." }.map(\.name)
    }

    /// The space-separated words of a small cgroup file.
    static func words(_ path: String) -> [String] {
        guard let bytes = try? Syscalls.readPrefix(path, count: 1 << 16) else { return [] }
        return bytes.split(whereSeparator: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\n") })
            .compactMap { String(validating: $0, as: UTF8.self) }
    }

    static func write(_ text: String, to path: String) throws(SystemError) {
        let fd = try Syscalls.open(path, .write)
        defer { Syscalls.close(fd) }
        try Syscalls.writeAll(fd, Array(text.utf8))
    }
}

/// One worker's cgroup.
package struct WorkerCgroup: Sendable {
    package let path: String

    /// Moves process `pid`, every thread of it, in.
    package func add(_ pid: Int32) throws(SystemError) {
        try set("cgroup.procs", "\(pid)")
    }

    /// SIGKILLs every process in it, and in the cgroups beneath, at once.
    package func kill() {
        try? set("cgroup.kill", "1")
    }

    /// Waits up to `allowed` for it to hold no process (a zombie holds
    /// none): whether it does.
    func waitUntilEmpty(allowed: Duration) -> Bool {
        guard let fd = try? Syscalls.open(path + "/cgroup.events", .read) else { return false }
        defer { Syscalls.close(fd) }
        let clock = ContinuousClock()
        let end = clock.now + allowed
        var buffer = [UInt8](repeating: 0, count: 256)
        while true {
            let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { return false }
            let lines = buffer[..<count].split(separator: UInt8(ascii: "\n"))
            if lines.contains(where: { $0.elementsEqual("populated 0".utf8) }) { return true }
            let left = clock.now.duration(to: end)
            guard left > .zero else { return false }
            // The kernel marks the file with POLLPRI when a value in it changes.
            var entry = [pollfd(fd: fd, events: Int16(POLLPRI), revents: 0)]
            let milliseconds = Int32(clamping: left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1)
            if Syscalls.poll(&entry, milliseconds: milliseconds) < 0 { return false }
        }
    }

    /// Kills what is left, waits up to `allowed` for it to empty and removes
    /// it: whether it is gone.
    package func remove(allowed: Duration) -> Bool {
        kill()
        _ = waitUntilEmpty(allowed: allowed)
        return (try? Syscalls.removeFolder(path)) != nil
    }

    func set(_ file: String, _ value: String) throws(SystemError) {
        try WorkerCgroups.write(value, to: "\(path)/\(file)")
    }
}
