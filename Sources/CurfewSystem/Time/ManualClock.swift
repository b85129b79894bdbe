import Dispatch
import Synchronization

/// A clock that moves only when told to, for tests of time-dependent logic.
///
/// Timers fire synchronously, in deadline order, on the thread that calls
/// ``advance(by:)`` or ``fireDueTimers()``. So a 180 s budget is tested
/// exactly, in microseconds.
public final class ManualClock: CurfewClock {
    private struct Pending {
        let id: UInt64
        let deadline: CurfewInstant
        let work: @Sendable () -> Void
    }

    private struct State {
        var now: CurfewInstant
        var nextID: UInt64 = 1
        var pending: [Pending] = []
    }

    private let state: Mutex<State>

    /// A clock that starts at `start`.
    public init(start: CurfewInstant = CurfewInstant(nanoseconds: 1_000_000_000)) {
        state = Mutex(State(now: start))
    }

    public func now() -> CurfewInstant {
        state.withLock { $0.now }
    }

    public func schedule(at deadline: CurfewInstant, _ work: @escaping @Sendable () -> Void) -> any CurfewTimer {
        let id = state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            state.pending.append(Pending(id: id, deadline: deadline, work: work))
            return id
        }
        return ManualTimer(clock: self, id: id)
    }

    /// Moves time forward by `duration`, firing every timer that falls due,
    /// each with the clock reading its own deadline while it runs.
    public func advance(by duration: Duration) {
        precondition(duration >= .zero, "ManualClock cannot go backwards")
        let target = now().advanced(by: duration)
        while let next = popDue(before: target) {
            next.work()
        }
        state.withLock { $0.now = max($0.now, target) }
    }

    /// Fires the timers already due, without moving time.
    public func fireDueTimers() {
        advance(by: .zero)
    }

    /// Moves time to the earliest armed timer and fires it (and any other
    /// due then); false, and time stays, when no timer is armed.
    @discardableResult
    public func advanceToNextTimer() -> Bool {
        let next = state.withLock { state in state.pending.min { $0.deadline < $1.deadline }?.deadline }
        guard let next else { return false }
        advance(by: max(.zero, now().duration(to: next)))
        return true
    }

    /// How many timers are armed and not yet fired or cancelled.
    public var armedTimerCount: Int {
        state.withLock { $0.pending.count }
    }

    private func popDue(before target: CurfewInstant) -> Pending? {
        state.withLock { state in
            guard let index = state.pending.indices.min(by: {
                (state.pending[$0].deadline, state.pending[$0].id) < (state.pending[$1].deadline, state.pending[$1].id)
            }), state.pending[index].deadline <= target else { return nil }
            let due = state.pending.remove(at: index)
            state.now = max(state.now, due.deadline)
            return due
        }
    }

    fileprivate func cancel(id: UInt64) {
        state.withLock { $0.pending.removeAll { $0.id == id } }
    }
}

private struct ManualTimer: CurfewTimer {
    let clock: ManualClock
    let id: UInt64

    func cancel() {
        clock.cancel(id: id)
    }
}
