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

    /// `500ms`, `1.5s`, `2m`, `1h`, or a bare number of seconds, under 10⁹ s.
    package static func duration(_ text: String) -> Duration? {
        guard text.utf8.count <= maximumLength else { return nil }
        let units: [(String, Double)] = [("ms", 1e-3), ("s", 1), ("m", 60), ("h", 3600)]
        var number = Substring(text)
        var scale = 1.0
        for (suffix, factor) in units where text.hasSuffix(suffix) {
            number = text.dropLast(suffix.count)
            scale = factor
            break
        }
        guard !number.isEmpty, number.utf8.allSatisfy({ (0x30...0x39).contains($0) || $0 == UInt8(ascii: ".") }),
            let value = Double(number), value.isFinite, value >= 0, value * scale < 1e9
        else { return nil }
        return .nanoseconds(Int64((value * scale * 1e9).rounded()))
    }
}
