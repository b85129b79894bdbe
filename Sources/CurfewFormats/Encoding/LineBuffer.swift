/// Splits a byte stream into lines, in time linear in the stream's length.
///
/// A line longer than `maximumLength` bytes comes out in pieces of that
/// length, or, for a stream of messages that must arrive whole, is dropped
/// and counted in ``droppedLines``: memory stays bounded whatever the
/// stream holds, and no piece of a message is ever read as a message.
package struct LineBuffer {
    private var pending: [UInt8] = []
    package let maximumLength: Int
    package let dropsOverlongLines: Bool
    /// Inside a line being dropped: its bytes are skipped up to its newline.
    private var dropping = false
    /// How many overlong lines were dropped so far.
    package private(set) var droppedLines = 0

    package init(maximumLength: Int = .max, dropsOverlongLines: Bool = false) {
        precondition(maximumLength > 0, "a line holds at least one byte")
        self.maximumLength = maximumLength
        self.dropsOverlongLines = dropsOverlongLines
    }

    /// Appends bytes and returns the whole lines they complete.
    package mutating func append(_ bytes: UnsafeRawBufferPointer) -> [String] {
        var lines: [String] = []
        var start = 0
        while let newline = bytes[start...].firstIndex(of: 0x0A) {
            if dropping {
                dropping = false
            } else if pending.isEmpty && newline - start <= maximumLength {
                lines.append(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<newline]), as: UTF8.self))
            } else {
                pending.append(contentsOf: bytes[start..<newline])
                take(&lines, all: true)
            }
            start = newline + 1
        }
        if !dropping {
            pending.append(contentsOf: bytes[start...])
            take(&lines, all: false)
        }
        return lines
    }

    /// Moves what `pending` holds into `lines`: a complete line (`all`), or
    /// the whole pieces of an overlong one; an overlong message is dropped.
    private mutating func take(_ lines: inout [String], all: Bool) {
        if pending.count > maximumLength && dropsOverlongLines {
            pending.removeAll()
            droppedLines += 1
            dropping = !all  // the rest of it, up to its newline, is skipped
            return
        }
        var offset = 0
        while pending.count - offset > maximumLength {
            lines.append(String(decoding: pending[offset..<offset + maximumLength], as: UTF8.self))
            offset += maximumLength
        }
        if all {
            lines.append(String(decoding: pending[offset...], as: UTF8.self))
            pending.removeAll(keepingCapacity: true)
        } else if offset > 0 {
            pending.removeFirst(offset)
        }
    }

    /// Whether no partial line is waiting for its newline.
    package var isEmpty: Bool { pending.isEmpty }

    /// What is left without a newline, as a last line.
    package mutating func flush() -> String? {
        defer { pending.removeAll() }
        return pending.isEmpty ? nil : String(decoding: pending, as: UTF8.self)
    }
}
