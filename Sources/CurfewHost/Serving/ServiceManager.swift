import Curfew
import Glibc

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
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        self.socketPath = path
        self.descriptor = descriptor
        self.address = address
    }

    deinit {
        close(descriptor)
    }

    /// `sockaddr_un` bytes for `path`: the path and its terminating zero, or
    /// for `@name` a zero and the name (the abstract namespace, no terminator).
    static func address(_ path: String) -> [UInt8]? {
        let bytes = Array(path.utf8)
        guard let first = bytes.first, first == UInt8(ascii: "/") || first == UInt8(ascii: "@"), !bytes.contains(0) else { return nil }
        let capacity = MemoryLayout.size(ofValue: sockaddr_un().sun_path)
        let name: [UInt8] = first == UInt8(ascii: "@") ? [0] + bytes.dropFirst() : bytes + [0]
        guard name.count <= capacity else { return nil }
        var address = [UInt8](repeating: 0, count: MemoryLayout<sa_family_t>.size)
        withUnsafeBytes(of: sa_family_t(AF_UNIX)) { address.replaceSubrange(0..<$0.count, with: $0) }
        return address + name
    }

    /// Sends one message of `fields` (`READY=1`, `STATUS=…`); false when it
    /// could not be sent (no one listens: the service goes on regardless).
    @discardableResult
    public func send(_ fields: [String]) -> Bool {
        // One field a line: a newline inside a value would start a field of its own.
        let text = fields.map { $0.split(separator: "\n", omittingEmptySubsequences: false).joined(separator: " ") }.joined(separator: "\n")
        let bytes = Array(text.utf8)
        return address.withUnsafeBytes { address in
            bytes.withUnsafeBytes { body in
                sendto(
                    descriptor, body.baseAddress, body.count, Int32(MSG_NOSIGNAL),
                    address.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(address.count)) == body.count
            }
        }
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
    public static func watchdogTimeout(environment: [String: String], pid: Int32 = getpid()) -> Duration? {
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
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return false }
        return UInt64(status.st_dev) == device && UInt64(status.st_ino) == inode
    }
}
