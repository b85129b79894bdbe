import CurfewFormats
import Foundation
import Glibc
import Testing

@Suite struct JSONReaderTests {
    func parse(_ text: String) throws(JSONSyntaxError) -> JSONValue {
        try JSONReader.parse(Array(text.utf8))
    }

    @Test func values() throws {
        #expect(try parse(#"{"a": [1, -2.5e3, true, false, null, "x\n\u00e9\ud83d\ude00"]}"#)
            == .object([("a", .array([.number("1"), .number("-2.5e3"), .bool(true), .bool(false), .null, .string("x\né😀")]))]))
        #expect(try parse("  18446744073709551615 ") == .number("18446744073709551615"))
    }

    @Test(arguments: [
        ("", 1, 1, "unexpected end of the text: expected a value"),
        ("{\"a\": 1,}", 1, 9, "expected a quoted key"),
        ("[1 2]", 1, 4, "expected ',' or ']'"),
        ("{\"a\": 01}", 1, 7, "a number cannot start with 0"),
        ("\"tab\there\"", 1, 5, "a control character must be escaped in a string"),
        ("{\"a\": 1, \"a\": 2}", 1, 10, "duplicate key \"a\""),
        ("[1]\n  x", 2, 3, "unexpected text after the JSON value"),
        ("\"é\\q\"", 1, 3, "invalid escape '\\q'"),
    ])
    func errors(text: String, line: Int, column: Int, message: String) {
        #expect(throws: JSONSyntaxError(line: line, column: column, message: message)) { try parse(text) }
    }

    /// A value at a time, a text reads as it does whole: the same values
    /// (here rebuilt into a tree, numbers as `Double`s), the same errors.
    @Test(arguments: [
        #"{"a": [1, -2.5e3, true, false, null, "x\n\u00e9\ud83d\ude00"], "b": {}, "c": [], "d": {"e": [[0]]}}"#,
        "  18446744073709551615 ", "[]", "\"only\"", "null",
        "", "{\"a\": 1,}", "[1 2]", "{\"a\": 01}", "\"tab\there\"", "{\"a\": 1, \"a\": 2}", "[1]\n  x", "\"é\\q\"", "tru", "[nul]", "{\"a\" 1}",
    ])
    func aValueAtATimeReadsAsTheWhole(text: String) {
        func rebuild(_ reader: inout JSONReader) throws(JSONSyntaxError) -> JSONValue {
            switch reader.nextKind() {
            case .object:
                var members: [(key: String, value: JSONValue)] = []
                try reader.readObject { reader, key throws(JSONSyntaxError) in members.append((key, try rebuild(&reader))) }
                return .object(members)
            case .array:
                var elements: [JSONValue] = []
                try reader.readArray { reader throws(JSONSyntaxError) in elements.append(try rebuild(&reader)) }
                return .array(elements)
            case .string: return .string(try reader.readString())
            case .number: return .number(String(try reader.readDouble()!))
            case .bool: return .bool(try reader.readBool())
            case .null, nil:
                try reader.skipValue()
                return .null
            }
        }
        func doubles(_ value: JSONValue) -> JSONValue {
            switch value {
            case .object(let members): .object(members.map { ($0.key, doubles($0.value)) })
            case .array(let elements): .array(elements.map(doubles))
            case .number: .number(String(value.numberValue!))
            default: value
            }
        }
        let bytes = Array(text.utf8)
        let whole = Result { () throws(JSONSyntaxError) in doubles(try JSONReader.parse(bytes)) }
        var reader = JSONReader(bytes)
        let piecewise = Result { () throws(JSONSyntaxError) -> JSONValue in
            let value = try rebuild(&reader)
            try reader.finish()
            return value
        }
        #expect(piecewise == whole)
        var skipping = JSONReader(bytes)
        let skipped = Result { () throws(JSONSyntaxError) in
            try skipping.skipValue()
            try skipping.finish()
        }
        #expect(skipped.map { true } == whole.map { _ in true })
    }

    /// A member or element the caller leaves unread is skipped, and checked
    /// all the same; a value of another kind than asked is an error.
    @Test func whatIsNotReadIsSkipped() throws {
        var reader = JSONReader(Array(#"{"a": 1, "b": [1, {"c": [2]}], "d": "x", "e": [true, "y"]}"#.utf8))
        var read: [String] = []
        try reader.readObject { reader, key throws(JSONSyntaxError) in
            if key == "d" { read.append(try reader.readString()) }
            if key == "e" { try reader.readArray { reader throws(JSONSyntaxError) in if reader.nextKind() == .string { read.append(try reader.readString()) } } }
        }
        try reader.finish()
        #expect(read == ["x", "y"])
        var broken = JSONReader(Array(#"{"a": [1, 2 3], "d": "x"}"#.utf8))
        #expect(throws: JSONSyntaxError(line: 1, column: 13, message: "expected ',' or ']'")) {
            try broken.readObject { reader, key throws(JSONSyntaxError) in if key == "d" { _ = try reader.readString() } }
        }
        var number = JSONReader(Array("[1]".utf8))
        #expect(throws: JSONSyntaxError(line: 1, column: 2, message: "expected string, not number")) {
            try number.readArray { reader throws(JSONSyntaxError) in _ = try reader.readString() }
        }
    }

    /// An integer read a value at a time is exactly what the tree's
    /// `integerValue` gives: `nil` for a fraction, an exponent or a number
    /// past `Int64`.
    @Test(arguments: [
        "0", "-0", "7", "-7", "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
        "1.0", "1e3", "-1E-3", "12345678901234567890123", "1796159659799410255",
    ])
    func integersReadExactly(text: String) throws {
        var reader = JSONReader(Array(text.utf8))
        #expect(try reader.readInteger() == JSONValue.number(text).integerValue)
    }

    /// An object of `count` distinct keys, as one line.
    func object(keys count: Int) -> [UInt8] {
        Array(("{" + (0..<count).map { "\"k\($0)\":0" }.joined(separator: ",") + "}").utf8)
    }

    /// On `main` before the fix, the duplicate-key check made this take hours.
    @Test func aManyKeyedObjectIsRejectedInLinearTime() {
        #expect(throws: JSONSyntaxError(line: 1, column: 98_892, message: "more than 10000 keys in one object")) {
            try JSONReader.parse(object(keys: 200_000))
        }
        #expect((try? JSONReader.parse(object(keys: JSONReader.maximumMembers))) != nil)
    }

    /// A string's bytes past ASCII are valid UTF-8 or the text is refused,
    /// in a run of its own or after an escape; an ASCII run is taken as it is.
    @Test func aStringIsValidUTF8() throws {
        for bytes: [UInt8] in [[0x22, 0xFF, 0x22], [0x22, 0x61, 0xC3, 0x22], [0x22, 0x61, 0x5C, 0x6E, 0xED, 0xA0, 0x80, 0x22]] {
            #expect(throws: JSONSyntaxError.self, "\(bytes)") { try JSONReader.parse(bytes) }
        }
        #expect(try JSONReader.parse(Array("\"plain\"".utf8)) == .string("plain"))
        #expect(try JSONReader.parse(Array("\"caf\u{E9} \\n \u{65E5}\"".utf8)) == .string("caf\u{E9} \n \u{65E5}"))
    }

    /// A duplicate is found wherever the two keys fall: both among an
    /// object's first few members (searched), one there and one after
    /// (the set is built from the first ones), or both after.
    @Test(arguments: [
        (3, 5), (JSONReader.fewMembers - 2, JSONReader.fewMembers - 1), (0, JSONReader.fewMembers),
        (JSONReader.fewMembers - 1, JSONReader.fewMembers), (2, 30), (20, 31),
    ])
    func aDuplicateKeyIsFoundAnywhere(first: Int, again: Int) {
        var keys = (0..<again).map { "k\($0)" }
        keys.append("k\(first)")
        let text = "{" + keys.map { "\"\($0)\":0" }.joined(separator: ",") + "}"
        #expect(throws: JSONSyntaxError.self) { try JSONReader.parse(Array(text.utf8)) }
        do {
            _ = try JSONReader.parse(Array(text.utf8))
        } catch {
            #expect(error.message == "duplicate key \"k\(first)\"")
        }
        keys.removeLast()
        #expect((try? JSONReader.parse(Array(("{" + keys.map { "\"\($0)\":0" }.joined(separator: ",") + "}").utf8))) != nil)
    }

    @Test func boundsOnValuesAndNumbers() {
        let many = Array(("[" + Array(repeating: "[0,0,0,0,0,0,0,0,0]", count: 100_001).joined(separator: ",") + "]").utf8)
        #expect(throws: JSONSyntaxError(line: 1, column: 1_999_999, message: "more than 1000000 values in one text")) {
            try JSONReader.parse(many)
        }
        let long = String(repeating: "1", count: 101)
        #expect(throws: JSONSyntaxError(line: 1, column: 2, message: "a number of more than 100 characters")) {
            try JSONReader.parse(Array("[\(long)]".utf8))
        }
        // A duplicate key is quoted in the message, cut to 64 characters.
        let key = String(repeating: "k", count: 1000)
        #expect(throws: JSONSyntaxError(line: 1, column: 1007, message: "duplicate key \"\(key.prefix(64))…\"")) {
            try JSONReader.parse(Array("{\"\(key)\":1,\"\(key)\":2}".utf8))
        }
    }
}
