import Glibc
import Synchronization
import _CurfewShims

/// How a helper process (a worker, a scanner, a fork server) is ended: steps
/// taken in turn, each allowing the helper a time to exit before the next,
/// and after the last its process group is killed and it is reaped. Every
/// helper ends through one, so none is left running or unreaped by a path
/// that forgot a step.
package struct Teardown: Sendable {
    package enum Step: Sendable {
        /// Asks it to leave by its own protocol (a message, the end of its socket).
        case ask(@Sendable () -> Void, allowed: Duration)
        /// Sends it a signal.
        case signal(Int32, allowed: Duration)
        /// Lets it exit by itself (it said it is done).
        case wait(allowed: Duration)

        package var allowed: Duration {
            switch self {
            case .ask(_, let allowed), .signal(_, let allowed), .wait(let allowed): allowed
            }
        }
    }

    package let steps: [Step]

    package init(_ steps: [Step]) {
        self.steps = steps
    }

    /// Straight to the kill.
    package static let kill = Teardown([])
}

/// A helper process as the one who ends it sees it.
package protocol TeardownTarget: Sendable {
    /// Whether it has exited (it may not be reaped yet).
    var hasExited: Bool { get }
    /// Waits until it has exited, `timeout` at most (`nil`: as long as it
    /// takes): whether it has.
    func waitForExit(timeout: Duration?) -> Bool
    /// Sends it `signal`, unless it is gone.
    func send(_ signal: Int32)
    /// SIGKILLs its process group (what it left in it too), unless it is
    /// no longer this process's to kill.
    func killGroup()
    /// Waits for it to end and reaps it: its wait status, or `nil` when
    /// how it ended is unknown.
    func reap() -> Int32?
}

extension TeardownTarget {
    /// Ends it through `teardown`: its wait status, or `nil` when unknown.
    @discardableResult
    package func end(_ teardown: Teardown) -> Int32? {
        stop(teardown)
        return reap()
    }

    /// Takes `teardown`'s steps and kills it, but leaves the reap to
    /// whoever reaps it (a thread that waits for it already).
    package func stop(_ teardown: Teardown) {
        for step in teardown.steps {
            switch step {
            case .ask(let request, _): request()
            case .signal(let signal, _): send(signal)
            case .wait: break
            }
            if waitForExit(timeout: step.allowed) { break }
        }
        killGroup()
    }
}

/// A helper this process started and reaps: spawned (the leader of its own
/// process group), or a forked worker adopted when its fork server died.
///
/// Its pid stays its own until it is reaped, so signals to it and its group
/// are sent only before then, under the lock that the reap also takes.
package final class HelperProcess: TeardownTarget {
    package let pid: pid_t
    /// Becomes readable when the process exits (for a poll); -1 when the
    /// kernel has no pidfds.
    package let pidfd: Int32
    /// Reaped, with its wait status (`nil`: it was not this process's child to reap).
    private let reaped = Mutex<Int32??>(nil)

    /// Takes `pid`, a child of this process; with `pidfd` when one is open
    /// already (this object closes it).
    package init(pid: pid_t, pidfd: Int32? = nil) {
        self.pid = pid
        self.pidfd = pidfd ?? curfew_shim_pidfd_open(pid)
    }

    deinit {
        if pidfd >= 0 { Glibc.close(pidfd) }
    }

    /// Whether it has exited (it may not be reaped yet).
    package var hasExited: Bool {
        if reaped.withLock({ $0 != nil }) { return true }
        // The pidfd, not the pid: another thread may reap it meanwhile, and
        // the pid then names whatever child gets it next.
        if pidfd >= 0 {
            var entry = pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&entry, 1, 0)
            if ready >= 0 { return ready > 0 && entry.revents & Int16(POLLIN) != 0 }
        }
        return curfew_shim_has_exited(pid) == 1
    }

    package func waitForExit(timeout: Duration?) -> Bool {
        if reaped.withLock({ $0 != nil }) { return true }
        let clock = ContinuousClock()
        let end = timeout.map { clock.now.advanced(by: $0) }
        // The pidfd is readable once the process has exited, reaped or not:
        // unlike a wait on its pid, never confused by the pid's next owner.
        while pidfd >= 0 {
            var entry = [pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)]
            let wait = end.map { Int32(clamping: max(0, clock.now.duration(to: $0).nanoseconds) / 1_000_000 + 1) } ?? -1
            let ready = Syscalls.poll(&entry, milliseconds: wait)
            if ready > 0 && entry[0].revents & Int16(POLLIN) != 0 { return true }
            if ready != 0 { break }  // the poll (or the pidfd) failed: wait as without one
            if let end, clock.now >= end { return false }
        }
        // No pidfd: a wait on the pid, or a look every 10 ms until `end`.
        guard let end else { return curfew_shim_wait_exited(pid) == 0 || hasExited }
        while !hasExited {
            if clock.now >= end { return false }
            usleep(10_000)
        }
        return true
    }

    package func send(_ signal: Int32) {
        reaped.withLock { reaped in
            guard reaped == nil else { return }
            if pidfd >= 0 { _ = curfew_shim_pidfd_send_signal(pidfd, signal) } else { _ = Glibc.kill(pid, signal) }
        }
    }

    package func killGroup() {
        reaped.withLock { reaped in
            if reaped == nil { _ = Glibc.kill(-pid, SIGKILL) }
        }
    }

    /// Reaps it once it has exited; callable from any thread, any number of
    /// times: each gets the one wait status.
    package func reap() -> Int32? {
        var waits = 0
        while true {
            // Waits without reaping, so that a kill under the lock never meets
            // a reaped pid; after a wait that said "exited" when it had not,
            // on the pid itself.
            if waits == 0 { _ = waitForExit(timeout: nil) } else { curfew_shim_wait_exited(pid) }
            waits += 1
            let status = reaped.withLock { reaped -> Int32?? in
                if let reaped { return .some(reaped) }
                var code: Int32 = 0
                let result = Syscalls.retryingEINTR { waitpid(pid, &code, WNOHANG) }
                if result == 0 { return nil }  // still running: wait again
                // Not this process's child (ECHILD): how it ended is unknown.
                reaped = .some(result == pid ? code : nil)
                return reaped
            }
            if let status { return status }
        }
    }
}
