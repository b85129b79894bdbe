/// A time zone's offsets from UTC over time: the transitions of a TZif file
/// (RFC 8536, version 2 or later, as the system's tz database ships them),
/// then its footer's POSIX rule for every time after the last one.
///
/// The file is outside data: every count is checked against the bytes
/// there are before anything is read, and the parse is linear in its size.
package struct ZoneRules: Sendable, Equatable {
    /// One kind of local time: its offset east of UTC and its abbreviation.
    package struct Kind: Sendable, Equatable {
        package var offset: Int
        var isDaylight: Bool
        package var abbreviation: String
    }

    package let name: String
    /// Seconds since the epoch (UTC) at which `kinds[kindAfter[i]]` begins.
    private let transitions: [Int64]
    private let kindAfter: [Int]
    private let kinds: [Kind]
    private let rule: PosixZoneRule?

    package static let utc = ZoneRules(name: "UTC", transitions: [], kindAfter: [], kinds: [Kind(offset: 0, isDaylight: false, abbreviation: "UTC")], rule: nil)

    private init(name: String, transitions: [Int64], kindAfter: [Int], kinds: [Kind], rule: PosixZoneRule?) {
        self.name = name
        self.transitions = transitions
        self.kindAfter = kindAfter
        self.kinds = kinds
        self.rule = rule
    }

    /// A zone from a POSIX `TZ` rule alone (`EST5EDT,M3.2.0,M11.1.0`).
    package init(name: String, rule: PosixZoneRule) {
        self.init(name: name, transitions: [], kindAfter: [], kinds: [rule.standard], rule: rule)
    }

    /// The local time in effect at `seconds` since the epoch.
    package func kind(at seconds: Int64) -> Kind {
        guard let last = transitions.last else { return rule?.kind(at: seconds) ?? kinds[0] }
        if seconds >= last, let rule { return rule.kind(at: seconds) }
        guard seconds >= transitions[0] else { return kinds[0] }
        // The last transition at or before `seconds`.
        var low = 0
        var high = transitions.count - 1
        while low < high {
            let middle = (low + high + 1) / 2
            if transitions[middle] <= seconds { low = middle } else { high = middle - 1 }
        }
        return kinds[kindAfter[low]]
    }

    /// The instants (seconds since the epoch, earliest first) whose local
    /// time here is `local` seconds since 1970-01-01 on the local clock:
    /// none in a gap a change skipped, two where a change repeats it.
    package func instants(local: Int64) -> [Int64] {
        // No offset passes a day and a few hours: every instant that could
        // read `local` lies in this window, and so do the offsets to try.
        let reach: Int64 = 30 * 3600
        var offsets = [kind(at: local &- reach).offset]
        for change in changes(after: local &- reach, through: local &+ reach) where !offsets.contains(change.offset) {
            offsets.append(change.offset)
        }
        var found: [Int64] = []
        for offset in offsets {
            let instant = local &- Int64(offset)
            if kind(at: instant).offset == offset, !found.contains(instant) { found.append(instant) }
        }
        return found.sorted()
    }

    /// Where a local time a change skipped ends: the local time (seconds
    /// since 1970-01-01 on the local clock) the clock jumped to, past
    /// `local`; `nil` when no change skipped `local`.
    func gapEnd(containing local: Int64) -> Int64? {
        let reach: Int64 = 30 * 3600
        var before = kind(at: local &- reach).offset
        for change in changes(after: local &- reach, through: local &+ reach) {
            // The clock read `at + before` just before and `at + offset` after.
            let from = change.at &+ Int64(before)
            let to = change.at &+ Int64(change.offset)
            if from <= local && local < to { return to }
            before = change.offset
        }
        return nil
    }

    /// The changes in (`start`, `end`], in order: when, and the offset after.
    private func changes(after start: Int64, through end: Int64) -> [(at: Int64, offset: Int)] {
        var found: [(at: Int64, offset: Int)] = []
        // The first transition past `start`, by binary search.
        var low = 0
        var high = transitions.count
        while low < high {
            let middle = (low + high) / 2
            if transitions[middle] > start { high = middle } else { low = middle + 1 }
        }
        var index = low
        while index < transitions.count, transitions[index] <= end {
            found.append((transitions[index], kinds[kindAfter[index]].offset))
            index += 1
        }
        if let rule, transitions.last.map({ end >= $0 }) ?? true {
            let after = max(start, transitions.last ?? .min)
            found += rule.changes(after: after, through: end).map { ($0.at, $0.kind.offset) }
        }
        return found
    }

    /// Reads a TZif file's bytes; `nil` when they are not one this reader
    /// takes (no version 2 data, leap seconds, a count past the bytes).
    package init?(name: String, tzif bytes: [UInt8]) {
        var reader = TZifReader(bytes: bytes)
        // The version 1 block, skipped whole: its 32-bit times end in 2038.
        guard let first = reader.header(), first.version >= 2, reader.skip(first.blockSize(timeBytes: 4)) else { return nil }
        guard let header = reader.header(), header.leapCount == 0 else { return nil }
        var transitions: [Int64] = []
        transitions.reserveCapacity(header.timeCount)
        for _ in 0..<header.timeCount {
            guard let time = reader.integer(bytes: 8) else { return nil }
            // Strictly increasing, as the RFC requires: the search needs it.
            if let last = transitions.last, time <= last { return nil }
            transitions.append(time)
        }
        var kindAfter: [Int] = []
        kindAfter.reserveCapacity(header.timeCount)
        for _ in 0..<header.timeCount {
            guard let index = reader.integer(bytes: 1), index < header.typeCount else { return nil }
            kindAfter.append(Int(index))
        }
        var raw: [(offset: Int, isDaylight: Bool, abbreviationAt: Int)] = []
        for _ in 0..<header.typeCount {
            guard let offset = reader.integer(bytes: 4), let daylight = reader.integer(bytes: 1), daylight <= 1,
                let at = reader.integer(bytes: 1), at < header.characterCount
            else { return nil }
            // RFC 8536: -89999 to 93599 seconds.
            guard (-89_999...93_599).contains(offset) else { return nil }
            raw.append((Int(offset), daylight == 1, Int(at)))
        }
        guard let characters = reader.take(header.characterCount),
            reader.skip(header.standardCount + header.utcCount)
        else { return nil }
        let kinds = raw.map { entry in
            let tail = characters.dropFirst(entry.abbreviationAt)
            let text = tail.prefix { $0 != 0 }
            return Kind(offset: entry.offset, isDaylight: entry.isDaylight, abbreviation: String(decoding: text, as: UTF8.self))
        }
        // The footer: a newline, a POSIX rule (empty when there is none), a newline.
        var rule: PosixZoneRule?
        guard let newline = reader.integer(bytes: 1), newline == 0x0A else { return nil }
        let footer = reader.rest.prefix { $0 != 0x0A }
        guard footer.count < reader.rest.count else { return nil }
        if !footer.isEmpty {
            guard let parsed = PosixZoneRule(String(decoding: footer, as: UTF8.self)) else { return nil }
            rule = parsed
        }
        self.init(name: name, transitions: transitions, kindAfter: kindAfter, kinds: kinds, rule: rule)
    }
}

