import Curfew
import CurfewFormats
import Synchronization

/// `curfew events`: the host's events as JSON lines, the last
/// ``recentLimit`` kept for a reader that asks, each new one sent to every
/// reader following, like `journalctl -f`. Publishing never waits for a
/// reader: each has a buffer of at most ``readerBufferLimit`` bytes, which
/// one thread drains into its socket as the socket takes it; a reader that
/// falls that far behind is sent a notice and cut off.
final class EventStream: Sendable {
    static let recentLimit = 1000
    static let readerBufferLimit = 1 << 20
    static let maximumReaders = 16

    private final class Reader: @unchecked Sendable {
        // Safe because every field is used under `state`'s lock.
        let fd: Int32
        let job: String?
        let follows: Bool
        var pending: [UInt8] = []
        var sent = 0
        /// Cut off (too slow), or done (not following): closed once its buffer is out.
        var closing = false

        init(fd: Int32, job: String?, follows: Bool) {
            self.fd = fd
            self.job = job
            self.follows = follows
        }
    }

    private struct Line {
        let job: String?
        let text: String
    }

    private struct State {
        var recent: [Line] = []
        var oldest = 0
        var readers: [Reader] = []
        var closed = false
    }

    private let state = Mutex(State())
    /// Wakes the writer: a byte written when there is something to send.
    private let wake: [Int32]

    init() {
        wake = (try? Syscalls.pipe()) ?? [-1, -1]
        if wake[0] >= 0 {
            Syscalls.setNonBlocking(wake[0])
            Syscalls.setNonBlocking(wake[1])
            let stream = self
            if !OSThread.detach({ stream.write() }) {
                Syscalls.close(wake[0])
                Syscalls.close(wake[1])
            }
        }
    }

    /// Keeps `line` (about `job`, if any) and queues it for each reader of it.
    func publish(_ line: String, job: String?) {
        let woke = state.withLock { state -> Bool in
            guard !state.closed else { return false }
            let kept = Line(job: job, text: line)
            if state.recent.count < Self.recentLimit {
                state.recent.append(kept)
            } else {
                state.recent[state.oldest] = kept
                state.oldest = (state.oldest + 1) % Self.recentLimit
            }
            var any = false
            for reader in state.readers where reader.follows && !reader.closing && (reader.job == nil || reader.job == job) {
                Self.queue(line, to: reader)
                any = true
            }
            return any
        }
        if woke { poke() }
    }

    /// Takes `fd` as a reader of the events about `job` (all: `nil`): the
    /// kept ones first, then, if it `follows`, each as it comes. `false`
    /// (and `fd` left to the caller) when there are too many readers.
    func attach(_ fd: Int32, job: String?, follows: Bool) -> Bool {
        let taken = state.withLock { state -> Bool in
            guard !state.closed, state.readers.count < Self.maximumReaders else { return false }
            let reader = Reader(fd: fd, job: job, follows: follows)
            let ordered = state.recent[state.oldest...] + state.recent[..<state.oldest]
            for line in ordered where job == nil || line.job == job { Self.queue(line.text, to: reader) }
            if !follows { reader.closing = true }
            state.readers.append(reader)
            return true
        }
        if taken {
            Syscalls.setNonBlocking(fd)
            poke()
        }
        return taken
    }

    /// Closes every reader; publishing does nothing after.
    func close() {
        let readers = state.withLock { state -> [Reader] in
            state.closed = true
            defer { state.readers = [] }
            return state.readers
        }
        for reader in readers { Syscalls.close(reader.fd) }
        poke()
    }

