import Dispatch
import Foundation
import Synchronization
import Testing
import _CurfewShims

@testable import Curfew

/// The monotonic clock's timers (the `TimerThread`): in deadline
/// order, never inside the call that arms them, never after a cancel, and
/// on time while every hook worker spins.
@Suite(.timeLimit(.minutes(1))) struct MonotonicClockTests {
    let clock = MonotonicClock()

    func waited(_ semaphore: DispatchSemaphore) -> Bool {
        semaphore.wait(timeout: .now() + 20) == .success
    }

    @Test func timersFireInDeadlineOrder() {
        let order = Mutex<[Int]>([])
        let done = DispatchSemaphore(value: 0)
        let start = clock.now()
        // Armed latest first, 2 ms apart.
        let timers = (0..<20).reversed().map { index in
            clock.schedule(at: start.advanced(by: .milliseconds(20 + 2 * index))) {
                let count = order.withLock { $0.append(index); return $0.count }
                if count == 20 { done.signal() }
            }
        }
        #expect(waited(done))
        #expect(order.withLock { $0 } == Array(0..<20))
        _ = timers
    }

    @Test func aTimerDueAlreadyFiresButNeverInsideTheCall() {
        let arming = pthread_self()
        let firedOn = Atomic<UInt>(0)
        let done = DispatchSemaphore(value: 0)
        let timer = clock.schedule(at: CurfewInstant(nanoseconds: 0)) {
            firedOn.store(pthread_self(), ordering: .relaxed)
            done.signal()
        }
        #expect(waited(done))
        let thread = firedOn.load(ordering: .relaxed)
        #expect(thread != 0 && thread != arming, "on a thread of the clock's, not the caller's")
        timer.cancel()  // after it fired: harmless
    }

    @Test func aCancelledTimerNeverFiresAndLetsGoOfWhatItHeld() {
        final class Held: Sendable {}
        weak var watched: Held?
        let fired = Atomic<Int>(0)
        let timers: [any CurfewTimer] = (0..<100).map { index in
            let held = Held()
            if index == 0 { watched = held }
            return clock.schedule(at: clock.now().advanced(by: .milliseconds(30))) {
                _ = held
                fired.add(1, ordering: .relaxed)
            }
        }
        for timer in timers { timer.cancel() }
        #expect(watched == nil, "its captures went at the cancel")
        // A later timer fires: the cancelled ones, due before it, never did.
        let later = DispatchSemaphore(value: 0)
        let last = clock.schedule(at: clock.now().advanced(by: .milliseconds(60))) { later.signal() }
        #expect(waited(later))
        #expect(fired.load(ordering: .relaxed) == 0)
        _ = last
    }

    /// Chunks that spin hold every one of libdispatch's hook workers; a
    /// grant's deadline must still be met. Timers fired on the hooks' own
    /// queue would wait until a spinner stopped.
    @Test func aTimerFiresWhileEveryHookWorkerSpins() {
        let fired = Atomic<Bool>(false)
        let spinners = max(4, 2 * RunConfiguration.activeProcessorCount)
        let started = Atomic<Int>(0)
        for index in 0..<spinners {
            SerialQueue(label: "spinner \(index)").enqueue {
                started.add(1, ordering: .relaxed)
                let give = ContinuousClock.now + .seconds(20)
                while !fired.load(ordering: .relaxed) && ContinuousClock.now < give {}
            }
        }
        let give = ContinuousClock.now + .seconds(20)
        while started.load(ordering: .relaxed) == 0 && ContinuousClock.now < give { usleep(1000) }
        let done = DispatchSemaphore(value: 0)
        let deadline = clock.now().advanced(by: .milliseconds(10))
        let timer = clock.schedule(at: deadline) {
            fired.store(true, ordering: .relaxed)
            done.signal()
        }
        #expect(waited(done))
        let firedAt = clock.now()
        #expect(deadline.duration(to: firedAt) < .seconds(10), "it fired while the spinners spun, not after")
        _ = timer
    }

    /// The thread is real-time where the process may be (as root, say), to
    /// hand out a burst of expirations before the workers it wakes run; a
    /// thread its work starts (libdispatch starts workers from the thread
    /// that enqueues) is in the normal class, so no hook ever runs real-time.
    @Test func theTimerThreadIsRealTimeWhereAllowedAndWhatItStartsIsNot() {
        let allowed = Atomic<Int32>(-1)
        let normal = Atomic<Int32>(-1)
        let probed = DispatchSemaphore(value: 0)
        #expect(OSThread.detach {
            normal.store(sched_getscheduler(0), ordering: .relaxed)
            allowed.store(curfew_shim_set_thread_realtime(), ordering: .relaxed)
            probed.signal()
        })
        #expect(waited(probed))
        let timerPolicy = Atomic<Int32>(-1)
        let startedPolicy = Atomic<Int32>(-1)
        let startedSays = Atomic<Int32>(-1)
        let done = DispatchSemaphore(value: 0)
        let timer = clock.schedule(at: CurfewInstant(nanoseconds: 0)) {
            timerPolicy.store(sched_getscheduler(0), ordering: .relaxed)
            let started = OSThread.detach {
                startedPolicy.store(sched_getscheduler(0), ordering: .relaxed)
                // What the C library says, which code that reads its class and sets it again believes.
                var policy: Int32 = -1
                var parameter = sched_param()
                if pthread_getschedparam(pthread_self(), &policy, &parameter) == 0 { startedSays.store(policy, ordering: .relaxed) }
                done.signal()
            }
            if !started { done.signal() }
        }
        #expect(waited(done))
        let realTime = SCHED_FIFO | 0x4000_0000  // SCHED_RESET_ON_FORK, which Glibc does not export
        let before = normal.load(ordering: .relaxed)
        #expect(timerPolicy.load(ordering: .relaxed) == (allowed.load(ordering: .relaxed) == 0 ? realTime : before))
        #expect(startedPolicy.load(ordering: .relaxed) == before)
        #expect(startedSays.load(ordering: .relaxed) == before)
        _ = timer
    }
}
