import Dispatch
import Glibc
import _CurfewShims

/// Calls a handler for each SIGINT, SIGTERM (or other signal) the process
/// receives, on a Dispatch queue.
///
/// The signal handler is installed with `sigaction` before `init` returns and
/// only writes the signal's number to a pipe (async-signal-safe), so no signal
/// is lost, not even one that arrives before the queue reads the pipe. A
/// `DispatchSource` signal source would register asynchronously, leaving a
/// window in which the signal is dropped or takes its default action.
public final class SignalMonitor: Sendable {
    // Safe because DispatchSource's cancel is thread-safe; the type is just not annotated.
    private nonisolated(unsafe) let source: any DispatchSourceRead
    private let signals: [Int32]

    /// - Throws: ``CurfewError`` when the pipe or a handler cannot be set up.
    public init(
        signals: [Int32], queue: DispatchQueue = .global(), handler: @escaping @Sendable (Int32) -> Void
    ) throws(CurfewError) {
        let descriptor = signals.withUnsafeBufferPointer {
            curfew_shim_signal_pipe($0.baseAddress, Int32($0.count))
        }
        guard descriptor >= 0 else {
            let text = String(cString: strerror(errno))
            throw CurfewError(.unreadable, "Cannot watch for signals: \(text).", underlying: text)
        }
        self.signals = signals
        source = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
        source.setEventHandler {
            var bytes = [UInt8](repeating: 0, count: 16)
            while true {
                let count = bytes.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
                if count <= 0 { break }
                bytes.prefix(count).forEach { handler(Int32($0)) }
            }
        }
        source.activate()
    }

    /// A signal's name, as people read it in a reason: "SIGTERM", or
    /// "signal 42" for one without a name here.
    package static func name(of number: Int32) -> String {
        let names: [Int32: String] = [
            SIGSEGV: "SIGSEGV", SIGABRT: "SIGABRT", SIGBUS: "SIGBUS", SIGFPE: "SIGFPE", SIGILL: "SIGILL",
            SIGKILL: "SIGKILL", SIGTERM: "SIGTERM", SIGXCPU: "SIGXCPU", SIGPIPE: "SIGPIPE", SIGTRAP: "SIGTRAP",
            SIGINT: "SIGINT", SIGSYS: "SIGSYS", SIGXFSZ: "SIGXFSZ", SIGHUP: "SIGHUP",
        ]
        return names[number] ?? "signal \(number)"
    }

    /// Stops calling the handler and gives each signal its default action
    /// back: once the work it stopped is over, a Ctrl-C (say, while a
    /// summary prints) ends the process, as it would any other.
    public func cancel() {
        source.cancel()
        for number in signals { signal(number, SIG_DFL) }
    }
}
