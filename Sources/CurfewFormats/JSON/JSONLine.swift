/// A JSON object written key by key, in order, on one line.
public struct JSONLine: Sendable {
    /// The object so far, from its opening brace: every member is appended
    /// as bytes in place, and the text is made once, by ``text``.
    private var bytes: [UInt8]

    /// An object whose first member is `"event": event`.
    public init(event: String) {
        self.init("event", event)
    }

    /// An object whose first member is `key: value`.
    public init(_ key: String, _ value: String) {
        bytes = []
        bytes.reserveCapacity(192)
        bytes.append(UInt8(ascii: "{"))
        add(key, value)
    }

    /// Starts a member: its key and the colon.
    private mutating func key(_ key: String) {
        if bytes.count > 1 { bytes.append(UInt8(ascii: ",")) }
        Self.append(quoted: key, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
    }

    public mutating func add(_ key: String, _ value: String?) {
        self.key(key)
        if let value { Self.append(quoted: value, to: &bytes) } else { bytes += "null".utf8 }
    }

    public mutating func add(_ key: String, _ value: Int64) {
        self.key(key)
        Self.append(value, to: &bytes)
    }

    public mutating func add(_ key: String, _ value: Double?) {
        self.key(key)
        guard let value, value.isFinite else { return bytes += "null".utf8 }
        Self.append(value, to: &bytes)
    }

    public mutating func add(_ key: String, _ values: [String]) {
        self.key(key)
        bytes.append(UInt8(ascii: "["))
        for (index, value) in values.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            Self.append(quoted: value, to: &bytes)
        }
        bytes.append(UInt8(ascii: "]"))
    }

    public mutating func addRaw(_ key: String, _ json: String) {
        self.key(key)
        var json = json
        json.withUTF8 { bytes.append(contentsOf: $0) }
    }

    /// The object, on one line.
    public var text: String {
        var whole = bytes
        whole.append(UInt8(ascii: "}"))
        return String(decoding: whole, as: UTF8.self)
    }

    /// `value` to the microsecond: an integer when it is one, else in fixed
    /// point with its trailing zeros dropped (no exponent); from 2^63
    /// microseconds on, an integer below 10^15 as one, the rest in Swift's
    /// shortest form.
    public static func number(_ value: Double) -> String {
        var out: [UInt8] = []
        append(value, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    private static func append(_ value: Double, to out: inout [UInt8]) {
        let micro = (value * 1_000_000).rounded()
        // From 2^63 microseconds on (and for NaN) the integer below would
        // trap; there a microsecond is below the double's own precision anyway.
        guard abs(micro) < 9.2e18 else {
            let whole = value.rounded()
            return out += (whole == value && abs(value) < 1e15 ? String(Int64(whole)) : "\(value)").utf8
        }
        let whole = Int64(micro)
        if whole < 0 { out.append(UInt8(ascii: "-")) }
        let magnitude = whole.magnitude
        appendDigits(magnitude / 1_000_000, to: &out)
        var fraction = magnitude % 1_000_000
        guard fraction != 0 else { return }
        out.append(UInt8(ascii: "."))
        var width = 6
        while fraction % 10 == 0 { fraction /= 10; width -= 1 }
        appendDigits(fraction, width: width, to: &out)
    }

    private static func append(_ value: Int64, to out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        appendDigits(value.magnitude, to: &out)
    }

    /// Appends `value`'s decimal digits, `width` at least (leading zeros).
    private static func appendDigits(_ value: UInt64, width: Int = 1, to out: inout [UInt8]) {
        var count = 1
        var rest = value / 10
        while rest > 0 { count += 1; rest /= 10 }
        count = max(count, width)
        let start = out.count
        out.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: count))
        rest = value
        var index = start + count - 1
        while rest > 0 {
            out[index] = UInt8(ascii: "0") + UInt8(rest % 10)
            rest /= 10
            index -= 1
        }
    }

    /// An object of strings, its keys in order: one text for one table.
    public static func object(_ pairs: [String: String]) -> String {
        var out: [UInt8] = [UInt8(ascii: "{")]
        for (index, pair) in pairs.sorted(by: { $0.key < $1.key }).enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            append(quoted: pair.key, to: &out)
            out.append(UInt8(ascii: ":"))
            append(quoted: pair.value, to: &out)
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }

    public static func quote(_ text: String) -> String {
        var out: [UInt8] = []
        append(quoted: text, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Whether `text` may have a scalar a line escapes: a byte loop over
    /// its storage (a checkpoint's base64 is megabytes long). 0xC2 and 0xE2
    /// lead the C1 controls and the line and bidi separators.
    private static func needsEscape(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        for byte in bytes where byte < 0x20 || byte == 0x22 || byte == 0x5C || byte == 0x7F || byte == 0xC2 || byte == 0xE2 {
            return true
        }
        return false
    }

    /// Appends `text` to `out` as a JSON string.
    public static func append(quoted text: String, to out: inout String) {
        var text = text
        guard text.withUTF8({ !needsEscape($0) }) else {
            out += quote(text)
            return
        }
        out += "\""
        out += text
        out += "\""
    }

    /// Appends `text` to `out` as a JSON string, in UTF-8.
    public static func append(quoted text: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Most text needs no escape: then it is copied whole, not scalar by scalar.
        var text = text
        let copied = text.withUTF8 { bytes in
            guard !needsEscape(bytes) else { return false }
            out.append(contentsOf: bytes)
            return true
        }
        if !copied {
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\"".utf8
                case "\\": out += "\\\\".utf8
                case "\n": out += "\\n".utf8
                case "\r": out += "\\r".utf8
                case "\t": out += "\\t".utf8
                // Controls, and what a terminal or an editor reading the line
                // would act on (C1 controls, line separators, bidi overrides),
                // escaped: a line carries plugin text.
                case _ where scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || (0x2028...0x202E).contains(scalar.value)
                    || (0x2066...0x2069).contains(scalar.value):
                    out += "\\u".utf8
                    for shift: UInt32 in [12, 8, 4, 0] {
                        let digit = UInt8(truncatingIfNeeded: scalar.value >> shift) & 0xF
                        out.append(digit < 10 ? UInt8(ascii: "0") + digit : UInt8(ascii: "a") + digit - 10)
                    }
                default: out += UTF8.encode(scalar)!
                }
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
