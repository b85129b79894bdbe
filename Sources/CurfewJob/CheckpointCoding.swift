import CurfewFormats

// Codable checkpoints as JSON text, so `curfew state show` reads them and a C
// job could share the format. The SDK has no Foundation: these are its own
// encoder and decoder, over the host's JSON reader (linear in its input,
// bounded in depth and size), and the encoder refuses what that reader
// would refuse, so every checkpoint that saves also loads.

/// Encodes a value as the JSON text of a checkpoint.
enum CheckpointEncoding {
    static func encode(_ value: some Encodable) throws(CheckpointError) -> [UInt8] {
        let root = Slot()
        do {
            try value.encode(to: ValueEncoder(slot: root, codingPath: []))
        } catch let error as EncodingError {
            throw .notEncodable(Self.describe(error))
        } catch let error as CheckpointError {
            throw error
        } catch {
            throw .notEncodable("\(error)")
        }
        var text: [UInt8] = []
        var path: [Slot.PathStep] = []
        try root.write(to: &text, depth: 0, path: &path)
        return text
    }

    private static func describe(_ error: EncodingError) -> String {
        switch error {
        case .invalidValue(_, let context): CodingPathText.describe(context.codingPath, context.debugDescription)
        @unknown default: "\(error)"
        }
    }
}

/// Decodes a checkpoint's JSON text.
enum CheckpointDecoding {
    static func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws(CheckpointError) -> Value {
        let json: JSONValue
        do {
            json = try JSONReader.parse(bytes)
        } catch {
            throw .notDecodable("the checkpoint is not JSON (line \(error.line), column \(error.column): \(error.message))")
        }
        do {
            return try Value(from: ValueDecoder(value: json, codingPath: []))
        } catch let error as DecodingError {
            throw .notDecodable(Self.describe(error))
        } catch {
            throw .notDecodable("\(error)")
        }
    }

    private static func describe(_ error: DecodingError) -> String {
        switch error {
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .keyNotFound(_, let context),
            .dataCorrupted(let context):
            CodingPathText.describe(context.codingPath, context.debugDescription)
        @unknown default: "\(error)"
        }
    }
}

enum CodingPathText {
    /// `at position.offset: why`, or just `why` at the top.
    static func describe(_ path: [any CodingKey], _ why: String) -> String {
        path.isEmpty ? why : "at \(text(path)): \(why)"
    }

    static func text(_ path: [any CodingKey]) -> String {
        path.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
    }
}

/// A key for array elements and `super`.
private struct IndexKey: CodingKey {
    let stringValue: String
    let intValue: Int?
    init(stringValue: String) { (self.stringValue, intValue) = (stringValue, nil) }
    init(intValue: Int) { (stringValue, self.intValue) = ("\(intValue)", intValue) }
    static let superKey = IndexKey(stringValue: "super")
}

// MARK: - Encoding

/// Where one encoded value goes. A class, because a container handed out
/// now is filled later, and nested containers fill their parent's slots.
private final class Slot {
    enum Content {
        case empty
        case leaf(JSONValue)
        case object(keys: [String], members: [String: Slot])
        case array([Slot])
    }

    var content = Content.empty

    /// This slot as an object, made one if it is still empty.
    func objectMember(_ key: String) -> Slot {
        guard case .object(var keys, var members) = content else {
            let slot = Slot()
            content = .object(keys: [key], members: [key: slot])
            return slot
        }
        if let slot = members[key] { return slot }
        let slot = Slot()
        content = .empty  // keep the dictionary uniquely referenced while it grows
        keys.append(key)
        members[key] = slot
        content = .object(keys: keys, members: members)
        return slot
    }

    func makeObject() {
        if case .object = content { return }
        content = .object(keys: [], members: [:])
    }

    func makeArray() {
        if case .array = content { return }
        content = .array([])
    }

    func appendElement() -> Slot {
        let slot = Slot()
        guard case .array(var items) = content else {
            content = .array([slot])
            return slot
        }
        content = .empty
        items.append(slot)
        content = .array(items)
        return slot
    }

    var count: Int {
        if case .array(let items) = content { return items.count }
        return 0
    }

