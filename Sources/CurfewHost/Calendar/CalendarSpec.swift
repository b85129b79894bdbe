import Curfew

/// One item of a calendar field: a value, a range `a..b`, a repetition
/// `a/r` (up to the field's end) or both, `a..b/r`. Seconds are counted in
/// microseconds, as systemd takes them.
struct CalendarComponent: Sendable, Equatable, Comparable {
    var start: Int
    var stop: Int?
    var step: Int?

    /// The smallest value this item takes that is at least `value`.
    func next(atLeast value: Int) -> Int? {
        if start >= value { return start }
        guard let step else { return stop.map { value <= $0 ? value : nil } ?? nil }
        let steps = (value - start + step - 1) / step
        let (offset, overflow) = steps.multipliedReportingOverflow(by: step)
        guard !overflow else { return nil }
        let candidate = start + offset
        if let stop, candidate > stop { return nil }
        return candidate
    }

    /// Whether day `value` of a month `length` days long is one this `~`
    /// item takes: `~n` is the n-th day from the end (1: the last); a range
    /// `~a..b` takes those from the b-th to the a-th from the end, each
    /// `r`-th from its first day; `~n/r` every `r`-th day from the n-th
    /// from the end to the last.
    func takes(day value: Int, fromEndOf length: Int) -> Bool {
        let first = length + 1 - (stop ?? start)
        let last = stop == nil ? (step == nil ? first : length) : length + 1 - start
        guard value >= first, value <= last else { return false }
        return (value - first) % (step ?? 1) == 0
    }

    static func < (a: CalendarComponent, b: CalendarComponent) -> Bool {
        (a.start, a.stop ?? -1, a.step ?? 0) < (b.start, b.stop ?? -1, b.step ?? 0)
    }
}

