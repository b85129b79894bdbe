import _CurfewShims

/// The system's monotonic clock (`CLOCK_MONOTONIC`), with timers fired by
/// the process's ``TimerThread``.
///
/// Its origin is the system's boot, the same as `DispatchTime`'s, so a
/// deadline maps onto a `DispatchTime` without conversion error.
public struct MonotonicClock: CurfewClock {
    public init() {}

    @inline(__always)
    public func now() -> CurfewInstant {
        CurfewInstant(nanoseconds: curfew_shim_monotonic_nanoseconds())
    }

    public func schedule(at deadline: CurfewInstant, _ work: @escaping @Sendable () -> Void) -> any CurfewTimer {
        TimerThread.shared.schedule(at: deadline.nanoseconds, work)
    }
}