    /// Writes the JSON text, refusing what the host's reader would refuse.
    /// `path` is where this slot is (the keys and indexes down to it), a
    /// stack that is put into words only for an error.
    func write(to text: inout [UInt8], depth: Int, path: inout [PathStep]) throws(CheckpointError) {
        switch content {
        case .empty, .leaf(.null): text.append(contentsOf: "null".utf8)
        case .leaf(.bool(let flag)): text.append(contentsOf: (flag ? "true" : "false").utf8)
        case .leaf(.number(let number)): text.append(contentsOf: number.utf8)
        case .leaf(.string(let string)): text.append(contentsOf: JSONLine.quote(string).utf8)
        case .leaf(.object), .leaf(.array): preconditionFailure("a container is never a leaf")
        case .object(let keys, let members):
            try Self.check(depth: depth, count: keys.count, path: path)
            text.append(UInt8(ascii: "{"))
            for (index, key) in keys.enumerated() {
                if index > 0 { text.append(UInt8(ascii: ",")) }
                text.append(contentsOf: JSONLine.quote(key).utf8)
                text.append(UInt8(ascii: ":"))
                path.append(.key(key))
                try members[key]!.write(to: &text, depth: depth + 1, path: &path)
                path.removeLast()
            }
            text.append(UInt8(ascii: "}"))
        case .array(let items):
            try Self.check(depth: depth, count: 0, path: path)
            text.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { text.append(UInt8(ascii: ",")) }
                path.append(.index(index))
                try item.write(to: &text, depth: depth + 1, path: &path)
                path.removeLast()
            }
            text.append(UInt8(ascii: "]"))
        }
    }

    enum PathStep {
        case key(String)
        case index(Int)
    }

    private static func check(depth: Int, count: Int, path: [PathStep]) throws(CheckpointError) {
        var place: String {
            guard !path.isEmpty else { return "the value" }
            return path.map { step in
                switch step {
                case .key(let key): key
                case .index(let index): "[\(index)]"
                }
            }.joined(separator: ".")
        }
        guard depth < JSONReader.maximumDepth else {
            throw .notEncodable("\(place) nests deeper than \(JSONReader.maximumDepth) levels")
        }
        guard count <= JSONReader.maximumMembers else {
            throw .notEncodable("\(place) has \(count) keys; a checkpoint object holds at most \(JSONReader.maximumMembers)")
        }
    }
}

private struct ValueEncoder: Encoder {
    let slot: Slot
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        slot.makeObject()
        return KeyedEncodingContainer(KeyedEncoder(slot: slot, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        slot.makeArray()
        return UnkeyedEncoder(slot: slot, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleEncoder(slot: slot, codingPath: codingPath)
    }
}

/// A leaf's JSON, or an error for a number JSON cannot hold.
private enum Leaf {
    static func number(_ value: some BinaryFloatingPoint & LosslessStringConvertible, path: [any CodingKey]) throws -> JSONValue {
        guard value.isFinite else {
            throw EncodingError.invalidValue(
                value, EncodingError.Context(codingPath: path, debugDescription: "\(value) is not a number JSON can hold"))
        }
        return .number(value.description)
    }

    static func integer(_ value: some BinaryInteger) -> JSONValue { .number(String(value)) }
}

private struct SingleEncoder: SingleValueEncodingContainer {
    let slot: Slot
    let codingPath: [any CodingKey]

    func encodeNil() throws { slot.content = .leaf(.null) }
    func encode(_ value: Bool) throws { slot.content = .leaf(.bool(value)) }
    func encode(_ value: String) throws { slot.content = .leaf(.string(value)) }
    func encode(_ value: Double) throws { slot.content = .leaf(try Leaf.number(value, path: codingPath)) }
    func encode(_ value: Float) throws { slot.content = .leaf(try Leaf.number(value, path: codingPath)) }
    func encode(_ value: Int) throws { slot.content = .leaf(Leaf.integer(value)) }
    func encode(_ value: Int8) throws { slot.content = .leaf(Leaf.integer(value)) }
    func encode(_ value: Int16) throws { slot.content = .leaf(Leaf.integer(value)) }
    func encode(_ value: Int32) throws { slot.content = .leaf(Leaf.integer(value)) }
    func encode(_ value: Int64) throws { slot.content = .leaf(Leaf.integer(value)) }
    func encode(_ value: UInt) throws { slot.content = .leaf(Leaf.integer(value)) }
    func encode(_ value: UInt8) throws { slot.content = .leaf(Leaf.integer(value)) }
    func encode(_ value: UInt16) throws { slot.content = .leaf(Leaf.integer(value)) }
    func encode(_ value: UInt32) throws { slot.content = .leaf(Leaf.integer(value)) }
    func encode(_ value: UInt64) throws { slot.content = .leaf(Leaf.integer(value)) }
    func encode(_ value: some Encodable) throws { try value.encode(to: ValueEncoder(slot: slot, codingPath: codingPath)) }
}

private struct KeyedEncoder<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let slot: Slot
    let codingPath: [any CodingKey]

    private func single(_ key: Key) -> SingleEncoder {
        SingleEncoder(slot: slot.objectMember(key.stringValue), codingPath: codingPath + [key])
    }

    func encodeNil(forKey key: Key) throws { try single(key).encodeNil() }
    func encode(_ value: Bool, forKey key: Key) throws { try single(key).encode(value) }
    func encode(_ value: String, forKey key: Key) throws { try single(key).encode(value) }
    func encode(_ value: Double, forKey key: Key) throws { try single(key).encode(value) }
    func encode(_ value: Float, forKey key: Key) throws { try single(key).encode(value) }
    func encode(_ value: Int, forKey key: Key) throws { try single(key).encode(value) }
    func encode(_ value: Int8, forKey key: Key) throws { try single(key).encode(value) }
    func encode(_ value: Int16, forKey key: Key) throws { try single(key).encode(value) }
    func encode(_ value: Int32, forKey key: Key) throws { try single(key).encode(value) }
    func encode(_ value: Int64, forKey key: Key) throws { try single(key).encode(value) }
    func encode(_ value: UInt, forKey key: Key) throws { try single(key).encode(value) }
    func encode(_ value: UInt8, forKey key: Key) throws { try single(key).encode(value) }
    func encode(_ value: UInt16, forKey key: Key) throws { try single(key).encode(value) }
    func encode(_ value: UInt32, forKey key: Key) throws { try single(key).encode(value) }
    func encode(_ value: UInt64, forKey key: Key) throws { try single(key).encode(value) }
    func encode(_ value: some Encodable, forKey key: Key) throws { try single(key).encode(value) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        ValueEncoder(slot: slot.objectMember(key.stringValue), codingPath: codingPath + [key]).container(keyedBy: keyType)
    }

    func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        ValueEncoder(slot: slot.objectMember(key.stringValue), codingPath: codingPath + [key]).unkeyedContainer()
    }

