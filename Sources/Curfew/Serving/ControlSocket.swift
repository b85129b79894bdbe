import Glibc
import Synchronization
import _CurfewShims

/// The Unix socket `curfew status` and `curfew ctl` talk to a serving host
/// over: one request line of JSON in, one answer line out, then the
/// connection closes.
///
/// Only this user and root are served: each peer's credentials are read
/// with `SO_PEERCRED` (the kernel's word, not the peer's) and any other
/// user gets a refusal. Nor is the host itself, or any process descended
/// from it: its jobs run as its user, and a job that could say
/// `foreground` or `cancel` would steer its own grant and others' jobs.
/// (The host is its children's subreaper, so a job's detached child is
/// still its descendant.) The socket is mode 0600 in a folder of mode 0700.
/// A peer that sends nothing, or more than ``maximumRequestBytes``, is
/// dropped after ``readTimeout``: one slow client cannot hold the host.
public final class ControlSocket: Sendable {
    public let path: String
    private let descriptor: Int32
    private let closed = Flag()

    private final class Flag: Sendable {
        let value = Atomic<Bool>(false)
    }

    public static let maximumRequestBytes = 4096
    public static let readTimeout: Duration = .seconds(1)

    /// The default path: `$RUNTIME_DIRECTORY/serve.sock` (systemd's
    /// `RuntimeDirectory=`), else `$XDG_RUNTIME_DIR/curfew/serve.sock`, else
    /// `~/.cache/curfew/serve.sock` (a folder no other user can make first,
    /// as one in `/tmp` is), else `/tmp/curfew-UID/serve.sock`.
    public static func defaultPath(environment: (String) -> String? = { getenv($0).map { String(cString: $0) } }) -> String {
        if let runtime = environment("RUNTIME_DIRECTORY"), runtime.hasPrefix("/") {
            // systemd may list several, separated by colons: the first is ours.
            return String(runtime.split(separator: ":").first ?? Substring(runtime)) + "/serve.sock"
        }
        if let runtime = environment("XDG_RUNTIME_DIR"), runtime.hasPrefix("/") {
            return runtime + "/curfew/serve.sock"
        }
        if let home = environment("HOME"), home.hasPrefix("/"), home.utf8.count + 26 < MemoryLayout.size(ofValue: sockaddr_un().sun_path) {
            return home + "/.cache/curfew/serve.sock"
        }
        return "/tmp/curfew-\(geteuid())/serve.sock"
    }

    /// Why a client must not trust an answer from the socket at `path`, or
    /// `nil`: its folder is a symlink, or others can write it, or it is
    /// another user's (not this one's, nor root's) in a folder others can
    /// write, where anyone could have made it first (`/tmp`); or the socket
    /// is not a socket, or another user's. (As ssh-agent's clients check.)
    static func distrust(_ path: String, user: uid_t = geteuid()) -> String? {
        let folder = folder(of: path)
        var info = stat()
        guard lstat(folder, &info) == 0 else { return nil }  // nothing there: connecting says so
        guard info.st_mode & S_IFMT == S_IFDIR else { return "its folder \(folder) is not a folder (a symlink is not trusted)" }
        guard info.st_mode & 0o022 == 0 else {
            return "others can write its folder \(folder) (mode \(String(info.st_mode & 0o777, radix: 8))), so anyone could answer there"
        }
        let owner = info.st_uid
        if owner != user && owner != 0 {
            var parent = stat()
            let above = Self.folder(of: folder)
            if lstat(above, &parent) != 0 || parent.st_mode & 0o022 != 0 {
                return "its folder \(folder) belongs to uid \(owner), not you, in \(above), where anyone could have made it first"
            }
        }
        guard lstat(path, &info) == 0 else { return nil }
        guard info.st_mode & S_IFMT == S_IFSOCK else { return "\(path) is not a socket" }
        guard [user, 0, owner].contains(info.st_uid) else { return "it belongs to uid \(info.st_uid), neither you nor its folder's owner" }
        return nil
    }

    /// The socket of the system service (`deploy/systemd/curfew.service`:
    /// `RuntimeDirectory=curfew`).
    public static let systemServicePath = "/run/curfew/serve.sock"

    /// Where `curfew status` and `curfew ctl` look without `--socket`: this
    /// user's server (``defaultPath(environment:)``) when it has one, else
    /// the system service's, so an operator's shell finds the service.
    public static func clientPath(
        environment: (String) -> String? = { getenv($0).map { String(cString: $0) } },
        exists: (String) -> Bool = { access($0, F_OK) == 0 }
    ) -> String {
        let own = defaultPath(environment: environment)
        return !exists(own) && exists(systemServicePath) ? systemServicePath : own
    }

    /// Whether a peer of user `uid` may use the socket of a host run by `owner`.
    static func admits(uid: uid_t, owner: uid_t) -> Bool {
        uid == owner || uid == 0
    }

