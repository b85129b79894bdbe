import Curfew
import CurfewFormats
import Synchronization

/// `curfew events`: the host's events as JSON lines, the last ones kept
/// (at most ``recentLimit`` lines and ``recentBytesLimit`` bytes) for a
/// reader that asks, each new one sent to every reader following, like
/// `journalctl -f`. Publishing never waits for a reader, nor makes a line:
/// it queues the event for each reader, and one writer thread makes the
/// lines a batch at a time as a reader's socket takes them, so events no
/// one reads cost no line. A reader more than ``readerBufferLimit`` bytes
/// behind is sent a notice and cut off. The writer thread alone closes
/// readers' sockets, so no descriptor is closed while it may still use it.
package final class EventStream: Sendable {
    static let recentLimit = 1000
    static let recentBytesLimit = 4 << 20
    static let readerBufferLimit = 1 << 20
    static let maximumReaders = 16
    /// How long a reader that is done (cut off, or not following) may take
    /// to read what is left before it is closed anyway.
    static let closingGrace: Duration = .seconds(10)
    /// The longest text one field of a line carries (a log, an output line, a reason).
    static let fieldLimit = 8 << 10

    /// How much of a reader's queue the writer makes into lines at a time,
    /// and how little of them may wait in its buffer before it makes more.
    static let batchBytes = 32 << 10

    /// An event as published: its line is made by the writer, once, when a
    /// reader's socket has room for it or a reader asks for the kept ones.
    private final class Entry: @unchecked Sendable {
        // Safe because `made` is used on the writer thread only.
        enum Source {
            case text(String)
            case event(RunEvent, WallTime)
            case notice(Server.Notice, WallTime)
        }
        let job: String?
        /// About how many bytes its line takes: what the limits count.
        let size: Int
        private let source: Source
        private var made: String?

        init(_ source: Source, job: String?, size: Int) {
            self.source = source
            self.job = job
            self.size = size
        }

        /// Its line; on the writer thread only.
        var line: String {
            if let made { return made }
            let text =
                switch source {
                case .text(let text): text
                case .event(let event, let time): EventStream.text(of: event, at: time)
                case .notice(let notice, let time): EventStream.line(notice, at: time)
                }
            made = text
            return text
        }
    }

    private final class Reader: @unchecked Sendable {
        // Safe because every field is used under `state`'s lock.
        let fd: Int32
        let job: String?
        let follows: Bool
        /// Events not yet made into lines, oldest first, and about how many
        /// bytes they take, with those of a batch being made now.
        var queue: [Entry] = []
        var queued = 0
        /// Lines made, and how much of them is sent.
        var pending: [UInt8] = []
        var sent = 0
        /// It fell too far behind: its queue is dropped, a notice is in `pending`.
        var cut = false
        /// When it was cut off or found done: closed once its buffer is out, or after the grace.
        var closingSince: ContinuousClock.Instant?
        /// It shut its sending side: its socket is not read again.
        var quiet = false

        init(fd: Int32, job: String?, follows: Bool) {
            self.fd = fd
            self.job = job
            self.follows = follows
        }

        var isCaughtUp: Bool { queue.isEmpty && pending.count == sent }

        /// The next events to make into lines (at least one, about
        /// ``batchBytes`` in all), once little is left to send.
        func takeBatch() -> [Entry] {
            guard !cut, !queue.isEmpty, pending.count - sent < EventStream.batchBytes else { return [] }
            var count = 0
            var bytes = 0
            while count < queue.count && (count == 0 || bytes + queue[count].size <= EventStream.batchBytes) {
                bytes += queue[count].size + 1
                count += 1
            }
            // Counted in `queued` until its lines are in `pending` (``made(_:_:)``).
            let batch = Array(queue[..<count])
            queue.removeFirst(count)
            return batch
        }

        /// A batch's lines, made: in `pending` now, unless it was cut off meanwhile.
        func made(_ batch: [Entry], _ lines: [UInt8]) {
            guard !cut else { return }
            queued -= batch.reduce(0) { $0 + $1.size + 1 }
            pending += lines
        }
    }

    private struct State {
        /// The kept events from `head` on, oldest first.
        var recent: [Entry] = []
        var head = 0
        var recentBytes = 0
        var readers: [Reader] = []
        var closed = false
    }

    private let state = Mutex(State())
    /// Wakes the writer. Closed only in `deinit`: the writer thread holds
    /// the stream until it leaves, so no one writes the pipe after.
    private let wake: [Int32]
    /// Whether the writer runs (readers are taken only then).
    private let running = Atomic<Bool>(false)
    /// How many readers follow: lines only they would get are not made without one.
    private let followers = Atomic<Int>(0)

    package init() {
        let pipe = (try? Syscalls.pipe()) ?? []
        wake = pipe.count == 2 ? pipe : []
        guard wake.count == 2 else { return }
        Syscalls.setNonBlocking(wake[0])
        Syscalls.setNonBlocking(wake[1])
        let stream = self
        if OSThread.detach({ stream.write() }) { running.store(true, ordering: .releasing) }
    }

    deinit {
        for fd in wake { Syscalls.close(fd) }
    }

    /// Whether a reader follows now.
    var isFollowed: Bool { followers.load(ordering: .relaxed) > 0 }

    /// Queues `line` (about `job`, if any) for each reader of it, and keeps
    /// it for readers to come unless `keep` is false (progress, which would
    /// crowd out the rest).
    package func publish(_ line: String, job: String?, keep: Bool = true) {
        publish(Entry(.text(line), job: job, size: line.utf8.count), keep: keep)
    }

    /// Queues a run's event, which happened at `time`, as ``publish(_:job:keep:)``
    /// does a line. One with a text longer than a line carries is made into
    /// its line now, so what is kept is what the limits count.
    package func publish(_ event: RunEvent, at time: WallTime, keep: Bool = true) {
        let size = Self.size(of: event)
        let source: Entry.Source = size.cut ? .text(Self.text(of: event, at: time)) : .event(event, time)
        publish(Entry(source, job: Self.job(of: event), size: size.bytes), keep: keep)
    }

    /// Queues a notice of the server's, about no one job.
    func publish(_ notice: Server.Notice, at time: WallTime) {
        let cut: Server.Notice =
            switch notice {
            case .info(let text): .info(Reason.cut(text, to: Self.fieldLimit))
            case .warning(let text): .warning(Reason.cut(text, to: Self.fieldLimit))
            case .error(let text): .error(Reason.cut(text, to: Self.fieldLimit))
            }
        let text = switch cut { case .info(let text), .warning(let text), .error(let text): text }
        publish(Entry(.notice(cut, time), job: nil, size: 64 + text.utf8.count), keep: true)
    }

    private func publish(_ entry: Entry, keep: Bool) {
        let woke = state.withLock { state -> Bool in
            guard !state.closed else { return false }
            if keep {
                state.recent.append(entry)
                state.recentBytes += entry.size
                while state.recent.count - state.head > Self.recentLimit || state.recentBytes > Self.recentBytesLimit {
                    state.recentBytes -= state.recent[state.head].size
                    state.head += 1
                }
                if state.head >= 1024 && state.head * 2 >= state.recent.count {
                    state.recent.removeFirst(state.head)
                    state.head = 0
                }
            }
            // The writer is woken only for a reader it had nothing for: one
            // with lines waiting is in its poll already, for room to send them.
            var idle = false
            for reader in state.readers where reader.follows && reader.closingSince == nil && (reader.job == nil || reader.job == entry.job) {
                if reader.isCaughtUp { idle = true }
                Self.queue(entry, to: reader)
            }
            return idle
        }
        if woke { poke() }
    }

    /// Takes `fd` as a reader of the events about `job` (all: `nil`): the
    /// newest kept ones that fit half its buffer, oldest first, then, if it
    /// `follows`, each as it comes. `false` (and `fd` left to the caller)
    /// when there are too many readers, or the stream is closed.
    package func attach(_ fd: Int32, job: String?, follows: Bool) -> Bool {
        guard running.load(ordering: .acquiring) else { return false }
        let taken = state.withLock { state -> Bool in
            guard !state.closed, state.readers.count < Self.maximumReaders else { return false }
            let reader = Reader(fd: fd, job: job, follows: follows)
            var chosen: [Entry] = []
            var bytes = 0
            for entry in state.recent[state.head...].reversed() where job == nil || entry.job == job {
                bytes += entry.size + 1
                if bytes > Self.readerBufferLimit / 2 { break }
                chosen.append(entry)
            }
            for entry in chosen.reversed() { Self.queue(entry, to: reader) }
            if !follows { reader.closingSince = .now }
            state.readers.append(reader)
            return true
        }
        if taken {
            if follows { followers.add(1, ordering: .relaxed) }
            poke()
        }
        return taken
    }

    /// Ends every reader's stream; publishing does nothing after. The
    /// writer closes their sockets and leaves.
    package func close() {
        let readers = state.withLock { state -> [Reader]? in
            guard !state.closed else { return nil }
            state.closed = true
            return state.readers
        }
        guard let readers else { return }
        // Ends what a reader is blocked on; its descriptor stays the writer's to close.
        for reader in readers { Syscalls.shutdownBoth(reader.fd) }
        poke()
    }

    /// Queues `entry` for `reader`; past the limit, drops what it has not
    /// been sent (but the line going out) for a notice, and ends it.
    private static func queue(_ entry: Entry, to reader: Reader) {
        guard reader.closingSince == nil else { return }
        if reader.pending.count - reader.sent + reader.queued + entry.size + 1 > readerBufferLimit {
            let lineEnd = reader.pending[reader.sent...].firstIndex(of: 10).map { $0 + 1 } ?? reader.sent
            // A line partly sent is finished, so the notice starts a line of its own.
            let partial = reader.sent > 0 && reader.pending[reader.sent - 1] != 10
            reader.pending.removeSubrange((partial ? lineEnd : reader.sent)...)
            reader.pending += Array(#"{"event":"cut-off","message":"this reader fell more than 1 MiB behind; events were lost"}"#.utf8) + [10]
            reader.queue = []
            reader.queued = 0
            reader.cut = true
            reader.closingSince = .now
            return
        }
        reader.queue.append(entry)
        reader.queued += entry.size + 1
    }

    private func poke() {
        guard wake.count == 2 else { return }
        var byte: UInt8 = 1
        _ = withUnsafeBytes(of: &byte) { try? Syscalls.write(wake[1], $0) }
    }

    /// The writer: sends each reader what it can take, without blocking,
    /// and closes those done, cut off or gone.
    private func write() {
        var drain = [UInt8](repeating: 0, count: 256)
        while true {
            let (readers, closed) = state.withLock { state in (state.readers, state.closed) }
            if closed {
                for reader in readers { Syscalls.close(reader.fd) }
                state.withLock { $0.readers = [] }
                return
            }
            var entries = [Syscalls.PollEntry(wake[0])]
            for reader in readers {
                // Left with lines to send only when its socket would take no more.
                let (waiting, quiet) = state.withLock { _ in (reader.pending.count > reader.sent, reader.quiet) }
                entries.append(Syscalls.PollEntry(reader.fd, input: !quiet, output: waiting))
            }
            // Woken each second only while a reader may need closing for its grace.
            _ = Syscalls.poll(&entries, milliseconds: readers.isEmpty ? -1 : 1000)
            if entries[0].hasEvent { while (try? Syscalls.read(wake[0], into: &drain)) ?? 0 > 0 {} }
            var gone: [Reader] = []
            for (index, reader) in readers.enumerated() {
                let entry = entries[index + 1]
                if entry.isReadable {
                    // A reader sends nothing after its request: its end of sending
                    // is no end of reading; more bytes are dropped.
                    if ((try? Syscalls.receive(reader.fd, into: &drain, nonBlocking: true)) ?? -1) == 0 {
                        state.withLock { _ in reader.quiet = true }
                    }
                }
                if entry.isClosed && !entry.isWritable { gone.append(reader); continue }
                if send(to: reader) { gone.append(reader) }
            }
            guard !gone.isEmpty else { continue }
            let leaving = state.withLock { state -> [Reader] in
                let ids = Set(gone.map { ObjectIdentifier($0) })
                let leaving = state.readers.filter { ids.contains(ObjectIdentifier($0)) }
                state.readers.removeAll { ids.contains(ObjectIdentifier($0)) }
                return leaving
            }
            for reader in leaving {
                if reader.follows { followers.subtract(1, ordering: .relaxed) }
                Syscalls.close(reader.fd)
            }
        }
    }
}

extension EventStream {
    /// Sends `reader` what its socket takes, making its queued events into
    /// lines a batch at a time (outside the lock) as room comes: whether it
    /// is done with (gone, or done and sent).
    private func send(to reader: Reader) -> Bool {
        while true {
            let batch = state.withLock { _ in reader.takeBatch() }
            if !batch.isEmpty {
                var bytes: [UInt8] = []
                for entry in batch {
                    bytes += entry.line.utf8
                    bytes.append(10)
                }
                state.withLock { _ in reader.made(batch, bytes) }
            }
            enum Sent { case gone, full, all }
            let sent = state.withLock { _ -> Sent in
                while reader.pending.count > reader.sent {
                    let result = reader.pending[reader.sent...].withUnsafeBytes { bytes -> Result<Int, SystemError> in
                        do throws(SystemError) {
                            return .success(try Syscalls.send(reader.fd, bytes, nonBlocking: true))
                        } catch {
                            return .failure(error)
                        }
                    }
                    switch result {
                    case .success(let count) where count > 0: reader.sent += count
                    case .success: return .full
                    case .failure(let error): return error == .wouldBlock ? .full : .gone  // a reader that went away is done
                    }
                }
                if reader.sent > 64 << 10 {
                    reader.pending.removeFirst(reader.sent)
                    reader.sent = 0
                }
                return .all
            }
            switch sent {
            case .gone: return true
            case .full: break
            case .all: if state.withLock({ _ in !reader.queue.isEmpty && !reader.cut }) { continue }
            }
            return state.withLock { _ -> Bool in
                guard let since = reader.closingSince else { return false }
                return reader.isCaughtUp || ContinuousClock.now - since > Self.closingGrace
            }
        }
    }

    /// The job a run's event is about, if one.
    static func job(of event: RunEvent) -> String? {
        switch event {
        case .started(let job, _, _), .log(let job, _, _), .progress(let job, _), .expiring(let job, _), .nextRunRequested(let job, _),
            .runSubmitted(let job, _), .conditionsRequired(let job, _):
            job
        case .finished(let result): result.job
        case .output: nil
        }
    }

    /// About how many bytes a run's event's line takes (its text fields,
    /// each cut as ``text(of:at:)`` cuts it, and room for the rest), and
    /// whether a field is cut.
    static func size(of event: RunEvent) -> (bytes: Int, cut: Bool) {
        var long = false
        func cut(_ text: String) -> Int {
            let count = text.utf8.count
            if count > fieldLimit { long = true }
            return min(count, fieldLimit)
        }
        let fields =
            switch event {
            case .started(let job, let plugin, _): job.utf8.count + plugin.utf8.count
            case .log(let job, _, let message): job.utf8.count + cut(message)
            case .progress(let job, _), .expiring(let job, _), .nextRunRequested(let job, _): job.utf8.count
            case .runSubmitted(let job, let run): job.utf8.count + run.job.utf8.count
            case .conditionsRequired(let job, let conditions): job.utf8.count + 12 * conditions.count
            case .finished(let result): result.job.utf8.count + cut(result.reason)
            case .output(let plugin, let stream, let line): (plugin?.utf8.count ?? 4) + stream.utf8.count + cut(line)
            }
        return (96 + fields, long)
    }

    /// A run's event as a line of `curfew events`, and the job it is about.
    package static func line(_ event: RunEvent, at time: WallTime) -> (text: String, job: String?) {
        (text(of: event, at: time), job(of: event))
    }

    /// A run's event as a line of `curfew events`.
    static func text(of event: RunEvent, at time: WallTime) -> String {
        func line(_ name: String, _ job: String?) -> JSONLine {
            var line = JSONLine("event", name)
            line.add("time", time.milliseconds)
            if let job { line.add("job", job) }
            return line
        }
        switch event {
        case .started(let job, let plugin, let budget):
            var out = line("started", job)
            out.add("plugin", plugin)
            out.add("budget", budget?.seconds)
            return out.text
        case .log(let job, let level, let message):
            var out = line("log", job)
            out.add("level", level.description)
            out.add("message", Reason.cut(message, to: fieldLimit))
            return out.text
        case .progress(let job, let progress):
            var out = line("progress", job)
            out.add("completed", progress.completed)
            out.add("total", progress.total)
            return out.text
        case .expiring(let job, let reason):
            var out = line("expiring", job)
            out.add("reason", reason.rawValue)
            return out.text
        case .nextRunRequested(let job, let delay):
            var out = line("next-run", job)
            out.add("after", delay.seconds)
            return out.text
        case .runSubmitted(let job, let run):
            var out = line("submit", job)
            out.add("target", run.job)
            out.add("after", run.after.seconds)
            return out.text
        case .conditionsRequired(let job, let conditions):
            var out = line("conditions", job)
            out.add("conditions", conditions.sorted().map(\.rawValue))
            return out.text
        case .finished(let result):
            var out = line("finished", result.job)
            out.add("outcome", result.outcome.rawValue)
            out.add("reason", Reason.cut(result.reason, to: fieldLimit))
            out.add("elapsed", result.elapsed.seconds)
            return out.text
        case .output(let plugin, let stream, let text):
            var out = line("output", nil)
            out.add("plugin", plugin)
            out.add("stream", stream)
            out.add("line", Reason.cut(text, to: fieldLimit))
            return out.text
        }
    }

    /// A notice of the server's as a line of `curfew events` (about no one job).
    static func line(_ notice: Server.Notice, at time: WallTime) -> String {
        var out = JSONLine("event", "notice")
        out.add("time", time.milliseconds)
        switch notice {
        case .info(let text): out.add("level", "info"); out.add("message", Reason.cut(text, to: fieldLimit))
        case .warning(let text): out.add("level", "warning"); out.add("message", Reason.cut(text, to: fieldLimit))
        case .error(let text): out.add("level", "error"); out.add("message", Reason.cut(text, to: fieldLimit))
        }
        return out.text
    }
}
