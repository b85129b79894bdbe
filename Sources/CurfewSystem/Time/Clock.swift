import Dispatch

/// A point on a monotonic timeline, in nanoseconds from an arbitrary origin.
///
/// Curfew's grants and runner read time only through a ``CurfewClock``, so the
/// same code runs against the system's monotonic clock or a hand-stepped one.
public struct CurfewInstant: Comparable, Hashable, Sendable, CustomStringConvertible {
    /// Nanoseconds since the clock's origin.
    public var nanoseconds: UInt64

    public init(nanoseconds: UInt64) {
        self.nanoseconds = nanoseconds
    }

    public static func < (lhs: CurfewInstant, rhs: CurfewInstant) -> Bool {
        lhs.nanoseconds < rhs.nanoseconds
    }

    /// The instant `duration` later (negative durations go earlier, clamped at the origin).
    public func advanced(by duration: Duration) -> CurfewInstant {
        let delta = duration.nanoseconds
        if delta >= 0 {
            let (sum, overflow) = nanoseconds.addingReportingOverflow(UInt64(delta))
            return CurfewInstant(nanoseconds: overflow ? .max : sum)
        }
        let magnitude = delta.magnitude
        return CurfewInstant(nanoseconds: nanoseconds > magnitude ? nanoseconds - magnitude : 0)
    }

    /// The time from `self` to `other` (negative when `other` is earlier).
    public func duration(to other: CurfewInstant) -> Duration {
        if other.nanoseconds >= nanoseconds {
            return .nanoseconds(Int64(clamping: other.nanoseconds - nanoseconds))
        }
        return .nanoseconds(-Int64(clamping: nanoseconds - other.nanoseconds))
    }

    public var description: String { "\(nanoseconds)ns" }
}

/// A timer armed with ``CurfewClock/schedule(at:_:)``.
public protocol CurfewTimer: Sendable {
    /// Stops the timer if it has not fired. Harmless when it already fired.
    func cancel()
}

/// Where Curfew reads the time and arms its timers.
///
/// Grants and the runner take a clock from outside: ``MonotonicClock`` in
/// production, ``ManualClock`` in tests that step time by hand.
public protocol CurfewClock: Sendable {
    /// The current instant. On the per-chunk path: keep it cheap.
    func now() -> CurfewInstant

    /// Arms a one-shot timer that runs `work` at `deadline`, on a thread of
    /// the clock's (for ``MonotonicClock``, the ``TimerThread``).
    ///
    /// - Important: `work` never runs synchronously inside this call, even
    ///   when `deadline` has passed. It must be short and must not call
    ///   plugin code: every timer of the process waits for it. Hand anything
    ///   longer to a queue.
    func schedule(at deadline: CurfewInstant, _ work: @escaping @Sendable () -> Void) -> any CurfewTimer
}

extension Duration {
    /// The duration in whole nanoseconds, saturating at `Int64`'s range.
    package var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let (sum, overflow2) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
        if overflow2 { return seconds < 0 ? .min : .max }
        return sum
    }

    /// The duration in whole milliseconds, saturating where ``nanoseconds``
    /// does (at 292 years: every duration the host takes is far shorter).
    public var milliseconds: Int64 { nanoseconds / 1_000_000 }

    /// The duration in seconds, as a `Double`.
    public var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) * 1e-18
    }
}