    /// Binds `path` (making its folder, mode 0700, when missing) and serves
    /// each request with `handle`, on a thread of its own.
    ///
    /// - Throws: When another host serves there already, or the path cannot be bound.
    /// - Parameters:
    ///   - host: The process whose descendants are refused (this one; `nil`
    ///     for none, as for a test that asks its own socket through a child).
    ///   - refused: Told, in a sentence, of each peer refused for being a
    ///     job of the host (an operator wants to know a job tried).
    public init(
        path: String, host: pid_t? = getpid(), refused: @escaping @Sendable (String) -> Void = { _ in },
        handle: @escaping @Sendable (_ request: [UInt8]) -> String
    ) throws(CurfewError) {
        self.path = path
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard path.utf8.count < capacity, !path.utf8.contains(0) else {
            throw CurfewError(.unreadable, "the control socket path \(path) is longer than \(capacity - 1) bytes; choose a shorter one with --socket")
        }
        try PrivateFolder.prepare(Self.folder(of: path), what: "the control socket's folder", code: .unreadable)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
        }
        if Self.answers(path) {
            throw CurfewError(.unreadable, "another curfew serve answers on \(path); stop it, or choose another socket with --socket")
        }
        var info = stat()
        if lstat(path, &info) == 0 {
            guard info.st_mode & S_IFMT == S_IFSOCK else {
                throw CurfewError(.unreadable, "\(path) exists and is not a socket; it was left as it is")
            }
            unlink(path)  // a socket no host answers on: left by one that died
        }
        descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw CurfewError(.unreadable, "cannot make the control socket: \(String(cString: strerror(errno)))") }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, chmod(path, 0o600) == 0, listen(descriptor, 16) == 0 else {
            let why = String(cString: strerror(errno))
            Glibc.close(descriptor)
            throw CurfewError(.unreadable, "cannot serve the control socket \(path): \(why)")
        }
        let fd = descriptor
        let closed = self.closed
        let owner = geteuid()
        let started = Thread.detach {
            while !closed.value.load(ordering: .relaxed) {
                let client = curfew_shim_accept(fd)
                if client < 0 {
                    if errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE { continue }
                    return  // shut down
                }
                Self.serve(client, owner: owner, host: host, refused: refused, handle: handle)
                Glibc.close(client)
            }
        }
        guard started else {
            Glibc.close(descriptor)
            unlink(path)
            throw CurfewError(.unreadable, "cannot start the control socket's thread")
        }
    }

    /// Stops serving and removes the socket file.
    public func close() {
        guard !closed.value.exchange(true, ordering: .relaxed) else { return }
        unlink(path)
        // Wakes the accept: the thread sees the socket shut down and leaves.
        shutdown(descriptor, Int32(SHUT_RDWR))
        Glibc.close(descriptor)
    }

    private static func serve(
        _ client: Int32, owner: uid_t, host: pid_t?, refused: @Sendable (String) -> Void, handle: @Sendable ([UInt8]) -> String
    ) {
        var peer: UInt32 = 0
        guard curfew_shim_peer_uid(client, &peer) == 0 else { return }
        guard admits(uid: peer, owner: owner) else {
            send(client, "{\"ok\":false,\"error\":\"refused: uid \(peer) is neither this host's user (uid \(owner)) nor root\"}")
            return
        }
        var pid: Int32 = 0
        let descends = host.map { curfew_shim_peer_descends_from(client, $0, &pid) } ?? 0
        // Not knowing is refusal, for a peer that could be a job: one of this user's.
        if descends == 1 || (descends < 0 && peer == owner) {
            let why = descends == 1
                ? "pid \(pid) is one of this host's jobs, or a process a job started; a job cannot steer its host"
                : "cannot tell whether pid \(pid) is one of this host's jobs"
            refused("control socket: refused \(why)")
            send(client, "{\"ok\":false,\"error\":\"refused: \(why)\"}")
            return
        }
        var timeout = timeval(tv_sec: Int(readTimeout.components.seconds), tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var request: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1024)
        while !request.contains(UInt8(ascii: "\n")) {
            let count = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            request += buffer[..<count]
            guard request.count <= maximumRequestBytes else {
                send(client, "{\"ok\":false,\"error\":\"a request of more than \(maximumRequestBytes) bytes\"}")
                return
            }
        }
        guard let end = request.firstIndex(of: UInt8(ascii: "\n")) else { return }
        send(client, handle(Array(request[..<end])))
    }

    private static func send(_ client: Int32, _ line: String) {
        var bytes = Array((line + "\n").utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeMutableBytes { Glibc.send(client, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return }
            offset += written
        }
    }

    /// Sends `request` to the host serving on `path` and returns its answer line.
    public static func ask(path: String, request: String) throws(CurfewError) -> [UInt8] {
        if let why = distrust(path) { throw CurfewError(.insecure, "refusing to ask \(path): \(why)") }
        let fd = try connect(path)
        defer { Glibc.close(fd) }
        // The kernel's word on who answers: this user, root, or the socket folder's owner (a service's user).
        var server: UInt32 = 0
        var info = stat()
        if curfew_shim_peer_uid(fd, &server) == 0, server != geteuid(), server != 0,
            lstat(folder(of: path), &info) != 0 || info.st_uid != server
        {
            throw CurfewError(.insecure, "refusing to ask \(path): uid \(server) answers there, neither you nor its folder's owner")
        }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        send(fd, request)
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            answer += buffer[..<count]
            guard answer.count <= 64 << 20 else { break }
        }
        if let end = answer.firstIndex(of: UInt8(ascii: "\n")) { return Array(answer[..<end]) }
        throw CurfewError(.unreadable, "the host on \(path) closed the connection without an answer")
    }

    private static func connect(_ path: String) throws(CurfewError) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        guard path.utf8.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw CurfewError(.unreadable, "the control socket path \(path) is too long")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw CurfewError(.unreadable, "cannot make a socket: \(String(cString: strerror(errno)))") }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            let why = errno == ENOENT || errno == ECONNREFUSED ? "no curfew serve is running there" : String(cString: strerror(errno))
            Glibc.close(fd)
            throw CurfewError(.unreadable, "cannot reach \(path): \(why)")
        }
        return fd
    }

    private static func answers(_ path: String) -> Bool {
        guard let fd = try? connect(path) else { return false }
        Glibc.close(fd)
        return true
    }

    private static func folder(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }
}
