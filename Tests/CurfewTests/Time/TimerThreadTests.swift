import Dispatch
import Glibc
import Synchronization
import Testing
import _CurfewShims

@testable import Curfew

/// The thread every monotonic timer fires on: in deadline order, never
/// after a cancel, and never inside the call that arms it.
@Suite(.timeLimit(.minutes(1))) struct TimerThreadTests {
    func now() -> UInt64 { curfew_shim_monotonic_nanoseconds() }

    @Test func timersFireInDeadlineOrderAndTiesInTheOrderArmed() {
        let thread = TimerThread()
        let fired = Mutex<[Int]>([])
        let done = DispatchSemaphore(value: 0)
        let base = now() + 20_000_000
        // Deadlines 0…9 ms out of order, each twice: ties keep the order armed.
        let offsets = [7, 2, 9, 0, 5, 3, 8, 1, 6, 4]
        var armedOrder: [Int] = []
        for round in 0..<2 {
            for offset in offsets {
                let label = offset * 10 + round
                armedOrder.append(label)
                _ = thread.schedule(at: base + UInt64(offset) * 1_000_000) {
                    if fired.withLock({ $0.append(label); return $0.count }) == 20 { done.signal() }
                }
            }
        }
        #expect(fired.withLock { $0.isEmpty })  // nothing inside schedule
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(fired.withLock { $0 } == armedOrder.sorted())
        #expect(thread.pendingCount == 0)
    }

    @Test func aCancelledTimerNeverFiresAndLetsGoOfWhatItHeld() {
        final class Token: Sendable {}
        let thread = TimerThread()
        let ran = Atomic<Int>(0)
        weak var weakToken: Token?
        var cancelled: [TimerThread.Entry] = []
        do {
            let token = Token()
            weakToken = token
            cancelled.append(thread.schedule(at: now() + 5_000_000) { _ = token; ran.add(1, ordering: .relaxed) })
        }
        // Many more, far out, so the cancelled ones are swept from the heap at once.
        for _ in 0..<200 {
            cancelled.append(thread.schedule(at: now() + 3_600_000_000_000) { ran.add(1, ordering: .relaxed) })
        }
        cancelled.forEach { $0.cancel() }
        #expect(weakToken == nil)
        #expect(thread.pendingCount == 0)
        let later = DispatchSemaphore(value: 0)
        _ = thread.schedule(at: now() + 10_000_000) { later.signal() }
        #expect(later.wait(timeout: .now() + 10) == .success)
        #expect(ran.load(ordering: .relaxed) == 0)
    }

    @Test func anEarlierTimerArmedWhileTheThreadWaitsFiresOnTime() {
        let thread = TimerThread()
        let early = DispatchSemaphore(value: 0)
        let lateDeadline = now() + 3_600_000_000_000
        let late = thread.schedule(at: lateDeadline) {}
        // The thread is asleep until the late one before the early one is armed.
        while thread.waitingUntil != lateDeadline { usleep(100) }
        let start = now()
        _ = thread.schedule(at: start + 5_000_000) { early.signal() }
        #expect(early.wait(timeout: .now() + 10) == .success)
        #expect(now() - start < 3_000_000_000)
        late.cancel()
    }
}
