import Curfew

/// What systemd tells a service through its environment, and the notify
/// protocol back to it (`sd_notify`): datagrams of newline-separated
/// `KEY=VALUE` lines to `$NOTIFY_SOCKET`, a path or (`@…`) an abstract name.
///
/// Everything here is read from the environment, which a service manager
/// wrote but a user can set by hand: every value is checked, and a bad one
/// turns the feature off rather than trapping.
public final class ServiceNotifier: Sendable {
    /// The socket the messages go to, as `$NOTIFY_SOCKET` names it.
    public let socketPath: String
    private let descriptor: Int32
    // The address, bytes and length, built once.
    private let address: [UInt8]

    /// A notifier for `$NOTIFY_SOCKET` in `environment`, or `nil` when it is
    /// unset, empty, not absolute nor abstract, or too long for an address.
    public init?(environment: [String: String]) {
        guard let path = environment["NOTIFY_SOCKET"], let address = Self.address(path) else { return nil }
        guard let descriptor = try? Syscalls.datagramSocket() else { return nil }
        self.socketPath = path
        self.descriptor = descriptor
        self.address = address
    }

    deinit {
        Syscalls.close(descriptor)
    }

    /// `sockaddr_un` bytes for `path`: the path and its terminating zero, or
    /// for `@name` a zero and the name (the abstract namespace, no terminator).
    static func address(_ path: String) -> [UInt8]? {
        Syscalls.localAddress(path)
    }

    /// Sends one message of `fields` (`READY=1`, `STATUS=…`); false when it
    /// could not be sent (no one listens: the service goes on regardless).
    @discardableResult
    public func send(_ fields: [String]) -> Bool {
        // One field a line: a newline inside a value would start a field of its own.
        let text = fields.map { $0.split(separator: "\n", omittingEmptySubsequences: false).joined(separator: " ") }.joined(separator: "\n")
        return Syscalls.send(descriptor, Array(text.utf8), toAddress: address)
    }

    /// This process's environment, by name.
    public static func processEnvironment() -> [String: String] {
        var environment: [String: String] = [:]
        for entry in Syscalls.environment() {
            guard let equals = entry.firstIndex(of: "=") else { continue }
            environment[String(entry[..<equals])] = String(entry[entry.index(after: equals)...])
        }
        return environment
    }

    /// The longest watchdog timeout taken from `$WATCHDOG_USEC`: a day.
    static let maximumWatchdog: Duration = .seconds(86_400)

    /// How often systemd wants a `WATCHDOG=1`: `$WATCHDOG_USEC`, when it is a
    /// whole number of microseconds from 1 ms to a day and `$WATCHDOG_PID`
    /// is unset or this process; `nil` otherwise.
    public static func watchdogTimeout(environment: [String: String], pid: Int32? = nil) -> Duration? {
        let pid = pid ?? Syscalls.processID
        guard let text = environment["WATCHDOG_USEC"], !text.isEmpty, text.utf8.count <= 12,
            text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let microseconds = Int64(text)
        else { return nil }
        let timeout = Duration.microseconds(microseconds)
        guard timeout >= .milliseconds(1), timeout <= maximumWatchdog else { return nil }
        if let owner = environment["WATCHDOG_PID"], !owner.isEmpty, owner != String(pid) { return nil }
        return timeout
    }

    /// Whether `descriptor` is the stream `$JOURNAL_STREAM` names
    /// (`DEVICE:INODE`): systemd connected it to the journal, which reads a
    /// `<N>` syslog priority at the start of each line.
    public static func isJournal(_ descriptor: Int32, environment: [String: String]) -> Bool {
        guard let text = environment["JOURNAL_STREAM"] else { return false }
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        guard let status = try? Syscalls.status(of: descriptor) else { return false }
        return status.device == device && status.inode == inode
    }
}
