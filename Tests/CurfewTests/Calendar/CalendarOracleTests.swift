import Testing

@testable import Curfew
@testable import CurfewCLI
@testable import CurfewHost

/// Calendar expressions against systemd's own reading of them:
/// `systemd-analyze calendar --base-time=… --iterations=20` is the oracle
/// for the normalized form and the next twenty elapses of a few hundred
/// generated expressions and the tricky ones by hand, from bases beside
/// the spring-forward and fall-back days of two time zones and a leap day.
@Suite struct CalendarOracleTests {
    static let iterations = 20

    /// Bases beside each change of the clock in Berlin and New York in
    /// 2026, and before a leap day.
    static let bases = [
        "2026-03-29 00:30:00 UTC", "2026-10-25 00:10:00 UTC", "2026-03-08 06:00:00 UTC", "2026-11-01 05:10:00 UTC",
        "2028-02-27 00:00:00 UTC", "2026-12-05 21:52:13 UTC",
    ]

    /// The hand-picked ones: DST, leap days, `~`, `/`, lists and ranges.
    static let byHand = [
        "*-*-* 02:30", "*-*-* 02:30 Europe/Berlin", "*:0/20 Europe/Berlin", "*:0/30 America/New_York", "daily America/New_York",
        "*-*-* 01:30 America/New_York", "*-02-29", "*-02-29 12:00 Europe/Berlin", "Mon *-02-29", "*-02~01", "*-02~03,01",
        "*-*~07/2", "*-01~02..07/2", "Mon *-05~07/1", "Fri *-*-13", "Sat *-*-1..7 4:00", "*-*-1..31/10", "*-*-1..30/10",
        "2027..2030/2-3-1", "quarterly", "semiannually", "weekly", "minutely", "hourly", "monthly", "yearly",
        "Mon..Fri *-*-* 02:00:00 Europe/Berlin", "Sun,Mon *-*-* 23:59:59", "*:*:0/7.5", "*:*:0.25", "*-*-* 12:00:00 UTC",
        "mon,WED..fri 1:00", "Mon-Fri 03:00", "*-03-29 02:00..03/1:00 Europe/Berlin", "*-10-25 02:00..03/1:00 Europe/Berlin",
        "26-1-1", "*-*-* 00/6:00", "*-*-31", "*-02-30", "2199-12-31 23:59:59", "*-1~1-1", "*-*~1/2", "Fri..Mon",
        "*/2-*-*", "*-*-* 24:00", "*-13-01", "12", "Mon Tue", "*-*-* 1:1:1:1",
    ]

    /// A few hundred expressions from a fixed seed, each field drawn from
    /// values, lists, ranges and repetitions.
    static func generated(count: Int) -> [String] {
        var random = SplitMix64(seed: 0x00C4_1E4D_A45E_ED)
        func pick(_ options: [String]) -> String { options[Int(random.next(upTo: UInt64(options.count - 1)))] }
        func chance(_ percent: UInt64) -> Bool { random.next(upTo: 99) < percent }
        var expressions: [String] = []
        for _ in 0..<count {
            var parts: [String] = []
            if chance(25) { parts.append(pick(["Mon", "Sat,Sun", "Mon..Fri", "Tue,Thu", "Wed..Sat", "Sun", "Fri", "Mon,Wed..Fri"])) }
            if chance(75) {
                let year = chance(80) ? "*" : pick(["2026..2030", "2027", "2026/2", "2026,2028", "2028..2036/4"])
                let month = chance(45) ? "*" : pick(["1", "2", "3", "1,7", "3..10", "1/3", "10..12", "11", "2,3,10,11"])
                if chance(15) {
                    parts.append("\(year)-\(month)~\(pick(["1", "3", "07/2", "02..07", "1,3", "2/1", "05..10/2"]))")
                } else {
                    let day = chance(40) ? "*" : pick(["1", "29", "31", "1..7", "15", "1/10", "13", "5,20", "28..31", "25..31/2"])
                    parts.append("\(year)-\(month)-\(day)")
                }
            }
            let hour = chance(35) ? "*" : pick(["0", "2", "3", "1,13", "9..17", "0/6", "2/3", "23", "1", "2..3"])
            let minute = chance(20) ? "*" : pick(["0", "30", "0/15", "5/20", "45", "0,30", "59", "10..50/20"])
            let second = chance(70) ? nil : pick(["0", "30", "*", "0/20", "10..50/10", "5", "7.5"])
            parts.append("\(hour):\(minute)" + (second.map { ":" + $0 } ?? ""))
            let expression = parts.joined(separator: " ") + pick(["", "", " UTC", " Europe/Berlin", " America/New_York"])
            expressions.append(expression)
        }
        return expressions
    }