/// A calendar expression in systemd's syntax (`systemd.time(7)`): when a
/// job runs, as `OnCalendar=` says when a timer elapses.
///
///     [WEEKDAYS] [[YEAR-]MONTH-DAY] [HOUR:MINUTE[:SECOND]] [ZONE]
///
/// `Mon..Fri *-*-* 02:00:00 Europe/Berlin`, `*-02~01` (February's last
/// day), `*:0/15` (every quarter hour), `hourly`. Each field is `*` or a
/// list of values, ranges `a..b` and repetitions `a/r`; `~` counts days
/// from the month's end. Without a zone the expression reads the local
/// time; a zone is `UTC` or a name of the system's tz database.
package struct CalendarSpec: Sendable, Equatable {
    /// Monday is bit 0, Sunday bit 6.
    var weekdays: UInt8 = everyWeekday
    var years: [CalendarComponent]?
    var months: [CalendarComponent]?
    var days: [CalendarComponent]?
    /// The day field counts from the month's end (`~`).
    var countsFromEnd = false
    var hours: [CalendarComponent]?
    var minutes: [CalendarComponent]?
    /// Never `*`: systemd's `*` seconds are every whole second.
    var seconds: [CalendarComponent] = Self.everySecond
    /// `nil`: local time; "UTC" or a tz database name.
    package var zone: String?

    static let everyWeekday: UInt8 = 0x7F
    static let everySecond = [CalendarComponent(start: 0, stop: nil, step: 1_000_000)]
    package static let weekdayNames = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    /// The most items one field may list, as systemd allows.
    static let maximumItems = 241

    /// The words that stand for a whole expression.
    static let shorthands: [(words: [String], expression: String)] = [
        (["minutely"], "*-*-* *:*:00"), (["hourly"], "*-*-* *:00:00"), (["daily"], "*-*-* 00:00:00"),
        (["weekly"], "Mon *-*-* 00:00:00"), (["monthly"], "*-*-01 00:00:00"),
        (["yearly", "annually", "anually"], "*-01-01 00:00:00"), (["quarterly"], "*-01,04,07,10-01 00:00:00"),
        (["semiannually", "semi-annually", "biannually", "bi-annually"], "*-01,07-01 00:00:00"),
    ]

    /// Parses `text`; `zoneExists` says whether a trailing word names a
    /// time zone of the system (a word that does not is no zone, and the
    /// expression is then refused for it).
    package init(_ text: String, zoneExists: (String) -> Bool = { (try? TimeZones.zone(named: $0)) != nil }) throws(CurfewError) {
        func refuse(_ why: String) -> CurfewError {
            CurfewError(.badConfig, "\"\(Reason.cut(text, to: 120))\" is not a calendar expression: \(why)")
        }
        guard text.utf8.count <= 4096 else { throw refuse("it is longer than 4096 bytes") }
        var body = Substring(text)
        if let space = body.lastIndex(of: " ") {
            let word = String(body[body.index(after: space)...])
            if word.uppercased() == "UTC" {
                zone = "UTC"
                body = body[..<space]
            } else if TimeZones.isZoneName(word), !word.contains(".") {
                if zoneExists(word) {
                    zone = word
                    body = body[..<space]
                } else if word.contains("/") {
                    // Only a zone has a slash: say so, not that it is a bad time.
                    throw refuse("\"\(word)\" is not a time zone this host can read (zones of the tz database without leap seconds)")
                }
            }
        }
        guard !body.isEmpty else { throw refuse("it names no time") }
        if body.hasPrefix("@") {
            // Seconds since 1970: one moment, in UTC.
            guard let epoch = Int(body.dropFirst()), epoch >= 0, epoch <= 7_258_118_399 else {
                throw refuse("@ takes whole seconds since 1970, before the year 2200")
            }
            let time = CivilTime(microseconds: Int64(epoch) * 1_000_000)
            let one = { (value: Int) in [CalendarComponent(start: value, stop: nil, step: nil)] }
            (years, months, days) = (one(time.year), one(time.month), one(time.day))
            (hours, minutes, seconds) = (one(time.hour), one(time.minute), one(time.microsecond))
            zone = "UTC"
            return
        }
        if let shorthand = Self.shorthands.first(where: { $0.words.contains(body.lowercased()) }) {
            body = Substring(shorthand.expression)
        }
        guard !body.hasPrefix(" ") else { throw refuse("it starts with a space") }
        var words = body.split(separator: " ", omittingEmptySubsequences: true)
        guard !words.contains(where: { $0.contains("\t") }) else { throw refuse("only spaces may separate its parts") }
        if let first = words.first, first.first?.isLetter == true {
            weekdays = try Self.weekdays(first, refuse)
            words.removeFirst()
        }
        var date: Substring?
        var time: Substring?
        switch words.count {
        case 0: break
        case 1: if words[0].contains(":") { time = words[0] } else { date = words[0] }
        case 2:
            date = words[0]
            time = words[1]
        default: throw refuse("\"\(words[2])\" follows its date and time")
        }
        if let date { try parseDate(date, refuse) } else { (years, months, days) = (nil, nil, nil) }
        // `~*` is every day, counted from either end.
        if days == nil { countsFromEnd = false }
        if let time { try parseTime(time, refuse) } else {
            hours = [CalendarComponent(start: 0, stop: nil, step: nil)]
            minutes = hours
            seconds = [CalendarComponent(start: 0, stop: nil, step: nil)]
        }
    }

    /// The one moment `text` names, in microseconds since the epoch: a
    /// date and time (`2026-12-24 18:00`, local time unless a zone follows)
    /// or `@` and seconds since 1970.
    package static func moment(_ text: String) throws(CurfewError) -> Int64 {
        let spec = try CalendarSpec(text)
        let zone = try spec.zone.map { name throws(CurfewError) in try TimeZones.zone(named: name) } ?? TimeZones.local()
        guard let first = spec.next(after: -1, in: zone), spec.next(after: first, in: zone) == nil else {
            throw CurfewError(.badConfig, "\"\(Reason.cut(text, to: 120))\" does not name one moment, such as \"2026-03-28 12:00:00 UTC\"")
        }
        return first
    }

    private static func weekdays(_ word: Substring, _ refuse: (String) -> CurfewError) throws(CurfewError) -> UInt8 {
        var set: UInt8 = 0
        var rest = word
        /// The weekday `rest` starts with, by its full or three-letter name.
        func day() throws(CurfewError) -> Int {
            for (index, name) in weekdayNames.enumerated() {
                for form in [name, String(name.prefix(3))] where rest.lowercased().hasPrefix(form.lowercased()) {
                    let after = rest.dropFirst(form.count)
                    if after.isEmpty || after.first == "," || after.first == "." || after.first == "-" {
                        rest = after
                        return index
                    }
                }
            }
            throw refuse("\"\(word)\" is not a list of weekdays such as Mon..Fri or Sat,Sun")
        }
        while !rest.isEmpty {
            let first = try day()
            var last = first
            if rest.hasPrefix("..") || rest.hasPrefix("-") {
                rest = rest.dropFirst(rest.hasPrefix("..") ? 2 : 1)
                last = try day()
                guard last >= first else { throw refuse("the weekday range \(weekdayNames[first].prefix(3))..\(weekdayNames[last].prefix(3)) runs backwards (weeks start on Monday)") }
            }
            for index in first...last { set |= 1 << index }
            if rest.hasPrefix(",") {
                rest = rest.dropFirst()
            } else if !rest.isEmpty {
                throw refuse("\"\(word)\" is not a list of weekdays such as Mon..Fri or Sat,Sun")
            }
        }
        return set
    }

    private mutating func parseDate(_ word: Substring, _ refuse: (String) -> CurfewError) throws(CurfewError) {
        countsFromEnd = word.contains("~")
        let fields = word.split(separator: "-", omittingEmptySubsequences: false).flatMap { part in
            part.split(separator: "~", omittingEmptySubsequences: false)
        }
        // `~` may only stand before the day.
        if countsFromEnd {
            guard let tilde = word.lastIndex(of: "~"), !word[tilde...].contains("-"), word.filter({ $0 == "~" }).count == 1 else {
                throw refuse("\"~\" may only stand before the day, as in *-02~01")
            }
        }
        guard fields.count == 2 || fields.count == 3 else {
            throw refuse("\"\(word)\" is not a date such as 2026-12-24, *-*-01 or 12-24")
        }
        if fields.count == 3 {
            years = try Self.field(fields[0], "year", 1970...2199, refuse, twoDigitYears: true)
        }
        months = try Self.field(fields[fields.count - 2], "month", 1...12, refuse)
        days = try Self.field(fields[fields.count - 1], "day", 1...(countsFromEnd ? 28 : 31), refuse, fromEnd: countsFromEnd)
    }

    private mutating func parseTime(_ word: Substring, _ refuse: (String) -> CurfewError) throws(CurfewError) {
        let fields = word.split(separator: ":", omittingEmptySubsequences: false)
        guard fields.count == 2 || fields.count == 3 else {
            throw refuse("\"\(word)\" is not a time such as 02:00, *:0/15 or 12:00:30")
        }
        hours = try Self.field(fields[0], "hour", 0...23, refuse)
        minutes = try Self.field(fields[1], "minute", 0...59, refuse)
        if fields.count == 3 {
            seconds = try Self.field(fields[2], "second", 0...59_999_999, refuse, unit: 1_000_000) ?? Self.everySecond
        } else {
            seconds = [CalendarComponent(start: 0, stop: nil, step: nil)]
        }
    }

    /// One field: `*`, or a list of items, each checked against `range`
    /// (in `unit`s: microseconds for seconds).
    private static func field(
        _ text: Substring, _ name: String, _ range: ClosedRange<Int>, _ refuse: (String) -> CurfewError, unit: Int = 1,
        twoDigitYears: Bool = false, fromEnd: Bool = false
    ) throws(CurfewError) -> [CalendarComponent]? {
        if text == "*" { return nil }
        guard !text.isEmpty else { throw refuse("its \(name) is empty") }
        let items = text.split(separator: ",", omittingEmptySubsequences: false)
        guard items.count <= maximumItems else { throw refuse("its \(name) lists more than \(maximumItems) items") }
        var components: [CalendarComponent] = []
        for item in items {
            var body = item
            var step: Int?
            if let slash = item.firstIndex(of: "/") {
                step = try number(item[item.index(after: slash)...], name, unit, refuse)
                body = item[..<slash]
                guard step! > 0 else { throw refuse("its \(name)'s repetition /\(item[item.index(after: slash)...]) must be more than 0") }
            }
            var start: Int
            var stop: Int?
            if let dots = body.firstRange(of: "..") {
                start = try number(body[..<dots.lowerBound], name, unit, refuse)
                stop = try number(body[dots.upperBound...], name, unit, refuse)
                if step == nil {
                    // As systemd: a range of seconds spans a second at least.
                    guard unit == 1 || stop! - start >= unit else { throw refuse("its \(name) range \(body) spans less than a second") }
                    step = unit
                }
            } else {
                start = try number(body, name, unit, refuse)
            }
            if twoDigitYears {
                start = start < 70 ? start + 2000 : start < 100 ? start + 1900 : start
                stop = stop.map { $0 < 70 ? $0 + 2000 : $0 < 100 ? $0 + 1900 : $0 }
            }
            // A range's end is its last step.
            if let last = stop, let every = step {
                guard last >= start else { throw refuse("its \(name) range \(body) runs backwards") }
                let trimmed = start + (last - start) / every * every
                stop = trimmed == start ? nil : trimmed
                if stop == nil { step = nil }
            }
            let span = range.upperBound - range.lowerBound
            guard range.contains(start), stop.map({ range.contains($0) }) ?? true else {
                throw refuse("its \(name) \(item) is outside \(range.lowerBound / unit) to \(range.upperBound / unit)")
            }
            if let every = step {
                guard every <= span else { throw refuse("its \(name)'s repetition in \(item) is longer than the field") }
                if stop == nil {
                    let reaches = fromEnd ? start - every >= range.lowerBound : start + every <= range.upperBound
                    guard reaches else { throw refuse("its \(name) \(item) repeats past the field's end") }
                }
            }
            let component = CalendarComponent(start: start, stop: stop, step: step)
            if !components.contains(component) { components.append(component) }
        }
        return components.sorted()
    }

    /// A whole number, or for seconds a number with up to six decimals
    /// (a seventh rounds), in `unit`s.
    private static func number(_ text: Substring, _ name: String, _ unit: Int, _ refuse: (String) -> CurfewError) throws(CurfewError) -> Int {
        let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let whole = parts.first, !whole.isEmpty, whole.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else {
            throw refuse("its \(name) \"\(text)\" is not a number")
        }
        let digits = whole.drop { $0 == "0" }
        guard digits.count <= 9, var value = Int(digits.isEmpty ? "0" : digits) else { throw refuse("its \(name) \(text) is too large") }
        value *= unit
        guard parts.count == 2 else { return value }
        let fraction = parts[1]
        guard unit == 1_000_000, !fraction.isEmpty, fraction.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else {
            throw refuse(unit == 1 ? "its \(name) \"\(text)\" is not a whole number" : "its \(name) \"\(text)\" is not a number")
        }
        var micro = 0
        for (index, digit) in fraction.utf8.prefix(7).enumerated() {
            let figure = Int(digit - 0x30)
            if index < 6 { micro = micro * 10 + figure } else if figure >= 5 { micro += 1 }
        }
        if fraction.utf8.count < 6 {
            for _ in fraction.utf8.count..<6 { micro *= 10 }
        }
        return value + micro
    }
}

