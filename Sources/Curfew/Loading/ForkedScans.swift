import _CurfewShims

extension SafeScanner {
    /// What ``scanForked(_:environment:shouldStop:started:)`` saw through.
    struct ForkedScans {
        /// Verdicts by file, and whether the file alone decided each.
        var answers: [String: (result: FileResult, cacheable: Bool)] = [:]
        /// Files it has no verdict on (its server could not start or fork,
        /// or died with them in hand, or a scanner ended before it loaded
        /// anything): for ``scanAlone``.
        var left: [String] = []
        /// The caller asked to stop: files not answered are in neither list.
        var stopped = false
        /// How each batch server ended (its wait status), for those that started.
        var serverStatuses: [Int32] = []
    }

    /// Scans plugin libraries with batch servers (C that runs no Swift:
    /// `curfew-scanner`, else `curfew __scanbatch.N`, see
    /// ``SafeScanner/batchExecutable``): each forks a scanner per file, reads each one's
    /// channel, reaps it, and reports what it said and how it ended on one
    /// stream. The host's part per file is a request, a read and the check of
    /// the answer; no thread, socket pair or fork round trip of its own.
    ///
    /// One server per core (four at most): a server forks, reads and reaps
    /// its scanners one after another, so a single one keeps one core busy
    /// with that alone while scanners wait for it. Files go to whichever
    /// server has room, from this one thread.
    ///
    /// When plugin code kills a server, the files it had in hand are left
    /// for ``scanAlone``, whose scanners answer on channels of this process.
    ///
    /// - Parameter started: Called once the servers are started (or could
    ///   not be), for work of the caller's to run while they scan.
    /// - Parameter environment: The servers' (``scannerEnvironment``).
    func scanForked(_ files: [String], environment: [String], shouldStop: () -> Bool, started: () -> Void = {}) -> ForkedScans {
        var scans = ForkedScans()
        guard !files.isEmpty else {
            started()
            return scans
        }
        let cores = RunConfiguration.activeProcessorCount
        // Twice the cores scan at once in all (sixteen at most), shared by the servers.
        let count = min(cores, 4, files.count)
        let width = max(2, min(2 * cores, 16) / count)
        var servers: [ScanServer] = []
        if usesForkServer {
            // `curfew-scanner` when installed, else (or when it cannot start) the host's own image.
            let executables = [batchExecutable, workerExecutable].compactMap { $0 }
            spawning: for _ in 0..<count {
                for executable in executables {
                    if let server = ForkServer.spawn(
                        executable: executable, argument: CURFEW_SCAN_BATCH_ARGUMENT, environment: environment, kind: .stream)
                    {
                        servers.append(ScanServer(server: server, width: width, timeoutPerFile: timeoutPerFile))
                        continue spawning
                    }
                }
                break
            }
        }
        started()
        guard !servers.isEmpty else {
            scans.left = files
            return scans
        }
        var batch = ScanBatch(scanner: self, files: files, servers: servers)
        batch.run(into: &scans, shouldStop: shouldStop)
        scans.serverStatuses = batch.close(stopping: scans.stopped)
        return scans
    }
}

/// The host's side of one batch server.
private struct ScanServer {
    let server: (pid: Int32, control: Int32)
    let process: HelperProcess
    /// Files sent to it and not yet reported, by id (their index in the batch's files).
    var inHand = Set<Int>()
    /// Bytes read and not yet a whole report.
    var pending: [UInt8] = []
    /// Requests waiting until the socket takes them: the host never blocks
    /// on a server that is busy writing a report, and reads while it waits
    /// to write.
    var outbox: [UInt8]
    /// Whether it has been told that no more files will come.
    var allSent = false
    /// Gone (it died, or spoke out of protocol): its files went another way.
    var gone = false
    /// When it last said anything.
    var heard = ContinuousClock.now
    /// How many files it may hold at once: twice its scanners and twice the
    /// reports it sends at once, so it has files to start while its reports
    /// wait to be sent and while the host answers them.
    let ahead: Int

    init(server: (pid: Int32, control: Int32), width: Int, timeoutPerFile: Duration) {
        self.server = server
        process = HelperProcess(pid: server.pid)
        let timeout = UInt32(clamping: max(1, timeoutPerFile.milliseconds))
        outbox = withUnsafeBytes(of: (timeout, UInt32(width))) { Array($0) }
        ahead = 2 * (width + Int(CURFEW_SCAN_REPORTS_AT_ONCE))
    }

    /// Sends what the socket takes now of the outbox; false once the server is gone.
    mutating func flush() -> Bool {
        while !outbox.isEmpty {
            let sent: Int
            do throws(SystemError) {
                sent = try Syscalls.send(server.control, outbox, nonBlocking: true)
            } catch {
                return error == .wouldBlock
            }
            guard sent > 0 else { return false }
            outbox.removeFirst(sent)
        }
        return true
    }

    /// The scan is over: the server leaves once it has reported all (at
    /// once, its scanners killed, when `stopping`); by `end` at the latest,
    /// then it is killed. Its wait status.
    mutating func close(stopping: Bool, by end: ContinuousClock.Instant) -> Int32 {
        if stopping && !gone {
            // A stop, if the socket takes it now; else the end of the stream
            // stops it, or it is killed below.
            outbox = withUnsafeBytes(of: (CURFEW_SCAN_STOP, UInt32(0))) { Array($0) }
            _ = flush()
        }
        // Asked to leave by the end of its stream; what it still reports is
        // read (and dropped) so that it is never stuck writing. Its stream's
        // end is its exit: no time beyond `end` to wait for it.
        let (control, gone) = (server.control, gone)
        let status = process.end(
            Teardown([
                .ask(
                    {
                        Syscalls.shutdownSending(control)
                        let clock = ContinuousClock()
                        var buffer = [UInt8](repeating: 0, count: 4096)
                        while !gone && clock.now < end {
                            let milliseconds = Int32(clamping: max(1, clock.now.duration(to: end).milliseconds))
                            guard Syscalls.waitForInput(control, milliseconds: milliseconds) else { break }
                            let count = buffer.withUnsafeMutableBytes { bytes in (try? Syscalls.receive(control, into: bytes)) ?? -1 }
                            if count <= 0 { break }
                        }
                    }, allowed: .zero)
            ]))
        Syscalls.close(control)
        return status ?? -1
    }
}