    /// What systemd says of each expression from `base` in local zone
    /// `tz`: its normalized form and elapses, or `nil` when it refuses it.
    static func oracle(_ expressions: [String], base: String, tz: String) async throws -> [String: (normalized: String, elapses: [String])?] {
        let run = try await Fixtures.run(
            "/usr/bin/systemd-analyze", ["calendar", "--base-time=\(base)", "--iterations=\(iterations)", "--"] + expressions,
            timeout: .seconds(60), environment: ["TZ": tz, "SYSTEMD_COLORS": "0", "SYSTEMD_PAGER": "cat"])
        var refused = Set<String>()
        for line in run.stderr.split(separator: "\n") where line.hasPrefix("Failed to parse calendar specification '") {
            let rest = line.dropFirst("Failed to parse calendar specification '".count)
            guard let end = rest.lastIndex(of: "'") else { continue }
            refused.insert(String(rest[..<end]))
        }
        // One block a parsed expression, each from its "Normalized form".
        var blocks: [(normalized: String, elapses: [String])] = []
        for line in run.stdout.split(separator: "\n") {
            let text = line.drop { $0 == " " }
            if text.hasPrefix("Normalized form: ") {
                blocks.append((String(text.dropFirst("Normalized form: ".count)), []))
            } else if text.hasPrefix("Next elapse: ") || text.hasPrefix("Iter. #") {
                guard let colon = text.firstIndex(of: ":") else { continue }
                let value = text[text.index(colon, offsetBy: 2)...]
                if value != "never" { blocks[blocks.count - 1].elapses.append(String(value)) }
            }
        }
        var answers: [String: (normalized: String, elapses: [String])?] = [:]
        var next = 0
        for expression in expressions {
            if refused.contains(expression) {
                answers[expression] = .some(nil)
            } else {
                guard next < blocks.count else { break }
                answers[expression] = blocks[next]
                next += 1
            }
        }
        #expect(next == blocks.count, "systemd-analyze printed \(blocks.count) forms for \(next) expressions")
        return answers
    }

    /// Ours, as `curfew calendar` reads and prints them.
    static func ours(_ expression: String, base: String, local: ZoneRules) -> (normalized: String, elapses: [String])? {
        guard let spec = try? CalendarSpec(expression), let zone = (spec.zone.map { try? TimeZones.zone(named: $0) } ?? local),
            let start = try? CalendarCommand.baseTime(base)
        else { return nil }
        var elapses: [String] = []
        var after = start
        for _ in 0..<iterations {
            guard let next = spec.next(after: after, in: zone) else { break }
            elapses.append(local.stamp(next))
            after = next
        }
        return (spec.description, elapses)
    }

