/// Where and why a text is not valid JSON.
package struct JSONSyntaxError: Error, Equatable {
    package let line: Int
    package let column: Int
    package let message: String

    package init(line: Int, column: Int, message: String) {
        self.line = line
        self.column = column
        self.message = message
    }
}

/// Reads JSON (RFC 8259) and reports the line and column of the first error.
///
/// Every text from outside the host goes through it: worker messages,
/// manifests, the scan cache.
///
/// It reads a text whole into a ``JSONValue`` (``parse(_:)``), or a value at
/// a time into the caller's own types (``init(_:)``, ``nextKind()`` and the
/// `read` methods), with no tree between: the same grammar, checks and
/// limits either way.
///
/// - Important: It never traps on its input, and its time and memory are
///   linear in the input's length: it nests at most ``maximumDepth`` levels,
///   holds at most ``maximumMembers`` keys in one object and
///   ``maximumValues`` values in all, and reads numbers of at most
///   ``maximumNumberLength`` characters. Callers bound the input's length.
package struct JSONReader {
    package static let maximumDepth = 64
    package static let maximumMembers = 10_000
    /// Up to this many members, a key's duplicate is sought among them.
    package static let fewMembers = 8
    package static let maximumValues = 1_000_000
    package static let maximumNumberLength = 100

    private let bytes: [UInt8]
    private var index = 0
    private var depth = 0
    private var values = 0

    package static func parse(_ bytes: [UInt8]) throws(JSONSyntaxError) -> JSONValue {
        var reader = JSONReader(bytes: bytes)
        reader.skipWhitespace()
        let value = try reader.value()
        reader.skipWhitespace()
        guard reader.index == bytes.count else { throw reader.error("unexpected text after the JSON value") }
        return value
    }

    /// What the next value is.
    package enum Kind: Equatable, Sendable {
        case object, array, string, number, bool, null
    }

    /// A reader of `bytes` a value at a time: read the top value with one of
    /// the `read` methods (or ``skipValue()``), then ``finish()``.
    package init(_ bytes: [UInt8]) {
        self.init(bytes: bytes)
    }

    private init(bytes: [UInt8]) {
        // A UTF-8 byte order mark is allowed and skipped.
        self.bytes = bytes
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { index = 3 }
    }

    private func error(_ message: String, at position: Int? = nil) -> JSONSyntaxError {
        let end = min(position ?? index, bytes.count)
        var line = 1
        var column = 1
        var offset = 0
        while offset < end {
            if bytes[offset] == 0x0A {
                line += 1
                column = 1
            } else if bytes[offset] & 0xC0 != 0x80 {
                column += 1  // count characters, not UTF-8 continuation bytes
            }
            offset += 1
        }
        return JSONSyntaxError(line: line, column: column, message: message)
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    /// The kind of the value that begins after any whitespace, or `nil`
    /// when none does (the text ends, or another byte is there).
    package mutating func nextKind() -> Kind? {
        skipWhitespace()
        guard index < bytes.count else { return nil }
        switch bytes[index] {
        case UInt8(ascii: "{"): return .object
        case UInt8(ascii: "["): return .array
        case UInt8(ascii: "\""): return .string
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return .bool
        case UInt8(ascii: "n"): return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number
        default: return nil
        }
    }

    /// Reads an object, handing each member's key to `member`, which reads
    /// the member's value with one `read` method (a value it leaves unread
    /// is skipped). Duplicate keys are an error, as in ``parse(_:)``.
    package mutating func readObject(
        _ member: (inout JSONReader, String) throws(JSONSyntaxError) -> Void
    ) throws(JSONSyntaxError) {
        try begin(.object)
        try object(member)
    }

    /// Reads the next value as ``readObject(_:)`` does when it is an object,
    /// handing `member` each member's key and kind too; skips it when it is
    /// not. Whether it was one.
    package mutating func readObjectIfOne(
        _ member: (inout JSONReader, String, Kind?) throws(JSONSyntaxError) -> Void
    ) throws(JSONSyntaxError) -> Bool {
        guard nextKind() == .object else {
            try skipValue()
            return false
        }
        try readObject { reader, key throws(JSONSyntaxError) in try member(&reader, key, reader.nextKind()) }
        return true
    }

    /// Reads an array, handing the reader to `element` for each element,
    /// which reads it with one `read` method (one left unread is skipped).
    package mutating func readArray(_ element: (inout JSONReader) throws(JSONSyntaxError) -> Void) throws(JSONSyntaxError) {
        try begin(.array)
        try array(element)
    }

    package mutating func readString() throws(JSONSyntaxError) -> String {
        try begin(.string)
        return try string()
    }

    /// Reads a number: the integer it is exactly, or `nil` when it is none
    /// that fits an `Int64` (a fraction, an exponent, too many digits), as
    /// ``JSONValue/integerValue`` reads it.
    package mutating func readInteger() throws(JSONSyntaxError) -> Int64? {
        try begin(.number)
        let digits = try number()
        var at = digits.lowerBound
        let negative = bytes[at] == UInt8(ascii: "-")
        if negative { at += 1 }
        var value: Int64 = 0
        while at < digits.upperBound {
            let byte = bytes[at]
            guard (0x30...0x39).contains(byte) else { return nil }
            let digit = Int64(byte - 0x30)
            let (times, overflowed) = value.multipliedReportingOverflow(by: 10)
            let (next, overflowedAgain) = negative ? times.subtractingReportingOverflow(digit) : times.addingReportingOverflow(digit)
            guard !overflowed && !overflowedAgain else { return nil }
            value = next
            at += 1
        }
        return value
    }

    /// Reads a number as ``JSONValue/numberValue`` does.
    package mutating func readDouble() throws(JSONSyntaxError) -> Double? {
        try begin(.number)
        return Double(String(decoding: bytes[try number()], as: UTF8.self))
    }

    package mutating func readBool() throws(JSONSyntaxError) -> Bool {
        try begin(.bool)
        if case .bool(let flag) = try literal() { return flag }
        throw error("expected true or false")
    }

    /// Reads the next value, whatever it is, and forgets it (it is checked
    /// as any other).
    package mutating func skipValue() throws(JSONSyntaxError) {
        skipWhitespace()
        _ = try value()
    }

    /// Ends the reading: only whitespace may follow the value read.
    package mutating func finish() throws(JSONSyntaxError) {
        skipWhitespace()
        guard index == bytes.count else { throw error("unexpected text after the JSON value") }
    }

    /// Counts the value that begins here, which must be of `kind`.
    private mutating func begin(_ kind: Kind) throws(JSONSyntaxError) {
        guard let next = nextKind() else {
            throw error(index < bytes.count ? "expected a value" : "unexpected end of the text: expected a value")
        }
        guard next == kind else { throw error("expected \(kind), not \(next)") }
        try count()
    }

    private mutating func count() throws(JSONSyntaxError) {
        values += 1
        if values > Self.maximumValues { throw error("more than \(Self.maximumValues) values in one text") }
    }

    private mutating func value() throws(JSONSyntaxError) -> JSONValue {
        guard index < bytes.count else { throw error("unexpected end of the text: expected a value") }
        try count()
        switch bytes[index] {
        case UInt8(ascii: "{"):
            var members: [(key: String, value: JSONValue)] = []
            try object { reader, key throws(JSONSyntaxError) in members.append((key, try reader.value())) }
            return .object(members)
        case UInt8(ascii: "["):
            var elements: [JSONValue] = []
            try array { reader throws(JSONSyntaxError) in elements.append(try reader.value()) }
            return .array(elements)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"), UInt8(ascii: "f"), UInt8(ascii: "n"): return try literal()
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return .number(String(decoding: bytes[try number()], as: UTF8.self))
        default: throw error("expected a value")
        }
    }

    private mutating func nest() throws(JSONSyntaxError) {
        depth += 1
        if depth > Self.maximumDepth { throw error("nested more than \(Self.maximumDepth) levels deep") }
    }

    /// The object that begins here (counted), each member's value read by
    /// `member` or else skipped.
    private mutating func object(_ member: (inout JSONReader, String) throws(JSONSyntaxError) -> Void) throws(JSONSyntaxError) {
        try nest()
        defer { depth -= 1 }
        index += 1
        // The keys so far (the first few, room for them made at once; then
        // the set has them all), and how many.
        var members: [String] = []
        var count = 0
        // A duplicate key is sought among the few members so far, then, once
        // the object has more, in a set: neither a search of every member
        // per key (quadratic) nor a set for every small object (most of the
        // cost of reading the scan cache).
        var keys: Set<String>?
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "}") {
            index += 1
            return
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                throw error("expected a quoted key")
            }
            let keyStart = index
            let key = try string()
            if keys == nil && members.count >= Self.fewMembers { keys = Set(members) }
            guard keys?.insert(key).inserted ?? !members.contains(key) else {
                let shown = key.unicodeScalars.count > 64 ? String(key.unicodeScalars.prefix(64)) + "…" : key
                throw error("duplicate key \"\(shown)\"", at: keyStart)
            }
            if count >= Self.maximumMembers {
                throw error("more than \(Self.maximumMembers) keys in one object", at: keyStart)
            }
            count += 1
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':' after the key") }
            index += 1
            skipWhitespace()
            if keys == nil {
                if members.isEmpty { members.reserveCapacity(Self.fewMembers) }
                members.append(key)
            }
            try read(by: { reader throws(JSONSyntaxError) in try member(&reader, key) })
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of the text: expected ',' or '}'") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == UInt8(ascii: "}") else { throw error("expected ',' or '}'") }
            index += 1
            return
        }
    }

    /// One value, read by `reader` (or skipped, when it reads none).
    private mutating func read(by reader: (inout JSONReader) throws(JSONSyntaxError) -> Void) throws(JSONSyntaxError) {
        let before = values
        try reader(&self)
        if values == before { try skipValue() }
    }

    /// The array that begins here (counted), each element read by `element` or else skipped.
    private mutating func array(_ element: (inout JSONReader) throws(JSONSyntaxError) -> Void) throws(JSONSyntaxError) {
        try nest()
        defer { depth -= 1 }
        index += 1
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "]") {
            index += 1
            return
        }
        while true {
            skipWhitespace()
            try read(by: element)
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of the text: expected ',' or ']'") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == UInt8(ascii: "]") else { throw error("expected ',' or ']'") }
            index += 1
            return
        }
    }

    /// The literal that begins here: `true`, `false` or `null`.
    private mutating func literal() throws(JSONSyntaxError) -> JSONValue {
        let (word, value): (StaticString, JSONValue) =
            switch bytes[index] {
            case UInt8(ascii: "t"): ("true", .bool(true))
            case UInt8(ascii: "f"): ("false", .bool(false))
            default: ("null", .null)
            }
        let count = word.utf8CodeUnitCount
        guard bytes.count - index >= count,
            word.withUTF8Buffer({ expected in bytes[index..<index + count].elementsEqual(expected) })
        else { throw error("expected a value") }
        index += count
        return value
    }

    /// The number that begins here: where its text is.
    private mutating func number() throws(JSONSyntaxError) -> Range<Int> {
        let start = index
        func digits(_ reader: inout JSONReader) -> Int {
            let from = reader.index
            while reader.index < reader.bytes.count, (0x30...0x39).contains(reader.bytes[reader.index]) { reader.index += 1 }
            return reader.index - from
        }
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        let integerStart = index
        guard digits(&self) > 0 else { throw error("expected a digit") }
        if bytes[integerStart] == UInt8(ascii: "0") && index - integerStart > 1 {
            throw error("a number cannot start with 0", at: integerStart)
        }
        if index < bytes.count && bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits(&self) > 0 else { throw error("expected a digit after '.'") }
        }
        if index < bytes.count && (bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E")) {
            index += 1
            if index < bytes.count && (bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-")) { index += 1 }
            guard digits(&self) > 0 else { throw error("expected a digit in the exponent") }
        }
        if index - start > Self.maximumNumberLength {
            throw error("a number of more than \(Self.maximumNumberLength) characters", at: start)
        }
        return start..<index
    }

    private mutating func string() throws(JSONSyntaxError) -> String {
        index += 1
        // Most strings have no escape: they are their bytes, validated once.
        var text = ""
        var run = index
        // Whether the run so far has a byte past ASCII: an ASCII run is
        // valid as it is, and decoding it costs a third of validating it.
        var wide: UInt8 = 0
        func flush(_ reader: JSONReader, _ text: inout String, upTo end: Int) throws(JSONSyntaxError) {
            guard run < end else { return }
            let part = reader.bytes.withUnsafeBufferPointer {
                let bytes = UnsafeBufferPointer(rebasing: $0[run..<end])
                return wide < 0x80 ? String(decoding: bytes, as: UTF8.self) : String(validating: bytes, as: UTF8.self)
            }
            guard let part else { throw reader.error("invalid UTF-8 in a string", at: run) }
            text += part
        }
        while true {
            // To the next quote, backslash or control byte, in one sweep.
            (index, wide) = bytes.withUnsafeBufferPointer { [index, wide] buffer in
                var at = index
                var wide = wide
                while at < buffer.count {
                    let byte = buffer[at]
                    if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 { break }
                    wide |= byte
                    at += 1
                }
                return (at, wide)
            }
            guard index < bytes.count else { throw error("unterminated string") }
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                try flush(self, &text, upTo: index)
                index += 1
                return text
            }
            if byte < 0x20 { throw error("a control character must be escaped in a string") }
            try flush(self, &text, upTo: index)
            index += 1
            guard index < bytes.count else { throw error("unterminated string") }
            let escape = bytes[index]
            index += 1
            switch escape {
            case UInt8(ascii: "\""): text.append("\"")
            case UInt8(ascii: "\\"): text.append("\\")
            case UInt8(ascii: "/"): text.append("/")
            case UInt8(ascii: "b"): text.append("\u{08}")
            case UInt8(ascii: "f"): text.append("\u{0C}")
            case UInt8(ascii: "n"): text.append("\n")
            case UInt8(ascii: "r"): text.append("\r")
            case UInt8(ascii: "t"): text.append("\t")
            case UInt8(ascii: "u"):
                var code = try hex4()
                if (0xD800...0xDBFF).contains(code) {
                    guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                        throw error("a high surrogate must be followed by a low surrogate")
                    }
                    index += 2
                    let low = try hex4()
                    guard (0xDC00...0xDFFF).contains(low) else { throw error("invalid low surrogate") }
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                }
                guard let scalar = Unicode.Scalar(code) else { throw error("invalid Unicode escape") }
                text.unicodeScalars.append(scalar)
            default:
                throw error("invalid escape '\\\(Character(Unicode.Scalar(escape)))'", at: index - 2)
            }
            run = index
        }
    }

    private mutating func hex4() throws(JSONSyntaxError) -> UInt32 {
        guard bytes.count - index >= 4 else { throw error("expected four hex digits") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = Self.hexValue(bytes[index]) else { throw error("expected four hex digits") }
            value = value << 4 | digit
            index += 1
        }
        return value
    }

    private static func hexValue(_ byte: UInt8) -> UInt32? {
        switch byte {
        case 0x30...0x39: UInt32(byte - 0x30)
        case 0x41...0x46: UInt32(byte - 0x41 + 10)
        case 0x61...0x66: UInt32(byte - 0x61 + 10)
        default: nil
        }
    }
}
