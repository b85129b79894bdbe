/// A JSON object written key by key, in order, on one line.
public struct JSONLine: Sendable {
    private var fields: [String] = []

    /// An object whose first member is `"event": event`.
    public init(event: String) {
        add("event", event)
    }

    /// An object whose first member is `key: value`.
    public init(_ key: String, _ value: String) {
        add(key, value)
    }

    public mutating func add(_ key: String, _ value: String?) {
        fields.append("\(Self.quote(key)):\(value.map(Self.quote) ?? "null")")
    }

    public mutating func add(_ key: String, _ value: Int64) {
        fields.append("\(Self.quote(key)):\(value)")
    }

    public mutating func add(_ key: String, _ value: Double?) {
        guard let value, value.isFinite else { return fields.append("\(Self.quote(key)):null") }
        fields.append("\(Self.quote(key)):\(Self.number(value))")
    }

    public mutating func add(_ key: String, _ values: [String]) {
        fields.append("\(Self.quote(key)):[\(values.map(Self.quote).joined(separator: ","))]")
    }

    public mutating func addRaw(_ key: String, _ json: String) {
        fields.append("\(Self.quote(key)):\(json)")
    }

    /// The object, on one line.
    public var text: String { "{" + fields.joined(separator: ",") + "}" }

    public static func number(_ value: Double) -> String {
        let micro = (value * 1_000_000).rounded() / 1_000_000
        return micro == micro.rounded() && abs(micro) < 1e15 ? String(Int64(micro)) : "\(micro)"
    }

    public static func quote(_ text: String) -> String {
        // Most text needs no escape: then it is copied whole, not scalar by scalar.
        if !text.utf8.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C || $0 == 0x7F }) { return "\"" + text + "\"" }
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
