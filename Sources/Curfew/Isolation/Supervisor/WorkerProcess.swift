import CurfewFormats
import Dispatch
import Synchronization
import _CurfewShims

/// One worker process, from the host's side: its pid, socket and pipes, the
/// jobs it hosts (one with `--isolate job`, a plugin's with `--isolate
/// plugin`), and a thread that reads its messages, stdout and stderr, routes
/// them to the jobs, and, when the worker exits, reaps it and tells each job
/// still on it how it ended.
final class WorkerProcess: @unchecked Sendable {
    // Safe because the mutable state is the `state` Mutex, and the socket is
    // written, shut and closed only under it; pid is set in init.
    private struct State {
        var jobs: [String: WorkerRun] = [:]
        /// Every job this worker was given: a message may name only these.
        var given: Set<String> = []
        /// The worker has exited: no message, kill or job may reach it (its
        /// descriptor numbers and, once reaped, its pid may belong to others).
        var exited = false
        var killedFor: Kill?
    }

    /// Why the host killed a worker.
    enum Kill: Equatable {
        /// This job overran its hard deadline.
        case deadline(job: String)
        /// This job reported its end, and its worker did not exit.
        case lingered(job: String)
        /// The worker broke the protocol: plugin code wrote on its channel.
        case invalidMessage(String)
    }

    let pid: Int32
    private let channel: Int32
    private let state = Mutex(State())
    /// Held while a line is written to the channel, and when it is closed
    /// (true from then on). Not the state lock: a long write (a run message
    /// with a 1 MiB checkpoint, to a worker busy loading) must not keep a
    /// kill at the deadline, or the reader, waiting.
    private let channelLock = Mutex(false)
    /// How it is killed and reaped: by this process (``HelperProcess``), or
    /// through the fork server that forked it (``ForkedWorker``).
    private let process: any TeardownTarget
    /// For a forked worker: one byte is written when how it ended is known.
    private let exitPipe: [Int32]

    /// A worker this process started (and reaps); `scratches`: where its
    /// scratch folder comes from and goes back to (`nil`: made and removed).
    init(_ worker: WorkerPool.Worker, scratches: ScratchFolders? = nil) {
        pid = worker.process.pid
        reusesCgroup = false
        cgroup = Mutex((nil, false))
        scratch = Mutex((nil, false))
        self.scratches = scratches
        channel = worker.channel
        process = worker.process
        exitPipe = []
        let (out, err) = (worker.out, worker.err)
        OSThread.detach { self.supervise(out: out, err: err) }
    }

    /// A worker the fork server forked (and reaps); `exitPipe` is this one's
    /// own, `cgroup` the one it was moved into (``cgroup(for:)``), `scratch`
    /// its scratch folder when one was made with it, from `scratches`;
    /// `sandboxed`: whether its jobs run under Landlock, so none can write
    /// its cgroup's files, and the cgroup may go to a later worker.
    init(
        forked child: ForkServer.Child, by server: ForkServer, channel: Int32, out: Int32, err: Int32, exitPipe: [Int32],
        cgroup group: WorkerCgroup?, scratch folder: String? = nil, scratches: ScratchFolders? = nil, sandboxed: Bool = false
    ) {
        pid = child.pid
        reusesCgroup = sandboxed
        scratch = Mutex((folder, false))
        self.scratches = scratches
        // Moved in as it was forked, or never: once it exits its fork server
        // reaps it at once, and a later move could take in another process
        // that was given its pid.
        cgroup = Mutex((group, group == nil))
        self.channel = channel
        self.exitPipe = exitPipe
        process = ForkedWorker(child, of: server) { end in
            // 1: the server reaped it; 2: the server is gone and the worker,
            // alive, is this process's now.
            var byte: UInt8 = if case .adopted = end { 2 } else { 1 }
            _ = withUnsafeBytes(of: &byte) { try? Syscalls.write(exitPipe[1], $0) }
        }
        // A thread of its own: the loop blocks in poll and waitpid, and Dispatch's
        // pool is only as wide as the machine has cores.
        OSThread.detach { self.supervise(out: out, err: err) }
    }

    /// After the worker exits, how long its streams may stay silent before
    /// reading stops, and how long reading may go on at most.
    static let drainQuiet: Duration = .milliseconds(100)
    static let drainLimit: Duration = .seconds(2)

