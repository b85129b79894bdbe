/// A JSON value, as a manifest holds it. Objects keep their keys in order and
/// numbers keep their text, so 64-bit integers convert exactly.
package indirect enum JSONValue: Equatable, Sendable {
    case object([(key: String, value: JSONValue)])
    case array([JSONValue])
    case string(String)
    case number(String)
    case bool(Bool)
    case null

    package static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.object(let a), .object(let b)):
            a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        case (.array(let a), .array(let b)): a == b
        case (.string(let a), .string(let b)): a == b
        case (.number(let a), .number(let b)): a == b
        case (.bool(let a), .bool(let b)): a == b
        case (.null, .null): true
        default: false
        }
    }

    /// The member of an object, or `nil`.
    package subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.key == key }?.value
    }

    /// A word for messages: "an object", "a string", …
    package var kind: String {
        switch self {
        case .object: "an object"
        case .array: "an array"
        case .string: "a string"
        case .number: "a number"
        case .bool: "a boolean"
        case .null: "null"
        }
    }
}

extension JSONValue {
    /// The value as JSON text on one line (numbers as they were read).
    package var text: String {
        switch self {
        case .object(let members): "{" + members.map { JSONLine.quote($0.key) + ":" + $0.value.text }.joined(separator: ",") + "}"
        case .array(let values): "[" + values.map(\.text).joined(separator: ",") + "]"
        case .string(let string): JSONLine.quote(string)
        case .number(let digits): digits
        case .bool(let flag): flag ? "true" : "false"
        case .null: "null"
        }
    }

    package var stringValue: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    package var numberValue: Double? {
        if case .number(let text) = self { return Double(text) }
        return nil
    }

    /// An integer, exactly (a `Double` loses precision past 2^53).
    package var integerValue: Int64? {
        if case .number(let text) = self { return Int64(text) }
        return nil
    }
}
