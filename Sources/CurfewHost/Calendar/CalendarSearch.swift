extension CalendarSpec {
    /// The first time after `instant` (microseconds since the epoch) that
    /// this expression names, or `nil` when none comes before the year
    /// after ``maximumYear``.
    ///
    /// Walks the calendar in the expression's zone from the largest field
    /// to the smallest, as systemd does: a local time a clock change skips
    /// (02:30 on a spring-forward day) is no time at all, and one it repeats
    /// names its first instant, so a daily run comes once on both days.
    package func next(after instant: Int64, in zone: ZoneRules) -> Int64? {
        let start = instant &+ 1
        let kind = zone.kind(at: Self.seconds(start))
        var at = CivilTime(microseconds: start &+ Int64(kind.offset) * 1_000_000)
        // Each turn moves `at` later, to a later month, day, hour or minute,
        // or past a gap: a few turns a month at most, and past the last year
        // the walk ends. The bound only guards that reasoning.
        for _ in 0..<1_000_000 {
            guard at.year <= Self.maximumYear else { return nil }
            guard let year = Self.next(years, atLeast: at.year, upTo: Self.maximumYear) else { return nil }
            if year > at.year { at = CivilTime(year: year, month: 1, day: 1, hour: 0, minute: 0, microsecond: 0) }
            guard let month = Self.next(months, atLeast: at.month, upTo: 12) else {
                at = CivilTime(year: at.year + 1, month: 1, day: 1, hour: 0, minute: 0, microsecond: 0)
                continue
            }
            if month > at.month { at = CivilTime(year: at.year, month: month, day: 1, hour: 0, minute: 0, microsecond: 0) }
            guard let day = firstDay(from: at.day, month: at.month, year: at.year) else {
                at = at.month == 12
                    ? CivilTime(year: at.year + 1, month: 1, day: 1, hour: 0, minute: 0, microsecond: 0)
                    : CivilTime(year: at.year, month: at.month + 1, day: 1, hour: 0, minute: 0, microsecond: 0)
                continue
            }
            if day > at.day { at = CivilTime(year: at.year, month: at.month, day: day, hour: 0, minute: 0, microsecond: 0) }
            guard let hour = Self.next(hours, atLeast: at.hour, upTo: 23) else {
                at = CivilTime(microseconds: CivilTime(year: at.year, month: at.month, day: at.day, hour: 0, minute: 0, microsecond: 0)
                    .microseconds + CivilTime.microsecondsPerDay)
                continue
            }
            if hour > at.hour { at = CivilTime(year: at.year, month: at.month, day: at.day, hour: hour, minute: 0, microsecond: 0) }
            guard let minute = Self.next(minutes, atLeast: at.minute, upTo: 59) else {
                at = CivilTime(microseconds: Self.floor(at, minutes: 60) + 3_600_000_000)
                continue
            }
            if minute > at.minute { at.minute = minute; at.microsecond = 0 }
            guard let microsecond = Self.next(seconds, atLeast: at.microsecond, upTo: 59_999_999) else {
                at = CivilTime(microseconds: Self.floor(at, minutes: 1) + 60_000_000)
                continue
            }
            at.microsecond = microsecond
            let local = at.microseconds
            let within = local - Self.seconds(local) * 1_000_000
            let instants = zone.instants(local: Self.seconds(local))
            if let found = instants.map({ $0 * 1_000_000 + within }).first(where: { $0 >= start }) { return found }
            // Skipped by a change of the clock: on from where the clock jumped
            // to, in one turn however fine the expression's steps. Repeated
            // and already past: on from the next microsecond.
            if instants.isEmpty, let end = zone.gapEnd(containing: Self.seconds(local)) {
                at = CivilTime(microseconds: end.multipliedClamped(by: 1_000_000))
            } else {
                at = CivilTime(microseconds: local + 1)
            }
        }
        return nil
    }

    /// The last year searched: systemd's, so that "never" means the same.
    static let maximumYear = 2199

    /// Whole seconds of `microseconds`, floored.
    private static func seconds(_ microseconds: Int64) -> Int64 {
        let (quotient, remainder) = microseconds.quotientAndRemainder(dividingBy: 1_000_000)
        return remainder < 0 ? quotient - 1 : quotient
    }

    /// `at`'s microseconds with its time cut to a whole `minutes`-minute step.
    private static func floor(_ at: CivilTime, minutes: Int) -> Int64 {
        var cut = at
        cut.microsecond = 0
        if minutes == 60 { cut.minute = 0 }
        return cut.microseconds
    }

    /// The smallest value at least `value` and at most `limit` that
    /// `components` take (any value when they are `nil`, `*`).
    static func next(_ components: [CalendarComponent]?, atLeast value: Int, upTo limit: Int) -> Int? {
        guard value <= limit else { return nil }
        guard let components else { return value }
        var best: Int?
        for component in components {
            guard let candidate = component.next(atLeast: value), candidate <= limit else { continue }
            if best.map({ candidate < $0 }) ?? true { best = candidate }
        }
        return best
    }

    /// The first day from `from` on in the month that the day and weekday
    /// fields both take.
    private func firstDay(from: Int, month: Int, year: Int) -> Int? {
        let length = CivilTime.daysIn(month: month, year: year)
        guard from <= length else { return nil }
        let first = CivilTime.days(year: year, month: month, day: 1)
        for day in from...length {
            if weekdays != CalendarSpec.everyWeekday {
                let weekday = CivilTime.weekday(days: first + Int64(day - 1))
                guard weekdays & (1 << weekday) != 0 else { continue }
            }
            guard let days else { return day }
            // `~`: counted back from the month's last day (1 is the last).
            let taken = days.contains { countsFromEnd ? $0.takes(day: day, fromEndOf: length) : $0.next(atLeast: day) == day }
            if taken { return day }
        }
        return nil
    }
}