    /// Where systemd 252 skips a time it names and curfew does not: its
    /// carry resets only the next smaller field when an open repetition
    /// rolls over (`*:0/40` loses 00:00 each day), and a gap that crosses
    /// an hour (Chatham's 02:45 to 03:45) loses the rest of that hour.
    @Test func whereSystemdSkipsATimeCurfewRunsIt() throws {
        func first(_ expression: String, after base: String) throws -> String? {
            let spec = try CalendarSpec(expression)
            let zone = try spec.zone.map { name throws(CurfewError) in try TimeZones.zone(named: name) } ?? .utc
            return spec.next(after: try CalendarCommand.baseTime(base), in: zone).map { ZoneRules.utc.stamp($0) }
        }
        // systemd: 00:40.
        #expect(try first("*:0/40 UTC", after: "2026-03-01 23:40:00 UTC") == "Mon 2026-03-02 00:00:00 UTC")
        // systemd: 2028-01-20.
        #expect(try first("*-*-20/10,5 UTC", after: "2027-12-31 12:00:00 UTC") == "Wed 2028-01-05 00:00:00 UTC")
        // 03:45 is the first time after Chatham's gap; systemd: the next day's.
        #expect(try first("*-*-* 03:45 Pacific/Chatham", after: "2026-09-26 12:00:00 UTC") == "Sat 2026-09-26 14:00:00 UTC")
    }

    @Test(arguments: ["UTC", "Europe/Berlin"])
    func agreesWithSystemd(localZone: String) async throws {
        let local = try TimeZones.zone(named: localZone)
        let expressions = Self.byHand + Self.generated(count: 300)
        var compared = 0
        for (index, base) in Self.bases.enumerated() {
            // Each base takes every hand-picked one and its share of the rest.
            let share = Self.byHand + Self.generated(count: 300).enumerated().filter { $0.offset % Self.bases.count == index }.map(\.element)
            let answers = try await Self.oracle(share, base: base, tz: localZone)
            for expression in share {
                guard let answer = answers[expression] else {
                    Issue.record("systemd-analyze gave no answer for \(expression)")
                    continue
                }
                let mine = Self.ours(expression, base: base, local: local)
                guard let answer else {
                    #expect(mine == nil, "systemd refuses \"\(expression)\"; we read it as \(mine?.normalized ?? "")")
                    continue
                }
                guard let mine else {
                    Issue.record("we refuse \"\(expression)\"; systemd reads it as \(answer.normalized)")
                    continue
                }
                #expect(mine.normalized == answer.normalized, "\"\(expression)\"")
                #expect(mine.elapses == answer.elapses, "\"\(expression)\" from \(base) in \(localZone)")
                if mine.elapses == answer.elapses { compared += 1 }
            }
        }
        // Every expression, generated or by hand, from at least one base.
        #expect(expressions.count >= 300)
        #expect(compared >= 300)
    }
}

/// The parts under the calendar: civil dates, zone files and rules, and
/// `curfew calendar`'s own words.
@Suite struct CalendarPartsTests {
    @Test func civilDaysRoundTripOverFourHundredYears() {
        var days = CivilTime.days(year: 1900, month: 1, day: 1)
        for year in 1900..<2300 {
            for month in 1...12 {
                for day in 1...CivilTime.daysIn(month: month, year: year) {
                    #expect(CivilTime.days(year: year, month: month, day: day) == days)
                    let date = CivilTime.date(days: days)
                    guard date == (year, month, day) else {
                        Issue.record("day \(days) read as \(date), not \(year)-\(month)-\(day)")
                        return
                    }
                    days += 1
                }
            }
        }
        #expect(CivilTime.weekday(days: 0) == 3)  // 1970-01-01, a Thursday
    }

