/// The 64-bit FNV-1a hash: cheap, stable across runs and machines, not
/// cryptographic. Names cache shards and tells plugin builds apart.
package struct FNV1a {
    package private(set) var value: UInt64 = 0xcbf2_9ce4_8422_2325

    package init() {}

    package mutating func add(_ bytes: some Sequence<UInt8>) {
        for byte in bytes {
            value ^= UInt64(byte)
            value &*= 0x0000_0100_0000_01b3
        }
    }

    /// Adds `bytes` in a loop of its own: the generic `add(_:)` is not
    /// specialized across modules, and took an iterator's calls per byte.
    package mutating func add(_ bytes: UnsafeRawBufferPointer) {
        var value = self.value
        for byte in bytes {
            value ^= UInt64(byte)
            value &*= 0x0000_0100_0000_01b3
        }
        self.value = value
    }

    /// The value in 16 hex digits.
    package var hex: String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}
