import Glibc
import _CurfewShims

extension SafeScanner {
    /// What ``scanForked(_:shouldStop:)`` saw through.
    struct ForkedScans {
        /// Verdicts by file, and whether the file alone decided each.
        var answers: [String: (result: FileResult, cacheable: Bool)] = [:]
        /// Files it has no verdict on (its server could not start, or died
        /// before it forked them, or a scanner ended before it loaded
        /// anything): for ``scanAlone``.
        var left: [String] = []
        /// The caller asked to stop: files not answered are in neither list.
        var stopped = false
    }

    /// Scans plugin libraries, each in a C scanner of its own forked by one
    /// scan server (`curfew __scanserver`), all from the calling thread:
    /// every file's request is sent without waiting for the last one's
    /// fork, and one `poll` watches the server and every scanner's channel,
    /// so a file costs the host a socket pair and a few system calls, not a
    /// thread and its wake-ups.
    ///
    /// A scanner's channel is this process's: when plugin code kills the
    /// server, a scanner that comes to this process (a subreaper) is seen
    /// through here, its wait status read from a pidfd.
    func scanForked(_ files: [String], shouldStop: () -> Bool) -> ForkedScans {
        var scans = ForkedScans()
        guard !files.isEmpty else { return scans }
        guard usesForkServer,
            let server = ForkServer.spawn(
                executable: workerExecutable, argument: CURFEW_SCAN_SERVER_ARGUMENT, environment: WorkerProtocol.helperEnvironment())
        else {
            scans.left = files
            return scans
        }
        var loop = ScanLoop(scanner: self, server: server)
        loop.run(files, into: &scans, shouldStop: shouldStop)
        loop.close()
        return scans
    }
}

/// One file's scanner, while it runs.
private struct ScanSlot {
    let file: String
    /// This process's end of the scanner's socket; -1 once it has said all
    /// it will (done, a problem, or the end of the stream).
    var channel: Int32
    var reply: ScannerFrames
    /// Known from the server's reply to the fork (0 before).
    var pid: pid_t = 0
    var sequence: UInt64 = 0
    var answer: FileResult?
    var problem: String?
    var finished = false
    var loading = false
    /// Its wait status once known; `.some(nil)` when it cannot be known.
    var status: Int32??
    /// When it must have answered; then, once it has, when it must have exited.
    var deadline: ContinuousClock.Instant
    var hung = false
    /// Asked to be killed (sent once its pid is known).
    var killing = false
    /// A pidfd for a scanner that came to this process when its server died.
    var pidfd: Int32 = -1
}

/// The event loop of ``SafeScanner/scanForked(_:shouldStop:)``.
private struct ScanLoop {
    let scanner: SafeScanner
    let serverPid: pid_t
    /// The server's control socket; -1 once it is gone.
    private var control: Int32
    private let null = open("/dev/null", O_WRONLY | O_CLOEXEC)
    private var slots: [Int: ScanSlot] = [:]
    /// Slots whose fork the server has not answered yet, in the order asked.
    private var awaitingPid: [Int] = []
    private var awaitingHead = 0
    private var nextSlot = 0
    private let clock = ContinuousClock()
    private let timeout: Duration

    init(scanner: SafeScanner, server: (pid: pid_t, control: Int32)) {
        self.scanner = scanner
        serverPid = server.pid
        control = server.control
        timeout = scanner.timeoutPerFile
    }