extension CalendarSpec: CustomStringConvertible {
    /// The normalized form, as `systemd-analyze calendar` prints it.
    package var description: String {
        var parts: [String] = []
        if weekdays != Self.everyWeekday, weekdays != 0 {
            var runs: [String] = []
            var index = 0
            while index < 7 {
                guard weekdays & (1 << index) != 0 else {
                    index += 1
                    continue
                }
                var end = index
                while end + 1 < 7, weekdays & (1 << (end + 1)) != 0 { end += 1 }
                let name = { (day: Int) in String(Self.weekdayNames[day].prefix(3)) }
                switch end - index {
                case 0: runs.append(name(index))
                case 1: runs.append(name(index) + "," + name(end))
                default: runs.append(name(index) + ".." + name(end))
                }
                index = end + 1
            }
            parts.append(runs.joined(separator: ","))
        }
        let date = Self.text(years, width: 4) + "-" + Self.text(months, width: 2) + (countsFromEnd ? "~" : "-") + Self.text(days, width: 2)
        let secondsText = seconds == Self.everySecond ? "*" : Self.text(seconds, width: 2, unit: 1_000_000)
        parts.append(date)
        parts.append(Self.text(hours, width: 2) + ":" + Self.text(minutes, width: 2) + ":" + secondsText)
        if let zone { parts.append(zone) }
        return parts.joined(separator: " ")
    }

    private static func text(_ components: [CalendarComponent]?, width: Int, unit: Int = 1) -> String {
        guard let components else { return "*" }
        return components.map { component in
            var text = value(component.start, width: width, unit: unit)
            if let stop = component.stop { text += ".." + value(stop, width: width, unit: unit) }
            if let step = component.step, !(component.stop != nil && step == unit) {
                text += "/" + String(step / unit) + (step % unit == 0 ? "" : "." + padded(step % unit, 6))
            }
            return text
        }.joined(separator: ",")
    }

    private static func value(_ value: Int, width: Int, unit: Int) -> String {
        padded(value / unit, width) + (value % unit == 0 ? "" : "." + padded(value % unit, 6))
    }

    private static func padded(_ value: Int, _ width: Int) -> String {
        let digits = String(value)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
}
