import Glibc
import Synchronization
import Testing

@testable import Curfew

/// Signals the handler counts: how many reached the polling thread.
private let signalsTaken = Atomic<Int>(0)

/// The seam retries what a handled signal interrupts, for the time left:
/// no caller sees `EINTR`, and a wait is not cut short by one.
@Suite(.timeLimit(.minutes(1))) struct SyscallsTests {
    @Test func aHandledSignalNeitherFailsNorShortensAPoll() async throws {
        // SIGWINCH: ignored by default, so a stray one harms no other test.
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { _ in signalsTaken.add(1, ordering: .relaxed) }
        sigemptyset(&action.sa_mask)
        action.sa_flags = 0  // no SA_RESTART: poll would return EINTR
        var previous = sigaction()
        try #require(sigaction(SIGWINCH, &action, &previous) == 0)
        defer { sigaction(SIGWINCH, &previous, nil) }
        let ends = try Syscalls.pipe()
        defer { ends.forEach { close($0) } }

        let (ready, failure, waited, taken) = try await Fixtures.offPool { () -> (Int32, Int32, Duration, Int) in
            var only = sigset_t()
            sigemptyset(&only)
            sigaddset(&only, SIGWINCH)
            pthread_sigmask(SIG_UNBLOCK, &only, nil)  // a thread may start with it blocked
            let before = signalsTaken.load(ordering: .relaxed)
            // Signals while the poll waits, from another thread, until it returns.
            let signals = SignalSender(target: pthread_self())
            var sender = pthread_t()
            let context = Unmanaged.passRetained(signals).toOpaque()
            pthread_create(&sender, nil, { context in
                let sender = Unmanaged<SignalSender>.fromOpaque(context!).takeRetainedValue()
                while !sender.done.load(ordering: .relaxed) {
                    pthread_kill(sender.target, SIGWINCH)
                    usleep(10_000)
                }
                return nil
            }, context)
            var entries = [pollfd(fd: ends[0], events: Int16(POLLIN), revents: 0)]
            // The control: the signals reach a poll here, which libc's own
            // call reports as EINTR, well before its 30 s.
            let raw = Glibc.poll(&entries, 1, 30_000)
            guard raw == -1 && errno == EINTR else {
                signals.done.store(true, ordering: .relaxed)
                pthread_join(sender, nil)
                return (raw, errno, .zero, 0)
            }
            let clock = ContinuousClock()
            let start = clock.now
            let ready = Syscalls.poll(&entries, milliseconds: 300)
            let failure = errno
            let waited = clock.now - start
            signals.done.store(true, ordering: .relaxed)
            pthread_join(sender, nil)
            return (ready, failure, waited, signalsTaken.load(ordering: .relaxed) - before)
        }
        #expect(ready == 0, "poll returned \(ready) (errno \(failure))")
        #expect(waited >= .milliseconds(300) && waited < .seconds(10), "waited \(waited)")
        #expect(taken > 0, "no signal reached the poll: the test proved nothing")
    }

    @Test func aReadIsRetriedNotFailedAfterASignal() throws {
        var calls = 0
        let result = Syscalls.retryingEINTR { () -> Int in
            calls += 1
            if calls < 3 {
                errno = EINTR
                return -1
            }
            return 7
        }
        #expect(result == 7 && calls == 3)
        let failed = Syscalls.retryingEINTR { () -> Int in
            errno = EBADF
            return -1
        }
        #expect(failed == -1 && errno == EBADF)
    }
}

private final class SignalSender: @unchecked Sendable {
    let target: pthread_t
    let done = Atomic<Bool>(false)
    init(target: pthread_t) { self.target = target }
}

/// A monitor catches its signals while it runs, and gives them back after.
@Suite struct SignalMonitorTests {
    @Test func aCancelledMonitorLeavesItsSignalsToTheirDefaultAction() throws {
        // SIGURG: ignored by default, and no other test's. SIG_DFL is the null handler.
        func handler() -> sighandler_t? {
            var current = sigaction()
            sigaction(SIGURG, nil, &current)
            return current.__sigaction_handler.sa_handler
        }
        let monitor = try SignalMonitor(signals: [SIGURG]) { _ in }
        #expect(handler() != nil, "caught while the monitor runs")
        monitor.cancel()
        #expect(handler() == nil, "the default action after")
    }
}
