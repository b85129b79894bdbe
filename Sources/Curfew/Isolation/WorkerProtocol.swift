import Glibc

/// The messages between the host and a worker: JSON Lines over a socket.
/// Version 1; every message has a `type`, the first a `protocol` as well.
enum WorkerProtocol {
    static let version: Int64 = 1
    /// The hidden first argument that starts `curfew` as a worker.
    public static let workerArgument = "__worker"
    /// The worker's end of the socket.
    static let channelDescriptor: Int32 = 3

    static func signalName(_ number: Int32) -> String {
        let names: [Int32: String] = [
            SIGSEGV: "SIGSEGV", SIGABRT: "SIGABRT", SIGBUS: "SIGBUS", SIGFPE: "SIGFPE", SIGILL: "SIGILL",
            SIGKILL: "SIGKILL", SIGTERM: "SIGTERM", SIGXCPU: "SIGXCPU", SIGPIPE: "SIGPIPE", SIGTRAP: "SIGTRAP",
            SIGINT: "SIGINT", SIGSYS: "SIGSYS", SIGXFSZ: "SIGXFSZ",
        ]
        return names[number] ?? "signal \(number)"
    }

    /// Writes all of `line` and a newline; false when the other side is gone.
    @discardableResult
    static func send(_ line: String, to descriptor: Int32) -> Bool {
        let bytes = Array((line + "\n").utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if written < 0 {
                if errno == EINTR { continue }
                return false
            }
            offset += written
        }
        return true
    }
}

/// Splits a byte stream into lines, in time linear in the stream's length.
///
/// A line longer than `maximumLength` bytes comes out in pieces of that
/// length, so memory stays bounded whatever the stream holds.
struct LineBuffer {
    private var pending: [UInt8] = []
    let maximumLength: Int

    init(maximumLength: Int = .max) {
        precondition(maximumLength > 0, "a line holds at least one byte")
        self.maximumLength = maximumLength
    }

    /// Appends bytes and returns the whole lines they complete.
    mutating func append(_ bytes: UnsafeRawBufferPointer) -> [String] {
        var lines: [String] = []
        var start = 0
        while let newline = bytes[start...].firstIndex(of: 0x0A) {
            if pending.isEmpty {
                lines.append(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<newline]), as: UTF8.self))
            } else {
                pending.append(contentsOf: bytes[start..<newline])
                lines.append(String(decoding: pending, as: UTF8.self))
                pending.removeAll(keepingCapacity: true)
            }
            start = newline + 1
        }
        pending.append(contentsOf: bytes[start...])
        if pending.count >= maximumLength {
            var offset = 0
            while pending.count - offset >= maximumLength {
                lines.append(String(decoding: pending[offset..<offset + maximumLength], as: UTF8.self))
                offset += maximumLength
            }
            pending.removeFirst(offset)
        }
        return lines
    }

    /// Whether no partial line is waiting for its newline.
    var isEmpty: Bool { pending.isEmpty }

    /// What is left without a newline, as a last line.
    mutating func flush() -> String? {
        defer { pending.removeAll() }
        return pending.isEmpty ? nil : String(decoding: pending, as: UTF8.self)
    }
}
