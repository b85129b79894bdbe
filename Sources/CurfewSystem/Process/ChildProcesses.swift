import Glibc
import Synchronization
import _CurfewShims

/// The processes plugin code starts, seen from the process that hosts it:
/// made to end with their job, even those that call `setsid()` or fork twice
/// to get away.
public enum ChildProcesses {
    /// Makes this process a child subreaper: a descendant whose parent dies
    /// comes to this process, not to init, so it can still be found.
    ///
    /// - Returns: Whether the kernel agreed.
    @discardableResult
    public static func adoptOrphans() -> Bool {
        curfew_shim_become_subreaper() == 0
    }

    /// SIGKILLs and reaps every child of this process (with its process
    /// group) but those in `keeping` and the sandbox's socket helper (which
    /// makes the sockets of jobs to come), and the orphans that arrive as
    /// they die, until none is left.
    ///
    /// - Important: Only for a process whose every other child is plugin
    ///   code's (or listed in `keeping`): the host in process, a worker.
    /// - Returns: How many were ended, or `nil` when the kernel cannot list
    ///   children (no `CONFIG_PROC_CHILDREN`).
    @discardableResult
    public static func endAll(keeping: [pid_t] = []) -> Int? {
        // One at a time: two passes at once would each reap what the other
        // listed, and the kernel's list of children is not whole while it changes.
        let helper = curfew_sandbox_helper()
        let keeping = helper > 0 ? keeping + [helper] : keeping
        let killed = lock.withLock { _ in
            keeping.withUnsafeBufferPointer { curfew_shim_kill_children($0.baseAddress, Int32($0.count), 64) }
        }
        return killed < 0 ? nil : Int(killed)
    }

    private static let lock = Mutex(())

    /// The environment variable that marks what a host started (its workers,
    /// and what their jobs start, unless a job clears its environment): a
    /// host killed with SIGKILL ends nothing, and what it left is found by it.
    public static let markVariable = "CURFEW_HOST_MARK"

    /// The mark this host gives the helpers it starts from now on (in their
    /// environment, see ``markVariable``), or `nil`.
    public static var mark: String? {
        get { currentMark.withLock { $0 } }
        set { currentMark.withLock { $0 = newValue } }
    }

    private static let currentMark = Mutex<String?>(nil)

    /// The mark of hosts that run at `place` (a state store: where one
    /// host at a time runs), however its path is spelled.
    public static func mark(of place: String) -> String {
        var hash = FNV1a()
        hash.add((Syscalls.realPath(place) ?? place).utf8)
        return hash.hex
    }

    /// SIGKILLs every process of this user but this one whose environment
    /// holds `markVariable=mark`: what a host before this one, with the same
    /// mark, left running. Each is held by a pidfd while its environment is
    /// read, so a pid reused meanwhile is never signalled.
    ///
    /// - Important: Only while no process of this one carries the mark yet.
    /// - Returns: How many were ended.
    @discardableResult
    public static func endMarked(_ mark: String) -> Int {
        // Again while a pass finds any: one may have forked as it was read.
        var ended = 0
        for _ in 0..<8 {
            let found = endMarkedOnce(mark)
            ended += found
            if found == 0 { break }
        }
        return ended
    }

    private static func endMarkedOnce(_ mark: String) -> Int {
        let entry = ArraySlice("\(markVariable)=\(mark)".utf8)
        let user = geteuid()
        guard let proc = opendir("/proc") else { return 0 }
        defer { closedir(proc) }
        var ended = 0
        while let item = readdir(proc) {
            let name = withUnsafePointer(to: item.pointee.d_name) { $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) } }
            guard let pid = pid_t(name), pid > 1, pid != getpid() else { continue }
            var info = stat()
            guard stat("/proc/\(pid)", &info) == 0, info.st_uid == user else { continue }
            let pidfd = curfew_shim_pidfd_open(pid)
            guard pidfd >= 0 else { continue }
            defer { close(pidfd) }
            // The environment it started with, as the kernel keeps it: NUL-separated entries.
            guard let environment = try? Syscalls.readPrefix("/proc/\(pid)/environ", count: 1 << 20) else { continue }
            guard environment.split(separator: 0).contains(entry) else { continue }
            if curfew_shim_pidfd_send_signal(pidfd, SIGKILL) == 0 { ended += 1 }
        }
        return ended
    }
}
