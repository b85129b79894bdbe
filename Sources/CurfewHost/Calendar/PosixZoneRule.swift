/// A POSIX `TZ` rule, as a TZif footer or the `TZ` variable holds one:
/// `CET-1CEST,M3.5.0,M10.5.0/3` is one hour east of UTC (CET), daylight
/// time (CEST, an hour more) from the last Sunday of March at 02:00 to the
/// last Sunday of October at 03:00. Times of day may run from -167 to 167
/// hours (RFC 8536's extension), so a rule can say "all year".
package struct PosixZoneRule: Sendable, Equatable {
    /// A day of the year a change comes on.
    enum Day: Sendable, Equatable {
        /// `Jn`: 1 to 365, February 29 never counted.
        case julian(Int)
        /// `n`: 0 to 365, February 29 counted in leap years.
        case zeroBased(Int)
        /// `Mm.w.d`: weekday `d` (0 Sunday) of week `w` (5: the last) of month `m`.
        case monthWeek(month: Int, week: Int, weekday: Int)
    }

    struct Change: Sendable, Equatable {
        var day: Day
        /// Seconds after the day's local midnight.
        var time: Int
    }

    let standard: ZoneRules.Kind
    /// The daylight time and when it starts and ends; `nil`: none.
    let daylight: (kind: ZoneRules.Kind, start: Change, end: Change)?

    package static func == (a: PosixZoneRule, b: PosixZoneRule) -> Bool {
        a.standard == b.standard && a.daylight?.kind == b.daylight?.kind && a.daylight?.start == b.daylight?.start
            && a.daylight?.end == b.daylight?.end
    }

    /// The kind of local time at `seconds` since the epoch.
    func kind(at seconds: Int64) -> ZoneRules.Kind {
        guard let daylight else { return standard }
        let year = CivilTime(microseconds: (seconds &+ Int64(standard.offset)).multipliedClamped(by: 1_000_000)).year
        let (start, end) = bounds(year: year, daylight)
        let inDaylight = start < end ? (start <= seconds && seconds < end) : !(end <= seconds && seconds < start)
        return inDaylight ? daylight.kind : standard
    }

    /// The changes in (`start`, `end`], in order: when, and the kind after.
    func changes(after start: Int64, through end: Int64) -> [(at: Int64, kind: ZoneRules.Kind)] {
        guard let daylight else { return [] }
        let first = CivilTime(microseconds: start.multipliedClamped(by: 1_000_000)).year - 1
        let last = CivilTime(microseconds: end.multipliedClamped(by: 1_000_000)).year + 1
        guard first <= last else { return [] }
        var found: [(at: Int64, kind: ZoneRules.Kind)] = []
        for year in first...last {
            let (begins, ends) = bounds(year: year, daylight)
            if begins > start && begins <= end { found.append((begins, daylight.kind)) }
            if ends > start && ends <= end { found.append((ends, standard)) }
        }
        return found.sorted { $0.at < $1.at }
    }

    /// When daylight time starts and ends in `year`, in seconds since the epoch.
    private func bounds(year: Int, _ daylight: (kind: ZoneRules.Kind, start: Change, end: Change)) -> (Int64, Int64) {
        // The start is on standard time's clock, the end on daylight time's.
        let start = Self.localSeconds(daylight.start, year: year) - Int64(standard.offset)
        let end = Self.localSeconds(daylight.end, year: year) - Int64(daylight.kind.offset)
        return (start, end)
    }

    private static func localSeconds(_ change: Change, year: Int) -> Int64 {
        let days: Int64
        switch change.day {
        case .julian(let number):
            // Day 60 is March 1 whatever the year.
            let leapDay: Int64 = CivilTime.isLeap(year) && number >= 60 ? 1 : 0
            days = CivilTime.days(year: year, month: 1, day: 1) + Int64(number - 1) + leapDay
        case .zeroBased(let number):
            days = CivilTime.days(year: year, month: 1, day: 1) + Int64(number)
        case .monthWeek(let month, let week, let weekday):
            let first = CivilTime.days(year: year, month: month, day: 1)
            // CivilTime counts Monday as 0; POSIX counts Sunday as 0.
            let firstWeekday = (CivilTime.weekday(days: first) + 1) % 7
            var day = 1 + (weekday - firstWeekday + 7) % 7 + (week - 1) * 7
            let length = CivilTime.daysIn(month: month, year: year)
            while day > length { day -= 7 }
            days = first + Int64(day - 1)
        }
        return days * 86_400 + Int64(change.time)
    }

    /// Parses a rule; `nil` when it is not one.
    package init?(_ text: String) {
        var scanner = RuleScanner(Array(text.utf8))
        guard let standardName = scanner.name(), let standardOffset = scanner.offset() else { return nil }
        standard = ZoneRules.Kind(offset: -standardOffset, isDaylight: false, abbreviation: standardName)
        if scanner.atEnd {
            daylight = nil
            return
        }
        guard let daylightName = scanner.name() else { return nil }
        let daylightOffset = scanner.peekIsOffset ? scanner.offset() : standardOffset - 3600
        guard let daylightOffset else { return nil }
        let kind = ZoneRules.Kind(offset: -daylightOffset, isDaylight: true, abbreviation: daylightName)
        // No rule: the United States' since 2007, as glibc assumes.
        var start = Change(day: .monthWeek(month: 3, week: 2, weekday: 0), time: 7200)
        var end = Change(day: .monthWeek(month: 11, week: 1, weekday: 0), time: 7200)
        if !scanner.atEnd {
            guard scanner.consume(","), let first = scanner.change(), scanner.consume(","), let second = scanner.change() else { return nil }
            start = first
            end = second
        }
        guard scanner.atEnd else { return nil }
        daylight = (kind, start, end)
    }
}

