import Curfew
import CurfewHost
import Dispatch
import Synchronization

/// Where the CLI writes: whole lines, never interleaved, plus the live
/// status block at the bottom of a terminal.
final class Console: Sendable {
    private struct Live {
        /// The block's lines, each with the job it shows.
        var entries: [(job: String, line: String)] = []
        var lines: [String] { entries.map(\.line) }
        /// The process's last lines are written: nothing more is.
        var sealed = false
    }

    /// The stream human messages go to: stdout, or stderr when stdout carries JSON.
    let humanDescriptor: Int32
    /// Human output goes to a terminal.
    let humanIsTerminal: Bool
    /// Colours are used: a terminal, and NO_COLOR unset or empty.
    let usesColor: Bool
    private let live = Mutex(Live())
    /// Called once, with the descriptor, when a reader goes away (EPIPE).
    private let closedHandler = Mutex<(@Sendable (Int32) -> Void)?>(nil)
    /// The descriptors whose reader has gone: nothing more is written to them.
    private static let closedDescriptors = Mutex<Set<Int32>>([])

    /// Whether a write to stdout or stderr found its reader gone (EPIPE),
    /// in this process; the tool then exits with ``ExitCode/outputClosed``.
    static var outputWasClosed: Bool { !closedDescriptors.withLock { $0.isEmpty } }

    /// Where machine output and errors go: stdout and stderr, or the
    /// descriptors an ``OutputCapture`` kept for the host.
    let outputDescriptor: Int32
    let errorDescriptor: Int32

    /// The descriptors systemd connected to the journal (`$JOURNAL_STREAM`):
    /// each line written there starts with its syslog priority.
    private let journal: Set<Int32>

    /// How much a line matters, as syslog numbers it: the journal reads
    /// `<N>` at a line's start, so `journalctl -p warning` finds warnings.
    enum Priority: Int {
        case error = 3, warning = 4, notice = 5, info = 6, debug = 7
    }

    init(json: Bool, output: Int32 = Syscalls.standardOutput, error: Int32 = Syscalls.standardError, environment: [String: String] = [:]) {
        outputDescriptor = output
        errorDescriptor = error
        journal = Set([output, error].filter { ServiceNotifier.isJournal($0, environment: environment) })
        humanDescriptor = json ? error : output
        humanIsTerminal = Syscalls.isTerminal(humanDescriptor)
        let noColor = Syscalls.environmentValue("NO_COLOR") ?? ""
        usesColor = humanIsTerminal && noColor.isEmpty
    }

    /// Calls `handler` once, when a write first finds its reader gone.
    func onOutputClosed(_ handler: @escaping @Sendable (Int32) -> Void) {
        closedHandler.withLock { $0 = handler }
    }

    /// Writes a line for people.
    func human(_ line: String, priority: Priority = .info) {
        emit(line, to: humanDescriptor, priority: priority)
    }

    /// Writes a line of machine output to stdout.
    func machine(_ line: String, priority: Priority = .info) {
        emit(line, to: outputDescriptor, priority: priority)
    }

    /// Writes lines for people at once: a listing, in one write rather
    /// than a write (and a wakeup of the reader) per line.
    func human(lines: [String], priority: Priority = .info) {
        emit(lines, to: humanDescriptor, priority: priority)
    }

    /// Writes lines of machine output to stdout at once.
    func machine(lines: [String], priority: Priority = .info) {
        emit(lines, to: outputDescriptor, priority: priority)
    }

    /// Writes an error line to stderr.
    func error(_ line: String, priority: Priority = .error) {
        emit(line, to: errorDescriptor, priority: priority)
    }

    /// Replaces the live status block (terminals only): one line per job.
    func setLive(_ entries: [(job: String, line: String)]) {
        guard humanIsTerminal else { return }
        live.withLock { live in
            guard !live.sealed else { return }
            var text = clearing(live.entries.count)
            for entry in entries { text += entry.line + "\n" }
            live.entries = entries
            write(text, to: humanDescriptor)
        }
    }

    /// Takes `job`'s line out of the live status block, if it has one.
    func removeLive(_ job: String) {
        guard humanIsTerminal else { return }
        live.withLock { live in
            guard !live.sealed, live.entries.contains(where: { $0.job == job }) else { return }
            var text = clearing(live.entries.count)
            live.entries.removeAll { $0.job == job }
            for entry in live.entries { text += entry.line + "\n" }
            write(text, to: humanDescriptor)
        }
    }

    /// The terminal's width in columns, when human output goes to one that says.
    var columns: Int? {
        guard humanIsTerminal else { return nil }
        return Syscalls.terminalColumns(humanDescriptor)
    }

    private func emit(_ line: String, to descriptor: Int32, priority: Priority) {
        emit([line], to: descriptor, priority: priority)
    }

    /// Writes `machine` (when given) and `error`, the process's last lines:
    /// nothing is written after them. For plugin code that ends the process
    /// in process: its other threads may still be delivering events, and no
    /// line may follow the one that says the process ended.
    func last(machine: String?, error: String) {
        live.withLock { live in
            guard !live.sealed else { return }
            // The status block goes for good: nothing will draw it again.
            if !live.entries.isEmpty {
                write(clearing(live.entries.count), to: humanDescriptor)
                live.entries = []
            }
            if let machine { write(text([machine], to: outputDescriptor, priority: .info), to: outputDescriptor) }
            write(text([error], to: errorDescriptor, priority: .error), to: errorDescriptor)
            live.sealed = true
        }
    }

    private func text(_ lines: [String], to descriptor: Int32, priority: Priority) -> String {
        let prefix = journal.contains(descriptor) ? "<\(priority.rawValue)>" : ""
        var text = ""
        for line in lines { text += prefix + line + "\n" }
        return text
    }

    private func emit(_ lines: [String], to descriptor: Int32, priority: Priority) {
        guard !lines.isEmpty else { return }
        let text = text(lines, to: descriptor, priority: priority)
        live.withLock { live in
            guard !live.sealed else { return }
            guard !live.lines.isEmpty else { return write(text, to: descriptor) }
            // A status block is drawn under the last line: lift it, write, put it back.
            write(clearing(live.lines.count), to: humanDescriptor)
            write(text, to: descriptor)
            write(live.lines.map { $0 + "\n" }.joined(), to: humanDescriptor)
        }
    }

    private func clearing(_ count: Int) -> String {
        count == 0 ? "" : "\u{1B}[\(count)A\r\u{1B}[J"
    }

    func paint(_ text: String, _ color: Color) -> String {
        usesColor ? "\u{1B}[\(color.rawValue)m\(text)\u{1B}[0m" : text
    }

    enum Color: String {
        case red = "31", green = "32", yellow = "33", magenta = "35", dim = "2", bold = "1"
    }

    private func write(_ text: String, to descriptor: Int32) {
        guard !Self.closedDescriptors.withLock({ $0.contains(descriptor) }) else { return }
        do throws(SystemError) {
            try Syscalls.writeAll(descriptor, Array(text.utf8))
            return
        } catch {
            guard error == .brokenPipe else { return }
        }
        // The reader is gone (`| head`, a closed terminal): stop writing there
        // and say so once; SIGPIPE is ignored, so the host lives to clean up.
        let first = Self.closedDescriptors.withLock { $0.insert(descriptor).inserted }
        // Called off this thread: it may hold the live lock, and the handler may write.
        if first, let handler = closedHandler.withLock({ $0 }) { SerialQueue.host.async { handler(descriptor) } }
    }

}