    /// The folder its jobs write in under a sandbox: made with the worker
    /// or with the first of them, removed once the worker is reaped (then
    /// `closed`: none is made for a worker whose end was handled).
    private let scratch: Mutex<(folder: String?, closed: Bool)>
    /// Where its scratch folder comes from and, once its cgroup is gone, goes back to.
    private let scratches: ScratchFolders?

    /// The worker's scratch folder, made at the first call unless it was made with the worker.
    func scratchFolder() throws(SystemError) -> String {
        try scratch.withLock { (scratch: inout (folder: String?, closed: Bool)) throws(SystemError) -> String in
            // Closed first: a folder given back may be another worker's now.
            guard !scratch.closed else { throw .noProcess }
            if let folder = scratch.folder { return folder }
            let made = if let scratches { try scratches.take() } else { try ScratchFolders.make() }
            scratch.folder = made
            return made
        }
    }

    /// Whether its cgroup, emptied, may go to a later worker.
    private let reusesCgroup: Bool

    /// The worker's own cgroup (see ``WorkerCgroups``): made before its
    /// first job's plugin code runs, killed whole when it is killed or exits
    /// with something left in it, and given back once it is reaped.
    /// `closed` once it has exited: its pid may then be another process's,
    /// which no cgroup may take in, and the cgroup another worker's.
    private let cgroup: Mutex<(group: WorkerCgroup?, closed: Bool)>

    /// A new cgroup with process `pid` in it, where the host has a subtree
    /// for them (``WorkerCgroups``), or `nil`.
    static func cgroup(for pid: Int32) -> WorkerCgroup? {
        try? WorkerCgroups.current?.make(with: pid)
    }

    /// Gives the worker its cgroup's `limits`, first moving it into one of
    /// its own where the host has a subtree for them and it has none yet:
    /// `nil`, or why it could not.
    func confine(_ limits: ResourceLimits) -> String? {
        guard let cgroups = WorkerCgroups.current else { return nil }
        return cgroup.withLock { state -> String? in
            guard !state.closed else {
                return state.group == nil ? "its worker has no cgroup of its own: what the job starts ends by the subreaper walk" : nil
            }
            let group: WorkerCgroup
            if let made = state.group {
                group = made
            } else {
                do throws(SystemError) {
                    group = try cgroups.make(with: pid)
                } catch {
                    return "its worker has no cgroup of its own (\(error.message)): what the job starts ends by the subreaper walk"
                }
                state.group = group
            }
            do throws(SystemError) {
                try cgroups.limit(group, memoryBytes: limits.memoryBytes)
                return nil
            } catch {
                return "its worker's cgroup did not take the memory limit (\(error.message)): only its own address space is bounded"
            }
        }
    }

    /// Whether a new job may join: not exited, not being killed.
    var isUsable: Bool { state.withLock { !$0.exited && $0.killedFor == nil } }

    /// Adds a job and sends its `run` message; false when the worker cannot take it.
    func host(_ run: WorkerRun, message: String) -> Bool {
        let added = state.withLock { state -> Bool in
            guard !state.exited && state.killedFor == nil else { return false }
            state.jobs[run.job.name] = run
            state.given.insert(run.job.name)
            return true
        }
        return added && write(message)
    }

    @discardableResult
    func send(_ line: String) -> Bool {
        state.withLock { !$0.exited } && write(line)
    }

    private func write(_ line: String) -> Bool {
        channelLock.withLock { closed in !closed && WorkerProtocol.send(line, to: channel) }
    }

    /// Whether the worker has ended, though this process may not have
    /// handled its end yet.
    func hasExited() -> Bool {
        state.withLock { $0.exited } || process.hasExited
    }

    /// Kills the whole process group, for the reason given.
    func kill(_ reason: Kill) {
        let first = state.withLock { state -> Bool in
            guard !state.exited && state.killedFor == nil else { return false }
            state.killedFor = reason
            return true
        }
        // Sent only while the group is still the worker's (see TeardownTarget).
        if first {
            process.killGroup()
            // Under the cgroup's lock, and only before its end was handled:
            // once the worker has exited, its cgroup may be the next worker's.
            cgroup.withLock { state in
                if !state.closed { state.group?.kill() }
            }
        }
    }

    /// No more jobs will come: the worker exits once its jobs have ended.
    func close() {
        send(HostMessage.close.line)
    }

