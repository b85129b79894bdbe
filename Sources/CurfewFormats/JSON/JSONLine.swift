/// A JSON object written key by key, in order, on one line.
public struct JSONLine: Sendable {
    /// The members so far, comma-separated: each is appended in place, not
    /// kept as a string of its own and joined at the end.
    private var members = ""

    /// An object whose first member is `"event": event`.
    public init(event: String) {
        add("event", event)
    }

    /// An object whose first member is `key: value`.
    public init(_ key: String, _ value: String) {
        add(key, value)
    }

    /// Starts a member: its key and the colon.
    private mutating func key(_ key: String) {
        if !members.isEmpty { members += "," }
        Self.append(quoted: key, to: &members)
        members += ":"
    }

    public mutating func add(_ key: String, _ value: String?) {
        self.key(key)
        if let value { Self.append(quoted: value, to: &members) } else { members += "null" }
    }

    public mutating func add(_ key: String, _ value: Int64) {
        self.key(key)
        members += String(value)
    }

    public mutating func add(_ key: String, _ value: Double?) {
        self.key(key)
        guard let value, value.isFinite else { return members += "null" }
        members += Self.number(value)
    }

    public mutating func add(_ key: String, _ values: [String]) {
        self.key(key)
        members += "["
        for (index, value) in values.enumerated() {
            if index > 0 { members += "," }
            Self.append(quoted: value, to: &members)
        }
        members += "]"
    }

    public mutating func addRaw(_ key: String, _ json: String) {
        self.key(key)
        members += json
    }

    /// The object, on one line.
    public var text: String { "{" + members + "}" }

    public static func number(_ value: Double) -> String {
        let micro = (value * 1_000_000).rounded() / 1_000_000
        return micro == micro.rounded() && abs(micro) < 1e15 ? String(Int64(micro)) : "\(micro)"
    }

    /// An object of strings, its keys in order: one text for one table.
    public static func object(_ pairs: [String: String]) -> String {
        "{" + pairs.sorted { $0.key < $1.key }.map { quote($0.key) + ":" + quote($0.value) }.joined(separator: ",") + "}"
    }

    public static func quote(_ text: String) -> String {
        var out = ""
        append(quoted: text, to: &out)
        return out
    }

    /// Whether `text` may have a scalar a line escapes: a byte loop over
    /// its storage (a checkpoint's base64 is megabytes long). 0xC2 and 0xE2
    /// lead the C1 controls and the line and bidi separators.
    private static func needsEscape(_ text: String) -> Bool {
        func flagged(_ byte: UInt8) -> Bool { byte < 0x20 || byte == 0x22 || byte == 0x5C || byte == 0x7F || byte == 0xC2 || byte == 0xE2 }
        func check(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
            for byte in bytes where flagged(byte) { return true }
            return false
        }
        return text.utf8.withContiguousStorageIfAvailable(check) ?? text.utf8.contains(where: flagged)
    }

    /// Appends `text` to `out` as a JSON string.
    public static func append(quoted text: String, to out: inout String) {
        out += "\""
        // Most text needs no escape: then it is copied whole, not scalar by scalar.
        if !needsEscape(text) {
            out += text
        } else {
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\n": out += "\\n"
                case "\r": out += "\\r"
                case "\t": out += "\\t"
                // Controls, and what a terminal or an editor reading the line
                // would act on (C1 controls, line separators, bidi overrides),
                // escaped: a line carries plugin text.
                case _ where scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || (0x2028...0x202E).contains(scalar.value)
                    || (0x2066...0x2069).contains(scalar.value):
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                default: out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
    }
}
