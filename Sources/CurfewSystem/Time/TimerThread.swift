import Glibc
import Synchronization
import _CurfewShims

/// Fires every ``MonotonicClock`` timer of the process: one thread of the
/// host's own that sleeps until the earliest deadline of a ``TimerHeap``,
/// then runs each due timer's work, which is short host work that at most
/// enqueues onto Dispatch (a grant's state change, a job's next slice).
///
/// Not libdispatch's timer sources, for what the bench measured: a source
/// costs its owner a wake of Dispatch's manager thread and then of a worker
/// before the work runs (the expire hook of 1,000 live jobs came 0.32 ms
/// late at the median, twice a POSIX timer's signal), and arming and
/// cancelling one per chunk delay cost 4 times the CPU; this thread is one
/// wake, and an armed timer is a heap entry of a few dozen bytes.
///
/// The thread runs in the real-time class where the process may (see
/// ``run()``), else above the hooks' workers and the host's (nice -5, where
/// the process may raise a thread's priority), and blocks every signal. It
/// starts with the first timer armed.
///
/// - Important: Arm no timer in a process that will `fork` without `exec`
///   (the fork server): a child has none of its threads.
package final class TimerThread: @unchecked Sendable {
    // Safe because every field but `cancelledTimers` is used under `lock`.
    package static let shared = TimerThread()

    private let lock = ThreadLock()
    private let wake: ThreadCondition
    private var heap = TimerHeap()
    private var started = false
    /// The deadline the thread sleeps until: `.max` for none, 0 while it fires.
    private var sleepingUntil: UInt64 = 0
    /// Timers cancelled and maybe still in the heap: counted as they are
    /// cancelled (outside the lock), less those the heap has dropped.
    private let cancelledTimers = Atomic<Int>(0)

    private init() {
        wake = lock.makeCondition()
    }

    /// Arms a timer that runs `work` at `deadline` (monotonic nanoseconds),
    /// never inside this call.
    package func schedule(at deadline: UInt64, _ work: @escaping @Sendable () -> Void) -> TimerEntry {
        let entry = TimerEntry(work: work, owner: self)
        lock.lock()
        if heap.wantsCompaction(cancelled: cancelledTimers.load(ordering: .relaxed)) {
            cancelledTimers.subtract(heap.removeCancelled(), ordering: .relaxed)
        }
        heap.insert(entry, at: deadline)
        if !started {
            started = true
            // Without a thread no timer fires: the process cannot keep a deadline.
            guard OSThread.detach({ self.run() }) else { fatalError("cannot start the timer thread: \(errno)") }
        } else if deadline < sleepingUntil {
            wake.signal()
        }
        lock.unlock()
        return entry
    }

    /// Whether the thread may take the real-time class (see ``run()``).
    private static let mayBeRealTime = Atomic<Bool>(true)

    /// Keeps the thread in the normal class: for a worker, whose process is
    /// its plugin's. Call it before the first timer is armed.
    package static func staysInNormalClass() {
        mayBeRealTime.store(false, ordering: .relaxed)
    }

    /// One of its timers was cancelled (``TimerEntry/cancel()``, which takes no lock).
    package func timerCancelled() {
        cancelledTimers.add(1, ordering: .relaxed)
    }

    private func run() {
        var all = sigset_t()
        sigfillset(&all)
        pthread_sigmask(SIG_BLOCK, &all, nil)
        _ = curfew_shim_name_thread("curfew-timers")
        // Real-time (SCHED_FIFO 1) where the process may (as root, or with
        // CAP_SYS_NICE or RLIMIT_RTPRIO), but not in a worker: a Dispatch
        // worker it wakes for a job's expiration cannot take its core before
        // it has handed out the rest of a burst (at nice -5, a quarter of its
        // switches in a burst of expirations were that preemption). Its work
        // is the host's own and short, and what it starts (libdispatch starts
        // workers from the thread that enqueues) begins in the normal class:
        // plugin code never runs real-time.
        if Self.mayBeRealTime.load(ordering: .relaxed) && curfew_shim_set_thread_realtime() == 0 {
            // No slack, on kernels that would still apply one to a real-time thread's waits.
            _ = curfew_shim_set_timer_slack(1)
        } else {
            // Woken up to 50 µs after a deadline (the kernel's default
            // slack), not at once: expirations that come close together
            // are taken in one wake, which costs the host less CPU in a
            // burst of them.
            _ = curfew_shim_set_timer_slack(50_000)
            // Above the host's own workers, which libdispatch runs at nice
            // -2 where it may; ignored, as theirs is, where not allowed.
            // libdispatch sets each worker to its QoS's nice (utility: 2),
            // so plugin code never inherits -5.
            _ = curfew_shim_set_thread_nice(-5)
        }
        var due: [@Sendable () -> Void] = []
        lock.lock()
        while true {
            let now = curfew_shim_monotonic_nanoseconds()
            let dropped = heap.takeDue(at: now, limit: .max, into: &due)
            if dropped > 0 { cancelledTimers.subtract(dropped, ordering: .relaxed) }
            if !due.isEmpty {
                sleepingUntil = 0
                lock.unlock()
                for work in due { work() }
                due.removeAll(keepingCapacity: true)
                lock.lock()
                continue
            }
            sleepingUntil = heap.nextDeadline ?? .max
            if sleepingUntil == .max {
                wake.wait()
            } else {
                _ = wake.wait(until: sleepingUntil)
            }
        }
    }
}
