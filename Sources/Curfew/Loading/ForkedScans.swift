import Glibc
import _CurfewShims

extension SafeScanner {
    /// What ``scanForked(_:shouldStop:)`` saw through.
    struct ForkedScans {
        /// Verdicts by file, and whether the file alone decided each.
        var answers: [String: (result: FileResult, cacheable: Bool)] = [:]
        /// Files it has no verdict on (its server could not start or fork,
        /// or died with them in hand, or a scanner ended before it loaded
        /// anything): for ``scanAlone``.
        var left: [String] = []
        /// The caller asked to stop: files not answered are in neither list.
        var stopped = false
        /// How the batch server ended (its wait status), when one started.
        var serverStatus: Int32?
    }

    /// Scans plugin libraries with one batch server (`curfew __scanbatch`,
    /// C that runs no Swift): it forks a scanner per file, as many at once
    /// as twice the cores, reads each one's channel, reaps it, and reports
    /// what it said and how it ended on one stream. The host's part per
    /// file is a request, a read and the check of the answer; no thread,
    /// socket pair or fork round trip of its own.
    ///
    /// When plugin code kills the server, the files it had in hand are left
    /// for ``scanAlone``, whose scanners answer on channels of this process.
    func scanForked(_ files: [String], shouldStop: () -> Bool) -> ForkedScans {
        var scans = ForkedScans()
        guard !files.isEmpty else { return scans }
        guard usesForkServer,
            let server = ForkServer.spawn(
                executable: workerExecutable, argument: CURFEW_SCAN_BATCH_ARGUMENT, environment: WorkerProtocol.helperEnvironment(),
                type: SOCK_STREAM)
        else {
            scans.left = files
            return scans
        }
        var batch = ScanBatch(scanner: self, files: files, server: server)
        batch.run(into: &scans, shouldStop: shouldStop)
        scans.serverStatus = batch.close(stopping: scans.stopped)
        return scans
    }
}

/// The host's side of one `__scanbatch` server.
private struct ScanBatch {
    let scanner: SafeScanner
    let files: [String]
    let server: (pid: pid_t, control: Int32)
    /// The files sent and not yet reported, by id (their index in `files`).
    private var inHand = Set<Int>()
    private var pending: [UInt8] = []

    init(scanner: SafeScanner, files: [String], server: (pid: pid_t, control: Int32)) {
        self.scanner = scanner
        self.files = files
        self.server = server
    }

