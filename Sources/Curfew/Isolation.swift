import Glibc

/// Where a job's code runs.
public enum Isolation: String, Sendable, CaseIterable {
    /// In the host process: fastest; a crashing plugin takes the host down.
    case none
    /// In a worker process per plugin file, shared by that plugin's jobs: a
    /// crash takes down that plugin's running jobs, no others.
    case plugin
    /// In a worker process of its own: a crash, a hang or a limit takes down
    /// only that job, and the host kills it at its hard deadline.
    case job
}

/// Limits a worker process applies to itself before it loads a plugin
/// (`setrlimit`), together with `PR_SET_NO_NEW_PRIVS`.
public struct ResourceLimits: Sendable, Equatable {
    /// Address space, in bytes (`RLIMIT_AS`).
    public var memoryBytes: UInt64?
    /// CPU time, in seconds (`RLIMIT_CPU`): SIGXCPU at the limit.
    public var cpuSeconds: UInt64?
    /// Open file descriptors (`RLIMIT_NOFILE`).
    public var openFiles: UInt64?

    public init(memoryBytes: UInt64? = nil, cpuSeconds: UInt64? = nil, openFiles: UInt64? = nil) {
        self.memoryBytes = memoryBytes
        self.cpuSeconds = cpuSeconds
        self.openFiles = openFiles
    }

    /// Which limit a worker killed by `signal` most likely hit, in words.
    func explain(signal: Int32) -> String? {
        // SIGXCPU at the soft CPU limit, SIGKILL at the hard one a second later.
        if let cpuSeconds, signal == SIGXCPU || signal == SIGKILL { return "it used up its CPU time limit (--cpu-time \(cpuSeconds)s)" }
        if let memoryBytes, [SIGSEGV, SIGABRT, SIGBUS, SIGKILL].contains(signal) {
            return "it may have hit its memory limit (--memory \(memoryBytes / (1024 * 1024))MiB)"
        }
        return nil
    }
}

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

extension JSONValue {
    var stringValue: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    var numberValue: Double? {
        if case .number(let text) = self { return Double(text) }
        return nil
    }

    /// An integer, exactly (a `Double` loses precision past 2^53).
    var integerValue: Int64? {
        if case .number(let text) = self { return Int64(text) }
        return nil
    }
}