/// The host's side of a scan by batch servers.
private struct ScanBatch {
    let scanner: SafeScanner
    let files: [String]
    var servers: [ScanServer]

    init(scanner: SafeScanner, files: [String], servers: [ScanServer]) {
        self.scanner = scanner
        self.files = files
        self.servers = servers
    }

    mutating func run(into scans: inout SafeScanner.ForkedScans, shouldStop: () -> Bool) {
        var next = 0
        // A server that says nothing for longer than a file may take, with
        // files in hand, is stuck (plugin code can stop it): given up on.
        let clock = ContinuousClock()
        let patience = scanner.timeoutPerFile + .seconds(5)
        var bytes = [UInt8](repeating: 0, count: 65536)
        while true {
            // Files to the servers with room, each in turn.
            for index in servers.indices where !servers[index].gone {
                while servers[index].inHand.count < servers[index].ahead && next < files.count && files.count < Int(CURFEW_SCAN_END) {
                    let id = next
                    next += 1
                    guard let request = ScannerFrames.request(files[id]) else {
                        scans.answers[files[id]] = SafeScanner.pathTooLongVerdict
                        continue
                    }
                    servers[index].inHand.insert(id)
                    servers[index].outbox += withUnsafeBytes(of: UInt32(id)) { Array($0) } + request
                }
            }
            for index in servers.indices where !servers[index].gone {
                if next == files.count && !servers[index].allSent {
                    servers[index].outbox += withUnsafeBytes(of: (CURFEW_SCAN_END, UInt32(0))) { Array($0) }
                    servers[index].allSent = true
                }
                if !servers[index].flush() { lose(index, into: &scans) }
            }
            let live = servers.indices.filter { !servers[$0].gone }
            if live.isEmpty { break }
            if next == files.count && live.allSatisfy({ servers[$0].inHand.isEmpty && servers[$0].outbox.isEmpty }) { return }
            if shouldStop() {
                scans.stopped = true
                return
            }
            for index in live where !servers[index].inHand.isEmpty && servers[index].heard.duration(to: clock.now) > patience {
                lose(index, into: &scans)
            }
            var entries = live.map { index -> Syscalls.PollEntry in
                Syscalls.PollEntry(servers[index].server.control, output: !servers[index].outbox.isEmpty)
            }
            guard Syscalls.poll(&entries, milliseconds: 100) > 0 else { continue }
            for (entry, index) in zip(entries, live) where !servers[index].gone && entry.hasInputOrEnd {
                let control = servers[index].server.control
                let count: Int
                do throws(SystemError) {
                    count = try Syscalls.receive(control, into: &bytes, nonBlocking: true)
                } catch {
                    if error == .wouldBlock { continue }
                    count = -1
                }
                guard count > 0 else {
                    lose(index, into: &scans)
                    continue
                }
                servers[index].heard = clock.now
                servers[index].pending += bytes[..<count]
                if !readReports(from: index, into: &scans) { lose(index, into: &scans) }
            }
        }
        // Every server is gone (plugin code may kill or stop them): what
        // was never sent goes another way too.
        scans.left += files[next...]
    }

    /// A server is gone: what it had in hand goes another way.
    private mutating func lose(_ index: Int, into scans: inout SafeScanner.ForkedScans) {
        guard !servers[index].gone else { return }
        servers[index].gone = true
        scans.left += servers[index].inHand.sorted().map { files[$0] }
        servers[index].inHand.removeAll()
    }

    /// Takes each whole report off a server's pending bytes; false when one
    /// does not read right (the server is not speaking the protocol: treat
    /// it as gone).
    private mutating func readReports(from index: Int, into scans: inout SafeScanner.ForkedScans) -> Bool {
        var start = 0
        defer { servers[index].pending.removeFirst(start) }
        while servers[index].pending.count - start >= 16 {
            let header = servers[index].pending[start..<start + 16].withUnsafeBytes {
                (id: $0.loadUnaligned(as: UInt32.self), status: $0.loadUnaligned(fromByteOffset: 4, as: Int32.self),
                 flags: $0.loadUnaligned(fromByteOffset: 8, as: UInt32.self), length: $0.loadUnaligned(fromByteOffset: 12, as: UInt32.self))
            }
            guard header.length <= CURFEW_SCAN_MAX_REPLY, servers[index].inHand.contains(Int(header.id)) else { return false }
            guard servers[index].pending.count - start - 16 >= Int(header.length) else { break }
            let said = servers[index].pending[start + 16..<start + 16 + Int(header.length)]
            start += 16 + Int(header.length)
            let id = Int(header.id)
            servers[index].inHand.remove(id)
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

    /// The scan is over: each server leaves once it has reported all (at
    /// once, its scanners killed, when `stopping`); two seconds at most, then
    /// it is killed. Their wait statuses.
    mutating func close(stopping: Bool) -> [Int32] {
        let end = ContinuousClock.now + .seconds(2)
        return servers.indices.map { servers[$0].close(stopping: stopping, by: end) }
    }
}
