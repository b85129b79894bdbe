/// A reading of a calendar and a clock with no time zone: what a calendar
/// expression matches, in the proleptic Gregorian calendar. Days are
/// counted from 1970-01-01 (day 0) by the usual era arithmetic, exact for
/// every year an `Int` day count holds.
package struct CivilTime: Sendable, Equatable, Comparable {
    package var year: Int
    /// 1 to 12.
    package var month: Int
    /// 1 to the month's length.
    package var day: Int
    package var hour: Int
    package var minute: Int
    /// Microseconds into the minute, 0 to 59,999,999: systemd's calendar
    /// takes seconds to the microsecond.
    package var microsecond: Int

    static let microsecondsPerDay: Int64 = 86_400_000_000

    /// The days since 1970-01-01 of `year`-`month`-`day`.
    package static func days(year: Int, month: Int, day: Int) -> Int64 {
        // Years from March, so that a leap day ends its year.
        let shifted = Int64(month <= 2 ? year - 1 : year)
        let era = (shifted >= 0 ? shifted : shifted - 399) / 400
        let yearOfEra = shifted - era * 400
        let monthFromMarch = Int64(month > 2 ? month - 3 : month + 9)
        let dayOfYear = (153 * monthFromMarch + 2) / 5 + Int64(day) - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The date `days` after 1970-01-01.
    static func date(days: Int64) -> (year: Int, month: Int, day: Int) {
        let shifted = days + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthFromMarch + 2) / 5 + 1
        let month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        return (Int(year), Int(month), Int(day))
    }

    static func isLeap(_ year: Int) -> Bool {
        year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
    }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// 0 for Monday to 6 for Sunday (1970-01-01 was a Thursday).
    package static func weekday(days: Int64) -> Int {
        Int(((days % 7) + 7 + 3) % 7)
    }

    /// This reading as microseconds since 1970-01-01 00:00 on its own
    /// clock (UTC when the reading is UTC's).
    var microseconds: Int64 {
        let days = Self.days(year: year, month: month, day: day)
        return days * Self.microsecondsPerDay + Int64(hour * 3600 + minute * 60) * 1_000_000 + Int64(microsecond)
    }

    /// The reading of `microseconds` since 1970-01-01 00:00, floored.
    package init(microseconds: Int64) {
        let (days, remainder) = microseconds.quotientAndRemainder(dividingBy: Self.microsecondsPerDay)
        let dayCount = remainder < 0 ? days - 1 : days
        let into = Int(remainder < 0 ? remainder + Self.microsecondsPerDay : remainder)
        let date = Self.date(days: dayCount)
        self.init(
            year: date.year, month: date.month, day: date.day, hour: into / 3_600_000_000, minute: into / 60_000_000 % 60,
            microsecond: into % 60_000_000)
    }

    init(year: Int, month: Int, day: Int, hour: Int, minute: Int, microsecond: Int) {
        self.year = year
        self.month = month
        self.day = day
        self.hour = hour
        self.minute = minute
        self.microsecond = microsecond
    }

    package static func < (a: CivilTime, b: CivilTime) -> Bool {
        (a.year, a.month, a.day, a.hour, a.minute, a.microsecond) < (b.year, b.month, b.day, b.hour, b.minute, b.microsecond)
    }
}
