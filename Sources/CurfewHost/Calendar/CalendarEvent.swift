import Curfew

/// A job's `on` in serve's config: a calendar expression with its zone
/// read, so that a schedule asks it for the next elapse and no file is read
/// while the host runs.
public struct CalendarEvent: Sendable, Equatable {
    package let spec: CalendarSpec
    package let zone: ZoneRules

    /// Reads `text`, its zone from the system's tz database (or the local
    /// time zone when it names none).
    public init(_ text: String) throws(CurfewError) {
        spec = try CalendarSpec(text)
        zone = try spec.zone.map { name throws(CurfewError) in try TimeZones.zone(named: name) } ?? TimeZones.local()
    }

    /// The first elapse after `time`, to the millisecond (rounded up, so
    /// never before the expression's time); `nil`: none before 2200.
    public func next(after time: WallTime) -> WallTime? {
        // The last microsecond of `time`'s millisecond: the elapse comes after it.
        let after = time.milliseconds.multipliedClamped(by: 1000) &+ 999
        guard let next = spec.next(after: after, in: zone) else { return nil }
        let (milliseconds, remainder) = next.quotientAndRemainder(dividingBy: 1000)
        return WallTime(milliseconds: milliseconds + (remainder > 0 ? 1 : 0))
    }

    public var description: String { spec.description }

    /// The first elapse after `time` of any of `events`.
    public static func next(of events: [CalendarEvent], after time: WallTime) -> WallTime? {
        events.compactMap { $0.next(after: time) }.min()
    }
}
