import Curfew
import CurfewHost
import Synchronization

/// In process, plugin code that calls `exit()` ends the host in the middle
/// of a run. While armed, this turns that into a report — which job did it,
/// with what status — and ends the host with a status of its own,
/// ``ExitCode/jobEndedHost``, never the plugin's.
///
/// `_exit()` and a crash cannot be caught this way; only `--isolate`
/// contains them.
enum ProcessExitWatch {
    private struct State {
        var installed = false
        var report: (@Sendable (_ status: Int32, _ job: String?) -> Void)?
        /// The process that armed it: a child a plugin forks inherits the
        /// handler, and its own exit() is none of the host's business.
        var process: Int32 = 0
    }

    private static let state = Mutex(State())

    /// Calls `report` if the process exits before ``disarm()``, on the
    /// thread that called `exit`, then ends the process.
    static func arm(_ report: @escaping @Sendable (_ status: Int32, _ job: String?) -> Void) {
        let install = state.withLock { state -> Bool in
            state.report = report
            state.process = Syscalls.processID
            defer { state.installed = true }
            return !state.installed
        }
        if install {
            Syscalls.onExit { status, _ in
                // Taken out under the lock, so it runs once even if two threads exit.
                guard let report = ProcessExitWatch.state.withLock({ state -> (@Sendable (Int32, String?) -> Void)? in
                    guard state.process == Syscalls.processID else { return nil }
                    defer { state.report = nil }
                    return state.report
                }) else { return }
                report(status, HookThread.currentJob)
                Syscalls.exitNow(ExitCode.jobEndedHost)
            }
        }
    }

    /// The host's own exit is coming: let it through.
    static func disarm() {
        state.withLock { $0.report = nil }
    }
}
