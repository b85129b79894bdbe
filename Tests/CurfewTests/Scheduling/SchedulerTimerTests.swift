import Dispatch
import Glibc
import Synchronization
import Testing
import _CurfewShims

@testable import Curfew

/// The scheduler's timers: in deadline order, never after a cancel, never
/// inside the call that arms them, fired by the thread that then runs the
/// hook they made ready, and on time even when every hook thread is blocked;
/// the monitor that watches them sleeps through a burst of short work.
@Suite(.timeLimit(.minutes(1))) struct SchedulerTimerTests {
    func now() -> UInt64 { curfew_shim_monotonic_nanoseconds() }

    /// Waits for `semaphore` at most ten seconds; false when it never came.
    func waited(_ semaphore: DispatchSemaphore) -> Bool {
        semaphore.wait(timeout: .now() + 10) == .success
    }

    @Test func timersFireInDeadlineOrderAndTiesInTheOrderArmed() {
        let scheduler = HookScheduler(threads: 2, stall: .seconds(60))
        let fired = Mutex<[Int]>([])
        let done = DispatchSemaphore(value: 0)
        // Far enough out that all are armed before the first is due, unless
        // the machine stalls this thread that long (then order is not judged:
        // a timer armed after an earlier deadline passed fires when armed).
        let base = now() + 300_000_000
        // Deadlines 0…90 ms out of order, each twice: ties keep the order
        // armed. Ten milliseconds apart: two threads fire them, and one the
        // machine holds off its core for 1 ms would let the next deadline's
        // timer run on the other first (seen on a loaded machine).
        let offsets = [7, 2, 9, 0, 5, 3, 8, 1, 6, 4]
        var armedOrder: [Int] = []
        for round in 0..<2 {
            for offset in offsets {
                let label = offset * 10 + round
                armedOrder.append(label)
                _ = scheduler.schedule(at: base + UInt64(offset) * 10_000_000) {
                    if fired.withLock({ $0.append(label); return $0.count }) == 20 { done.signal() }
                }
            }
        }
        let armedBy = now()
        #expect(fired.withLock { $0.isEmpty } || armedBy >= base)  // nothing inside schedule
        #expect(waited(done))
        if armedBy < base { #expect(fired.withLock { $0 } == armedOrder.sorted()) }
        #expect(scheduler.pendingTimerCount == 0)
    }

    @Test func aCancelledTimerNeverFiresAndLetsGoOfWhatItHeld() {
        final class Token: Sendable {}
        let scheduler = HookScheduler(threads: 2, stall: .seconds(60))
        let ran = Atomic<Int>(0)
        weak var weakToken: Token?
        var cancelled: [TimerEntry] = []
        // Due well after the cancel, unless the machine stalls this thread that long.
        let deadline = now() + 300_000_000
        do {
            let token = Token()
            weakToken = token
            cancelled.append(scheduler.schedule(at: deadline) { _ = token; ran.add(1, ordering: .relaxed) })
        }
        // Many more, far out, so the cancelled ones are swept from the heap at once.
        for _ in 0..<200 {
            cancelled.append(scheduler.schedule(at: now() + 3_600_000_000_000) { ran.add(1, ordering: .relaxed) })
        }
        cancelled.forEach { $0.cancel() }
        let cancelledBy = now()
        #expect(weakToken == nil)
        #expect(scheduler.pendingTimerCount == 0)
        let later = DispatchSemaphore(value: 0)
        _ = scheduler.schedule(at: deadline + 10_000_000) { later.signal() }
        #expect(waited(later))
        if cancelledBy < deadline { #expect(ran.load(ordering: .relaxed) == 0) }
    }

    /// A job that ends cancels its timers on a thread that may be firing
    /// others: the cancel must not wait for a thread that holds the lock.
    @Test func aCancelTakesNoLockOfTheSchedulers() {
        let scheduler = HookScheduler(threads: 2, stall: .seconds(60))
        let ran = Atomic<Int>(0)
        let timer = scheduler.schedule(at: now() + 3_600_000_000_000) { ran.add(1, ordering: .relaxed) }
        let cancelled = DispatchSemaphore(value: 0)
        let returnedWhileLocked = scheduler.whileLocked { () -> Bool in
            Thread.detach {
                timer.cancel()
                cancelled.signal()
            }
            return cancelled.wait(timeout: .now() + 2) == .success
        }
        #expect(returnedWhileLocked, "the cancel waited for the scheduler's lock")
        if !returnedWhileLocked { #expect(waited(cancelled)) }
        #expect(scheduler.pendingTimerCount == 0)
        timer.cancel()  // a second cancel does nothing
        #expect(scheduler.pendingTimerCount == 0)
    }

    /// Timers due together (a microsecond apart, not tied), each of whose
    /// work waits for the other's to start: they run at once only if no
    /// thread holds a due timer it has not started while it runs another's
    /// work (a thread that took a batch did, and a thread the kernel stops
    /// stopped the whole batch).
    @Test func aDueTimerIsLeftForAnyThreadWhileAnotherTimersWorkRuns() {
        let scheduler = HookScheduler(threads: 2, stall: .seconds(60))
        let started = [DispatchSemaphore(value: 0), DispatchSemaphore(value: 0)]
        let met = Atomic<Int>(0)
        let done = DispatchSemaphore(value: 0)
        let deadline = now() + 50_000_000
        for index in 0..<2 {
            _ = scheduler.schedule(at: deadline + UInt64(index) * 1000) {
                started[index].signal()
                if started[1 - index].wait(timeout: .now() + 10) == .success { met.add(1, ordering: .relaxed) }
                started[1 - index].signal()  // lets the other one end, whichever came first
                done.signal()
            }
        }
        #expect(waited(done) && waited(done))
        #expect(met.load(ordering: .relaxed) == 2, "one timer's work ran only after the other's gave up waiting")
    }

    @Test func anEarlierTimerArmedWhileTheLeaderWaitsFiresOnTime() {
        let scheduler = HookScheduler(threads: 2, stall: .seconds(60))
        let early = DispatchSemaphore(value: 0)
        let lateDeadline = now() + 3_600_000_000_000
        let late = scheduler.schedule(at: lateDeadline) {}
        // A thread leads, asleep until the late one, before the early one is armed.
        while scheduler.timerWaitingUntil != lateDeadline { usleep(100) }
        let start = now()
        _ = scheduler.schedule(at: start + 5_000_000) { early.signal() }
        #expect(waited(early))
        #expect(now() - start < 3_000_000_000)
        late.cancel()
    }

    /// An expiration costs one wake: the thread that waited for the deadline
    /// runs the hook the timer made ready, with no hand-over to another.
    @Test func theThreadThatFiresATimerRunsTheHookItMadeReady() {
        let scheduler = HookScheduler(threads: 1, stall: .seconds(60))
        let lane = scheduler.makeLane()
        let firedOn = Mutex<pthread_t?>(nil)
        let ranOn = Mutex<pthread_t?>(nil)
        let done = DispatchSemaphore(value: 0)
        _ = scheduler.schedule(at: now() + 5_000_000) {
            firedOn.withLock { $0 = pthread_self() }
            lane.enqueueUrgently {
                ranOn.withLock { $0 = pthread_self() }
                done.signal()
            }
        }
        #expect(waited(done))
        let fired = firedOn.withLock { $0 }
        let ran = ranOn.withLock { $0 }
        #expect(fired != nil && ran != nil && pthread_equal(fired!, ran!) != 0)
    }

    /// A hook that blocks every thread cannot hold up a deadline: with no
    /// thread idle to lead, the monitor fires the timer.
    @Test func aTimerFiresWhileEveryHookThreadIsBlocked() {
        let scheduler = HookScheduler(threads: 2, stall: .seconds(60))  // no thread is added
        let release = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        for _ in 0..<2 {
            scheduler.makeLane().enqueue {
                entered.signal()
                release.wait()
            }
        }
        #expect(waited(entered) && waited(entered))
        let fired = DispatchSemaphore(value: 0)
        let start = now()
        _ = scheduler.schedule(at: start + 5_000_000) { fired.signal() }
        #expect(waited(fired))
        #expect(now() - start < 3_000_000_000)
        #expect(scheduler.threadCount == 2)
        release.signal()
        release.signal()
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