/// Big-endian fields of a TZif file, each read only where the bytes hold it.
private struct TZifReader {
    struct Header {
        let version: Int
        let utcCount, standardCount, leapCount, timeCount, typeCount, characterCount: Int

        /// The bytes of the data block after this header.
        func blockSize(timeBytes: Int) -> Int {
            timeCount * timeBytes + timeCount + typeCount * 6 + characterCount + leapCount * (timeBytes + 4) + standardCount
                + utcCount
        }
    }

    let bytes: [UInt8]
    var at = 0

    init(bytes: [UInt8]) { self.bytes = bytes }

    var rest: ArraySlice<UInt8> { bytes[at...] }

    mutating func take(_ count: Int) -> ArraySlice<UInt8>? {
        guard count >= 0, count <= bytes.count - at else { return nil }
        defer { at += count }
        return bytes[at..<at + count]
    }

    mutating func skip(_ count: Int) -> Bool { take(count) != nil }

    /// A signed big-endian integer of 1, 4 or 8 bytes (a 1-byte one unsigned).
    mutating func integer(bytes count: Int) -> Int64? {
        guard let field = take(count) else { return nil }
        var value: UInt64 = 0
        for byte in field { value = value << 8 | UInt64(byte) }
        switch count {
        case 1: return Int64(value)
        case 4: return Int64(Int32(bitPattern: UInt32(truncatingIfNeeded: value)))
        default: return Int64(bitPattern: value)
        }
    }

    mutating func header() -> Header? {
        guard let magic = take(4), magic.elementsEqual("TZif".utf8), let version = take(1)?.first, take(15) != nil else { return nil }
        var counts: [Int] = []
        for _ in 0..<6 {
            // Each count is of bytes (or of records of a few bytes) that must
            // follow in this file: past its size, the file is not whole.
            guard let count = integer(bytes: 4), count >= 0, count <= Int64(bytes.count) else { return nil }
            counts.append(Int(count))
        }
        // A type count of 0, or an empty abbreviation table, is invalid.
        guard counts[4] >= 1, counts[4] <= 256, counts[5] >= 1 else { return nil }
        let number = version == 0 ? 1 : Int(version) - 0x30
        return Header(
            version: number, utcCount: counts[0], standardCount: counts[1], leapCount: counts[2], timeCount: counts[3],
            typeCount: counts[4], characterCount: counts[5])
    }
}

extension ZoneRules {
    /// `Mon 2026-12-07 01:00:00 CET`: `microseconds` since the epoch, here,
    /// to the second, as systemd prints a time.
    package func stamp(_ microseconds: Int64) -> String {
        let seconds = microseconds >= 0 ? microseconds / 1_000_000 : (microseconds + 1) / 1_000_000 - 1
        let kind = kind(at: seconds)
        let local = CivilTime(microseconds: (seconds &+ Int64(kind.offset)).multipliedClamped(by: 1_000_000))
        let weekday = CivilTime.weekday(days: CivilTime.days(year: local.year, month: local.month, day: local.day))
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(CalendarSpec.weekdayNames[weekday].prefix(3)) \(local.year)-\(two(local.month))-\(two(local.day)) "
            + "\(two(local.hour)):\(two(local.minute)):\(two(local.microsecond / 1_000_000)) \(kind.abbreviation)"
    }

    /// Whether every time here is UTC's (UTC, `Etc/UTC`, `GMT`): then a
    /// time needs no second reading in UTC.
    package var isUTC: Bool {
        // As systemd asks (`timezone` and `daylight`): the zone's rule of
        // today, not its history (Abidjan kept local mean time until 1912).
        if let rule { return rule.standard.offset == 0 && rule.daylight == nil }
        return kinds.last.map { $0.offset == 0 && !$0.isDaylight } ?? true
    }
}
