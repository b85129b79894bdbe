import Curfew
import Dispatch
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
        func run(_ handle: @Sendable ([UInt8]) -> String, takes: (@Sendable ([UInt8], Int32) -> Bool)?) {
            while true {
                ready.wait()
                let next = waiting.withLock { state -> (client: Int32, request: [UInt8])?? in
                    if state.closed {
                        for waiting in state.requests { Syscalls.close(waiting.client) }
                        return .some(nil)
                    }
                    return state.requests.isEmpty ? nil : state.requests.removeFirst()
                }
                guard let next else { continue }
                guard let next else { return }
                if takes?(next.request, next.client) != true { ControlSocket.reply(next.client, handle(next.request)) }
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
    public static func defaultPath() -> String {
        defaultPath(environment: Syscalls.environmentValue)
    }

    /// ``defaultPath()`` for the variables `environment` gives.
    public static func defaultPath(environment: (String) -> String?) -> String {
        if let runtime = environment("RUNTIME_DIRECTORY"), runtime.hasPrefix("/") {
            // systemd may list several, separated by colons: the first is ours.
            return String(runtime.split(separator: ":").first ?? Substring(runtime)) + "/serve.sock"
        }
        if let runtime = environment("XDG_RUNTIME_DIR"), runtime.hasPrefix("/") {
            return runtime + "/curfew/serve.sock"
        }
        if let home = environment("HOME"), home.hasPrefix("/"), home.utf8.count + 26 <= Syscalls.maximumSocketPathBytes {
            return home + "/.cache/curfew/serve.sock"
        }
        return "/tmp/curfew-\(Syscalls.userID)/serve.sock"
    }

    /// Why a client must not trust an answer from the socket at `path`, or
    /// `nil`: its folder is a symlink, or others can write it, or it is
    /// another user's (not this one's, nor root's) in a folder others can
    /// write, where anyone could have made it first (`/tmp`); or the socket
    /// is not a socket, or another user's. (As ssh-agent's clients check.)
    static func distrust(_ path: String, user: UInt32 = Syscalls.userID) -> String? {
        let folder = Syscalls.folder(of: path)
        guard let info = try? Syscalls.linkStatus(folder) else { return nil }  // nothing there: connecting says so
        guard info.isDirectory else { return "its folder \(folder) is not a folder (a symlink is not trusted)" }
        guard info.mode & 0o022 == 0 else {
            return "others can write its folder \(folder) (mode \(String(info.mode & 0o777, radix: 8))), so anyone could answer there"
        }
        let owner = info.owner
        if owner != user && owner != 0 {
            let above = Syscalls.folder(of: folder)
            if (try? Syscalls.linkStatus(above)).map({ $0.mode & 0o022 != 0 }) ?? true {
                return "its folder \(folder) belongs to uid \(owner), not you, in \(above), where anyone could have made it first"
            }
        }
        guard let socket = try? Syscalls.linkStatus(path) else { return nil }
        guard socket.isSocket else { return "\(path) is not a socket" }
        guard [user, 0, owner].contains(socket.owner) else { return "it belongs to uid \(socket.owner), neither you nor its folder's owner" }
        return nil
    }

    /// The socket of the system service (`deploy/systemd/curfew.service`:
    /// `RuntimeDirectory=curfew`).
    public static let systemServicePath = "/run/curfew/serve.sock"

    /// Where `curfew status` and `curfew ctl` look without `--socket`: this
    /// user's server (``defaultPath()``) when it has one, else
    /// the system service's, so an operator's shell finds the service.
    public static func clientPath() -> String {
        clientPath(environment: Syscalls.environmentValue, exists: Syscalls.exists)
    }

    /// ``clientPath()`` for the variables `environment` gives and the paths `exists` finds.
    public static func clientPath(environment: (String) -> String?, exists: (String) -> Bool) -> String {
        let own = defaultPath(environment: environment)
        return !exists(own) && exists(systemServicePath) ? systemServicePath : own
    }

    /// Whether a peer of user `uid` may use the socket of a host run by `owner`.
    static func admits(uid: UInt32, owner: UInt32) -> Bool {
        uid == owner || uid == 0
    }

    /// Binds `path` (making its folder, mode 0700, when missing) and serves
    /// each request with `handle`, on a thread of its own.
    ///
    /// - Throws: When another host serves there already, or the path cannot be bound.
    /// - Parameters:
    ///   - refusesJobs: Whether this process's descendants (its jobs) are
    ///     refused; not for a test that asks its own socket through a child.
    ///   - refused: Told, in a sentence, of each peer refused for being a
    ///     job of the host (an operator wants to know a job tried).
    public init(
        path: String, refusesJobs: Bool = true, refused: @escaping @Sendable (String) -> Void = { _ in },
        takes: (@Sendable (_ request: [UInt8], _ client: Int32) -> Bool)? = nil,
        handle: @escaping @Sendable (_ request: [UInt8]) -> String
    ) throws(CurfewError) {
        self.path = path
        guard path.utf8.count <= Syscalls.maximumSocketPathBytes, !path.utf8.contains(0) else {
            throw CurfewError(
                .unreadable, "the control socket path \(path) is longer than \(Syscalls.maximumSocketPathBytes) bytes; choose a shorter one with --socket")
        }
        try PrivateFolder.prepare(Syscalls.folder(of: path), what: "the control socket's folder", code: .unreadable)
        if Self.answers(path) {
            throw CurfewError(.unreadable, "another curfew serve answers on \(path); stop it, or choose another socket with --socket")
        }
        if let info = try? Syscalls.linkStatus(path) {
            guard info.isSocket else {
                throw CurfewError(.unreadable, "\(path) exists and is not a socket; it was left as it is")
            }
            try? Syscalls.unlink(path)  // a socket no host answers on: left by one that died
        }
        // Non-blocking: the loop accepts until none is waiting.
        do throws(SystemError) {
            descriptor = try Syscalls.listenLocal(at: path, backlog: 16)
        } catch {
            throw CurfewError(.unreadable, "cannot serve the control socket \(path): \(error.message)")
        }
        let fd = descriptor
        let closed = self.closed
        let owner = Syscalls.userID
        let host = refusesJobs ? Syscalls.processID : nil
        let answering = Answers()
        let started = OSThread.detach({ answering.run(handle, takes: takes) }) && OSThread.detach {
            Self.serve(listening: fd, closed: closed, owner: owner, host: host, refused: refused, answering: answering)
        }
        guard started else {
            Syscalls.close(descriptor)
            try? Syscalls.unlink(path)
            throw CurfewError(.unreadable, "cannot start the control socket's thread")
        }
    }

    /// Stops serving and removes the socket file.
    public func close() {
        guard !closed.value.exchange(true, ordering: .relaxed) else { return }
        try? Syscalls.unlink(path)
        // Wakes the accept: the thread sees the socket shut down and leaves.
        Syscalls.shutdownBoth(descriptor)
        Syscalls.close(descriptor)
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
        listening: Int32, closed: Flag, owner: UInt32, host: Int32?, refused: @escaping @Sendable (String) -> Void,
        answering: Answers
    ) {
        var clients: [Client] = []
        defer { for client in clients { Syscalls.close(client.fd) } }
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
                Syscalls.close(client.fd)  // no whole request in time
                return true
            }
            // At the cap, a refused peer (a job) makes room first; else the
            // listener is left alone and the kernel's queue holds the rest.
            if clients.count + answering.count.load(ordering: .relaxed) >= maximumClients,
                let refusedOne = clients.firstIndex(where: { $0.refusal != nil })
            {
                Syscalls.close(clients.remove(at: refusedOne).fd)
            }
            let accepting = clients.count + answering.count.load(ordering: .relaxed) < maximumClients && acceptAgain <= now
            var entries = [Syscalls.PollEntry(accepting ? listening : -1)] + clients.map { Syscalls.PollEntry($0.fd) }
            var deadlines = clients.map(\.deadline)
            if acceptAgain > now { deadlines.append(acceptAgain) }
            if !accepting && acceptAgain <= now { deadlines.append(now + .milliseconds(10)) }  // answers free slots
            let wait = deadlines.min().map { max(0, Int32(clamping: now.duration(to: $0).milliseconds) &+ 1) } ?? -1
            let ready = Syscalls.poll(&entries, milliseconds: wait)
            if ready < 0 { return }
            guard ready > 0 else { continue }
            var done = Set<Int32>()
            for (index, entry) in entries.enumerated().dropFirst() where entry.hasEvent {
                let place = index - 1
                let fd = clients[place].fd
                let count: Int
                do throws(SystemError) {
                    count = try Syscalls.receive(fd, into: &buffer, nonBlocking: true)
                } catch {
                    if error == .wouldBlock { continue }
                    count = -1
                }
                guard count > 0 else {
                    done.insert(clients[place].fd)
                    Syscalls.close(clients[place].fd)
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
            guard entries[0].hasEvent else { continue }
            while clients.count + answering.count.load(ordering: .relaxed) < maximumClients {
                let client: Int32
                do throws(SystemError) {
                    client = try Syscalls.accept(listening)
                } catch {
                    if error == .connectionAborted { continue }
                    let outOfDescriptors = error == .tooManyFiles || error == .tooManyFilesInSystem
                    if outOfDescriptors { acceptAgain = ContinuousClock.now + .milliseconds(100) }
                    if error == .wouldBlock || outOfDescriptors { break }
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
    private static func admit(_ client: Int32, owner: UInt32, host: Int32?, refused: @Sendable (String) -> Void) -> String?? {
        guard let peer = Syscalls.peerUserID(client) else {
            Syscalls.close(client)
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
        defer { Syscalls.close(client) }
        var bytes = ArraySlice((line + "\n").utf8)
        let deadline = ContinuousClock.now + requestTimeout
        while !bytes.isEmpty {
            do throws(SystemError) {
                let written = try Syscalls.send(client, Array(bytes), nonBlocking: true)
                guard written > 0 else { return }
                bytes = bytes.dropFirst(written)
            } catch {
                guard error == .wouldBlock, let left = milliseconds(until: deadline) else { return }
                var entry = [Syscalls.PollEntry(client, input: false, output: true)]
                _ = Syscalls.poll(&entry, milliseconds: left)
            }
        }
    }

    private static func send(_ client: Int32, _ line: String) {
        _ = Syscalls.sendAll(client, Array((line + "\n").utf8))
    }

    /// How long a client waits for its answer, from connecting to the last byte.
    public static let answerTimeout: Duration = .seconds(10)

    /// Sends `request` to the host serving on `path` and returns its answer
    /// line, all within ``answerTimeout``.
    public static func ask(path: String, request: String) throws(CurfewError) -> [UInt8] {
        let deadline = ContinuousClock.now + answerTimeout
        let fd = try open(path, request: request, by: deadline)
        defer { Syscalls.close(fd) }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        // Each read is searched for the end, not the whole answer again: a
        // status of 10,000 jobs is megabytes, and the host sends it within a second.
        var ended = false
        while !ended {
            guard let left = milliseconds(until: deadline) else { throw timedOut(path) }
            guard Syscalls.waitForInput(fd, milliseconds: left) else { continue }  // the deadline is checked above
            guard let count = try? Syscalls.receive(fd, into: &buffer), count > 0 else { break }
            ended = buffer[..<count].contains(UInt8(ascii: "\n"))
            answer += buffer[..<count]
            guard answer.count <= 64 << 20 else { break }
        }
        if let end = answer.firstIndex(of: UInt8(ascii: "\n")) { return Array(answer[..<end]) }
        throw CurfewError(.unreadable, "the host on \(path) closed the connection without an answer")
    }

    /// Sends `request` and hands `line` each line the host sends until it
    /// closes the connection (`curfew events`): each read within
    /// ``answerTimeout`` of the last, unless `follows`, when it waits as long
    /// as the host keeps the stream. Each line is at most 1 MiB; a longer
    /// one ends the reading.
    public static func stream(path: String, request: String, follows: Bool, line: (ArraySlice<UInt8>) -> Void) throws(CurfewError) {
        var deadline = ContinuousClock.now + answerTimeout
        let fd = try open(path, request: request, by: deadline)
        defer { Syscalls.close(fd) }
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let wait: Int32
            if follows {
                wait = -1
            } else {
                guard let left = milliseconds(until: deadline) else { throw timedOut(path) }
                wait = left
            }
            guard Syscalls.waitForInput(fd, milliseconds: wait) else { continue }
            guard let count = try? Syscalls.receive(fd, into: &buffer), count > 0 else { break }
            // A reader slow to print (a pager) is not the host being slow.
            deadline = ContinuousClock.now + answerTimeout
            pending += buffer[..<count]
            var start = pending.startIndex
            while let end = pending[start...].firstIndex(of: UInt8(ascii: "\n")) {
                line(pending[start..<end])
                start = end + 1
            }
            pending.removeFirst(start - pending.startIndex)
            guard pending.count <= 1 << 20 else { break }
        }
    }

    /// A connection to the host on `path`, checked, with `request` sent:
    /// the caller reads the answer and closes it.
    private static func open(_ path: String, request: String, by deadline: ContinuousClock.Instant) throws(CurfewError) -> Int32 {
        if let why = distrust(path) { throw CurfewError(.insecure, "refusing to ask \(path): \(why)") }
        let fd = try connect(path, by: deadline)
        // The kernel's word on who answers: this user, root, or the socket folder's owner (a service's user).
        if let server = Syscalls.peerUserID(fd), server != Syscalls.userID, server != 0,
            (try? Syscalls.linkStatus(Syscalls.folder(of: path)))?.owner != server
        {
            Syscalls.close(fd)
            throw CurfewError(.insecure, "refusing to ask \(path): uid \(server) answers there, neither you nor its folder's owner")
        }
        Syscalls.setSendTimeout(fd, answerTimeout)
        send(fd, request)
        return fd
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
        guard path.utf8.count <= Syscalls.maximumSocketPathBytes else {
            throw CurfewError(.unreadable, "the control socket path \(path) is too long")
        }
        do throws(SystemError) {
            return try Syscalls.connectLocal(to: path, by: deadline)
        } catch {
            if error == .timedOut { throw timedOut(path) }
            let why = error == .noEntry || error == .connectionRefused ? "no curfew serve is running there" : error.message
            throw CurfewError(.unreadable, "cannot reach \(path): \(why)")
        }
    }

    private static func answers(_ path: String) -> Bool {
        guard let fd = try? connect(path, by: .now + .seconds(1)) else { return false }
        Syscalls.close(fd)
        return true
    }

}
