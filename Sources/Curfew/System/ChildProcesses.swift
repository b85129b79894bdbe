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
    /// group) but those in `keeping`, and the orphans that arrive as they
    /// die, until none is left.
    ///
    /// - Important: Only for a process whose every other child is plugin
    ///   code's (or listed in `keeping`): the host in process, a worker.
    /// - Returns: How many were ended, or `nil` when the kernel cannot list
    ///   children (no `CONFIG_PROC_CHILDREN`).
    @discardableResult
    public static func endAll(keeping: [pid_t] = []) -> Int? {
        // One at a time: two passes at once would each reap what the other
        // listed, and the kernel's list of children is not whole while it changes.
        let killed = lock.withLock { _ in
            keeping.withUnsafeBufferPointer { curfew_shim_kill_children($0.baseAddress, Int32($0.count), 64) }
        }
        return killed < 0 ? nil : Int(killed)
    }

    private static let lock = Mutex(())
}
