import Glibc

/// A moment on the wall clock, in milliseconds since the Unix epoch: when
/// history happened, comparable across restarts (unlike ``CurfewInstant``).
public struct WallTime: Sendable, Hashable, Comparable {
    public let milliseconds: Int64

    public init(milliseconds: Int64) { self.milliseconds = milliseconds }

    public static func now() -> WallTime {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return WallTime(milliseconds: Int64(time.tv_sec) &* 1000 &+ Int64(time.tv_nsec) / 1_000_000)
    }

    /// The calendar's reading of this moment, in UTC or the local time zone.
    package struct Fields: Equatable {
        package var year, month, day, hour, minute, second, millisecond: Int
    }

    /// This moment on the calendar: in UTC, or in the local time zone.
    package func fields(utc: Bool) -> Fields {
        // Floored, so a time before 1970 still reads right; divided before
        // any subtraction, so no value traps.
        let remainder = milliseconds % 1000
        var seconds = time_t(milliseconds / 1000 - (remainder < 0 ? 1 : 0))
        var parts = tm()
        if utc { gmtime_r(&seconds, &parts) } else { localtime_r(&seconds, &parts) }
        return Fields(
            year: Int(parts.tm_year) + 1900, month: Int(parts.tm_mon) + 1, day: Int(parts.tm_mday), hour: Int(parts.tm_hour),
            minute: Int(parts.tm_min), second: Int(parts.tm_sec), millisecond: Int(remainder < 0 ? remainder + 1000 : remainder))
    }

    public static func < (a: WallTime, b: WallTime) -> Bool { a.milliseconds < b.milliseconds }

    /// `duration` later, saturating.
    public func later(by duration: Duration) -> WallTime {
        let (value, overflow) = milliseconds.addingReportingOverflow(duration.milliseconds)
        return WallTime(milliseconds: overflow ? (duration > .zero ? .max : .min) : value)
    }

    /// `duration` earlier, saturating.
    public func earlier(by duration: Duration) -> WallTime {
        later(by: .zero - duration)
    }
}

/// Time since boot, suspend included (`CLOCK_BOOTTIME`): what a schedule's
/// gaps run on, so a sleeping machine's missed slots count as passed.
package enum BootTime {
    package static func milliseconds() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_BOOTTIME, &time)
        return Int64(time.tv_sec) &* 1000 &+ Int64(time.tv_nsec) / 1_000_000
    }
}