    mutating func run(into scans: inout SafeScanner.ForkedScans, shouldStop: () -> Bool) {
        let cores = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        let width = max(2, min(2 * cores, 16))
        let timeout = UInt32(clamping: max(1, scanner.timeoutPerFile.milliseconds))
        // Requests wait here until the socket takes them: this side never
        // blocks on a server that is busy writing a report, and reads while
        // it waits to write.
        var outbox = withUnsafeBytes(of: (timeout, UInt32(width))) { Array($0) }
        var next = 0
        var allSent = false
        // A few requests ahead of the scanners, not all.
        let ahead = 2 * width
        // A server that says nothing for longer than a file may take, with
        // files in hand, is stuck (plugin code can stop it): given up on.
        let clock = ContinuousClock()
        let patience = scanner.timeoutPerFile + .seconds(5)
        var heard = clock.now
        while true {
            while inHand.count < ahead && next < files.count && files.count < Int(CURFEW_SCAN_END) {
                let id = next
                next += 1
                guard let request = ScannerFrames.request(files[id]) else {
                    scans.answers[files[id]] = (
                        .rejected(code: CurfewError.Code.loadFailed.rawValue, reason: "Cannot be loaded: its path is longer than \(CURFEW_SCAN_MAX_PATH) bytes."),
                        true
                    )
                    continue
                }
                inHand.insert(id)
                outbox += withUnsafeBytes(of: UInt32(id)) { Array($0) } + request
            }
            if next == files.count && !allSent {
                outbox += withUnsafeBytes(of: (CURFEW_SCAN_END, UInt32(0))) { Array($0) }
                allSent = true
            }
            guard flush(&outbox) else { break }
            if inHand.isEmpty && next == files.count && outbox.isEmpty { return }
            if shouldStop() {
                scans.stopped = true
                return
            }
            if !inHand.isEmpty && heard.duration(to: clock.now) > patience { break }
            let events = Int16(POLLIN) | (outbox.isEmpty ? 0 : Int16(POLLOUT))
            var entry = pollfd(fd: server.control, events: events, revents: 0)
            let ready = poll(&entry, 1, 100)
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0, entry.revents & ~Int16(POLLOUT) != 0 else { continue }
            var bytes = [UInt8](repeating: 0, count: 65536)
            let count = bytes.withUnsafeMutableBytes { recv(server.control, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if count < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) { continue }
            guard count > 0 else { break }
            heard = clock.now
            pending += bytes[..<count]
            guard readReports(into: &scans) else { break }
        }
        // The server is gone (plugin code may kill or stop it): what it had
        // in hand, and what it was never sent, go another way.
        scans.left += inHand.sorted().map { files[$0] } + files[next...]
        inHand.removeAll()
    }

    /// Sends what the socket takes now of `outbox`; false once the server is gone.
    private func flush(_ outbox: inout [UInt8]) -> Bool {
        while !outbox.isEmpty {
            let sent = outbox.withUnsafeBytes { Glibc.send(server.control, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
            if sent > 0 {
                outbox.removeFirst(sent)
                continue
            }
            if sent < 0 && errno == EINTR { continue }
            return sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
        }
        return true
    }

    /// Takes each whole report off `pending`; false when one does not read
    /// right (the server is not speaking the protocol: treat it as gone).
    private mutating func readReports(into scans: inout SafeScanner.ForkedScans) -> Bool {
        var start = 0
        defer { pending.removeFirst(start) }
        while pending.count - start >= 16 {
            let header = pending[start..<start + 16].withUnsafeBytes {
                (id: $0.loadUnaligned(as: UInt32.self), status: $0.loadUnaligned(fromByteOffset: 4, as: Int32.self),
                 flags: $0.loadUnaligned(fromByteOffset: 8, as: UInt32.self), length: $0.loadUnaligned(fromByteOffset: 12, as: UInt32.self))
            }
            guard header.length <= CURFEW_SCAN_MAX_REPLY, inHand.contains(Int(header.id)) else { return false }
            guard pending.count - start - 16 >= Int(header.length) else { break }
            let said = pending[start + 16..<start + 16 + Int(header.length)]
            start += 16 + Int(header.length)
            let id = Int(header.id)
            inHand.remove(id)
            report(files[id], status: header.status, flags: header.flags, said: said, into: &scans)
        }
        return true
    }

    /// One file's verdict from its scanner's report.
    private func report(
        _ file: String, status: Int32, flags: UInt32, said bytes: ArraySlice<UInt8>, into scans: inout SafeScanner.ForkedScans
    ) {
        if flags & CURFEW_SCAN_NOT_STARTED != 0 {
            scans.left.append(file)
            return
        }
        if flags & CURFEW_SCAN_HUNG != 0 {
            scans.answers[file] = scanner.hungVerdict
            return
        }
        var reply = ScannerFrames(file: file)
        var said = ScannerSaid()
        _ = said.hear(bytes.withUnsafeBytes { reply.read($0) })
        if flags & CURFEW_SCAN_OVERFLOW != 0 { said.cutShort(ScannerFrames.tooMuch) }
        guard !said.endedBeforeLoading else {
            // It ended before it loaded anything: no verdict on the file.
            scans.left.append(file)
            return
        }
        scans.answers[file] = said.verdict(status: status)
    }

    /// The scan is over: the server leaves once it has reported all (at
    /// once, its scanners killed, when `stopping`); two seconds at most, then
    /// it is killed. Its wait status.
    func close(stopping: Bool) -> Int32 {
        if stopping {
            // A stop, if the socket takes it now; else the end of the stream
            // stops it, or it is killed below.
            var stop = withUnsafeBytes(of: (CURFEW_SCAN_STOP, UInt32(0))) { Array($0) }
            _ = flush(&stop)
        }
        shutdown(server.control, Int32(SHUT_WR))
        let clock = ContinuousClock()
        let end = clock.now + .seconds(2)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while clock.now < end {
            var entry = pollfd(fd: server.control, events: Int16(POLLIN), revents: 0)
            let ready = poll(&entry, 1, Int32(clamping: max(1, clock.now.duration(to: end).milliseconds)))
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { break }
            let count = buffer.withUnsafeMutableBytes { recv(server.control, $0.baseAddress, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
        }
        Glibc.close(server.control)
        Glibc.kill(server.pid, SIGKILL)  // gone by now, unless stuck: not reaped yet, so still its pid
        var status: Int32 = 0
        while waitpid(server.pid, &status, 0) < 0 && errno == EINTR {}
        return status
    }
}