    @Test func posixRulesGiveTheFootersOffsets() throws {
        let berlin = try #require(PosixZoneRule("CET-1CEST,M3.5.0,M10.5.0/3"))
        // 2026-03-29 01:00 UTC: CET becomes CEST.
        #expect(berlin.kind(at: 1_774_745_999).abbreviation == "CET")
        #expect(berlin.kind(at: 1_774_746_000).abbreviation == "CEST")
        #expect(berlin.kind(at: 1_774_746_000).offset == 7200)
        // Southern: daylight time across the new year.
        let sydney = try #require(PosixZoneRule("AEST-10AEDT,M10.1.0,M4.1.0/3"))
        #expect(sydney.kind(at: 1_767_225_600).isDaylight)  // 2026-01-01
        #expect(!sydney.kind(at: 1_780_272_000).isDaylight)  // 2026-06-01
        #expect(PosixZoneRule("<+0330>-3:30")?.standard.offset == 12_600)
        for bad in ["", "CE", "CET", "CET-1CEST,M13.1.0,M10.5.0", "CET-1CEST,M3.5.0", "CET-1CEST,J0,J365", "CET-200", "CET-1CEST,M3.5.7,M10.5.0"] {
            #expect(PosixZoneRule(bad) == nil, "\(bad)")
        }
    }

    /// A zone file is outside data: every cut and every flipped count is
    /// refused or read, never a trap.
    @Test func damagedZoneFilesAreRefusedNotTrusted() throws {
        let bytes = try Syscalls.readFile("/usr/share/zoneinfo/Europe/Berlin")
        let whole = try #require(ZoneRules(name: "Europe/Berlin", tzif: bytes))
        #expect(whole.kind(at: 0).abbreviation == "CET")
        for length in stride(from: 0, to: bytes.count - 1, by: 7) {
            #expect(ZoneRules(name: "cut", tzif: Array(bytes.prefix(length))) == nil)
        }
        for index in 0..<min(bytes.count, 100) {
            var damaged = bytes
            damaged[index] ^= 0xFF
            _ = ZoneRules(name: "damaged", tzif: damaged)
        }
        #expect(ZoneRules(name: "v1", tzif: Array("TZif".utf8) + [0] + Array(repeating: 0, count: 39)) == nil)
    }

    @Test func zoneNamesStayInTheDatabase() {
        for bad in ["", "/etc/passwd", "../../etc/passwd", "Europe/../../x", "Europe//Berlin", "Europe/", "-x", "a b"] {
            #expect(!TimeZones.isZoneName(bad), "\(bad)")
        }
        #expect(TimeZones.isZoneName("America/Argentina/Buenos_Aires"))
        #expect(TimeZones.isZoneName("Etc/GMT+5"))
    }

    @Test func refusalsSayWhy() {
        func why(_ text: String) -> String {
            do {
                _ = try CalendarSpec(text)
                return "read"
            } catch {
                return error.description
            }
        }
        #expect(why("*-13-01") == "\"*-13-01\" is not a calendar expression: its month 13 is outside 1 to 12")
        #expect(why("Fri..Mon") == "\"Fri..Mon\" is not a calendar expression: the weekday range Fri..Mon runs backwards (weeks start on Monday)")
        #expect(why("*-*-* 1:1:1:1") == "\"*-*-* 1:1:1:1\" is not a calendar expression: \"1:1:1:1\" is not a time such as 02:00, *:0/15 or 12:00:30")
        #expect(why("*-*-* 02:00 Mars/Olympus") == "\"*-*-* 02:00 Mars/Olympus\" is not a calendar expression: \"Mars/Olympus\" is not a time zone this host can read (zones of the tz database without leap seconds)")
        #expect(why("*:*:0..0.5") == "\"*:*:0..0.5\" is not a calendar expression: its second range 0..0.5 spans less than a second")
        #expect(why(String(repeating: "1,", count: 300) + "1-1-1") .hasSuffix("its year lists more than 241 items"))
    }

    @Test func relativeTimesReadAsSystemdsDo() {
        let second: Int64 = 1_000_000
        #expect(CalendarCommand.relative(0) == "now")
        #expect(CalendarCommand.relative(7 * 60 * second) == "7min left")
        #expect(CalendarCommand.relative(-(27 * 3600 * second)) == "1 day 3h ago")
        #expect(CalendarCommand.relative(86 * 86400 * second) == "2 months 25 days left")
        #expect(CalendarCommand.relative(400 * 86400 * second) == "1 year 1 month left")
    }
}