    func superEncoder() -> any Encoder {
        ValueEncoder(slot: slot.objectMember(IndexKey.superKey.stringValue), codingPath: codingPath + [IndexKey.superKey])
    }

    func superEncoder(forKey key: Key) -> any Encoder {
        ValueEncoder(slot: slot.objectMember(key.stringValue), codingPath: codingPath + [key])
    }
}

private struct UnkeyedEncoder: UnkeyedEncodingContainer {
    let slot: Slot
    let codingPath: [any CodingKey]
    var count: Int { slot.count }

    private func next() -> ValueEncoder {
        let key = IndexKey(intValue: slot.count)
        return ValueEncoder(slot: slot.appendElement(), codingPath: codingPath + [key])
    }

    private func single() -> SingleEncoder {
        let encoder = next()
        return SingleEncoder(slot: encoder.slot, codingPath: encoder.codingPath)
    }

    func encodeNil() throws { try single().encodeNil() }
    func encode(_ value: Bool) throws { try single().encode(value) }
    func encode(_ value: String) throws { try single().encode(value) }
    func encode(_ value: Double) throws { try single().encode(value) }
    func encode(_ value: Float) throws { try single().encode(value) }
    func encode(_ value: Int) throws { try single().encode(value) }
    func encode(_ value: Int8) throws { try single().encode(value) }
    func encode(_ value: Int16) throws { try single().encode(value) }
    func encode(_ value: Int32) throws { try single().encode(value) }
    func encode(_ value: Int64) throws { try single().encode(value) }
    func encode(_ value: UInt) throws { try single().encode(value) }
    func encode(_ value: UInt8) throws { try single().encode(value) }
    func encode(_ value: UInt16) throws { try single().encode(value) }
    func encode(_ value: UInt32) throws { try single().encode(value) }
    func encode(_ value: UInt64) throws { try single().encode(value) }
    func encode(_ value: some Encodable) throws { try single().encode(value) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        next().container(keyedBy: keyType)
    }

    func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer { next().unkeyedContainer() }
    func superEncoder() -> any Encoder { next() }
}

// MARK: - Decoding

private struct ValueDecoder: Decoder {
    let value: JSONValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = value else {
            throw DecodingError.typeMismatch(
                [String: Any].self, .init(codingPath: codingPath, debugDescription: "expected an object, found \(value.kind)"))
        }
        return KeyedDecodingContainer(KeyedDecoder(members: members, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let items) = value else {
            throw DecodingError.typeMismatch(
                [Any].self, .init(codingPath: codingPath, debugDescription: "expected an array, found \(value.kind)"))
        }
        return UnkeyedDecoder(items: items, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        SingleDecoder(value: value, codingPath: codingPath)
    }
}

private struct SingleDecoder: SingleValueDecodingContainer {
    let value: JSONValue
    let codingPath: [any CodingKey]

    private func mismatch<T>(_ type: T.Type, _ expected: String) -> DecodingError {
        .typeMismatch(type, .init(codingPath: codingPath, debugDescription: "expected \(expected), found \(value.kind)"))
    }

