import _CurfewShims

/// The one writer of a state store: an exclusive `flock` on `state.lock`
/// in the store's folder, held for the writer's life.
///
/// Two hosts on one store would run the same job from the same checkpoint
/// and overwrite each other's saves, so a second writer is refused, with
/// the holder named from what it wrote into the file. The kernel drops the
/// lock with the holder's last descriptor, so a holder killed with SIGKILL
/// frees the store; the descriptor is close-on-exec, so no program the host
/// starts keeps it, and closed in a child forked without exec (plugin code
/// in process may fork a helper that outlives the host).
public final class StoreLock: Sendable {
    /// Who holds a store: written into the lock file for the one refused.
    public struct Holder: Sendable, Equatable {
        public var pid: Int32
        public var command: String
        /// A serving host's control socket.
        public var socket: String?

        /// `pid` `nil`: this process.
        public init(pid: Int32? = nil, command: String, socket: String? = nil) {
            self.pid = pid ?? Syscalls.processID
            self.command = command
            self.socket = socket
        }

        /// This process, named by its arguments.
        public static func current(socket: String? = nil) -> Holder {
            Holder(command: CommandLine.arguments.joined(separator: " "), socket: socket)
        }

        /// One `key value` line each; a value ends at the first line break.
        var text: String {
            var lines = ["pid \(pid)", "command \(Self.oneLine(command))"]
            if let socket { lines.append("socket \(Self.oneLine(socket))") }
            return lines.joined(separator: "\n") + "\n"
        }

        /// What a lock file says, read as untrusted text: unknown keys and
        /// malformed lines are passed over; `nil` when it names no pid.
        static func parse(_ bytes: [UInt8]) -> Holder? {
            var holder = Holder(pid: 0, command: "")
            for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
                guard let space = line.firstIndex(of: " ") else { continue }
                let value = String(line[line.index(after: space)...])
                switch line[..<space] {
                case "pid": holder.pid = Int32(value) ?? 0
                case "command": holder.command = value
                case "socket": holder.socket = value
                default: continue
                }
            }
            return holder.pid > 0 ? holder : nil
        }

        private static func oneLine(_ text: String) -> String {
            String(text.prefix(maximumField).map { $0 == "\n" || $0 == "\r" ? " " : $0 })
        }
    }

    /// The lock file's name in the store's folder.
    public static let fileName = "state.lock"
    /// The longest command or socket path kept in the file, in characters.
    static let maximumField = 512
    /// What is read of a holder's file: its fields and keys, with room.
    static let maximumRead = 4 * maximumField

    /// The lock file's path.
    public let path: String
    private let fd: Int32

    /// Takes the lock on the store in `folder` (which must exist) for
    /// `holder`, and writes who holds it.
    ///
    /// - Throws: `.stateLocked` naming the holder when another process holds
    ///   it; `.stateUnavailable` when the file cannot be opened or locked.
    public init(folder: String, holder: Holder) throws(CurfewError) {
        path = folder.hasSuffix("/") ? folder + Self.fileName : folder + "/" + Self.fileName
        let fd: Int32
        do throws(SystemError) {
            fd = try Syscalls.openLockFile(path)
        } catch {
            throw CurfewError(.stateUnavailable, "cannot open the state store's lock \(path): \(error.message)")
        }
        let locked: Bool
        do throws(SystemError) {
            locked = try Syscalls.tryExclusiveLock(fd)
            if locked { try Syscalls.rewrite(fd, with: Array(holder.text.utf8)) }
        } catch {
            Syscalls.close(fd)
            throw CurfewError(.stateUnavailable, "cannot lock the state store \(path): \(error.message)")
        }
        guard locked else {
            let other = (try? Syscalls.readPrefix(of: fd, count: Self.maximumRead)).flatMap(Holder.parse)
            Syscalls.close(fd)
            throw CurfewError(.stateLocked, Self.refusal(folder: folder, holder: other))
        }
        self.fd = fd
        curfew_shim_close_in_children(fd)
    }

    deinit {
        curfew_shim_close_in_children(-1)
        Syscalls.close(fd)
    }

    static func refusal(folder: String, holder: Holder?) -> String {
        let who: String
        if let holder {
            var detail = "pid \(holder.pid)"
            if let socket = holder.socket { detail += ", control socket \(socket)" }
            who = holder.command.isEmpty ? "another host (\(detail))" : "'\(holder.command)' (\(detail))"
        } else {
            who = "another host (it has not yet said which)"
        }
        return "the state store in \(folder) is in use by \(who): one host writes a store at a time. "
            + "Stop that one, or give this one another folder with --state"
    }
}
