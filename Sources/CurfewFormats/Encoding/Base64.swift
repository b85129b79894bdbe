/// Standard base64 (RFC 4648, with padding): how bytes cross a worker's
/// channel, which carries lines of JSON text.
package enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    /// Each byte's value in the alphabet, or 0xFF for a byte outside it.
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (value, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(value) }
        return table
    }()

    package static func encode(_ bytes: some Collection<UInt8>) -> String {
        var out = [UInt8]()
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var iterator = bytes.makeIterator()
        while let first = iterator.next() {
            let second = iterator.next()
            let third = iterator.next()
            let group = UInt32(first) << 16 | UInt32(second ?? 0) << 8 | UInt32(third ?? 0)
            out.append(alphabet[Int(group >> 18 & 63)])
            out.append(alphabet[Int(group >> 12 & 63)])
            out.append(second == nil ? UInt8(ascii: "=") : alphabet[Int(group >> 6 & 63)])
            out.append(third == nil ? UInt8(ascii: "=") : alphabet[Int(group & 63)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes `text` encodes, or `nil` when it is not canonical base64
    /// (a length not a multiple of 4, a byte outside the alphabet, padding
    /// anywhere but the end, or bits set after the last byte). Linear.
    package static func decode(_ text: String) -> [UInt8]? {
        var utf8 = Array(text.utf8)
        guard utf8.count % 4 == 0 else { return nil }
        var padding = 0
        while padding < 2, utf8.last == UInt8(ascii: "=") {
            utf8.removeLast()
            padding += 1
        }
        var out = [UInt8]()
        out.reserveCapacity(utf8.count / 4 * 3 + 2)
        var group: UInt32 = 0
        var filled = 0
        for byte in utf8 {
            let value = values[Int(byte)]
            guard value != 0xFF else { return nil }
            group = group << 6 | UInt32(value)
            filled += 1
            if filled == 4 {
                out.append(UInt8(group >> 16 & 0xFF))
                out.append(UInt8(group >> 8 & 0xFF))
                out.append(UInt8(group & 0xFF))
                group = 0
                filled = 0
            }
        }
        switch filled {
        case 0: break
        case 2:
            guard group & 0xF == 0 else { return nil }
            out.append(UInt8(group >> 4 & 0xFF))
        case 3:
            guard group & 0x3 == 0 else { return nil }
            out.append(UInt8(group >> 10 & 0xFF))
            out.append(UInt8(group >> 2 & 0xFF))
        default:
            return nil
        }
        return out
    }
}
