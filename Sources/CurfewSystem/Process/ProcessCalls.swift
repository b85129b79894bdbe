// The calling process and thread through the seam: signals, masks, exits,
// limits, naps and thread-local slots. The hot ones (a hook call's mask and
// slot) are inlinable: they cost the libc call and nothing more.
import Glibc

/// The signal numbers the host names.
package enum Signal {
    package static let kill = SIGKILL
    package static let terminate = SIGTERM
    package static let interrupt = SIGINT
    package static let hangUp = SIGHUP
    package static let cpuLimit = SIGXCPU
    package static let segmentationFault = SIGSEGV
    package static let abort = SIGABRT
    package static let busError = SIGBUS
}

/// A thread's signal mask, kept to be put back.
package struct SignalMask {
    @usableFromInline var kept: sigset_t

    @usableFromInline init(kept: sigset_t) { self.kept = kept }

    /// Unblocks every signal on this thread: the mask it had, to restore.
    @inlinable
    package static func unblockAll() -> SignalMask {
        var none = sigset_t()
        var kept = sigset_t()
        sigemptyset(&none)
        pthread_sigmask(SIG_SETMASK, &none, &kept)
        return SignalMask(kept: kept)
    }

    @inlinable
    package func restore() {
        var mask = kept
        pthread_sigmask(SIG_SETMASK, &mask, nil)
    }
}

/// One pointer per thread: each thread reads and writes only its own.
package struct ThreadLocalPointer: Sendable {
    @usableFromInline let key: pthread_key_t

    /// A new slot, never deleted.
    package init() {
        var key = pthread_key_t()
        precondition(pthread_key_create(&key, nil) == 0, "cannot make a thread-local key")
        self.key = key
    }

    @inlinable
    package var value: UnsafeMutableRawPointer? {
        get { pthread_getspecific(key) }
        nonmutating set { pthread_setspecific(key, newValue) }
    }
}

extension OSThread {
    /// A thread's identity, compared with `pthread_equal`.
    package struct ID: Equatable, Sendable {
        let thread: pthread_t

        /// The calling thread.
        package static var current: ID { ID(thread: pthread_self()) }

        package static func == (a: ID, b: ID) -> Bool { pthread_equal(a.thread, b.thread) != 0 }
    }
}

extension Syscalls {
    /// Ends the process now with `status`: no exit handlers, no flushing.
    /// For a child whose handlers (a plugin's, the runtime's) are not its own.
    package static func exitNow(_ status: Int32) -> Never {
        _exit(status)
    }

    /// Ends the process with `status`, running exit handlers.
    package static func exit(_ status: Int32) -> Never {
        Glibc.exit(status)
    }

    /// Runs `handler` when the process exits normally (`exit`, or a return
    /// from `main`).
    package static func atExit(_ handler: @escaping @convention(c) () -> Void) {
        atexit(handler)
    }

    /// Runs `handler` with the exit status when the process calls `exit`.
    package static func onExit(_ handler: @escaping @convention(c) (Int32, UnsafeMutableRawPointer?) -> Void) {
        on_exit(handler, nil)
    }

    /// Waits for signals for ever: for a thread whose process some other
    /// thread will end.
    package static func waitForever() -> Never {
        while true { pause() }
    }

    /// Sleeps for about `microseconds`; a signal may cut it short.
    package static func nap(microseconds: UInt32) {
        usleep(microseconds)
    }

    /// This process's hard limit on open descriptors, or `nil` when it
    /// cannot be read.
    package static func openFileHardLimit() -> UInt64? {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return nil }
        return UInt64(limit.rlim_max)
    }
}

// The standard streams and the terminal.
extension Syscalls {
    package static let standardInput: Int32 = STDIN_FILENO
    package static let standardOutput: Int32 = STDOUT_FILENO
    package static let standardError: Int32 = STDERR_FILENO

    /// Makes `target` a copy of `fd` (`dup2`): `target` is not close-on-exec.
    package static func duplicate(_ fd: Int32, onto target: Int32) throws(SystemError) {
        guard retryingEINTR({ dup2(fd, target) }) >= 0 else { throw .last }
    }

    /// Whether `fd` is a terminal.
    package static func isTerminal(_ fd: Int32) -> Bool {
        isatty(fd) == 1
    }

    /// The width of the terminal `fd`, in columns, when it says.
    package static func terminalColumns(_ fd: Int32) -> Int? {
        var size = winsize()
        guard ioctl(fd, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return nil }
        return Int(size.ws_col)
    }
}