    private func supervise(out: Int32, err: Int32) {
        // A pidfd (or, for a forked worker, the server's word) tells when the
        // worker exits even if a process it started still holds its pipes
        // (then end-of-file would never come).
        let forked = process as? ForkedWorker
        var exit = forked == nil ? (process as? HelperProcess)?.pidfd ?? -1 : exitPipe[0]
        /// For a forked worker: whether the server's one byte was read.
        var exitByteTaken = false
        /// Reads the server's byte: false when it says the worker is this process's now.
        func takeExitByte() -> Bool {
            var byte: UInt8 = 0
            _ = withUnsafeMutableBytes(of: &byte) { try? Syscalls.read(exitPipe[0], into: $0) }
            exitByteTaken = true
            guard byte == 2, case .adopted(let helper) = forked?.ended else { return true }
            exit = helper.pidfd
            return false
        }
        // Messages arrive whole or not at all; a line of output longer than
        // 64 KiB comes in pieces: either way the host's memory stays bounded.
        var buffers = [
            LineBuffer(maximumLength: WorkerProtocol.maximumMessageBytes, dropsOverlongLines: true),
            LineBuffer(maximumLength: OutputCapture.maximumLineLength), LineBuffer(maximumLength: OutputCapture.maximumLineLength),
        ]
        let streams = [channel, out, err]
        var open = [true, true, true]
        var chunk = [UInt8](repeating: 0, count: 65536)
        var drainUntil: CurfewInstant?
        let clock = MonotonicClock()
        // stdout and stderr are non-blocking: poll may have found one ready that
        // drainOutput() has emptied since; a read then finds nothing instead of
        // waiting. (Not the channel: the host also sends on it, and only this
        // loop reads it.)
        for stream in [out, err] { Syscalls.setNonBlocking(stream) }
        /// Reads stream `index` once; false at its end.
        func readOnce(_ index: Int) -> Bool {
            // A flood waits in the worker's pipe, not in this process's memory.
            state.withLock { $0.jobs.values.first }?.waitForRoom()
            var count: Int
            do throws(SystemError) {
                if index == 0 {
                    count = try readChannel(into: &chunk)
                } else {
                    count = try Syscalls.read(streams[index], into: &chunk)
                }
            } catch {
                if error == .wouldBlock { return true }
                count = -1
            }
            if count <= 0 {
                open[index] = false
                if let last = buffers[index].flush() { route(last, from: index) }
                return false
            }
            let dropped = buffers[index].droppedLines
            let lines = chunk.withUnsafeBytes { buffers[index].append(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
            if buffers[index].droppedLines > dropped {
                // The worker cuts its own long messages: only plugin code writes one this long.
                kill(.invalidMessage("a message of more than \(WorkerProtocol.maximumMessageBytes >> 20) MiB"))
            }
            if index == 0 {
                for line in lines {
                    // The worker wrote a job's output before any message about it:
                    // take what is in the pipes first, so a job's last lines are
                    // its own and come before its end.
                    drainOutput()
                    if !buffers[1].isEmpty || !buffers[2].isEmpty, endsJob(line), soleJob() {
                        for index in 1...2 { if let last = buffers[index].flush() { route(last, from: index) } }
                    }
                    route(line, from: 0)
                }
                // A descriptor comes with its line's first byte: only a line
                // not whole yet may have one waiting (plugin code sent the rest).
                if attached.count > (buffers[0].isEmpty ? 0 : 1) {
                    kill(.invalidMessage("a descriptor with a message that takes none"))
                    closeAttached()
                }
            } else {
                for line in lines { route(line, from: index) }
            }
            return true
        }
        /// Reads stdout and stderr until neither has more right now, or 1 MiB
        /// each: a flood must not keep the channel and the exit from being read.
        func drainOutput() {
            for index in 1...2 where open[index] {
                var reads = 0
                while reads < 16, open[index], Syscalls.waitForInput(streams[index], milliseconds: 0), readOnce(index) { reads += 1 }
            }
        }
        // Once the worker has exited, everything it wrote is still read, to the
        // end of each stream. Only a process it left behind holding a copy of
        // the pipes can keep an end from coming: then reading stops after
        // `drainQuiet` without a byte, or `drainLimit` after the exit.
        var exitedAt: CurfewInstant?
        while open.contains(true) {
            var polls = streams.indices.filter { open[$0] }.map { Syscalls.PollEntry(streams[$0]) }
            if exit >= 0 && exitedAt == nil { polls.append(Syscalls.PollEntry(exit)) }
            let wait = drainUntil.map { Int32(max(0, clock.now().duration(to: $0).nanoseconds / 1_000_000)) } ?? -1
            let ready = Syscalls.poll(&polls, milliseconds: wait)
            if ready < 0 { break }
            if ready == 0 && drainUntil != nil { break }
            if let exitedAt {
                drainUntil = min(clock.now().advanced(by: Self.drainQuiet), exitedAt.advanced(by: Self.drainLimit))
            }
            for entry in polls where entry.hasEvent {
                if entry.fd == exit {
                    // The fork server died and the worker lives on, this process's child now.
                    if forked != nil && !exitByteTaken && !takeExitByte() { continue }
                    workerExited()
                    exitedAt = clock.now()
                    drainUntil = clock.now().advanced(by: Self.drainQuiet)
                    continue
                }
                let index = streams.firstIndex(of: entry.fd)!
                if open[index] { _ = readOnce(index) }
            }
        }
        // The server's report writes one byte, exactly once: always take it
        // before closing, so the write never meets a closed (or reused) number.
        if forked != nil && !exitByteTaken { _ = takeExitByte() }
        closeAttached()
        workerExited()
        let status = process.reap() ?? -1
        // Its cgroup first: once it is empty (kept for a later worker, or
        // removed), no process the jobs started is left, and their scratch
        // folder can go to the run's next worker.
        var emptied = false
        if let group = cgroup.withLock({ $0.group }) {
            if let error = WorkerCgroups.giveBack(group, reusable: reusesCgroup, allowed: .seconds(1)) {
                state.withLock { $0.jobs.values.first }?.warn("its cgroup \(group.path) could not be removed: \(error.message)")
            } else {
                emptied = true
            }
        }
        // What the jobs left in their scratch folder goes before their ends are told.
        if let folder = scratch.withLock({ scratch -> String? in
            scratch.closed = true
            return scratch.folder
        }) {
            do throws(SystemError) {
                if emptied, let scratches { try scratches.giveBack(folder) } else { try Syscalls.removeTree(folder) }
            } catch {
                state.withLock { $0.jobs.values.first }?.warn("its scratch folder \(folder) could not be removed: \(error.message)")
            }
        }
        // The channel is closed here, not when the worker exited: until now this
        // thread was still polling it, and a number closed under a poll can be
        // handed to the next worker.
        channelLock.withLock { closed in
            closed = true
            Syscalls.close(channel)
        }
        ([out, err] + exitPipe).forEach { Syscalls.close($0) }
        let jobs = state.withLock { state -> [WorkerRun] in
            defer { state.jobs.removeAll() }
            return Array(state.jobs.values)
        }
        let killedFor = state.withLock { $0.killedFor }
        for run in jobs { run.workerExited(status: status, killedFor: killedFor) }
    }

    /// Once the worker has exited (not yet reaped, so its pid is still its
    /// own): no more messages or kills, and whatever it left in its group goes.
    private func workerExited() {
        // Not reaped yet here: its group is still its own while it is killed.
        // (A fork server does the same for its children before it reports.)
        _ = process.waitForExit(timeout: nil)
        let first = state.withLock { state -> Bool in
            defer { state.exited = true }
            return !state.exited
        }
        if first {
            process.killGroup()
            // What left the group (setsid) is still in the cgroup. Killed only
            // when something is left: a cgroup never killed goes to a later worker.
            cgroup.withLock { state -> WorkerCgroup? in
                state.closed = true
                return state.group
            }?.killIfPopulated()
        }
    }

    /// Whether a channel line reports the end of a job (a cheap look, before parsing).
    private func endsJob(_ line: String) -> Bool {
        line.hasPrefix("{\"type\":\"finished\"")
    }

    /// Whether this worker hosts a single job: then a line without a newline is its.
    private func soleJob() -> Bool {
        state.withLock { $0.jobs.count == 1 }
    }

    /// Descriptors the worker sent with its messages, oldest first: each is
    /// a large checkpoint's memory file, for the message that names it.
    /// Only the supervising thread touches it.
    private nonisolated(unsafe) var attached: [Int32] = []
    /// The most descriptors that may wait for their messages.
    static let maximumAttached = 4

    /// Reads the channel once into `chunk`, with the descriptors that came
    /// along: the bytes read, 0 at the end.
    /// Room for as many as one message may carry, so the kernel closes none
    /// here: closing a descriptor plugin code chose can block (a lingering
    /// socket), and this thread must not.
    private func readChannel(into chunk: inout [UInt8]) throws(SystemError) -> Int {
        var fds = [Int32](repeating: -1, count: 253)
        var received: Int32 = 0
        var truncated: Int32 = 0
        let count = chunk.withUnsafeMutableBytes { bytes in
            Syscalls.retryingEINTR {
                curfew_shim_receive_with_descriptors(channel, bytes.baseAddress, UInt(bytes.count), &fds, Int32(fds.count), &received, &truncated)
            }
        }
        let failure = count < 0 ? SystemError.last : nil
        attached += fds.prefix(Int(received))
        if truncated != 0 || attached.count > Self.maximumAttached {
            kill(.invalidMessage("more descriptors than checkpoints waiting for them"))
            closeAttached()
        }
        if let failure { throw failure }
        return Int(count)
    }

    private func closeAttached() {
        Self.closeElsewhere(attached)
        attached.removeAll()
    }

    /// Closes descriptors plugin code sent, off this thread.
    private static func closeElsewhere(_ descriptors: [Int32]) {
        guard !descriptors.isEmpty else { return }
        DispatchQueue.global(qos: .utility).async { descriptors.forEach { Syscalls.close($0) } }
    }

    /// A message with a checkpoint attached, its bytes read from the
    /// descriptor that came with it: a plain checkpoint message, or why not.
    private func resolve(_ message: WorkerMessage) -> Result<WorkerMessage, Unreadable> {
        guard case .attachedCheckpoint(let job, let id, let size) = message else { return .success(message) }
        guard !attached.isEmpty else { return .failure(Unreadable(reason: "a checkpoint without its memory file")) }
        let fd = attached.removeFirst()
        var data = [UInt8](repeating: 0, count: size)
        let read = data.withUnsafeMutableBytes { curfew_shim_read_sealed_memory_file(fd, $0.baseAddress, UInt($0.count)) }
        guard read == size else {
            Self.closeElsewhere([fd])
            return .failure(Unreadable(reason: "a checkpoint whose memory file is not sealed or not of its size (\(size) bytes)"))
        }
        Syscalls.close(fd)  // a sealed memory file: closed at once
        return .success(.checkpoint(job: job, id: id, data: data))
    }

    struct Unreadable: Error {
        let reason: String
    }

    private func route(_ line: String, from stream: Int) {
        let jobs = state.withLock { Array($0.jobs.values) }
        switch stream {
        case 0:
            // Plugin code can write on the channel: a line that is not a message
            // the worker itself would send ends the worker and its jobs.
            let message: WorkerMessage
            do throws(WorkerMessage.Invalid) {
                message = try WorkerMessage.decode(Array(line.utf8))
            } catch {
                return kill(.invalidMessage(error.reason))
            }
            let resolved: WorkerMessage
            switch resolve(message) {
            case .success(let message): resolved = message
            case .failure(let problem): return kill(.invalidMessage(problem.reason))
            }
            guard let name = message.job else {
                // An error of the worker's own, before any job: every job hears it.
                if case .error(let text) = message { jobs.forEach { $0.output(text, stream: "worker") } }
                return
            }
            let (run, known, broken) = state.withLock { state in
                (state.jobs[name], state.given.contains(name), { if case .invalidMessage = state.killedFor { true } else { false } }())
            }
            // After one invalid line, nothing more from this worker is believed.
            if broken { return }
            guard known else {
                return kill(.invalidMessage("a message for \(WorkerMessage.quoted(name)), a job it does not run"))
            }
            // A job that has left this shared worker hears nothing more.
            guard let run else { return }
            if run.handle(resolved) {
                // The job reported its end and leaves this worker (which may host others).
                state.withLock { _ = $0.jobs.removeValue(forKey: run.job.name) }
            }
        default:
            // A worker hosting several jobs cannot tell whose line it is: it is
            // the plugin's then, reported once (each job keeps it for a crash report).
            let name = stream == 1 ? "stdout" : "stderr"
            for run in jobs { run.output(line, stream: name, alone: jobs.count == 1) }
            if jobs.count > 1 { jobs[0].pluginOutput(line, stream: name) }
        }
    }
}
