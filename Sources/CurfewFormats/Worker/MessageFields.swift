/// Why a line of a channel is no message: said in a few words, quoting at
/// most a little of what was sent.
package struct MessageInvalid: Error, Equatable {
    package let reason: String
    package init(reason: String) { self.reason = reason }
}

/// Typed access to one JSON object's fields, each failure said in words:
/// what both ends of a worker's channel read its messages with.
struct MessageFields {
    private let fields: [String: JSONValue]

    /// The object on one line.
    static func object(_ line: [UInt8]) throws(MessageInvalid) -> MessageFields {
        let value: JSONValue
        do throws(JSONSyntaxError) {
            value = try JSONReader.parse(line)
        } catch {
            throw MessageInvalid(reason: "not JSON (\(error.message) at column \(error.column))")
        }
        return try of(value, nil)
    }

    /// `what`: the field it is, `nil` for the message itself.
    private static func of(_ value: JSONValue, _ what: String?) throws(MessageInvalid) -> MessageFields {
        guard case .object(let members) = value else {
            throw MessageInvalid(reason: (what.map { "\($0) is " } ?? "") + "\(value.kind), not an object")
        }
        var fields: [String: JSONValue] = [:]
        for member in members { fields[member.key] = member.value }
        return MessageFields(fields: fields)
    }

    var keys: [String] { fields.keys.sorted() }

    func has(_ key: String) -> Bool { fields[key] != nil }

    func only(_ allowed: Set<String>) throws(MessageInvalid) {
        if let unknown = fields.keys.first(where: { !allowed.contains($0) }) {
            throw MessageInvalid(reason: "unknown field \(WorkerMessage.quoted(unknown))")
        }
    }

    private func value(_ key: String) throws(MessageInvalid) -> JSONValue {
        guard let value = fields[key] else { throw MessageInvalid(reason: "no \"\(key)\"") }
        return value
    }

    func string(_ key: String) throws(MessageInvalid) -> String {
        let value = try value(key)
        guard case .string(let text) = value else { throw MessageInvalid(reason: "\"\(key)\" is \(value.kind), not a string") }
        return text
    }

    func bool(_ key: String) throws(MessageInvalid) -> Bool {
        let value = try value(key)
        guard case .bool(let flag) = value else { throw MessageInvalid(reason: "\"\(key)\" is \(value.kind), not a boolean") }
        return flag
    }

    func isNull(_ key: String) throws(MessageInvalid) -> Bool {
        try value(key) == .null
    }

    func object(_ key: String) throws(MessageInvalid) -> MessageFields {
        try Self.of(try value(key), "\"\(key)\"")
    }

    func integer(_ key: String) throws(MessageInvalid) -> Int64 {
        guard case .number(let text) = try value(key), let number = Int64(text) else {
            throw MessageInvalid(reason: "\"\(key)\" is not a 64-bit integer")
        }
        return number
    }

    /// A count: a 64-bit integer, not negative.
    func count(_ key: String) throws(MessageInvalid) -> UInt64 {
        let count = try integer(key)
        guard count >= 0 else {
            throw MessageInvalid(reason: key == "chunks" ? "a negative chunk count (\(count))" : "a negative \"\(key)\" (\(count))")
        }
        return UInt64(count)
    }

    /// One of the words `Word` allows.
    func word<Word: RawRepresentable & CaseIterable>(_ key: String, _: Word.Type) throws(MessageInvalid) -> Word where Word.RawValue == String {
        let text = try string(key)
        guard let word = Word(rawValue: text) else { throw MessageInvalid(reason: "unknown \(key) \(WorkerMessage.quoted(text))") }
        return word
    }

    /// An array of at most `most` strings of at most `longest` bytes each.
    func strings(_ key: String, most: Int, longest: Int) throws(MessageInvalid) -> [String] {
        try array(key, most: most, of: "strings of at most \(longest) bytes") { value -> String? in
            guard case .string(let text) = value, text.utf8.count <= longest else { return nil }
            return text
        }
    }

    /// An array of at most `most` counts (64-bit integers, not negative).
    func counts(_ key: String, most: Int) throws(MessageInvalid) -> [UInt64] {
        try array(key, most: most, of: "counts") { value -> UInt64? in
            guard case .number(let text) = value, let count = Int64(text), count >= 0 else { return nil }
            return UInt64(count)
        }
    }

    /// An array of at most `most` elements, each one `element` reads (`nil`: not one; `what` says what they must be).
    private func array<Element>(_ key: String, most: Int, of what: String, _ element: (JSONValue) -> Element?) throws(MessageInvalid) -> [Element] {
        let value = try value(key)
        guard case .array(let values) = value else { throw MessageInvalid(reason: "\"\(key)\" is \(value.kind), not an array") }
        guard values.count <= most else { throw MessageInvalid(reason: "more than \(most) in \"\(key)\"") }
        var elements: [Element] = []
        elements.reserveCapacity(values.count)
        for value in values {
            guard let read = element(value) else { throw MessageInvalid(reason: "\"\(key)\" holds other than \(what)") }
            elements.append(read)
        }
        return elements
    }

    /// The protocol version, which must be `version`.
    func version(_ version: Int64) throws(MessageInvalid) {
        guard try integer("protocol") == version else { throw MessageInvalid(reason: "protocol version mismatch") }
    }

    /// `job`: a job's name of 1 to ``WorkerMessage/maximumJobNameBytes`` bytes.
    func jobName() throws(MessageInvalid) -> String {
        let job = try string("job")
        guard !job.isEmpty, job.utf8.count <= WorkerMessage.maximumJobNameBytes else {
            throw MessageInvalid(reason: "\"job\" must name a job in 1 to \(WorkerMessage.maximumJobNameBytes) bytes")
        }
        return job
    }

    /// `t`, the worker's reading of the monotonic clock in nanoseconds, if given.
    func optionalTime() throws(MessageInvalid) -> UInt64? {
        guard fields["t"] != nil else { return nil }
        let time = try integer("t")
        guard time >= 0 else { throw MessageInvalid(reason: "a negative time (\(time))") }
        return UInt64(time)
    }
}
