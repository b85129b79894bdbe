import CurfewFormats

/// The messages between the host and a worker: JSON Lines over a socket,
/// ``HostMessage`` one way and ``WorkerMessage`` the other.
enum WorkerProtocol {
    /// The hidden first argument that starts `curfew` as a worker.
    public static let workerArgument = "__worker"
    /// The longest message either side sends, newline excluded: 16 MiB and
    /// some room for the fields around a log message's text. A worker cuts
    /// a longer log message (see ``truncatedLogMessage(_:)``); the host drops a
    /// longer line whole, with a note, and never reads a piece of it.
    static let maximumMessageBytes = 16 * 1024 * 1024 + 64 * 1024
    /// The longest log message text a worker sends whole.
    static let maximumLogMessageBytes = 16 * 1024 * 1024

    /// `text`, cut at a character boundary so that it takes at most
    /// ``maximumLogMessageBytes`` once escaped as a JSON string (a quote or
    /// a line break takes two bytes there, another control character six),
    /// with a note of how long it was. One pass over its bytes.
    static func truncatedLogMessage(_ text: String) -> String {
        let utf8 = text.utf8
        func encodedSize(_ byte: UInt8) -> Int {
            switch byte {
            case 0x22, 0x5C, 0x0A, 0x0D, 0x09: 2
            case 0x00..<0x20, 0x7F: 6
            default: 1
            }
        }
        guard utf8.count * 6 > maximumLogMessageBytes else { return text }  // fits however it escapes
        let note = " … [truncated: \(utf8.count) bytes, more than the 16 MiB a message from a worker may hold]"
        let room = maximumLogMessageBytes - note.utf8.count
        var size = 0
        var cut: String.UTF8View.Index?
        for index in utf8.indices {
            size += encodedSize(utf8[index])
            if cut == nil && size > room { cut = index }
            if size > maximumLogMessageBytes { break }
        }
        guard size > maximumLogMessageBytes, var end = cut else { return text }
        // Back to the start of a character: never inside a UTF-8 sequence.
        while end > utf8.startIndex && utf8[end] & 0xC0 == 0x80 { end = utf8.index(before: end) }
        return String(decoding: utf8[..<end], as: UTF8.self) + note
    }

    /// The worker's end of the socket.
    static let channelDescriptor: Int32 = 3

    /// The environment a helper (a worker, a scanner, the fork server)
    /// starts with: this process's, with the Swift backtracer off: it can
    /// hang a crashed helper and hold its pipes open, and a plugin's crash is
    /// an outcome, not a report to print. With this host's mark
    /// (``ChildProcesses/mark``), which what they start inherits: what a
    /// killed host left is found by the next.
    static func helperEnvironment() -> [String] {
        let mark = ChildProcesses.mark.map { ["\(ChildProcesses.markVariable)=\($0)"] } ?? []
        let ours = ["SWIFT_BACKTRACE=", ChildProcesses.markVariable + "=", WorkerSandbox.aheadVariable + "="]
        let inherited = Syscalls.environment().filter { variable in !ours.contains { variable.hasPrefix($0) } }
        return inherited + ["SWIFT_BACKTRACE=enable=no"] + mark
    }

    /// Writes all of `line` and a newline; false when the other side is gone.
    @discardableResult
    static func send(_ line: String, to descriptor: Int32) -> Bool {
        send(bytes: Array((line + "\n").utf8), to: descriptor)
    }

    /// Writes all of `bytes` on a socket; false when the other side is gone.
    @discardableResult
    static func send(bytes: [UInt8], to descriptor: Int32) -> Bool {
        Syscalls.sendAll(descriptor, bytes) == bytes.count
    }
}

// The channel's words for the host's types: the same raw values, checked
// at compile time by the switches, so neither side can drift.
extension AppState {
    init(_ name: HostMessage.AppStateName) {
        switch name {
        case .active: self = .active
        case .inactive: self = .inactive
        case .background: self = .background
        }
    }

    var name: HostMessage.AppStateName {
        switch self {
        case .active: .active
        case .inactive: .inactive
        case .background: .background
        }
    }
}

extension AppEvent {
    init(_ name: HostMessage.AppEventName) {
        switch name {
        case .launch: self = .launch
        case .willEnterForeground: self = .willEnterForeground
        case .didBecomeActive: self = .didBecomeActive
        case .willResignActive: self = .willResignActive
        case .didEnterBackground: self = .didEnterBackground
        case .willTerminate: self = .willTerminate
        }
    }

    var name: HostMessage.AppEventName {
        switch self {
        case .launch: .launch
        case .willEnterForeground: .willEnterForeground
        case .didBecomeActive: .didBecomeActive
        case .willResignActive: .willResignActive
        case .didEnterBackground: .didEnterBackground
        case .willTerminate: .willTerminate
        }
    }
}

extension ExpirationReason {
    init(_ name: HostMessage.ExpireReason) {
        switch name {
        case .timeout: self = .timeout
        case .shutdown: self = .shutdown
        case .cancelled: self = .cancelled
        case .stalled: self = .stalled
        case .conditions: self = .conditions
        }
    }

    var name: HostMessage.ExpireReason {
        switch self {
        case .timeout: .timeout
        case .shutdown: .shutdown
        case .cancelled: .cancelled
        case .stalled: .stalled
        case .conditions: .conditions
        }
    }
}
