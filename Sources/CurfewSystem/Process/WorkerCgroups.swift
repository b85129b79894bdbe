import Glibc
import Synchronization
import _CurfewShims

/// The cgroup v2 subtree a host gives its workers, where one is delegated
/// to it: each worker runs in a cgroup of its own, `curfew.<host>/worker.<n>`
/// beneath the host's (``HostName``), its `memory.max` the run's memory limit where that
/// controller is delegated too, and killed whole
/// (`cgroup.kill`) when the worker ends, so nothing a job starts outlives
/// it, however it detached; emptied, it goes to a later worker where it has
/// no controller (``giveBack(_:reusable:allowed:)``). Where none is delegated, the subreaper walk
/// (``ChildProcesses``) is all there is.
public final class WorkerCgroups: Sendable {
    /// Where the workers' cgroups are made.
    public let folder: String
    /// The controllers each worker's cgroup has: `memory`, or none.
    public let controllers: [String]
    /// How many processes dead hosts had left in their folders, ended as this one prepared.
    public let ended: Int
    /// The host moved itself into `folder/host` to give its workers controllers.
    private let hostInside: Bool
    private let made = Atomic<UInt64>(0)
    /// Worker cgroups whose workers have ended, emptied, for the next ones
    /// (``giveBack(_:reusable:allowed:)``): a `mkdir` and an `rmdir` in cgroupfs are
    /// most of what a worker's cgroup costs the host.
    private let emptied = Mutex<[WorkerCgroup]>([])
    /// How many emptied cgroups wait at most; beyond, one is removed.
    static let emptiedLimit = 16

    private init(folder: String, controllers: [String], ended: Int, hostInside: Bool) {
        self.folder = folder
        self.controllers = controllers
        self.ended = ended
        self.hostInside = hostInside
    }

