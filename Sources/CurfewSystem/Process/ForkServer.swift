import Dispatch
import Glibc
import Synchronization
import _CurfewShims

/// The host's side of the fork server (`curfew __forkserver`): one process
/// per run (or kept across a serving host's runs), single-threaded, with
/// the Swift runtime loaded, that forks a worker per request, so a worker
/// costs a fork, not a process start. It is the parent of the workers: it
/// reaps them, kills their groups before it does (no pid is reused under a
/// signal), and reports how each ended.
///
/// - Important: The server never loads a plugin or runs plugin code; only
///   its children, once forked, become workers.
package final class ForkServer: Sendable {
    /// A fork request waiting for its reply (replies come in request order):
    /// what to do with the child, called once on the reader's thread.
    private final class Request: Sendable {
        let then: @Sendable (Child?) -> Void
        init(_ then: @escaping @Sendable (Child?) -> Void) { self.then = then }
    }

    private struct State {
        var waiting: [Request] = []
        var exits: [pid_t: Int32] = [:]
        var listeners: [pid_t: @Sendable (Int32?) -> Void] = [:]
        var gone = false
        /// The server has been reaped: its workers are this process's children.
        var reaped = false
    }

    /// The argument that makes the host's own executable a fork server of
    /// isolation workers.
    package static let workerArgument = "__forkserver"

    package let pid: pid_t
    private let process: HelperProcess
    private let control: Int32
    private let state = Mutex(State())
    /// Requests are sent one at a time and queued in the order sent, so
    /// each reply finds its request; several may wait at once (the server
    /// forks for the next while this one's child starts).
    private let requests = Mutex(())
    /// Signalled once the server has exited and been reaped.
    private let ended = DispatchSemaphore(value: 0)

    /// Starts a fork server, `executable argument` (`__forkserver`, or
    /// `__scanserver` for C plugin scanners), or `nil` when it cannot start.
    package init?(executable: String, argument: String = ForkServer.workerArgument, environment: [String]) {
        guard let (pid, control) = Self.spawn(executable: executable, argument: argument, environment: environment) else { return nil }
        self.pid = pid
        process = HelperProcess(pid: pid)
        self.control = control
        OSThread.detach { self.read() }
    }

    /// Starts `executable argument` as a fork server: its pid and this
    /// process's end of its control socket (of `type`), or `nil` when it
    /// cannot start.
    package static func spawn(
        executable: String, argument: String, environment: [String], kind: Syscalls.SocketKind = .seqpacket
    ) -> (pid: pid_t, control: Int32)? {
        guard let pair = try? Syscalls.socketPair(kind) else { return nil }
        let null = Glibc.open("/dev/null", O_WRONLY | O_CLOEXEC)
        let spawned = Syscalls.spawnWorker(
            executable, arguments: [executable, argument], environment: environment, channel: pair[1],
            out: null, err: null)
        Glibc.close(pair[1])
        Glibc.close(null)
        guard case .success(let pid) = spawned else {
            Glibc.close(pair[0])
            return nil
        }
        return (pid, pair[0])
    }

    /// A forked worker: its pid, the number of the fork that made it (a
    /// kill names both, so it never reaches a later worker with a reused
    /// pid), and whether it was forked into the cgroup asked for.
    package struct Child: Sendable {
        package let pid: pid_t
        package let sequence: UInt64
        package var placed = false
    }

    /// Whether the server has gone (exited, or its socket ended).
    package var isGone: Bool { state.withLock { $0.gone } }

    /// Forks a worker whose fd 3, 1 and 2 are `channel`, `out` and `err`,
    /// into the cgroup v2 whose folder is open on `cgroup` where the kernel
    /// can (``Child/placed``); `nil` when the server is gone or could not fork.
    package func fork(channel: Int32, out: Int32, err: Int32, cgroup: Int32? = nil) -> Child? {
        final class Reply: @unchecked Sendable {
            // Safe because `child` is written before `done` is signalled and read after it.
            let done = DispatchSemaphore(value: 0)
            var child: Child?
        }
        let reply = Reply()
        guard fork(channel: channel, out: out, err: err, cgroup: cgroup, then: { child in
            reply.child = child
            reply.done.signal()
        }) else { return nil }
        reply.done.wait()
        return reply.child
    }

    /// Asks for a worker whose fd 3, 1 and 2 are `channel`, `out` and `err`,
    /// forked into the cgroup whose folder is open on `cgroup` where the
    /// kernel can (the caller may close its copies once this returns), and
    /// returns at once: `then` gets the child, or `nil` when the server could
    /// not fork or is gone, on the thread that reads the server's replies.
    /// False, and `then` is never called, when the request could not be sent.
    package func fork(
        channel: Int32, out: Int32, err: Int32, cgroup: Int32? = nil, then: @escaping @Sendable (Child?) -> Void
    ) -> Bool {
        let request = Request(then)
        return requests.withLock { _ -> Bool in
            guard state.withLock({ state -> Bool in
                guard !state.gone else { return false }
                state.waiting.append(request)
                return true
            }) else { return false }
            let descriptors: [Int32] = [channel, out, err] + (cgroup.map { [$0] } ?? [])
            guard curfew_shim_send_with_fds(control, "fork", descriptors, Int32(descriptors.count)) == 0 else {
                // Not sent: withdrawn, unless the reader found the server gone
                // and took the queue already, and so answers it (with `nil`).
                return !state.withLock { state -> Bool in
                    guard let index = state.waiting.firstIndex(where: { $0 === request }) else { return false }
                    state.waiting.remove(at: index)
                    return true
                }
            }
            return true
        }
    }

    /// Kills a worker's process group, if the server has not reaped it yet.
    package func kill(_ worker: Child) {
        requests.withLock { _ in
            guard !state.withLock({ $0.gone }) else { return }
            _ = "kill \(worker.pid) \(worker.sequence)".withCString { Glibc.send(control, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        }
    }

    /// Calls `handler` once with the worker's wait status when it ends, or
    /// with `nil` once the server is gone and reaped: a worker still alive
    /// then has come to this process (a subreaper), which must reap it.
    package func onExit(of worker: pid_t, _ handler: @escaping @Sendable (Int32?) -> Void) {
        let now = state.withLock { state -> Int32?? in
            if let status = state.exits.removeValue(forKey: worker) { return .some(status) }
            if state.gone && state.reaped { return .some(nil) }
            state.listeners[worker] = handler
            return nil
        }
        if let now { handler(now) }
    }

    /// A pidfd for `pid` if it is this process's child, else `nil`: for a
    /// worker whose server died, whether it came here (a subreaper) and is
    /// this process's to reap.
    package static func childPidfd(_ pid: pid_t) -> Int32? {
        let pidfd = curfew_shim_pidfd_open(pid)
        guard pidfd >= 0 else { return nil }
        guard curfew_shim_pidfd_is_child(pidfd) == 1 else {
            Glibc.close(pidfd)
            return nil
        }
        return pidfd
    }

    /// The run is over: the server leaves when it reads the end of its socket,
    /// after it has killed and reaped what is left; it is killed if it has
    /// not two seconds later (a worker whose kill it then never sent gets
    /// it once adopted: ``ForkedWorker``). Returns once the reader has
    /// reaped it, or two seconds after the kill.
    package func close() {
        process.stop(
            Teardown([
                .ask(
                    { [self] in
                        requests.withLock { _ in
                            if !state.withLock({ $0.gone }) { shutdown(control, Int32(SHUT_WR)) }
                        }
                    }, allowed: .seconds(2))
            ]))
        // Its socket's end comes with its exit: the reader reaps it.
        _ = ended.wait(timeout: .now() + .seconds(2))
    }

    private func read() {
        var buffer = [UInt8](repeating: 0, count: 128)
        while true {
            let count = buffer.withUnsafeMutableBytes { bytes in Syscalls.retryingEINTR { recv(control, bytes.baseAddress, bytes.count, 0) } }
            if count <= 0 { break }
            let words = String(decoding: buffer[..<count], as: UTF8.self).split(separator: " ")
            if words.first == "pid", words.count == 3 || (words.count == 4 && words[3] == "placed") {
                let request = state.withLock { state -> Request? in
                    state.waiting.isEmpty ? nil : state.waiting.removeFirst()
                }
                if let request {
                    let child = pid_t(words[1]).flatMap { pid in
                        pid > 0 ? Child(pid: pid, sequence: UInt64(words[2]) ?? 0, placed: words.count == 4) : nil
                    }
                    request.then(child)
                }
            } else if words.first == "exit", words.count == 3, let worker = pid_t(words[1]), let status = Int32(words[2]) {
                let listener = state.withLock { state -> (@Sendable (Int32?) -> Void)? in
                    if let listener = state.listeners.removeValue(forKey: worker) { return listener }
                    state.exits[worker] = status
                    return nil
                }
                listener?(status)
            }
        }
        // Gone: no more forks or kills.
        let waiting = state.withLock { state in
            state.gone = true
            defer { state.waiting.removeAll() }
            return state.waiting
        }
        waiting.forEach { $0.then(nil) }
        // Under the request lock: no fork or kill is sending on this number.
        _ = requests.withLock { _ in Glibc.close(control) }
        _ = process.reap()
        // Reaped: the workers it left (a worker may have killed it) are this
        // process's children now, and whoever waits for one hears so.
        let listeners = state.withLock { state in
            state.reaped = true
            defer { state.listeners.removeAll() }
            return Array(state.listeners.values)
        }
        listeners.forEach { $0(nil) }
        ended.signal()
    }
}

/// A fork server started on first need (or sooner: ``startSoon()``) and
/// used while it forks: once it cannot start, refuses or is gone, forking
/// is off for good and callers start their workers another way.
package final class LazyForkServer: Sendable {
    private let executable: String
    private let argument: String
    private let environment: [String]
    private let state: Mutex<(server: ForkServer?, tried: Bool, works: Bool)>

    package init(executable: String, argument: String = ForkServer.workerArgument, environment: [String], enabled: Bool) {
        self.executable = executable
        self.argument = argument
        self.environment = environment
        state = Mutex((nil, false, enabled))
    }

    /// Whether forking is still on (it may not have been tried yet).
    package var isOn: Bool { state.withLock { $0.works } }

    /// Whether forking is still on and the server, if started, is not
    /// known to be gone: one kept for later runs is replaced otherwise.
    package var isServing: Bool {
        let (works, server) = state.withLock { ($0.works, $0.server) }
        return works && server?.isGone != true
    }

    /// A worker forked with fd 3, 1 and 2 as `channel`, `out` and `err`,
    /// and its server; `nil` when forking is off or fails (off from then on).
    package func fork(channel: Int32, out: Int32, err: Int32, cgroup: Int32? = nil) -> (server: ForkServer, child: ForkServer.Child)? {
        guard let server = startedServer() else { return nil }
        if let child = server.fork(channel: channel, out: out, err: err, cgroup: cgroup) { return (server, child) }
        state.withLock { $0.works = false }  // refused or gone
        return nil
    }

    /// Asks for a worker as ``ForkServer/fork(channel:out:err:cgroup:then:)`` does,
    /// and returns at once; false, and `then` is never called, when forking
    /// is off or the request could not be sent. A refusal (`nil`) turns
    /// forking off, as one that could not be sent does.
    package func fork(
        channel: Int32, out: Int32, err: Int32, cgroup: Int32? = nil,
        then: @escaping @Sendable ((server: ForkServer, child: ForkServer.Child)?) -> Void
    ) -> Bool {
        guard let server = startedServer() else { return false }
        let sent = server.fork(channel: channel, out: out, err: err, cgroup: cgroup) { [self] child in
            guard let child else {
                state.withLock { $0.works = false }
                return then(nil)
            }
            then((server, child))
        }
        if !sent { state.withLock { $0.works = false } }
        return sent
    }

    /// Starts the server now, on a thread of its own, not on first need: a
    /// fork asked for meanwhile waits for the start.
    package func startSoon() {
        if !OSThread.detach({ [self] in _ = startedServer() }) { _ = startedServer() }
    }

    /// The server, started on first call; `nil` when forking is off.
    private func startedServer() -> ForkServer? {
        state.withLock { state -> ForkServer? in
            if state.works && !state.tried {
                state.tried = true
                state.server = ForkServer(executable: executable, argument: argument, environment: environment)
                if state.server == nil { state.works = false }
            }
            return state.works ? state.server : nil
        }
    }

    /// The server's pid, once it has started (for tests).
    package var serverPid: pid_t? {
        state.withLock { $0.server?.pid }
    }

    /// The server, if one started, leaves (see ``ForkServer/close()``); one
    /// not started yet (``startSoon()`` may be on its way) never will.
    package func close() {
        state.withLock { state -> ForkServer? in
            state.tried = true
            state.works = false
            return state.server
        }?.close()
    }
}

/// A worker the fork server forked, ended through the server: it kills the
/// worker's group and reaps it, and reports how it ended. When the server
/// dies first, a worker still alive is this process's child (a subreaper)
/// and ends as a ``HelperProcess``.
///
/// The server takes only kills: a `signal` step other than SIGKILL reaches
/// a forked worker only once it is adopted.
package final class ForkedWorker: TeardownTarget {
    package enum End: Sendable {
        /// Its wait status, as the server reported it.
        case status(Int32)
        /// The server died first, and the worker came to this process.
        case adopted(HelperProcess)
        /// The server died first, and the worker did not come here: it ended
        /// itself on its parent's death, and how it ended is unknown.
        case unknown
    }

    package let pid: pid_t
    private let server: ForkServer
    private let child: ForkServer.Child
    /// How it ended, once known, and whether a kill was asked for before:
    /// a kill the server could no longer take (it died) reaches the worker
    /// once it is adopted.
    private let end = Mutex<(end: End?, killAsked: Bool)>((nil, false))
    /// Left once `end` is set.
    private let ending = DispatchGroup()

    /// Takes `child` of `server`; `ended` is called once, on the server's
    /// reader thread, when how it ended is known.
    package init(_ child: ForkServer.Child, of server: ForkServer, ended: @escaping @Sendable (End) -> Void = { _ in }) {
        pid = child.pid
        self.server = server
        self.child = child
        ending.enter()
        server.onExit(of: child.pid) { [self] code in
            let known: End =
                if let code { .status(code) } else if let pidfd = ForkServer.childPidfd(child.pid) {
                    .adopted(HelperProcess(pid: child.pid, pidfd: pidfd))
                } else { .unknown }
            let killAsked = end.withLock { state -> Bool in
                state.end = known
                return state.killAsked
            }
            if killAsked, case .adopted(let helper) = known { helper.killGroup() }
            ending.leave()
            ended(known)
        }
    }

    /// How it ended, once known.
    package var ended: End? { end.withLock { $0.end } }

    package var hasExited: Bool {
        switch ended {
        case nil: false
        case .adopted(let helper): helper.hasExited
        case .status, .unknown: true
        }
    }

    package func waitForExit(timeout: Duration?) -> Bool {
        let clock = ContinuousClock()
        let start = clock.now
        if let timeout {
            guard ending.wait(timeout: .now() + .nanoseconds(Int(clamping: timeout.nanoseconds))) == .success else { return false }
        } else {
            ending.wait()
        }
        guard case .adopted(let helper) = ended else { return true }
        return helper.waitForExit(timeout: timeout.map { $0 - start.duration(to: clock.now) })
    }

    package func send(_ signal: Int32) {
        if signal == SIGKILL { return killGroup() }
        if case .adopted(let helper) = ended { helper.send(signal) }
    }

    package func killGroup() {
        let ended = end.withLock { state -> End? in
            if state.end == nil { state.killAsked = true }
            return state.end
        }
        switch ended {
        case nil: server.kill(child)  // the server kills it if it has not reaped it
        case .adopted(let helper): helper.killGroup()
        case .status, .unknown: break  // the server killed its group before it reaped it
        }
    }

    package func reap() -> Int32? {
        ending.wait()
        switch ended {
        case .status(let status): return status
        case .adopted(let helper): return helper.reap()
        case .unknown, nil: return nil
        }
    }
}
