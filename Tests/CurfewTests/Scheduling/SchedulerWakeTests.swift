import Dispatch
import Glibc
import Synchronization
import Testing
import _CurfewShims

@testable import Curfew

/// How the scheduler's monitor sleeps in a burst: at most once a tick while
/// every thread works, not once for each deadline or each piece of work.
@Suite(.timeLimit(.minutes(1))) struct SchedulerWakeTests {
    func now() -> UInt64 { curfew_shim_monotonic_nanoseconds() }

    /// Waits for `semaphore` at most ten seconds; false when it never came.
    func waited(_ semaphore: DispatchSemaphore) -> Bool {
        semaphore.wait(timeout: .now() + 10) == .success
    }

    /// Before: with every thread in work, the monitor was woken for each
    /// deadline and each enqueue, thousands of times a second. On a
    /// two-core machine that kept the second core from ever looking idle to
    /// the kernel, which then left one hook thread waiting behind the other
    /// on the first for milliseconds: the p99 of a burst of expirations.
    @Test func theMonitorWakesOnceATickWhileEveryThreadWorksInShortPieces() {
        // A tick of a second: a machine that holds both threads off their
        // cores for that long is the only way the monitor fires a timer here
        // (then it wakes for each deadline, and those wakes are not counted).
        let tick: UInt64 = 1_000_000_000
        let scheduler = HookScheduler(
            threads: 2, stall: .seconds(60), monitorTick: .nanoseconds(Int64(tick)))
        let stop = Atomic<Bool>(false)
        let stopped = DispatchSemaphore(value: 0)
        // Two lanes that never empty, each piece 20 µs: both threads always
        // work, and look at the timers between pieces.
        for _ in 0..<2 {
            let lane = scheduler.makeLane()
            @Sendable func piece() {
                let until = curfew_shim_monotonic_nanoseconds() + 20_000
                while curfew_shim_monotonic_nanoseconds() < until {}
                if stop.load(ordering: .relaxed) { stopped.signal() } else { lane.enqueue(piece) }
            }
            lane.enqueue(piece)
        }
        // A deadline every 50 µs for 100 ms.
        let start = now() + 2_000_000
        let fired = Atomic<Int>(0)
        for index in 0..<2000 {
            _ = scheduler.schedule(at: start + UInt64(index) * 50_000) { fired.add(1, ordering: .relaxed) }
        }
        while fired.load(ordering: .relaxed) < 2000 && now() < start + 10_000_000_000 { usleep(1000) }
        let wakes = scheduler.monitorWakeCount
        let elapsed = now() - start + 2_000_000
        stop.store(true, ordering: .relaxed)
        #expect(waited(stopped) && waited(stopped))
        #expect(fired.load(ordering: .relaxed) == 2000)
        // Once a tick, one more before it sleeps, and a few for the lanes' start.
        #expect(wakes <= elapsed / tick + 8, "the monitor woke \(wakes) times in \(elapsed / 1_000_000) ms")
    }
}
