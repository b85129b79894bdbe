import Dispatch
import _CurfewShims

/// The system's monotonic clock (`CLOCK_MONOTONIC`), with timers from Dispatch.
///
/// Its origin is the system's boot, the same as `DispatchTime`'s, so a
/// deadline maps onto a `DispatchTime` without conversion error.
public struct MonotonicClock: CurfewClock {
    public init() {}

    @inline(__always)
    public func now() -> CurfewInstant {
        CurfewInstant(nanoseconds: curfew_shim_monotonic_nanoseconds())
    }

    public func schedule(
        at deadline: CurfewInstant, on queue: DispatchQueue, _ work: @escaping @Sendable () -> Void
    ) -> any CurfewTimer {
        let source = DispatchSource.makeTimerSource(flags: .strict, queue: queue)
        source.setEventHandler {
            source.cancel()
            work()
        }
        // DispatchTime counts CLOCK_MONOTONIC nanoseconds on Linux as well.
        source.schedule(deadline: DispatchTime(uptimeNanoseconds: max(deadline.nanoseconds, 1)), leeway: .nanoseconds(0))
        source.activate()
        return DispatchTimer(source: source)
    }
}

/// A `DispatchSourceTimer` seen as a ``CurfewTimer``.
struct DispatchTimer: CurfewTimer {
    // Safe because DispatchSource's cancel is thread-safe; the type is just not annotated.
    nonisolated(unsafe) let source: any DispatchSourceTimer

    func cancel() {
        source.cancel()
    }
}