    /// Workers' cgroups in `folder`, which the caller made and removes, with
    /// `controllers` as if given: for tests, which must not prepare the
    /// process's own (``prepare()``).
    package convenience init(madeFolder folder: String, controllers: [String]) {
        self.init(folder: folder, controllers: controllers, ended: 0, hostInside: false)
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
            let workers = children(of: cgroups.folder).filter { $0 != "host" }.map { WorkerCgroup(path: "\(cgroups.folder)/\($0)") }
            // All killed first: their ends overlap.
            workers.forEach { _ = $0.kill() }
            workers.forEach { _ = $0.remove(allowed: .seconds(1)) }
        } else {
            sweep(cgroups.folder)
        }
    }

    /// A new cgroup for one worker, with process `pid` (the worker, before
    /// it runs plugin code) moved in.
    package func make(with pid: Int32) throws(SystemError) -> WorkerCgroup {
        let group = try makeFolder()
        do throws(SystemError) {
            try group.add(pid)
        } catch {
            _ = group.removeTree()
            throw error
        }
        return group
    }

    /// A new, empty cgroup for one worker, and its folder open (the caller
    /// closes `descriptor`): for the fork server to fork the worker straight
    /// into (``ForkServer/fork(channel:out:err:cgroup:then:)``), which is
    /// never a move. A move (``WorkerCgroup/add(_:)``) takes the kernel's
    /// global threadgroup lock, which waits for an RCU grace period and
    /// holds up every fork and exit on the machine meanwhile.
    package func makeEmpty() throws(SystemError) -> (group: WorkerCgroup, descriptor: Int32) {
        while let group = emptied.withLock({ $0.popLast() }) {
            // Kept empty, unfrozen and unkilled, or not given out: a late kill
            // of its last worker's would end the next one as it is forked.
            if !group.wasKilled, group.events == .idle,
                let descriptor = try? Syscalls.open(group.path, .read, [.directory, .noFollow])
            {
                return (group, descriptor)
            }
            _ = group.remove(allowed: .seconds(1))
        }
        let group = try makeFolder()
        do throws(SystemError) {
            return (group, try Syscalls.open(group.path, .read, [.directory, .noFollow]))
        } catch {
            _ = group.removeTree()
            throw error
        }
    }

    private func makeFolder() throws(SystemError) -> WorkerCgroup {
        let path = "\(folder)/worker.\(made.add(1, ordering: .relaxed).newValue)"
        try Syscalls.makeFolder(path, permissions: 0o755)
        let group = WorkerCgroup(path: path)
        do throws(SystemError) {
            // A job may make cgroups beneath its own, a few deep: its removal walks them.
            try group.set("cgroup.max.depth", "8")
            return group
        } catch {
            _ = group.removeTree()
            throw error
        }
    }

    /// A worker's cgroup once its worker has exited: what is left in it
    /// killed and waited up to `allowed` for, then the cgroup kept for a
    /// later worker (``makeEmpty()``), or removed. Kept only where
    /// `reusable` (its worker was sandboxed: a job unconfined could write
    /// the cgroup's own files, `cgroup.kill` or `cgroup.freeze`, against
    /// the next worker), where nothing was ever killed in it (see
    /// ``WorkerCgroup/kill()``), where the workers' cgroups have no
    /// controller, so an emptied one holds nothing of its last worker's (a
    /// memory controller would keep charging it for the page cache its jobs
    /// filled), and with no cgroup beneath it (a job may make some). `nil`
    /// once kept or gone, else why not.
    package func giveBack(_ group: WorkerCgroup, reusable: Bool, allowed: Duration) -> SystemError? {
        let events = group.events
        guard events != .populated, events != nil else {
            guard group.kill() else { return group.removeTree() }
            _ = group.waitUntilEmpty(allowed: allowed)
            return group.removeTree()
        }
        if reusable, events == .idle, !group.wasKilled, controllers.isEmpty, Syscalls.folder(of: group.path) == folder,
            group.hasNoDescendants,
            emptied.withLock({ emptied -> Bool in
                guard emptied.count < Self.emptiedLimit else { return false }
                emptied.append(group)
                return true
            })
        {
            return nil
        }
        return group.removeTree()
    }

    /// ``giveBack(_:reusable:allowed:)`` to the host's subtree, or where it is gone
    /// (the host is ending), ``WorkerCgroup/remove(allowed:)``.
    package static func giveBack(_ group: WorkerCgroup, reusable: Bool, allowed: Duration) -> SystemError? {
        // Not `current?.giveBack(...) ?? remove`: a kept cgroup's `nil` would remove it.
        guard let current else { return group.remove(allowed: allowed) }
        return current.giveBack(group, reusable: reusable, allowed: allowed)
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
        guard access(own, W_OK) == 0 else { return .off(reason: "cannot write its cgroup \(own): \(SystemError.last.message)") }
        guard let me = HostName.current() else { return .off(reason: "cannot read this process's start in /proc/self/stat") }
        let ended = staleFolders(in: own, besides: me).reduce(0) { $0 + sweep($1) }
        let folder = "\(own)/\(me.folderName)"
        do throws(SystemError) {
            try Syscalls.makeFolder(folder, permissions: 0o755)
        } catch {
            return .off(reason: "cannot make \(folder): \(error.message)")
        }
        // cgroup.kill came with Linux 5.14: without it a cgroup ends nothing.
        guard Syscalls.exists(folder + "/cgroup.kill") else {
            try? Syscalls.removeFolder(folder)
            return .off(reason: "this kernel's cgroups have no cgroup.kill (Linux 5.14)")
        }
        let pid = Syscalls.processID
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
        return .on(WorkerCgroups(folder: folder, controllers: given, ended: ended, hostInside: hostInside))
    }

    /// This process's cgroup v2 folder, and whether it is the hierarchy's
    /// root as this process sees it.
    package static func ownCgroup() -> (folder: String, isRoot: Bool)? {
        CPUQuota.ownGroups().first { $0.version == .v2 }.map { ($0.folder, $0.folder == $0.mountPoint) }
    }

    /// Whether `cgroup` was delegated to this process: systemd marks a
    /// `Delegate=yes` unit's cgroup `trusted.delegate` (`user.delegate`
    /// under a user's manager; systemd 251 and later), and gives it to the
    /// unit's user, who cannot read a `trusted.` attribute: a cgroup of this
    /// user's whose parent is not is where a delegation begins. (Every
    /// cgroup beneath a user's manager is that user's, delegated or not.)
    package static func isDelegated(_ cgroup: String) -> Bool {
        let user = Syscalls.userID
        if user != 0, let own = try? Syscalls.fileStatus(cgroup), own.owner == user,
            let parent = try? Syscalls.fileStatus(Syscalls.folder(of: cgroup)), parent.owner != user
        {
            return true
        }
        let names: [String] = ["trusted.delegate", "user.delegate"]
        return names.contains { name in curfew_shim_xattr_is_set(cgroup, name) == 1 }
    }

    /// Who made a `curfew.` folder, in its name: a host's pid, when it
    /// started (clock ticks since boot) and its pid namespace, so that a pid
    /// used again, or a host in another namespace that shares the cgroup,
    /// is never taken for the host that made it.
    package struct HostName: Equatable {
        package let pid: Int32
        package let start: UInt64
        package let namespace: UInt64

        package var folderName: String { "curfew.\(pid).\(start).\(namespace)" }

        package init(pid: Int32, start: UInt64, namespace: UInt64) {
            self.pid = pid
            self.start = start
            self.namespace = namespace
        }

        /// A folder's name read back, or `nil` when it is no host's.
        package init?(folderName name: String) {
            guard name.hasPrefix("curfew.") else { return nil }
            let parts = name.dropFirst(7).split(separator: ".", omittingEmptySubsequences: false)
            guard parts.count == 3, parts.allSatisfy({ $0.utf8.count <= 20 }), let pid = Int32(parts[0]), pid > 0,
                let start = UInt64(parts[1]), let namespace = UInt64(parts[2])
            else { return nil }
            self.init(pid: pid, start: start, namespace: namespace)
        }

        /// This process's, or `nil` where `/proc` is another pid
        /// namespace's (its pids would name other processes).
        package static func current() -> HostName? {
            let pid = Syscalls.processID
            guard (try? Syscalls.linkTarget("/proc/self")) == "\(pid)", let start = startTime(of: "\(pid)"),
                let namespace = try? Syscalls.fileStatus("/proc/self/ns/pid").inode
            else { return nil }
            return HostName(pid: pid, start: start, namespace: namespace)
        }

        /// Whether the host it names is gone: it was of this pid namespace
        /// (another's hosts are not seen here), and no process has its pid,
        /// or the one that has it started at another time. A stat that
        /// cannot be read says nothing: not gone.
        package func isGone(seenFrom me: HostName) -> Bool {
            guard namespace == me.namespace, self != me else { return false }
            if let now = Self.startTime(of: "\(pid)") { return now != start }
            return Glibc.kill(pid, 0) != 0 && errno == ESRCH
        }

        /// Field 22 of `/proc/PID/stat`, after the command's closing parenthesis.
        package static func startTime(of process: String) -> UInt64? {
            guard let bytes = try? Syscalls.readPrefix("/proc/\(process)/stat", count: 4096),
                let close = bytes.lastIndex(of: UInt8(ascii: ")"))
            else { return nil }
            let fields = bytes[(close + 1)...].split(separator: UInt8(ascii: " "))
            // The fields after the command start at the state (field 3).
            guard fields.count > 19, fields[19].count <= 20, let text = String(validating: fields[19], as: UTF8.self) else { return nil }
            return UInt64(text)
        }
    }

    /// The `curfew.` folders in `cgroup` whose host is gone.
    private static func staleFolders(in cgroup: String, besides me: HostName) -> [String] {
        children(of: cgroup).compactMap { name in
            guard let host = HostName(folderName: name), host.isGone(seenFrom: me) else { return nil }
            return "\(cgroup)/\(name)"
        }
    }

    /// Kills everything in `folder` and removes it with its cgroups: how
    /// many processes it held.
    @discardableResult
    private static func sweep(_ folder: String) -> Int {
        let all = WorkerCgroup(path: folder)
        let count = all.processCount()
        // Not this user's to kill (another's host): left, and not counted.
        guard all.kill() else { return 0 }
        _ = all.waitUntilEmpty(allowed: .seconds(1))
        _ = all.removeTree()
        return count
    }

    /// The names of the cgroups directly beneath `folder`.
    fileprivate static func children(of folder: String) -> [String] {
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

    package init(path: String) {
        self.path = path
    }

    /// Moves process `pid`, every thread of it, in.
    package func add(_ pid: Int32) throws(SystemError) {
        try set("cgroup.procs", "\(pid)")
    }

    /// SIGKILLs every process in it, and in the cgroups beneath, at once:
    /// whether the kernel took the request.
    @discardableResult
    package func kill() -> Bool {
        // Noted before the write, so no clone can come between the two
        // unnoted; forgotten when the write fails (nothing was killed).
        Self.killed.withLock { _ = $0.insert(path) }
        guard (try? set("cgroup.kill", "1")) != nil else {
            Self.killed.withLock { _ = $0.remove(path) }
            return false
        }
        return true
    }

    /// The cgroups ``kill()`` killed, until removed: the kernel (6.18 here)
    /// SIGKILLs a process cloned into a cgroup (`CLONE_INTO_CGROUP`) whose
    /// count of kills differs from that of the cloning process's own
    /// cgroup, so a killed cgroup is never a worker's again.
    private static let killed = Mutex<Set<String>>([])

    /// Whether it was killed since it was made.
    var wasKilled: Bool { Self.killed.withLock { $0.contains(path) } }

    /// What `cgroup.events` says of it.
    package enum Events: Equatable {
        /// No process in it or beneath it (a zombie holds none), not frozen.
        case idle
        /// A process in it or beneath it.
        case populated
        /// Empty, but frozen: a process cloned into it would not run.
        case frozen

        /// Reads `cgroup.events`' lines; `nil` when they say nothing of its processes.
        init?(parsing bytes: ArraySlice<UInt8>) {
            let lines = bytes.split(separator: UInt8(ascii: "\n"))
            if lines.contains(where: { $0.elementsEqual("populated 1".utf8) }) {
                self = .populated
            } else if lines.contains(where: { $0.elementsEqual("populated 0".utf8) }) {
                self = lines.contains(where: { $0.elementsEqual("frozen 0".utf8) }) ? .idle : .frozen
            } else {
                return nil
            }
        }
    }

    /// What `cgroup.events` says, or `nil` when it cannot be read.
    package var events: Events? {
        guard let bytes = try? Syscalls.readPrefix(path + "/cgroup.events", count: 256) else { return nil }
        return Events(parsing: bytes[...])
    }

    /// Kills what it holds, if anything (or when that cannot be read): a
    /// cgroup left unkilled can go to another worker
    /// (``WorkerCgroups/giveBack(_:reusable:allowed:)``).
    package func killIfPopulated() {
        let events = events
        if events == .populated || events == nil { kill() }
    }

    /// Whether no cgroup lives beneath it (`cgroup.stat`: one read, not a
    /// listing); false when that cannot be read.
    var hasNoDescendants: Bool {
        guard let bytes = try? Syscalls.readPrefix(path + "/cgroup.stat", count: 512) else { return false }
        return bytes.split(separator: UInt8(ascii: "\n")).contains { $0.elementsEqual("nr_descendants 0".utf8) }
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
            if let events = Events(parsing: buffer[..<count]), events != .populated { return true }
            let left = clock.now.duration(to: end)
            guard left > .zero else { return false }
            // The kernel marks the file with POLLPRI when a value in it changes.
            var entry = [pollfd(fd: fd, events: Int16(POLLPRI), revents: 0)]
            let milliseconds = Int32(clamping: left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1)
            if Syscalls.poll(&entry, milliseconds: milliseconds) < 0 { return false }
        }
    }

    /// Kills what is left, waits up to `allowed` for it to empty and removes
    /// it with any cgroup made beneath it: `nil` once it is gone (or was
    /// already), else why not.
    package func remove(allowed: Duration) -> SystemError? {
        if kill() { _ = waitUntilEmpty(allowed: allowed) }
        return removeTree()
    }

    /// How many processes it and the cgroups beneath it hold.
    func processCount(depth: Int = 0) -> Int {
        guard depth < 64 else { return 0 }
        let own = WorkerCgroups.words(path + "/cgroup.procs").count
        return WorkerCgroups.children(of: path).reduce(own) { $0 + WorkerCgroup(path: "\(path)/\($1)").processCount(depth: depth + 1) }
    }

    /// Removes it and the cgroups beneath it, deepest first (a job may
    /// have made some): `nil`, or the first error but a missing folder.
    package func removeTree(depth: Int = 0) -> SystemError? {
        // The kernel caps a hierarchy's depth; so does this walk.
        guard depth < 64 else { return SystemError(errno: ELOOP) }
        for name in WorkerCgroups.children(of: path) {
            if let error = WorkerCgroup(path: "\(path)/\(name)").removeTree(depth: depth + 1) { return error }
        }
        do throws(SystemError) {
            try Syscalls.removeFolder(path)
            Self.killed.withLock { _ = $0.remove(path) }
            return nil
        } catch {
            guard error == .noEntry else { return error }
            Self.killed.withLock { _ = $0.remove(path) }
            return nil
        }
    }

    func set(_ file: String, _ value: String) throws(SystemError) {
        try WorkerCgroups.write(value, to: "\(path)/\(file)")
    }
}
