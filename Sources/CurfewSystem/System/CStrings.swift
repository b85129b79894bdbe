import Glibc

/// C strings the host hands to plugins and libffi: allocated with `malloc`,
/// so C code may keep or free them as C expects.
package enum CStrings {
    /// A `malloc`ed copy of `text`, NUL-terminated. The caller frees it.
    /// Traps when memory runs out, as Swift's own allocations do.
    package static func copy(_ text: String) -> UnsafeMutablePointer<CChar> {
        guard let copy = strdup(text) else { fatalError("out of memory copying a \(text.utf8.count)-byte string") }
        return copy
    }

    package static func free(_ pointer: UnsafeMutablePointer<CChar>?) {
        Glibc.free(pointer)
    }

    /// Frees memory C code allocated with `malloc` and handed over.
    package static func free(_ pointer: UnsafeMutableRawPointer?) {
        Glibc.free(pointer)
    }

    /// The string at `pointer` when it ends within `limit` bytes and is
    /// UTF-8 (plugin memory: never read past the limit), else `nil`.
    package static func bounded(_ pointer: UnsafePointer<CChar>, limit: Int) -> String? {
        let count = length(pointer, limit: limit + 1)
        guard count <= limit else { return nil }
        let text = String(decoding: UnsafeRawBufferPointer(start: pointer, count: count), as: UTF8.self)
        // A byte that is not UTF-8 reads as U+FFFD, three bytes: refused,
        // not grown past the limit.
        return text.utf8.count == count ? text : nil
    }

    /// The length of the C string at `pointer`, reading at most `limit` bytes.
    package static func length(_ pointer: UnsafePointer<CChar>, limit: Int) -> Int {
        strnlen(pointer, limit)
    }
}