    /// Appends `line` to `reader`'s buffer, or cuts it off past the limit.
    private static func queue(_ line: String, to reader: Reader) {
        guard !reader.closing else { return }
        if reader.pending.count - reader.sent + line.utf8.count + 1 > readerBufferLimit {
            reader.pending.removeFirst(reader.sent)
            reader.sent = 0
            reader.pending += Array(#"{"event":"cut-off","message":"this reader fell more than 1 MiB behind; follow again"}"#.utf8) + [10]
            reader.closing = true
            return
        }
        reader.pending += Array(line.utf8)
        reader.pending.append(10)
    }

    private func poke() {
        guard wake[1] >= 0 else { return }
        var byte: UInt8 = 1
        _ = withUnsafeBytes(of: &byte) { try? Syscalls.write(wake[1], $0) }
    }

    /// The writer: sends each reader what it can take, without blocking,
    /// and closes those done, cut off or gone.
    private func write() {
        var drain = [UInt8](repeating: 0, count: 256)
        while true {
            let readers = state.withLock { state -> [Reader]? in state.closed ? nil : state.readers }
            guard let readers else {
                Syscalls.close(wake[0])
                Syscalls.close(wake[1])
                return
            }
            var entries = [Syscalls.PollEntry(wake[0])]
            var watched: [Reader] = []
            for reader in readers {
                let waiting = state.withLock { _ in reader.pending.count > reader.sent }
                // A reader's socket is read only for its end (it sends nothing).
                entries.append(Syscalls.PollEntry(reader.fd, input: true, output: waiting))
                watched.append(reader)
            }
            _ = Syscalls.poll(&entries, milliseconds: 1000)
            if entries[0].hasEvent { while (try? Syscalls.read(wake[0], into: &drain)) ?? 0 > 0 {} }
            var gone: [Reader] = []
            for (index, reader) in watched.enumerated() {
                let entry = entries[index + 1]
                if entry.isClosed { gone.append(reader); continue }
                if entry.isReadable {
                    // A reader sends nothing after its request: what comes is its end, or dropped.
                    let count = (try? Syscalls.receive(reader.fd, into: &drain, nonBlocking: true)) ?? -1
                    if count == 0 { gone.append(reader); continue }
                }
                let done = state.withLock { _ -> Bool in
                    while reader.pending.count > reader.sent {
                        let result = reader.pending[reader.sent...].withUnsafeBytes { bytes -> Result<Int, SystemError> in
                            do throws(SystemError) {
                                return .success(try Syscalls.send(reader.fd, bytes, nonBlocking: true))
                            } catch {
                                return .failure(error)
                            }
                        }
                        let written: Int
                        switch result {
                        case .success(let count): written = count
                        case .failure(let error): return error != .wouldBlock  // a reader that went away is done
                        }
                        if written == 0 { break }
                        reader.sent += written
                    }
                    if reader.sent > 64 << 10 {
                        reader.pending.removeFirst(reader.sent)
                        reader.sent = 0
                    }
                    return reader.closing && reader.pending.count <= reader.sent
                }
                if done { gone.append(reader) }
            }
            if !gone.isEmpty {
                let closing = state.withLock { state -> [Reader] in
                    let ids = Set(gone.map { ObjectIdentifier($0) })
                    let leaving = state.readers.filter { ids.contains(ObjectIdentifier($0)) }
                    state.readers.removeAll { ids.contains(ObjectIdentifier($0)) }
                    return leaving
                }
                for reader in closing { Syscalls.close(reader.fd) }
            }
        }
    }
}

extension EventStream {
    /// A run's event as a line of `curfew events`, and the job it is about.
    static func line(_ event: RunEvent, at time: WallTime) -> (text: String, job: String?) {
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
            return (out.text, job)
        case .log(let job, let level, let message):
            var out = line("log", job)
            out.add("level", level.description)
            out.add("message", message)
            return (out.text, job)
        case .progress(let job, let progress):
            var out = line("progress", job)
            out.add("completed", progress.completed)
            out.add("total", progress.total)
            return (out.text, job)
        case .expiring(let job, let reason):
            var out = line("expiring", job)
            out.add("reason", reason.rawValue)
            return (out.text, job)
        case .nextRunRequested(let job, let delay):
            var out = line("next-run", job)
            out.add("after", delay.seconds)
            return (out.text, job)
        case .runSubmitted(let job, let run):
            var out = line("submit", job)
            out.add("target", run.job)
            out.add("after", run.after.seconds)
            return (out.text, job)
        case .conditionsRequired(let job, let conditions):
            var out = line("conditions", job)
            out.add("conditions", conditions.sorted().map(\.rawValue))
            return (out.text, job)
        case .finished(let result):
            var out = line("finished", result.job)
            out.add("outcome", result.outcome.rawValue)
            out.add("reason", result.reason)
            out.add("elapsed", result.elapsed.seconds)
            return (out.text, result.job)
        case .output(let plugin, let stream, let text):
            var out = line("output", nil)
            out.add("plugin", plugin)
            out.add("stream", stream)
            out.add("line", text)
            return (out.text, nil)
        }
    }

    /// A notice of the server's as a line of `curfew events` (about no one job).
    static func line(_ notice: Server.Notice, at time: WallTime) -> String {
        var out = JSONLine("event", "notice")
        out.add("time", time.milliseconds)
        switch notice {
        case .info(let text): out.add("level", "info"); out.add("message", text)
        case .warning(let text): out.add("level", "warning"); out.add("message", text)
        case .error(let text): out.add("level", "error"); out.add("message", text)
        }
        return out.text
    }
}
