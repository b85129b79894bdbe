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
        if let encoded = bytes.withContiguousStorageIfAvailable({ encode(UnsafeRawBufferPointer($0)) }) { return encoded }
        return Array(bytes).withUnsafeBytes { encode($0) }
    }

    /// `bytes` in base64, written straight into the string's storage: a
    /// checkpoint of a megabyte crosses a worker's channel this way.
    package static func encode(_ bytes: UnsafeRawBufferPointer) -> String {
        let length = (bytes.count + 2) / 3 * 4
        return String(unsafeUninitializedCapacity: length) { out in
            alphabet.withUnsafeBufferPointer { alphabet in
                var read = 0
                var written = 0
                while read + 3 <= bytes.count {
                    let group = UInt32(bytes[read]) << 16 | UInt32(bytes[read + 1]) << 8 | UInt32(bytes[read + 2])
                    out[written] = alphabet[Int(group >> 18 & 63)]
                    out[written + 1] = alphabet[Int(group >> 12 & 63)]
                    out[written + 2] = alphabet[Int(group >> 6 & 63)]
                    out[written + 3] = alphabet[Int(group & 63)]
                    read += 3
                    written += 4
                }
                let left = bytes.count - read
                if left > 0 {
                    let group = UInt32(bytes[read]) << 16 | (left == 2 ? UInt32(bytes[read + 1]) << 8 : 0)
                    out[written] = alphabet[Int(group >> 18 & 63)]
                    out[written + 1] = alphabet[Int(group >> 12 & 63)]
                    out[written + 2] = left == 2 ? alphabet[Int(group >> 6 & 63)] : UInt8(ascii: "=")
                    out[written + 3] = UInt8(ascii: "=")
                }
            }
            return length
        }
    }

    /// The bytes `text` encodes, or `nil` when it is not canonical base64
    /// (a length not a multiple of 4, a byte outside the alphabet, padding
    /// anywhere but the end, or bits set after the last byte). Linear.
    package static func decode(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { decode(UnsafeRawBufferPointer($0)) }
    }

    /// The bytes base64 `text` encodes, as ``decode(_:)`` (a string's) reads them.
    package static func decode(_ text: UnsafeRawBufferPointer) -> [UInt8]? {
        guard text.count % 4 == 0 else { return nil }
        var count = text.count
        var padding = 0
        while padding < 2, count > 0, text[count - 1] == UInt8(ascii: "=") {
            count -= 1
            padding += 1
        }
        let whole = count / 4
        let tail = count % 4
        guard tail != 1 else { return nil }
        let length = whole * 3 + (tail == 0 ? 0 : tail - 1)
        var valid = true
        let out = [UInt8](unsafeUninitializedCapacity: length) { out, initialized in
            values.withUnsafeBufferPointer { values in
                var read = 0
                var written = 0
                var bad: UInt8 = 0
                for _ in 0..<whole {
                    let a = values[Int(text[read])], b = values[Int(text[read + 1])]
                    let c = values[Int(text[read + 2])], d = values[Int(text[read + 3])]
                    bad |= a | b | c | d
                    let group = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    out[written] = UInt8(truncatingIfNeeded: group >> 16)
                    out[written + 1] = UInt8(truncatingIfNeeded: group >> 8)
                    out[written + 2] = UInt8(truncatingIfNeeded: group)
                    read += 4
                    written += 3
                }
                // 0xFF marks a byte outside the alphabet: its top bits show in `bad`.
                if bad & 0xC0 != 0 { valid = false }
                if tail > 0 {
                    let a = values[Int(text[read])], b = values[Int(text[read + 1])]
                    let c = tail == 3 ? values[Int(text[read + 2])] : 0
                    if (a | b | c) & 0xC0 != 0 { valid = false }
                    let group = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6
                    out[written] = UInt8(truncatingIfNeeded: group >> 16)
                    // Bits past the last byte must be zero: canonical only.
                    if tail == 2 && group & 0xFFFF != 0 { valid = false }
                    if tail == 3 {
                        out[written + 1] = UInt8(truncatingIfNeeded: group >> 8)
                        if group & 0xFF != 0 { valid = false }
                    }
                }
            }
            initialized = length
        }
        return valid ? out : nil
    }
}
