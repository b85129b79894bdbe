import CurfewJSON
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
}