/// The fields of a POSIX `TZ` rule, read left to right.
private struct RuleScanner {
    let bytes: [UInt8]
    var at = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var atEnd: Bool { at == bytes.count }
    var peek: UInt8? { at < bytes.count ? bytes[at] : nil }
    var peekIsOffset: Bool { peek.map { $0 == UInt8(ascii: "+") || $0 == UInt8(ascii: "-") || isDigit($0) } ?? false }

    private func isDigit(_ byte: UInt8) -> Bool { (0x30...0x39).contains(byte) }

    mutating func consume(_ text: Unicode.Scalar) -> Bool {
        guard peek == UInt8(ascii: text) else { return false }
        at += 1
        return true
    }

    /// Three or more letters, or `<…>` of letters, digits and signs.
    mutating func name() -> String? {
        let start = at
        if consume("<") {
            while let byte = peek, byte != UInt8(ascii: ">") {
                guard isDigit(byte) || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-") || isLetter(byte) else { return nil }
                at += 1
            }
            guard at - start - 1 >= 3, consume(">") else { return nil }
            return String(decoding: bytes[start + 1..<at - 1], as: UTF8.self)
        }
        while let byte = peek, isLetter(byte) { at += 1 }
        guard at - start >= 3 else { return nil }
        return String(decoding: bytes[start..<at], as: UTF8.self)
    }

    private func isLetter(_ byte: UInt8) -> Bool { (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) }

    mutating func number(upTo limit: Int) -> Int? {
        var value = 0
        var digits = 0
        while let byte = peek, isDigit(byte) {
            value = value * 10 + Int(byte - 0x30)
            digits += 1
            guard value <= limit, digits <= 3 else { return nil }
            at += 1
        }
        return digits > 0 ? value : nil
    }

    /// `[+-]hh[:mm[:ss]]` in seconds; hours up to `hours`.
    mutating func offset(hours: Int = 24) -> Int? {
        var sign = 1
        if consume("-") { sign = -1 } else { _ = consume("+") }
        guard let hour = number(upTo: hours) else { return nil }
        var seconds = hour * 3600
        if consume(":") {
            guard let minute = number(upTo: 59) else { return nil }
            seconds += minute * 60
            if consume(":") {
                guard let second = number(upTo: 59) else { return nil }
                seconds += second
            }
        }
        return sign * seconds
    }

    mutating func change() -> PosixZoneRule.Change? {
        let day: PosixZoneRule.Day
        if consume("J") {
            guard let number = number(upTo: 365), number >= 1 else { return nil }
            day = .julian(number)
        } else if consume("M") {
            guard let month = number(upTo: 12), month >= 1, consume("."), let week = number(upTo: 5), week >= 1, consume("."),
                let weekday = number(upTo: 6)
            else { return nil }
            day = .monthWeek(month: month, week: week, weekday: weekday)
        } else {
            guard let number = number(upTo: 365) else { return nil }
            day = .zeroBased(number)
        }
        var time = 7200
        if consume("/") {
            guard let given = offset(hours: 167) else { return nil }
            time = given
        }
        return PosixZoneRule.Change(day: day, time: time)
    }
}

extension Int64 {
    /// `self * factor`, held at the type's bounds.
    package func multipliedClamped(by factor: Int64) -> Int64 {
        let (product, overflow) = multipliedReportingOverflow(by: factor)
        return overflow ? ((self < 0) != (factor < 0) ? .min : .max) : product
    }
}
