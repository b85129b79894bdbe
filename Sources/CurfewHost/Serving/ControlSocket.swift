import Curfew
import Dispatch
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
/// Clients are read together, by one loop: a request must arrive whole
/// within ``requestTimeout`` of its connection, one of more than
/// ``maximumRequestBytes`` is refused, and beyond ``maximumClients`` held at
/// once the oldest goes first. Requests are answered off the loop, so a
/// slow client, or many idle ones, cannot hold up another.
public final class ControlSocket: Sendable {
    public let path: String
    private let descriptor: Int32
    private let closed = Flag()

    private final class Flag: Sendable {
        let value = Atomic<Bool>(false)
    }

    /// Whole requests waiting for their answers, answered in order on a
    /// thread of their own: not Dispatch's, whose pool on Linux grows only
    /// about once a second while its threads are busy elsewhere (an answer
    /// was seen to wait 0.95 s for one).
    private final class Answers: Sendable {
        private let waiting = Mutex<(requests: [(client: Int32, request: [UInt8])], closed: Bool)>(([], false))
        private let ready = DispatchSemaphore(value: 0)
        /// How many wait, or are being answered.
        let count = Atomic<Int>(0)

        func add(_ client: Int32, _ request: [UInt8]) {
            count.add(1, ordering: .relaxed)
            waiting.withLock { $0.requests.append((client, request)) }
            ready.signal()
        }

        func close() {
            waiting.withLock { $0.closed = true }
            ready.signal()
        }

        /// Answers each request with `handle` until closed.
        func run(_ handle: @Sendable ([UInt8]) -> String) {
            while true {
                ready.wait()
                let next = waiting.withLock { state -> (client: Int32, request: [UInt8])?? in
                    if state.closed {
                        for waiting in state.requests { Glibc.close(waiting.client) }
                        return .some(nil)
                    }
                    return state.requests.isEmpty ? nil : state.requests.removeFirst()
                }
                guard let next else { continue }
                guard let next else { return }
                ControlSocket.reply(next.client, handle(next.request))
                count.subtract(1, ordering: .relaxed)
            }
        }
    }

