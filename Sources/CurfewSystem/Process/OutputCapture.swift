import CurfewFormats
import Glibc
import Synchronization
import _CurfewShims

/// Takes this process's stdout and stderr (fds 1 and 2) away from the code
/// it hosts: whatever a plugin writes there arrives as lines, through
/// `onLine`, and the host keeps the original streams on descriptors of its
/// own (``hostOutput``, ``hostError``).
///
/// In process (`--isolate none`) plugin code shares the host's descriptors;
/// without this, one `printf` would corrupt the host's JSON Lines. A line is
/// at most ``maximumLineLength`` bytes; a longer one arrives in pieces.
///
/// - Important: It changes process-wide state (fds 1 and 2): make one, in a
///   program's entry, before plugin code runs, and ``finish()`` it before
///   the program writes its last words. The host writes only to
///   ``hostOutput`` and ``hostError`` from then on.
public final class OutputCapture: Sendable {
    /// Which stream a line came from.
    public enum Stream: String, Sendable {
        case stdout, stderr
    }

    /// The longest line delivered whole: 64 KiB.
    public static let maximumLineLength = 64 * 1024

    /// The host's own stdout and stderr, duplicated before fds 1 and 2 were
    /// taken over; close-on-exec.
    public let hostOutput: Int32
    public let hostError: Int32

    private struct Reader {
        var buffers = [LineBuffer(maximumLength: OutputCapture.maximumLineLength),
                       LineBuffer(maximumLength: OutputCapture.maximumLineLength)]
        var open = [true, true]
    }

    private let pipes: [Int32]  // read ends, non-blocking
    private let onLine: @Sendable (Stream, String) -> Void
    /// Held while bytes are read and delivered, so ``drain()`` and the
    /// reader thread deliver lines whole and in order.
    private let reader = Mutex(Reader())
    private let finished = Atomic<Bool>(false)

    /// - Throws: ``SystemError`` when a descriptor or the reader thread cannot be made.
    public init(onLine: @escaping @Sendable (Stream, String) -> Void) throws(CurfewError) {
        self.onLine = onLine
        var made: [Int32] = []
        func fail(_ what: String) -> CurfewError {
            let text = String(cString: strerror(errno))
            made.forEach { Glibc.close($0) }
            return CurfewError(.unreadable, "Cannot capture plugins' output (\(what)): \(text).", underlying: text)
        }
        let output = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3)
        guard output >= 0 else { throw fail("dup of stdout") }
        made.append(output)
        let error = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3)
        guard error >= 0 else { throw fail("dup of stderr") }
        made.append(error)
        var readEnds: [Int32] = []
        for target in [STDOUT_FILENO, STDERR_FILENO] {
            let ends: [Int32]
            do throws(SystemError) { ends = try Syscalls.pipe() } catch { throw fail("pipe") }
            made += ends
            _ = fcntl(ends[0], F_SETFL, fcntl(ends[0], F_GETFL) | O_NONBLOCK)
            guard dup2(ends[1], target) == target else { throw fail("dup2") }
            Glibc.close(ends[1])
            made.removeLast()
            readEnds.append(ends[0])
        }
        // Plugins' stdio sees a pipe now; keep stdout line-buffered as on a
        // terminal, so a line arrives when it is written, not 4 KiB later.
        curfew_shim_stdout_line_buffered()
        hostOutput = output
        hostError = error
        pipes = readEnds
        guard OSThread.detach({ [self] in readUntilFinished() }) else {
            dup2(output, STDOUT_FILENO)
            dup2(error, STDERR_FILENO)
            throw fail("reader thread")
        }
    }

    /// Delivers every line written so far, on the calling thread. Call it
    /// before reporting that a job ended, so its last lines come first.
    ///
    /// - Parameter includingPartialLines: Also deliver what follows the last
    ///   newline, as a line: right when no other plugin code is running.
    public func drain(includingPartialLines: Bool = false) {
        // Plugin code may still have stdio buffers: flush them into the pipe first.
        curfew_shim_flush_stdout()
        reader.withLock { reader in
            readAvailable(&reader)
            if includingPartialLines { flushPartialLines(&reader) }
        }
    }

    /// Delivers what was still in the pipes (a last line without a newline
    /// too) and stops the reader. Fds 1 and 2 then point at `/dev/null`:
    /// plugin code still running (a terminated job's thread) cannot reach the
    /// host's streams, nor block on a pipe nobody reads. A process a plugin
    /// left holding a copy of the pipes cannot hold this up.
    public func finish() {
        // Flushed while the reader still runs: a full pipe cannot block it.
        curfew_shim_flush_stdout()
        guard !finished.exchange(true, ordering: .acquiringAndReleasing) else { return }
        reader.withLock { reader in
            readAvailable(&reader)
            flushPartialLines(&reader)
            reader.open = [false, false]
        }
        // Plugin code still running writes to nowhere now, not to a pipe that
        // fills and blocks it (and the host's own exit behind it).
        let null = open("/dev/null", O_WRONLY | O_CLOEXEC)
        if null >= 0 {
            dup2(null, STDOUT_FILENO)
            dup2(null, STDERR_FILENO)
            Glibc.close(null)
        }
    }

    private func readUntilFinished() {
        while !finished.load(ordering: .acquiring) {
            // drain() also reads, so a wake-up may find nothing: that is fine.
            // Never stdio here: a plugin thread may hold stdout's lock while it
            // waits for this thread to empty the pipe.
            // A pipe whose writers are all gone (a plugin closed fd 1) is left
            // out: poll would report it at once, for ever.
            let open = reader.withLock { $0.open }
            var polls = pipes.indices.filter { open[$0] }.map { pollfd(fd: pipes[$0], events: Int16(POLLIN), revents: 0) }
            if polls.isEmpty { break }
            // A timeout, so the thread notices finish() without a wake-up descriptor.
            let ready = Syscalls.poll(&polls, milliseconds: 100)
            if ready < 0 { break }
            if ready > 0 { reader.withLock { readAvailable(&$0) } }
        }
    }

    /// With the reader lock held: reads each pipe until it would block.
    private func readAvailable(_ reader: inout Reader) {
        var chunk = [UInt8](repeating: 0, count: 65536)
        for index in pipes.indices where reader.open[index] {
            while true {
                let count = chunk.withUnsafeMutableBytes { bytes in Syscalls.retryingEINTR { Glibc.read(pipes[index], bytes.baseAddress, bytes.count) } }
                if count == 0 {  // end of file: no writer is left
                    reader.open[index] = false
                    if let last = reader.buffers[index].flush() { deliver(last, from: index) }
                    break
                }
                if count < 0 { break }  // would block
                let lines = chunk.withUnsafeBytes { reader.buffers[index].append(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
                for line in lines { deliver(line, from: index) }
            }
        }
    }

    private func flushPartialLines(_ reader: inout Reader) {
        for index in reader.buffers.indices {
            if let last = reader.buffers[index].flush() { deliver(last, from: index) }
        }
    }

    private func deliver(_ line: String, from index: Int) {
        onLine(index == 0 ? .stdout : .stderr, line)
    }
}
