import Dispatch
import Glibc
import Synchronization
import Testing
import _CurfewShims

@testable import Curfew

/// How the scheduler's threads sleep and wake in a burst: the monitor wakes
/// once a tick, not once a deadline; and an idle thread spins for work
/// while another works, and takes it without being woken.
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
        let tick: UInt64 = 5_000_000
        let scheduler = HookScheduler(
            threads: 2, stall: .seconds(60), monitorTick: .nanoseconds(Int64(tick)), spin: .zero)
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
        let wakes = scheduler.wakeCounts.monitorWakes
        let elapsed = now() - start + 2_000_000
        stop.store(true, ordering: .relaxed)
        #expect(waited(stopped) && waited(stopped))
        #expect(fired.load(ordering: .relaxed) == 2000)
        // Once a tick, one more before it sleeps, and a few for the lanes' start.
        #expect(wakes <= elapsed / tick + 8, "the monitor woke \(wakes) times in \(elapsed / 1_000_000) ms")
    }

    /// Before: an idle thread slept at once, so each piece of work a burst
    /// made for it took a signal and a wake, and the kernel often put the
    /// woken thread on its waker's core.
    @Test func anIdleThreadSpinsWhileAnotherWorksAndTakesWorkWithoutAWake() {
        let start = now()
        // Three threads, each in work: then one blocked, one leading
        // (asleep until told), and one that spins.
        let scheduler = HookScheduler(threads: 3, stall: .seconds(60), spin: .seconds(5))
        let entered = DispatchSemaphore(value: 0)
        let releases = (0..<3).map { _ in DispatchSemaphore(value: 0) }
        let left = DispatchSemaphore(value: 0)
        for release in releases {
            scheduler.makeLane().enqueue {
                entered.signal()
                release.wait()
                left.signal()
            }
        }
        #expect(waited(entered) && waited(entered) && waited(entered))
        #expect(scheduler.threadCount == 3)
        releases[2].signal()  // it leads: no other thread is idle
        #expect(waited(left))
        while scheduler.timerWaitingUntil != .max && now() < start + 10_000_000_000 { usleep(100) }
        releases[1].signal()  // it spins: another leads, and another works
        #expect(waited(left))
        while scheduler.spinningThreads == 0 && now() < start + 10_000_000_000 { usleep(100) }
        #expect(scheduler.spinningThreads == 1)
        let signalsBefore = scheduler.wakeCounts.threadSignals
        let taken = DispatchSemaphore(value: 0)
        scheduler.makeLane().enqueue { taken.signal() }
        #expect(waited(taken))
        #expect(scheduler.wakeCounts.threadSignals == signalsBefore)
        // No thread is left spinning: with none in work, none spins.
        releases[0].signal()
        #expect(waited(left))
        let last = DispatchSemaphore(value: 0)
        scheduler.makeLane().enqueue { last.signal() }
        #expect(waited(last))
    }
}