    public static let maximumRequestBytes = 4096
    /// How long a client has to send its whole request.
    public static let requestTimeout: Duration = .seconds(1)
    /// The most clients read, or answered, at once.
    public static let maximumClients = 64

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
        let folder = Syscalls.folder(of: path)
        var info = stat()
        guard lstat(folder, &info) == 0 else { return nil }  // nothing there: connecting says so
        guard info.st_mode & S_IFMT == S_IFDIR else { return "its folder \(folder) is not a folder (a symlink is not trusted)" }
        guard info.st_mode & 0o022 == 0 else {
            return "others can write its folder \(folder) (mode \(String(info.st_mode & 0o777, radix: 8))), so anyone could answer there"
        }
        let owner = info.st_uid
        if owner != user && owner != 0 {
            var parent = stat()
            let above = Syscalls.folder(of: folder)
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
        try PrivateFolder.prepare(Syscalls.folder(of: path), what: "the control socket's folder", code: .unreadable)
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
        // Non-blocking: the loop accepts until none is waiting.
        descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
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
        let answering = Answers()
        let started = OSThread.detach({ answering.run(handle) }) && OSThread.detach {
            Self.serve(listening: fd, closed: closed, owner: owner, host: host, refused: refused, answering: answering)
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

    /// A client whose request is still coming.
    private struct Client {
        let fd: Int32
        let deadline: ContinuousClock.Instant
        var request: [UInt8] = []
        /// The answer a refused peer gets once it has sent its request (sent
        /// before, it could meet a closed socket mid-write, and die of SIGPIPE).
        var refusal: String? = nil
    }

    /// The loop: accepts, checks each peer, reads every request as it
    /// comes, and hands each whole one to `handle` off the loop.
    private static func serve(
        listening: Int32, closed: Flag, owner: uid_t, host: pid_t?, refused: @escaping @Sendable (String) -> Void,
        answering: Answers
    ) {
        var clients: [Client] = []
        defer { for client in clients { Glibc.close(client.fd) } }
        defer { answering.close() }
        var buffer = [UInt8](repeating: 0, count: 1024)
        // Out of descriptors, accepting waits a little: the listener would
        // be ready again at once, and the loop would spin.
        var acceptAgain = ContinuousClock.now
        var lastRefusalNotice: ContinuousClock.Instant?
        while !closed.value.load(ordering: .relaxed) {
            let now = ContinuousClock.now
            clients.removeAll { client in
                guard client.deadline <= now else { return false }
                Glibc.close(client.fd)  // no whole request in time
                return true
            }
            // At the cap, a refused peer (a job) makes room first; else the
            // listener is left alone and the kernel's queue holds the rest.
            if clients.count + answering.count.load(ordering: .relaxed) >= maximumClients,
                let refusedOne = clients.firstIndex(where: { $0.refusal != nil })
            {
                Glibc.close(clients.remove(at: refusedOne).fd)
            }
            let accepting = clients.count + answering.count.load(ordering: .relaxed) < maximumClients && acceptAgain <= now
            var entries = [pollfd(fd: accepting ? listening : -1, events: Int16(POLLIN), revents: 0)]
                + clients.map { pollfd(fd: $0.fd, events: Int16(POLLIN), revents: 0) }
            var deadlines = clients.map(\.deadline)
            if acceptAgain > now { deadlines.append(acceptAgain) }
            if !accepting && acceptAgain <= now { deadlines.append(now + .milliseconds(10)) }  // answers free slots
            let wait = deadlines.min().map { max(0, Int32(clamping: now.duration(to: $0).milliseconds) &+ 1) } ?? -1
            let ready = Syscalls.poll(&entries, milliseconds: wait)
            if ready < 0 { return }
            guard ready > 0 else { continue }
            var done = Set<Int32>()
            for (index, entry) in entries.enumerated().dropFirst() where entry.revents != 0 {
                let place = index - 1
                let fd = clients[place].fd
                let count = buffer.withUnsafeMutableBytes { bytes in Syscalls.retryingEINTR { recv(fd, bytes.baseAddress, bytes.count, Int32(MSG_DONTWAIT)) } }
                if count < 0 && errno == EAGAIN { continue }
                guard count > 0 else {
                    done.insert(clients[place].fd)
                    Glibc.close(clients[place].fd)
                    continue
                }
                clients[place].request += buffer[..<count]
                let client = clients[place]
                if let end = client.request.firstIndex(of: UInt8(ascii: "\n")), end <= maximumRequestBytes {
                    done.insert(client.fd)
                    if let refusal = client.refusal {
                        reply(client.fd, refusal)
                    } else {
                        answering.add(client.fd, Array(client.request[..<end]))
                    }
                } else if client.request.count > maximumRequestBytes {
                    done.insert(client.fd)
                    reply(client.fd, "{\"ok\":false,\"error\":\"a request of more than \(maximumRequestBytes) bytes\"}")
                }
            }
            if !done.isEmpty { clients.removeAll { done.contains($0.fd) } }
            guard entries[0].revents != 0 else { continue }
            while clients.count + answering.count.load(ordering: .relaxed) < maximumClients {
                let client = Syscalls.retryingEINTR { curfew_shim_accept(listening) }
                if client < 0 {
                    if errno == ECONNABORTED { continue }
                    if errno == EMFILE || errno == ENFILE { acceptAgain = ContinuousClock.now + .milliseconds(100) }
                    if errno == EAGAIN || errno == EMFILE || errno == ENFILE { break }
                    return  // shut down
                }
                // A job that floods the socket is said once a second, not once a try.
                let say: @Sendable (String) -> Void = { _ in }
                let notice = lastRefusalNotice.map { ContinuousClock.now - $0 >= .seconds(1) } ?? true
                guard let refusal = admit(client, owner: owner, host: host, refused: notice ? refused : say) else { continue }
                if refusal != nil && notice { lastRefusalNotice = ContinuousClock.now }
                clients.append(Client(fd: client, deadline: ContinuousClock.now + requestTimeout, refusal: refusal))
            }
        }
    }

    /// Whether the peer of `client` may ask: `.some(nil)` when it may,
    /// else the answer it gets instead; `nil` when it is gone (closed).
    private static func admit(_ client: Int32, owner: uid_t, host: pid_t?, refused: @Sendable (String) -> Void) -> String?? {
        var peer: UInt32 = 0
        guard curfew_shim_peer_uid(client, &peer) == 0 else {
            Glibc.close(client)
            return nil
        }
        guard admits(uid: peer, owner: owner) else {
            return .some("{\"ok\":false,\"error\":\"refused: uid \(peer) is neither this host's user (uid \(owner)) nor root\"}")
        }
        var pid: Int32 = 0
        let descends = host.map { curfew_shim_peer_descends_from(client, $0, &pid) } ?? 0
        // Not knowing is refusal, for a peer that could be a job: one of this user's.
        if descends == 1 || (descends < 0 && peer == owner) {
            let why = descends == 1
                ? "pid \(pid) is one of this host's jobs, or a process a job started; a job cannot steer its host"
                : "cannot tell whether pid \(pid) is one of this host's jobs"
            refused("control socket: refused \(why)")
            return .some("{\"ok\":false,\"error\":\"refused: \(why)\"}")
        }
        return .some(nil)
    }

    /// Sends `line` and closes `client`: all of it within ``requestTimeout``
    /// (a client that reads a long answer a byte at a time holds no one
    /// up for longer), never blocking past it.
    fileprivate static func reply(_ client: Int32, _ line: String) {
        defer { Glibc.close(client) }
        let bytes = Array((line + "\n").utf8)
        let deadline = ContinuousClock.now + requestTimeout
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { buffer in
                Syscalls.retryingEINTR { Glibc.send(client, buffer.baseAddress! + offset, buffer.count - offset, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT)) }
            }
            if written > 0 {
                offset += written
                continue
            }
            guard written < 0, errno == EAGAIN, let left = milliseconds(until: deadline) else { return }
            var entry = [pollfd(fd: client, events: Int16(POLLOUT), revents: 0)]
            _ = Syscalls.poll(&entry, milliseconds: left)
        }
    }

