/// Sizes and durations as people write them on a command line or in a file.
///
/// - Important: Each parse is linear in its input and never traps: a text
///   longer than ``maximumLength`` characters, a value that overflows, or a
///   sign or stray character is no quantity (`nil`).
package enum Quantities {
    /// The longest text read as a quantity.
    package static let maximumLength = 64

    /// `256MiB`, `2GiB`, `512KiB`, `64M`, `1G`, or a bare number of bytes.
    package static func size(_ text: String) -> UInt64? {
        guard text.utf8.count <= maximumLength else { return nil }
        let units: [(String, UInt64)] = [
            ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30),
        ]
        var number = Substring(text)
        var factor: UInt64 = 1
        for (suffix, unit) in units where text.hasSuffix(suffix) {
            number = text.dropLast(suffix.count)
            factor = unit
            break
        }
        guard !number.isEmpty, number.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let count = UInt64(number) else { return nil }
        let (bytes, overflow) = count.multipliedReportingOverflow(by: factor)
        return overflow ? nil : bytes
    }

    /// `500ms`, `1.5s`, `2m`, `1h`, several of those from the largest unit
    /// down (`1m30s`, `1h30m`, `2s500ms`), or a bare number of seconds;
    /// under 10⁹ s in all.
    package static func duration(_ text: String) -> Duration? {
        guard text.utf8.count <= maximumLength, !text.isEmpty else { return nil }
        let bytes = Array(text.utf8)
        func isNumber(_ byte: UInt8) -> Bool { (0x30...0x39).contains(byte) || byte == UInt8(ascii: ".") }
        // A bare number: seconds.
        if bytes.allSatisfy(isNumber) { return seconds(bytes[...], scale: 1) }
        let units: [String: (rank: Int, scale: Double)] = ["h": (0, 3600), "m": (1, 60), "s": (2, 1), "ms": (3, 1e-3)]
        var total: Duration = .zero
        var lastRank = -1
        var index = 0
        while index < bytes.count {
            let numberStart = index
            while index < bytes.count, isNumber(bytes[index]) { index += 1 }
            let unitStart = index
            while index < bytes.count, !isNumber(bytes[index]) { index += 1 }
            guard unitStart > numberStart, let unit = units[String(decoding: bytes[unitStart..<index], as: UTF8.self)],
                unit.rank > lastRank, let part = seconds(bytes[numberStart..<unitStart], scale: unit.scale)
            else { return nil }
            lastRank = unit.rank
            total += part
        }
        return total < .seconds(1_000_000_000) ? total : nil
    }

    /// A decimal number times `scale` seconds, under 10⁹ s.
    private static func seconds(_ digits: ArraySlice<UInt8>, scale: Double) -> Duration? {
        guard !digits.isEmpty, let value = Double(String(decoding: digits, as: UTF8.self)), value.isFinite, value >= 0,
            value * scale < 1e9
        else { return nil }
        return .nanoseconds(Int64((value * scale * 1e9).rounded()))
    }
}