    mutating func run(_ files: [String], into scans: inout SafeScanner.ForkedScans, shouldStop: () -> Bool) {
        // Twice as many scanners at once as cores: each mostly waits for
        // dlopen's reads and its fork.
        let width = max(2, min(2 * Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))), 16))
        var next = 0
        while true {
            if shouldStop() {
                scans.stopped = true
                for id in slots.keys { kill(id) }
                return
            }
            while control >= 0 && slots.count < width && next < files.count {
                start(files[next], into: &scans)
                next += 1
            }
            if slots.isEmpty {
                if next < files.count {
                    scans.left += Array(files[next...])  // the server is gone
                }
                return
            }
            wait(into: &scans)
            finishDue(into: &scans)
        }
    }

    /// Asks the server for a scanner of `file`, or hands the file on.
    private mutating func start(_ file: String, into scans: inout SafeScanner.ForkedScans) {
        guard let request = ScannerFrames.request(file) else {
            scans.answers[file] = (
                .rejected(code: CurfewError.Code.loadFailed.rawValue, reason: "Cannot be loaded: its path is longer than \(CURFEW_SCAN_MAX_PATH) bytes."),
                true
            )
            return
        }
        guard let pair = try? Syscalls.socketPair() else {
            scans.left.append(file)
            return
        }
        let sent = curfew_shim_send_with_fds(control, "fork", [pair[1], null, null]) == 0
        Glibc.close(pair[1])
        guard sent else {
            Glibc.close(pair[0])
            scans.left.append(file)
            serverGone(into: &scans)
            return
        }
        // Waits in the socket until the scanner reads it.
        WorkerProtocol.send(bytes: request, to: pair[0])
        let id = nextSlot
        nextSlot += 1
        slots[id] = ScanSlot(file: file, channel: pair[0], reply: ScannerFrames(file: file), deadline: clock.now + timeout)
        awaitingPid.append(id)
    }

    private enum Watch {
        case control, channel(Int), pidfd(Int)
    }

    /// Waits, 100 ms at most (the caller's stop is asked that often), for
    /// the server or a scanner, and reads what came.
    private mutating func wait(into scans: inout SafeScanner.ForkedScans) {
        var polls: [pollfd] = []
        var watches: [Watch] = []
        if control >= 0 {
            polls.append(pollfd(fd: control, events: Int16(POLLIN), revents: 0))
            watches.append(.control)
        }
        var soonest = clock.now + .milliseconds(100)
        for (id, slot) in slots {
            if slot.channel >= 0 {
                polls.append(pollfd(fd: slot.channel, events: Int16(POLLIN), revents: 0))
                watches.append(.channel(id))
            }
            if slot.pidfd >= 0 {
                polls.append(pollfd(fd: slot.pidfd, events: Int16(POLLIN), revents: 0))
                watches.append(.pidfd(id))
            }
            if slot.status == nil { soonest = min(soonest, slot.deadline) }
        }
        let wait = max(0, clock.now.duration(to: soonest).milliseconds)
        let ready = poll(&polls, nfds_t(polls.count), Int32(clamping: wait + 1))
        guard ready > 0 else { return }
        for (index, watch) in watches.enumerated() where polls[index].revents != 0 {
            switch watch {
            case .control: readControl(into: &scans)
            case .channel(let id): readChannel(id)
            case .pidfd(let id): reapAdopted(id)
            }
        }
    }

    /// Reads the server's replies: a pid for each fork, in order, and each
    /// scanner's wait status.
    private mutating func readControl(into scans: inout SafeScanner.ForkedScans) {
        var buffer = [UInt8](repeating: 0, count: 128)
        while control >= 0 {
            let count = buffer.withUnsafeMutableBytes { recv(control, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if count < 0 && errno == EINTR { continue }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return }
            if count <= 0 {
                serverGone(into: &scans)
                return
            }
            let words = String(decoding: buffer[..<count], as: UTF8.self).split(separator: " ")
            if words.first == "pid", words.count == 3, awaitingHead < awaitingPid.count {
                let id = awaitingPid[awaitingHead]
                awaitingHead += 1
                guard var slot = slots[id] else { continue }
                guard let pid = pid_t(words[1]), pid > 0, let sequence = UInt64(words[2]) else {
                    // Not forked: no verdict here.
                    if slot.channel >= 0 { Glibc.close(slot.channel) }
                    slots[id] = nil
                    scans.left.append(slot.file)
                    continue
                }
                slot.pid = pid
                slot.sequence = sequence
                slots[id] = slot
                if slot.killing { kill(id) }
            } else if words.first == "exit", words.count == 3, let pid = pid_t(words[1]), let status = Int32(words[2]),
                let id = slots.first(where: { $0.value.pid == pid })?.key
            {
                slots[id]!.status = .some(status)
            }
        }
    }

    /// Reads what a scanner said; once it is done, or says something no
    /// scanner says, or its stream ends, it is read no more.
    private mutating func readChannel(_ id: Int) {
        guard var slot = slots[id] else { return }
        var bytes = [UInt8](repeating: 0, count: 65536)
        let count = bytes.withUnsafeMutableBytes { read(slot.channel, $0.baseAddress, $0.count) }
        if count < 0 && errno == EINTR { return }
        if count > 0 {
            let events = bytes.withUnsafeBytes { slot.reply.read(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
            for event in events {
                switch event {
                case .problem(let what): slot.problem = slot.problem ?? what
                case .done: slot.finished = true
                case .loading: slot.loading = true
                case .answer(let result):
                    if slot.answer != nil { slot.problem = slot.problem ?? "two answers" }
                    slot.answer = result
                }
            }
            guard slot.finished || slot.problem != nil else {
                slots[id] = slot
                return
            }
        }
        Glibc.close(slot.channel)
        slot.channel = -1
        let ended = slot.finished && slot.problem == nil
        // Said it was done: it has two seconds to exit.
        if ended { slot.deadline = clock.now + .seconds(2) }
        slots[id] = slot
        if !ended { kill(id) }
    }

    /// Kills a scanner's process group (the server reaps it and reports).
    private mutating func kill(_ id: Int) {
        guard var slot = slots[id], slot.status == nil else { return }
        slot.killing = true
        if slot.pidfd >= 0 {
            Glibc.kill(-slot.pid, SIGKILL)  // ours now, not reaped: its pid is still its own
        } else if slot.pid > 0 && control >= 0 {
            _ = "kill \(slot.pid) \(slot.sequence)".withCString { Glibc.send(control, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        }
        slots[id] = slot
    }

    /// Reaps a scanner that came to this process, once its pidfd says it ended.
    private mutating func reapAdopted(_ id: Int) {
        guard var slot = slots[id], slot.pidfd >= 0 else { return }
        Glibc.kill(-slot.pid, SIGKILL)  // what it left in its group
        var status: Int32 = 0
        while waitpid(slot.pid, &status, 0) < 0 && errno == EINTR {}
        Glibc.close(slot.pidfd)
        slot.pidfd = -1
        slot.status = .some(status)
        slots[id] = slot
    }

    /// The server is gone (plugin code may kill it): a scanner it had not
    /// forked yet is handed on; one that came to this process is seen
    /// through here; one that did not, ends itself on its parent's death,
    /// and how is unknown.
    private mutating func serverGone(into scans: inout SafeScanner.ForkedScans) {
        guard control >= 0 else { return }
        Glibc.close(control)
        control = -1
        Glibc.kill(serverPid, SIGKILL)
        var status: Int32 = 0
        while waitpid(serverPid, &status, 0) < 0 && errno == EINTR {}
        for (id, slot) in slots where slot.status == nil {
            if slot.pid == 0 {
                if slot.channel >= 0 { Glibc.close(slot.channel) }
                slots[id] = nil
                scans.left.append(slot.file)
            } else if let pidfd = ForkServer.childPidfd(slot.pid) {
                slots[id]!.pidfd = pidfd
                if slot.killing { kill(id) }
            } else {
                slots[id]!.status = .some(nil)
            }
        }
        awaitingPid.removeAll()
        awaitingHead = 0
    }

    /// Kills the scanners past their deadline, and gives each scanner that
    /// has said all it will and ended its verdict.
    private mutating func finishDue(into scans: inout SafeScanner.ForkedScans) {
        let now = clock.now
        for id in Array(slots.keys) {
            var slot = slots[id]!
            if now >= slot.deadline {
                // No answer within the timeout: loading the file hangs. Or
                // it said it was done, yet did not exit.
                if slot.channel >= 0 { slot.hung = true }
                slots[id] = slot
                if slot.status == nil && !slot.killing { kill(id) }
                slot = slots[id]!
            }
            // Its end is known (or cannot be), and it has said all it will.
            guard let status = slot.status, slot.channel < 0 || slot.hung || status == nil else { continue }
            if slot.channel >= 0 { Glibc.close(slot.channel) }
            slots[id] = nil
            if slot.hung {
                scans.answers[slot.file] = scanner.hungVerdict
            } else if slot.problem == nil && !slot.loading {
                // It ended before it loaded anything: no verdict on the file.
                scans.left.append(slot.file)
            } else {
                scans.answers[slot.file] = SafeScanner.verdict(
                    answer: slot.answer, problem: slot.problem, finished: slot.finished, status: status)
            }
        }
    }

    /// The scan is over: the server kills and reaps what is left and leaves;
    /// two seconds at most.
    mutating func close() {
        if null >= 0 { Glibc.close(null) }
        for slot in slots.values {
            if slot.channel >= 0 { Glibc.close(slot.channel) }
            if slot.pidfd >= 0 {
                Glibc.kill(-slot.pid, SIGKILL)
                var status: Int32 = 0
                while waitpid(slot.pid, &status, 0) < 0 && errno == EINTR {}
                Glibc.close(slot.pidfd)
            }
        }
        slots.removeAll()
        guard control >= 0 else { return }
        shutdown(control, Int32(SHUT_WR))
        let end = clock.now + .seconds(2)
        var buffer = [UInt8](repeating: 0, count: 128)
        while clock.now < end {
            var entry = pollfd(fd: control, events: Int16(POLLIN), revents: 0)
            let ready = poll(&entry, 1, Int32(clamping: max(1, clock.now.duration(to: end).milliseconds)))
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { break }
            let count = buffer.withUnsafeMutableBytes { recv(control, $0.baseAddress, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
        }
        Glibc.close(control)
        control = -1
        Glibc.kill(serverPid, SIGKILL)  // gone by now, unless stuck: not reaped yet, so still its pid
        var status: Int32 = 0
        while waitpid(serverPid, &status, 0) < 0 && errno == EINTR {}
    }
}
