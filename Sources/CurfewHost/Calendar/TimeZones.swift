import Curfew

/// The system's time zones, read from its tz database (`TZDIR`, else
/// `/usr/share/zoneinfo`) by name, as systemd and glibc read them.
package enum TimeZones {
    /// The largest zone file read: the biggest in the database is a few KiB.
    static let maximumBytes = 256 << 10

    /// The database's folder.
    static var folder: String {
        Syscalls.environmentValue("TZDIR").flatMap { $0.hasPrefix("/") ? $0 : nil } ?? "/usr/share/zoneinfo"
    }

    /// Whether `name` can name a zone of the database: letters, digits and
    /// `_+-` in `/`-separated parts, none `.` or `..`, so no name reaches
    /// outside its folder.
    static func isZoneName(_ name: String) -> Bool {
        guard !name.isEmpty, name.utf8.count <= 255, !name.hasPrefix("/"), !name.hasSuffix("/") else { return false }
        for part in name.split(separator: "/", omittingEmptySubsequences: false) {
            guard !part.isEmpty, part != ".", part != "..", part.first != "-" else { return false }
            for byte in part.utf8 {
                let allowed =
                    (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || (0x30...0x39).contains(byte)
                    || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
                guard allowed else { return false }
            }
        }
        return true
    }

    /// The zone called `name` ("UTC", or a name of the database).
    package static func zone(named name: String) throws(CurfewError) -> ZoneRules {
        if name == "UTC" { return .utc }
        guard isZoneName(name) else { throw CurfewError(.notFound, "\(name) is not a time zone name") }
        return try read(folder + "/" + name, name: name)
    }

    /// The zone of this machine's local time: `TZ` (a zone name, a file, or
    /// a POSIX rule), else `/etc/localtime`, else UTC.
    package static func local() -> ZoneRules {
        if var text = Syscalls.environmentValue("TZ") {
            if text.hasPrefix(":") { text.removeFirst() }
            if text.isEmpty || text == "UTC" { return .utc }
            if text.hasPrefix("/"), let zone = try? read(text, name: text) { return zone }
            if isZoneName(text), let zone = try? read(folder + "/" + text, name: text) { return zone }
            if let rule = PosixZoneRule(text) { return ZoneRules(name: text, rule: rule) }
            return .utc
        }
        return (try? read("/etc/localtime", name: "localtime")) ?? .utc
    }

    private static func read(_ path: String, name: String) throws(CurfewError) -> ZoneRules {
        let bytes: [UInt8]
        do throws(SystemError) {
            bytes = try Syscalls.readFile(path, limit: maximumBytes)
        } catch {
            throw CurfewError(.notFound, "\(name) is not a time zone of this system (\(path): \(error.message))")
        }
        guard let zone = ZoneRules(name: name, tzif: bytes) else {
            throw CurfewError(.unreadable, "\(path) is not a time zone file this host reads (TZif version 2 or later, no leap seconds)")
        }
        return zone
    }
}
