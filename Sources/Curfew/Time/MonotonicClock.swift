import Dispatch
import Synchronization
import _CurfewShims

/// The system's monotonic clock (`CLOCK_MONOTONIC`), with timers that are
/// libdispatch timer sources.
///
/// Its origin is the system's boot, the same as `DispatchTime`'s, so a
/// deadline maps onto a `DispatchTime` without conversion error.
public struct MonotonicClock: CurfewClock {
    /// Where every timer's work runs: a queue of a higher QoS than the
    /// hooks', whose workers libdispatch keeps apart, so a deadline is met
    /// while every hook worker runs a chunk.
    static let timers = DispatchQueue(label: "curfew.timers", qos: .userInteractive, attributes: .concurrent)

    public init() {}

    @inline(__always)
    public func now() -> CurfewInstant {
        CurfewInstant(nanoseconds: curfew_shim_monotonic_nanoseconds())
    }

    public func schedule(at deadline: CurfewInstant, _ work: @escaping @Sendable () -> Void) -> any CurfewTimer {
        DispatchTimer(at: deadline, work)
    }
}

/// A one-shot timer source. Firing and cancelling race through one atomic
/// state, so after ``cancel()`` returns the work does not start (the source
/// may already have delivered its event), and the work and its captures
/// go at the cancel, not at the deadline.
final class DispatchTimer: CurfewTimer, @unchecked Sendable {
    // Safe because `work` is read and cleared only by whichever moved
    // `state` off armed, and `source` is set once, before it is activated.
    private static let armed: UInt8 = 0
    private static let done: UInt8 = 1

    private let state = Atomic<UInt8>(DispatchTimer.armed)
    private var work: (@Sendable () -> Void)?
    private let source: any DispatchSourceTimer

    init(at deadline: CurfewInstant, _ work: @escaping @Sendable () -> Void) {
        self.work = work
        source = DispatchSource.makeTimerSource(flags: .strict, queue: MonotonicClock.timers)
        // 0 means "now" to DispatchTime: an instant at the origin is long past either way.
        source.schedule(deadline: DispatchTime(uptimeNanoseconds: max(deadline.nanoseconds, 1)), leeway: .nanoseconds(0))
        // The handler holds the timer until the source is cancelled, which
        // releases the handler: fired or cancelled, nothing stays.
        source.setEventHandler { self.fire() }
        source.activate()
    }

    private func take() -> (@Sendable () -> Void)? {
        guard state.compareExchange(expected: Self.armed, desired: Self.done, ordering: .acquiringAndReleasing).exchanged else {
            return nil
        }
        defer { work = nil }
        return work
    }

    private func fire() {
        source.cancel()
        take()?()
    }

    func cancel() {
        guard let captures = take() else { return }
        source.cancel()
        _ = captures
    }
}
