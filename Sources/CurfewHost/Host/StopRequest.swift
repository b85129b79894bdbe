import Curfew
import Synchronization

/// A request to stop a run before its jobs are done — a signal, or the
/// output's reader gone — made at most once, whenever it comes: before
/// the jobs exist (during the scan) or while they run.
public final class StopRequest: Sendable {
    private struct State {
        var status: Int32?
        var reason: String?
        var action: (@Sendable (String) -> Void)?
        /// A stop signal came (see ``catchSignals(status:hangUp:)``).
        var signalled = false
    }

    private let state = Mutex(State())

    public init() {}

    /// The exit status the first request asked for, or `nil`.
    public var status: Int32? { state.withLock { $0.status } }

    /// Why the first request was made ("SIGTERM", "output closed"), or `nil`.
    public var reason: String? { state.withLock { $0.reason } }

    /// Records a request and runs the action for it (see ``onRequest(_:)``).
    ///
    /// - Returns: `false` when a request was made before; this one changes nothing.
    @discardableResult
    public func request(status: Int32, reason: String) -> Bool {
        let (first, action) = state.withLock { state -> (Bool, (@Sendable (String) -> Void)?) in
            guard state.status == nil else { return (false, nil) }
            state.status = status
            state.reason = reason
            return (true, state.action)
        }
        if first { action?(reason) }
        return first
    }

    /// Sets what a request does, given its reason; runs it now for a request
    /// already made. Either way it runs once.
    public func onRequest(_ action: @escaping @Sendable (String) -> Void) {
        let pending = state.withLock { state -> String? in
            state.action = action
            return state.reason
        }
        if let pending { action(pending) }
    }

    /// Catches SIGINT, SIGTERM and SIGHUP for a host whose process is its
    /// own: the first is a request, with the status `status(number)` and the
    /// signal's name as its reason; a second ends the process at once with
    /// 128 + its number, not waiting for cleanups. Given `hangUp`, SIGHUP
    /// calls it instead (a reload) and is no stop.
    public func catchSignals(
        status: @escaping @Sendable (Int32) -> Int32, hangUp: (@Sendable () -> Void)? = nil
    ) throws(CurfewError) -> SignalMonitor {
        try SignalMonitor(signals: [Signal.interrupt, Signal.terminate, Signal.hangUp]) { [self] number in
            if number == Signal.hangUp, let hangUp { return hangUp() }
            let again = state.withLock { state in
                defer { state.signalled = true }
                return state.signalled
            }
            if again { Syscalls.exitNow(128 + number) }
            request(status: status(number), reason: SignalMonitor.name(of: number))
        }
    }

    /// Lets the action go (and what it holds: a run's runner, its store):
    /// a request after the work it stops has ended only records its status.
    public func dropAction() {
        state.withLock { $0.action = nil }
    }
}
