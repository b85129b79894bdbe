/// Text that came from outside the host (a plugin's log, a reason it gave,
/// a file name), made safe to show on a terminal: nothing in it can move the
/// cursor, colour the screen, reorder what follows, or start a line of its
/// own that reads like one of the host's.
enum Untrusted {
    /// `text` on one line: line breaks, every other control character and
    /// the bidirectional overrides escaped (`\n`, `\t`, `\x1B`, `\u{202E}`).
    static func line(_ text: String) -> String {
        guard needsEscaping(text) else { return text }
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars { append(scalar, to: &out) }
        return String(out)
    }

    /// `text` split at its line breaks (`\n`, or `\r\n`), each line escaped
    /// as by ``line(_:)``. An empty text is one empty line.
    static func lines(_ text: String) -> [String] {
        guard needsEscaping(text) else { return [text] }
        var lines: [String] = []
        var out = String.UnicodeScalarView()
        let scalars = Array(text.unicodeScalars)
        var index = 0
        while index < scalars.count {
            let scalar = scalars[index]
            if scalar == "\n" || (scalar == "\r" && index + 1 < scalars.count && scalars[index + 1] == "\n") {
                lines.append(String(out))
                out = String.UnicodeScalarView()
                index += scalar == "\r" ? 2 : 1
                continue
            }
            append(scalar, to: &out)
            index += 1
        }
        lines.append(String(out))
        return lines
    }

    /// Whether any byte may start a sequence that needs escaping: a C0
    /// control, DEL, a C1 control (UTF-8 lead 0xC2) or a bidi override
    /// (lead 0xE2). One pass over the bytes; most text has none.
    private static func needsEscaping(_ text: String) -> Bool {
        text.utf8.contains { $0 < 0x20 || $0 == 0x7F || $0 == 0xC2 || $0 == 0xE2 }
    }

    private static func append(_ scalar: Unicode.Scalar, to out: inout String.UnicodeScalarView) {
        let value = scalar.value
        let escaped: String
        switch value {
        case 0x0A: escaped = "\\n"
        case 0x0D: escaped = "\\r"
        case 0x09: escaped = "\\t"
        case 0x00..<0x20, 0x7F..<0xA0:
            escaped = "\\x" + hex(value, digits: 2)
        case 0x202A...0x202E, 0x2066...0x2069:
            escaped = "\\u{" + hex(value, digits: 4) + "}"
        default:
            out.append(scalar)
            return
        }
        out.append(contentsOf: escaped.unicodeScalars)
    }

    private static func hex(_ value: UInt32, digits: Int) -> String {
        let text = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }
}