    private static func send(_ client: Int32, _ line: String) {
        var bytes = Array((line + "\n").utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeMutableBytes { buffer in
                Syscalls.retryingEINTR { Glibc.send(client, buffer.baseAddress! + offset, buffer.count - offset, Int32(MSG_NOSIGNAL)) }
            }
            guard written > 0 else { return }
            offset += written
        }
    }

    /// How long a client waits for its answer, from connecting to the last byte.
    public static let answerTimeout: Duration = .seconds(10)

    /// Sends `request` to the host serving on `path` and returns its answer
    /// line, all within ``answerTimeout``.
    public static func ask(path: String, request: String) throws(CurfewError) -> [UInt8] {
        if let why = distrust(path) { throw CurfewError(.insecure, "refusing to ask \(path): \(why)") }
        let deadline = ContinuousClock.now + answerTimeout
        let fd = try connect(path, by: deadline)
        defer { Glibc.close(fd) }
        // The kernel's word on who answers: this user, root, or the socket folder's owner (a service's user).
        var server: UInt32 = 0
        var info = stat()
        if curfew_shim_peer_uid(fd, &server) == 0, server != geteuid(), server != 0,
            lstat(Syscalls.folder(of: path), &info) != 0 || info.st_uid != server
        {
            throw CurfewError(.insecure, "refusing to ask \(path): uid \(server) answers there, neither you nor its folder's owner")
        }
        var timeout = timeval(tv_sec: Int(answerTimeout.components.seconds), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        send(fd, request)
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        // Each read is searched for the end, not the whole answer again: a
        // status of 10,000 jobs is megabytes, and the host sends it within a second.
        var ended = false
        while !ended {
            guard let left = milliseconds(until: deadline) else { throw timedOut(path) }
            var entry = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0)]
            guard Syscalls.poll(&entry, milliseconds: left) > 0 else { continue }  // the deadline is checked above
            let count = buffer.withUnsafeMutableBytes { bytes in Syscalls.retryingEINTR { recv(fd, bytes.baseAddress, bytes.count, 0) } }
            guard count > 0 else { break }
            ended = buffer[..<count].contains(UInt8(ascii: "\n"))
            answer += buffer[..<count]
            guard answer.count <= 64 << 20 else { break }
        }
        if let end = answer.firstIndex(of: UInt8(ascii: "\n")) { return Array(answer[..<end]) }
        throw CurfewError(.unreadable, "the host on \(path) closed the connection without an answer")
    }

    private static func timedOut(_ path: String) -> CurfewError {
        CurfewError(
            .unreadable,
            "no answer from \(path) within \(Int(answerTimeout.components.seconds)) s: the client gave up waiting (the host may be busy); try again")
    }

    /// The whole milliseconds left until `deadline` (at least 1), or `nil` once it has passed.
    private static func milliseconds(until deadline: ContinuousClock.Instant) -> Int32? {
        let left = ContinuousClock.now.duration(to: deadline)
        guard left > .zero else { return nil }
        return max(1, Int32(clamping: left.milliseconds))
    }

    /// A connection to `path`, made by `deadline` (a host whose queue of
    /// connections is full is tried again until then).
    private static func connect(_ path: String, by deadline: ContinuousClock.Instant? = nil) throws(CurfewError) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        guard path.utf8.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw CurfewError(.unreadable, "the control socket path \(path) is too long")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw CurfewError(.unreadable, "cannot make a socket: \(String(cString: strerror(errno)))") }
        var connected: Int32
        repeat {
            connected = withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                    Syscalls.retryingEINTR { Glibc.connect(fd, socketAddress, socklen_t(MemoryLayout<sockaddr_un>.size)) }
                }
            }
            // A Unix socket's connect fails at once with EAGAIN when the host's queue is full.
            guard connected != 0, errno == EAGAIN, let deadline else { break }
            guard milliseconds(until: deadline) != nil else {
                Glibc.close(fd)
                throw timedOut(path)
            }
            poll(nil, 0, 10)
        } while true
        guard connected == 0 else {
            let why = errno == ENOENT || errno == ECONNREFUSED ? "no curfew serve is running there" : String(cString: strerror(errno))
            Glibc.close(fd)
            throw CurfewError(.unreadable, "cannot reach \(path): \(why)")
        }
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags & ~O_NONBLOCK)
        return fd
    }

    private static func answers(_ path: String) -> Bool {
        guard let fd = try? connect(path, by: .now + .seconds(1)) else { return false }
        Glibc.close(fd)
        return true
    }

}