    private func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        guard case .number(let text) = value else { throw mismatch(type, "an integer") }
        guard let integer = T(text, radix: 10) else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: codingPath, debugDescription: "\(text) is not a whole number that fits \(T.self)"))
        }
        return integer
    }

    private func floatingPoint<T: BinaryFloatingPoint & LosslessStringConvertible>(_ type: T.Type) throws -> T {
        guard case .number(let text) = value else { throw mismatch(type, "a number") }
        guard let number = T(text), number.isFinite else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "\(text) does not fit \(T.self)"))
        }
        return number
    }

    func decodeNil() -> Bool { value == .null }

    func decode(_ type: Bool.Type) throws -> Bool {
        guard case .bool(let flag) = value else { throw mismatch(type, "a boolean") }
        return flag
    }

    func decode(_ type: String.Type) throws -> String {
        guard case .string(let text) = value else { throw mismatch(type, "a string") }
        return text
    }

    func decode(_ type: Double.Type) throws -> Double { try floatingPoint(type) }
    func decode(_ type: Float.Type) throws -> Float { try floatingPoint(type) }
    func decode(_ type: Int.Type) throws -> Int { try integer(type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer(type) }
    func decode(_ type: UInt.Type) throws -> UInt { try integer(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(type) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try T(from: ValueDecoder(value: value, codingPath: codingPath)) }
}

private struct KeyedDecoder<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let codingPath: [any CodingKey]
    private let members: [String: JSONValue]
    let allKeys: [Key]

    init(members: [(key: String, value: JSONValue)], codingPath: [any CodingKey]) {
        self.codingPath = codingPath
        // The first of a repeated key wins, as everywhere the host reads JSON.
        var table: [String: JSONValue] = [:]
        table.reserveCapacity(members.count)
        for member in members where table[member.key] == nil { table[member.key] = member.value }
        self.members = table
        allKeys = members.compactMap { Key(stringValue: $0.key) }
    }

    func contains(_ key: Key) -> Bool { members[key.stringValue] != nil }

    private func member(_ key: Key) throws -> JSONValue {
        guard let value = members[key.stringValue] else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no \"\(key.stringValue)\" in the checkpoint"))
        }
        return value
    }

    private func single(_ key: Key) throws -> SingleDecoder {
        SingleDecoder(value: try member(key), codingPath: codingPath + [key])
    }

    func decodeNil(forKey key: Key) throws -> Bool { try member(key) == .null }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try single(key).decode(type) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try single(key).decode(type) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try single(key).decode(type) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try single(key).decode(type) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try single(key).decode(type) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try single(key).decode(type) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try single(key).decode(type) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try single(key).decode(type) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try single(key).decode(type) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try single(key).decode(type) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try single(key).decode(type) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try single(key).decode(type) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try single(key).decode(type) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try single(key).decode(type) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try single(key).decode(type) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try ValueDecoder(value: try member(key), codingPath: codingPath + [key]).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try ValueDecoder(value: try member(key), codingPath: codingPath + [key]).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        ValueDecoder(value: members[IndexKey.superKey.stringValue] ?? .null, codingPath: codingPath + [IndexKey.superKey])
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        ValueDecoder(value: members[key.stringValue] ?? .null, codingPath: codingPath + [key])
    }
}

private struct UnkeyedDecoder: UnkeyedDecodingContainer {
    private let items: [JSONValue]
    let codingPath: [any CodingKey]
    private(set) var currentIndex = 0
    var count: Int? { items.count }
    var isAtEnd: Bool { currentIndex >= items.count }

    init(items: [JSONValue], codingPath: [any CodingKey]) {
        self.items = items
        self.codingPath = codingPath
    }

    private mutating func next() throws -> ValueDecoder {
        let key = IndexKey(intValue: currentIndex)
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                Any.self, .init(codingPath: codingPath + [key], debugDescription: "the array has only \(items.count) elements"))
        }
        defer { currentIndex += 1 }
        return ValueDecoder(value: items[currentIndex], codingPath: codingPath + [key])
    }

    private mutating func single() throws -> SingleDecoder {
        let decoder = try next()
        return SingleDecoder(value: decoder.value, codingPath: decoder.codingPath)
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, items[currentIndex] == .null else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try single().decode(type) }
    mutating func decode(_ type: String.Type) throws -> String { try single().decode(type) }
    mutating func decode(_ type: Double.Type) throws -> Double { try single().decode(type) }
    mutating func decode(_ type: Float.Type) throws -> Float { try single().decode(type) }
    mutating func decode(_ type: Int.Type) throws -> Int { try single().decode(type) }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try single().decode(type) }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try single().decode(type) }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try single().decode(type) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try single().decode(type) }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try single().decode(type) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try single().decode(type) }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try single().decode(type) }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try single().decode(type) }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try single().decode(type) }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try single().decode(type) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try next().container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try next().unkeyedContainer() }
    mutating func superDecoder() throws -> any Decoder { try next() }
}
