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

/// Splits a byte stream into lines.
struct LineBuffer {
    private var pending: [UInt8] = []

    /// Appends bytes and returns the whole lines they complete.
    mutating func append(_ bytes: UnsafeRawBufferPointer) -> [String] {
        pending.append(contentsOf: bytes)
        var lines: [String] = []
        while let newline = pending.firstIndex(of: 0x0A) {
            lines.append(String(decoding: pending[..<newline], as: UTF8.self))
            pending.removeSubrange(...newline)
        }
        return lines
    }

    /// What is left without a newline, as a last line.
    mutating func flush() -> String? {
        defer { pending.removeAll() }
        return pending.isEmpty ? nil : String(decoding: pending, as: UTF8.self)
    }
}
