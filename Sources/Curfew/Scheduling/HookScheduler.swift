import Dispatch
import Glibc
import Synchronization
import _CurfewShims

/// Where an in-process job's hooks run, and where every ``MonotonicClock``
/// timer of the process fires: threads of the host's own, as many as the
/// cores it may run on, shared by every job's ``Lane``.
///
/// A job that waits between chunks holds no thread, so a thousand live jobs
/// cost a thousand lanes (a few dozen bytes each), not a thousand threads.
/// Plugin code may still block or spin in a hook; a monitor thread notices a
/// thread that has been in one piece of work for longer than
/// ``stallNanoseconds`` while other lanes wait, and adds a thread for them,
/// as Go's runtime does for a goroutine stuck in a system call. Threads
/// beyond the cores leave once they have idled for a second.
///
/// Timers are a heap of deadlines, fired the leader/follower way: one idle
/// thread (the leader) waits until the earliest deadline while the others
/// wait for work. At the deadline it hands the lead to a follower, fires
/// the due timer (the host's short work: a grant's state change, an
/// enqueue) and runs the first piece of work it made ready itself, so an
/// expiration costs one wake; then the next due timer, one at a time,
/// each left in the heap for any thread until one takes it. A timer's
/// cancel takes no lock (``TimerEntry``). When no thread is idle to lead
/// and every thread has been in its piece of work for a monitor tick, the
/// monitor fires the due timers, so a hook that blocks every thread cannot
/// hold up a deadline by more than a tick. The monitor is never woken for
/// each piece of work or each deadline of a burst: that kept its core from
/// ever looking idle to the kernel, which then left a hook thread woken
/// onto the other's core waiting there for milliseconds.
///
/// - Important: Start no work and arm no timer on it in a process that will
///   `fork` without `exec` (the fork server): a child has none of its threads.
public final class HookScheduler: @unchecked Sendable {
    /// The scheduler every runner and every monotonic timer in this process uses.
    public static let shared = HookScheduler(threads: max(2, RunConfiguration.activeProcessorCount))

    /// Threads that never leave once started: the cores (at least two, so a
    /// task's expiration handler is not queued behind a chunk on one core).
    let baseThreads: Int
    /// Threads at most, stuck ones included.
    let maximumThreads: Int
    /// How long one piece of work may hold a thread before the monitor
    /// counts the thread as stuck and lets another one start.
    let stallNanoseconds: UInt64
    /// How often the monitor looks while work waits and no thread is idle,
    /// and how long every thread must have been in its work before the
    /// monitor fires due timers itself.
    let monitorTickNanoseconds: UInt64
    /// How long a thread beyond the base idles before it leaves.
    let idleExitNanoseconds: UInt64

    /// Timers a thread takes out of the heap at a time: the next due one,
    /// and any due at the very same instant (ties fire in the order armed),
    /// at most this many. A thread that took a batch of 64 held the rest
    /// where no other thread could see them, and a thread the kernel stops
    /// (two threads on one core, as a virtual machine often leaves them)
    /// stopped them all: now, after a timer's work, the thread runs the
    /// hook it made ready, then takes the next, and every other due timer
    /// stays in the heap for whichever thread runs first. The p99 of 1,000
    /// jobs' expire hooks went from 0.57 ms to 0.10 ms (BENCHMARKS.md).
    private static let timersPerTake = 64

    // Everything below, the lanes' queues included, is guarded by `mutex`.
    private let mutex = ThreadLock()
    private let workAvailable: ThreadCondition
    private let leaderWake: ThreadCondition
    private let monitorWake: ThreadCondition
    private var readyHead: Lane?
    private var readyTail: Lane?
    /// The last urgent lane at the head of the ready list: urgent lanes go
    /// ahead of the others and stay in the order they came.
    private var urgentTail: Lane?
    private var threads = 0
    /// Idle threads waiting for work (not the leader), and the signals sent
    /// to them not yet taken.
    private var followers = 0
    private var wakeups = 0
    /// Threads firing timers, which look at the ready list next unasked:
    /// each takes one piece of work made ready meanwhile without a wake.
    private var claims = 0
    /// A thread in ``adoptCurrentThread(after:)``'s setup.
    private var adopting: Adoption?
    private var timers = TimerHeap()
    /// Timers cancelled and maybe still in the heap: counted as they are
    /// cancelled (outside the lock), less those the heap has dropped.
    private let cancelledTimers = Atomic<Int>(0)
    /// Whether an idle thread leads (waits for the earliest deadline), the
    /// deadline it waits until, and whether it was told to take work.
    private var hasLeader = false
    private var leaderUntil: UInt64 = 0
    private var leaderCalled = false
    /// Per thread slot: when its current work began (monotonic ns), 0 when
    /// it is between works, `freeSlot` when no thread has the slot.
    private var busySince: [UInt64] = []
    private var monitorStarted = false
    /// The instant the monitor waits until (`.max`: until told; 0: it is
    /// awake, or told to wake).
    private var monitorUntil: UInt64 = 0
    /// How often the monitor woke while some thread had been in its piece
    /// of work for less than a tick: while threads work in short pieces
    /// (for tests).
    private var monitorWakes: UInt64 = 0
    private static let freeSlot = UInt64.max

    init(
        threads: Int, maximumThreads: Int = 512, stall: Duration = .milliseconds(10),
        monitorTick: Duration = .milliseconds(1), idleExit: Duration = .seconds(1)
    ) {
        baseThreads = max(1, threads)
        self.maximumThreads = max(baseThreads, maximumThreads)
        stallNanoseconds = UInt64(max(stall.nanoseconds, 1))
        monitorTickNanoseconds = UInt64(max(monitorTick.nanoseconds, 1))
        idleExitNanoseconds = UInt64(max(idleExit.nanoseconds, 1))
        workAvailable = mutex.makeCondition()
        leaderWake = mutex.makeCondition()
        monitorWake = mutex.makeCondition()
    }

    /// A new serial lane on this scheduler.
    public func makeLane() -> Lane {
        Lane(scheduler: self)
    }

    /// The threads it has now (for tests and the benchmark).
    public var threadCount: Int {
        withLock { threads }
    }

    // MARK: Timers

    /// Arms a timer that runs `work` at `deadline` (monotonic nanoseconds),
    /// never inside this call. The work must be short host work: it runs on
    /// a thread that would otherwise run a hook or fire other timers.
    func schedule(at deadline: UInt64, _ work: @escaping @Sendable () -> Void) -> TimerEntry {
        let entry = TimerEntry(work: work, owner: self)
        withLock {
            if timers.wantsCompaction(cancelled: cancelledTimers.load(ordering: .relaxed)) {
                cancelledTimers.subtract(timers.removeCancelled(), ordering: .relaxed)
            }
            timers.insert(entry, at: deadline)
            if hasLeader {
                if deadline < leaderUntil { leaderWake.signal() }
            } else if threads < baseThreads {
                startThread()  // it takes the lead
            } else {
                handOffTimers()
            }
        }
        return entry
    }

    /// One of its timers was cancelled (``TimerEntry/cancel()``, which
    /// takes no lock): the heap drops it when it comes to the top, or with
    /// the others at the next arming once they are half the heap.
    func timerCancelled() {
        cancelledTimers.add(1, ordering: .relaxed)
    }

    /// Runs `body` holding the scheduler's lock, as its threads do (for
    /// tests: what must not wait for the lock).
    func whileLocked<T>(_ body: () -> T) -> T {
        withLock(body)
    }

    /// Timers armed and not yet fired or cancelled (for tests).
    var pendingTimerCount: Int {
        withLock { timers.count - cancelledTimers.load(ordering: .relaxed) }
    }

    /// How often the monitor has woken while threads worked in short pieces
    /// (a machine that holds every thread off its core for a tick makes it
    /// wake for each deadline, rightly). For tests.
    var monitorWakeCount: UInt64 {
        withLock { monitorWakes }
    }

    /// The instant the leader, or the monitor when none leads, waits until
    /// now (`.max`: none; 0: neither waits). For tests.
    var timerWaitingUntil: UInt64 {
        withLock { hasLeader ? leaderUntil : monitorUntil }
    }

    /// With the lock held, when no thread leads: a follower takes the lead,
    /// or, with none idle, the monitor watches the deadlines.
    private func handOffTimers() {
        guard timers.nextDeadline != nil else { return }
        if followers > wakeups {
            wakeups += 1
            workAvailable.signal()
        } else {
            watchTimersFromMonitor()
        }
    }

    /// With the lock held.
    private func watchTimersFromMonitor() {
        guard let next = timers.nextDeadline else { return }
        if !monitorStarted {
            startMonitor()
        } else if monitorUntil != 0,
            max(next, curfew_shim_monotonic_nanoseconds() &+ monitorTickNanoseconds) < monitorUntil
        {
            // It could fire this timer before it next wakes: a tick after
            // the work the caller goes to now, at the earliest.
            monitorUntil = 0
            monitorWake.signal()
        }
    }

    // MARK: Lanes

    /// Queues `work` on `lane`. Urgent work puts its lane ahead of the
    /// lanes that wait, behind the urgent ones already there: at once when
    /// the lane is idle or waits for a thread, when its running work ends
    /// otherwise. The lane's own earlier work still comes first.
    func enqueue(_ work: @escaping @Sendable () -> Void, on lane: Lane, urgent: Bool = false) {
        withLock {
            if lane.first == nil {
                lane.first = work
            } else {
                lane.rest.append(work)
            }
            lane.enqueued &+= 1
            if urgent { lane.urgentThrough = lane.enqueued }
            guard !lane.scheduled else {
                // Waiting behind other lanes' work: it goes ahead of that now.
                if urgent && isWaiting(lane) && !lane.placedUrgently {
                    removeReady(lane)
                    pushReadyUrgently(lane)
                }
                return
            }
            lane.scheduled = true
            if keepForAdopter(lane) { return }
            if urgent {
                pushReadyUrgently(lane)
            } else {
                pushReady(lane)
            }
            wakeOrGrow()
        }
    }

    /// Whether the lane has work queued or running.
    func isBusy(_ lane: Lane) -> Bool {
        withLock { lane.scheduled }
    }

    // The ready list: lanes waiting for a thread, the urgent ones first (up
    // to `urgentTail`), each part in the order its lanes joined it.

    private func pushReady(_ lane: Lane) {
        lane.nextReady = nil
        lane.previousReady = readyTail
        if let tail = readyTail {
            tail.nextReady = lane
        } else {
            readyHead = lane
        }
        readyTail = lane
        lane.placedUrgently = false
    }

    private func pushReadyUrgently(_ lane: Lane) {
        let next: Lane?
        if let last = urgentTail {
            next = last.nextReady
            last.nextReady = lane
        } else {
            next = readyHead
            readyHead = lane
        }
        lane.previousReady = urgentTail
        lane.nextReady = next
        if let next {
            next.previousReady = lane
        } else {
            readyTail = lane
        }
        urgentTail = lane
        lane.placedUrgently = true
    }

    /// Whether the lane is in the ready list (not running).
    private func isWaiting(_ lane: Lane) -> Bool {
        lane.previousReady != nil || readyHead === lane
    }

    /// Takes a lane out of the ready list, wherever it is.
    private func removeReady(_ lane: Lane) {
        let previous = lane.previousReady
        let next = lane.nextReady
        if let previous {
            previous.nextReady = next
        } else {
            readyHead = next
        }
        if let next {
            next.previousReady = previous
        } else {
            readyTail = previous
        }
        // Urgent lanes are a prefix of the list: the one before an urgent lane is urgent.
        if urgentTail === lane { urgentTail = previous }
        lane.nextReady = nil
        lane.previousReady = nil
        lane.placedUrgently = false
    }

    private func popReady() -> Lane? {
        guard let lane = readyHead else { return nil }
        removeReady(lane)
        return lane
    }

    /// Whether a thread will look at the ready list soon without a new wake.
    private var idleThreadAvailable: Bool {
        claims > 0 || followers > wakeups || (hasLeader && !leaderCalled)
    }

    /// Work is ready: a thread firing timers takes it, or a follower, or
    /// the leader is woken, or a thread starts while there are fewer than
    /// the base, or else the monitor is told. With the lock held.
    private func wakeOrGrow() {
        if claims > 0 {
            claims -= 1
        } else if followers > wakeups {
            wakeups += 1
            workAvailable.signal()
        } else if hasLeader && !leaderCalled {
            leaderCalled = true
            leaderWake.signal()
        } else if threads < baseThreads {
            startThread()
        } else if !monitorStarted {
            startMonitor()
        } else {
            wakeMonitorIfAsleep()
        }
    }

    /// With the lock held.
    private func startThread() {
        let slot = takeSlot()
        if !Thread.detach({ [self] in
            // A hook that overflows its stack is still reported (HookThread).
            if HookThread.reportsCrashesNow { _ = curfew_shim_give_thread_alt_stack() }
            workerLoop(slot: slot)
        }) {
            releaseSlot(slot)
        }
    }

    /// With the lock held: a slot for a thread joining, counted.
    private func takeSlot() -> Int {
        let slot: Int
        if let free = busySince.firstIndex(of: Self.freeSlot) {
            slot = free
        } else {
            slot = busySince.count
            busySince.append(0)
        }
        busySince[slot] = 0
        threads += 1
        return slot
    }

    /// With the lock held: the slot of a thread that did not join after all.
    private func releaseSlot(_ slot: Int) {
        threads -= 1
        busySince[slot] = Self.freeSlot
    }

    /// Makes the calling thread one of the scheduler's, if `setup` returns
    /// true: the first lanes `setup` makes ready (on this thread, at most
    /// ``adoptedLaneCount``) are kept for it, where no other thread takes
    /// them and no thread is woken for them, and it runs them next. A
    /// worker's main thread reads its job's `run`, starts the job, and
    /// runs its `started` event and its `create` and first chunk itself: a
    /// wake of a hook thread, on a machine whose cores are busy with other
    /// jobs, waited for a core (a third of a millisecond on average, beside
    /// a 1 ms job).
    ///
    /// When `setup` returns false, the thread does not join: the lanes kept
    /// for it go to the other threads, and this returns false at once.
    /// Otherwise it returns true only if the thread leaves, as a thread
    /// beyond the base does once it has idled (``idleExitNanoseconds``).
    ///
    /// One thread at a time: while one is in its `setup`, another that
    /// adopts keeps no lanes (its work goes to the ready list as usual).
    ///
    /// - Important: The kept lanes wait for one another, where the monitor
    ///   does not see them: the first piece of work `setup` makes ready
    ///   must not block (a worker's is its `started` event, which it does
    ///   not send). While the thread has kept lanes left, it fires no
    ///   timer; the other threads and the monitor do.
    public func adoptCurrentThread(after setup: () -> Bool) -> Bool {
        let slot = withLock { () -> Int in
            if adopting == nil { adopting = Adoption(thread: pthread_self()) }
            return takeSlot()
        }
        let joins = setup()
        lock()
        var kept: [Lane] = []
        if let adoption = adopting, pthread_equal(adoption.thread, pthread_self()) != 0 {
            kept = adoption.lanes
            adopting = nil
        }
        guard joins else {
            releaseSlot(slot)
            for lane in kept {
                pushReady(lane)
                wakeOrGrow()
            }
            unlock()
            return false
        }
        unlock()
        workerLoop(slot: slot, named: false, kept: kept)
        return true
    }

    /// How many lanes an adopted thread's setup may keep for it: a job's
    /// start makes its `started` event ready, then its `create`.
    static let adoptedLaneCount = 2

    /// A thread in ``adoptCurrentThread(after:)``'s setup, and the lanes it
    /// made ready and keeps.
    private struct Adoption {
        let thread: pthread_t
        var lanes: [Lane] = []
    }

    /// With the lock held: whether the calling thread is in its adoption's
    /// setup and keeps `lane` for itself (not in the ready list, no wake).
    private func keepForAdopter(_ lane: Lane) -> Bool {
        guard var adoption = adopting, adoption.lanes.count < Self.adoptedLaneCount,
            pthread_equal(adoption.thread, pthread_self()) != 0
        else { return false }
        adoption.lanes.append(lane)
        adopting = adoption
        return true
    }

    /// With the lock held: wakes the monitor if it sleeps until told. One
    /// that looks a tick from now is left alone: it looks soon enough.
    private func wakeMonitorIfAsleep() {
        guard monitorUntil == .max else { return }
        monitorUntil = 0
        monitorWake.signal()
    }

    /// With the lock held.
    private func startMonitor() {
        monitorStarted = true
        if !Thread.detach({ [self] in monitorLoop() }) { monitorStarted = false }
    }

    /// - Parameters:
    ///   - named: Whether the thread takes the hook threads' name (not a
    ///     process's main thread, whose name is the process's).
    ///   - kept: Lanes made ready for this thread alone, which it runs
    ///     first, in order.
    private func workerLoop(slot: Int, named: Bool = true, kept: [Lane] = []) {
        if named { _ = curfew_shim_name_thread("curfew-hooks") }
        _ = curfew_shim_set_timer_slack(1)
        var due: [@Sendable () -> Void] = []
        var next: (@Sendable () -> Void)?
        var leading = false
        /// Right after a timer, the ready list comes before another timer:
        /// the work its claim took without a wake is this thread's to run.
        var justFired = false
        var idleSince = curfew_shim_monotonic_nanoseconds()
        var keptLanes = kept[...]
        lock()
        while true {
            // Timers due now, before any hook: whoever is idle fires them
            // (not a thread with lanes kept for it: a timer's work could
            // claim it, and then wait behind the kept work unwoken).
            if keptLanes.isEmpty, !justFired, let deadline = timers.nextDeadline {
                let now = curfew_shim_monotonic_nanoseconds()
                if deadline <= now {
                    takeDueTimers(at: now, into: &due)
                }
                if !due.isEmpty {
                    if leading {
                        leading = false
                        hasLeader = false
                    }
                    if !hasLeader { handOffTimers() }
                    claims += 1
                    busySince[slot] = now
                    fire(&due)
                    busySince[slot] = 0
                    if claims > 0 { claims -= 1 }
                    justFired = true
                    continue
                }
            }
            justFired = false
            if let lane = keptLanes.popFirst() ?? popReady() {
                if leading {
                    leading = false
                    hasLeader = false
                }
                if !hasLeader { handOffTimers() }
                busySince[slot] = curfew_shim_monotonic_nanoseconds()
                next = lane.first
                lane.started &+= 1
                if lane.restHead < lane.rest.count {
                    lane.first = lane.rest[lane.restHead]
                    lane.rest[lane.restHead] = nil  // what it captured goes once it has run
                    lane.restHead += 1
                    if lane.restHead == lane.rest.count {
                        lane.rest = []
                        lane.restHead = 0
                    } else if lane.restHead >= 64 && lane.restHead * 2 >= lane.rest.count {
                        // A lane that never empties (a flood of events) does not
                        // keep the slots of the work it ran: at most half its list.
                        lane.rest.removeFirst(lane.restHead)
                        lane.restHead = 0
                    }
                } else {
                    lane.first = nil
                }
                unlock()
                next!()
                next = nil
                lock()
                busySince[slot] = 0
                idleSince = curfew_shim_monotonic_nanoseconds()
                if lane.first != nil {
                    // Behind the lanes that waited meanwhile, or, with urgent
                    // work of its own to come, behind the urgent ones.
                    if lane.urgentThrough > lane.started {
                        pushReadyUrgently(lane)
                    } else {
                        pushReady(lane)
                    }
                } else {
                    lane.scheduled = false
                }
                continue
            }
            let extra = threads > baseThreads
            let leaveAt = extra ? idleSince &+ idleExitNanoseconds : .max
            if extra && curfew_shim_monotonic_nanoseconds() >= leaveAt {
                if leading {
                    leading = false
                    hasLeader = false
                }
                // It may have been woken to take the lead: pass that on.
                if !hasLeader { handOffTimers() }
                threads -= 1
                busySince[slot] = Self.freeSlot
                unlock()
                return
            }
            if leading || !hasLeader {
                // Lead: wait for the earliest deadline, or for work when no
                // follower is idle.
                leading = true
                hasLeader = true
                leaderCalled = false
                leaderUntil = min(timers.nextDeadline ?? .max, leaveAt)
                if leaderUntil == .max {
                    leaderWake.wait()
                } else {
                    leaderWake.wait(until: leaderUntil)
                }
                leaderCalled = false
                continue
            }
            followers += 1
            if leaveAt == .max {
                workAvailable.wait()
            } else {
                workAvailable.wait(until: leaveAt)
            }
            followers -= 1
            if wakeups > 0 { wakeups -= 1 }
        }
    }

    /// Adds a thread when work waits, none is idle, and threads are stuck;
    /// fires the due timers when no thread is idle to lead and every thread
    /// has been in its piece of work for a tick (threads between short
    /// pieces look at the timers themselves). While work waits it looks
    /// once a tick, and once more before it sleeps until told; for timers
    /// it wakes when it could first fire one.
    private func monitorLoop() {
        _ = curfew_shim_name_thread("curfew-monitor")
        _ = curfew_shim_set_timer_slack(1)
        var due: [@Sendable () -> Void] = []
        var lookAgain = false
        lock()
        while true {
            let now = curfew_shim_monotonic_nanoseconds()
            let busySinceLatest = threadsBusySince
            if !hasLeader, heldATick(since: busySinceLatest, at: now), let deadline = timers.nextDeadline, deadline <= now {
                takeDueTimers(at: now, into: &due)
                if !due.isEmpty {
                    fire(&due)
                    continue
                }
            }
            let workWaits = readyHead != nil && !idleThreadAvailable
            if workWaits && threads < maximumThreads {
                var stuck = 0
                for since in busySince where since != 0 && since != Self.freeSlot && now &- since >= stallNanoseconds {
                    stuck += 1
                }
                if threads < baseThreads + stuck { startThread() }
            }
            var until: UInt64 = workWaits || lookAgain ? now &+ monitorTickNanoseconds : .max
            if !hasLeader, let deadline = timers.nextDeadline {
                // The first instant it could fire: the deadline, once every
                // thread has been in its work for a tick.
                until = min(until, max(deadline, busySinceLatest &+ monitorTickNanoseconds))
            }
            lookAgain = workWaits
            monitorUntil = until
            if until == .max {
                monitorWake.wait()
            } else {
                monitorWake.wait(until: until)
            }
            monitorUntil = 0
            if !heldATick(since: threadsBusySince, at: curfew_shim_monotonic_nanoseconds()) { monitorWakes &+= 1 }
        }
    }

    /// With the lock held: when the latest of the pieces of work running now
    /// began (monotonic ns), or 0 when no thread is in one.
    private var threadsBusySince: UInt64 {
        var latest: UInt64 = 0
        for since in busySince where since != Self.freeSlot && since > latest { latest = since }
        return latest
    }

    /// Whether every thread in a piece of work, the latest of which began at
    /// `busySince` (0: none is in one), has been in it for a tick at `now`.
    private func heldATick(since busySince: UInt64, at now: UInt64) -> Bool {
        now &- min(busySince, now) >= monitorTickNanoseconds
    }

    /// With the lock held: takes the next due timer's work, and its ties' (``timersPerTake``).
    private func takeDueTimers(at now: UInt64, into due: inout [@Sendable () -> Void]) {
        let dropped = timers.takeDue(at: now, limit: Self.timersPerTake, into: &due)
        if dropped > 0 { cancelledTimers.subtract(dropped, ordering: .relaxed) }
    }

    /// Runs the timers' work taken from the heap, outside the lock (held on
    /// entry and on return), and lets go of it there too.
    private func fire(_ due: inout [@Sendable () -> Void]) {
        unlock()
        for work in due { work() }
        due.removeAll(keepingCapacity: true)
        lock()
    }

    // MARK: The lock

    private func lock() { mutex.lock() }
    private func unlock() { mutex.unlock() }

    private func withLock<T>(_ body: () -> T) -> T {
        mutex.withLock(body)
    }
}

/// A serial queue of work on a ``HookScheduler``: its work runs in the order
/// it was enqueued, one piece at a time, each on whichever of the
/// scheduler's threads is free. A lane with nothing to do holds no thread.
public final class Lane: HookQueue, @unchecked Sendable {
    let scheduler: HookScheduler
    // Guarded by the scheduler's lock.
    fileprivate var first: (@Sendable () -> Void)?
    /// The work behind `first`, from `restHead` on (the slots before it
    /// are spent, `nil`).
    fileprivate var rest: [(@Sendable () -> Void)?] = []
    fileprivate var restHead = 0
    /// In the ready list or running on a thread.
    fileprivate var scheduled = false
    /// In the ready list's urgent part.
    fileprivate var placedUrgently = false
    fileprivate var nextReady: Lane?
    /// The list holds each lane through the one before it (or its head).
    fileprivate unowned(unsafe) var previousReady: Lane?
    /// How much work was ever enqueued and started, and the count at the
    /// last urgent work: urgent work waits while it is above `started`.
    fileprivate var enqueued: UInt64 = 0
    fileprivate var started: UInt64 = 0
    fileprivate var urgentThrough: UInt64 = 0

    fileprivate init(scheduler: HookScheduler) {
        self.scheduler = scheduler
    }

    public func enqueue(_ work: @escaping @Sendable () -> Void) {
        scheduler.enqueue(work, on: self)
    }

    /// As ``enqueue(_:)``, ahead of other lanes' waiting work (behind this
    /// lane's own): for an expiration, which is due now.
    public func enqueueUrgently(_ work: @escaping @Sendable () -> Void) {
        scheduler.enqueue(work, on: self, urgent: true)
    }

    /// Whether work is queued or running on the lane now.
    public var isBusy: Bool {
        scheduler.isBusy(self)
    }
}

/// A serial queue hooks and handlers are enqueued on: a ``Lane`` in the
/// runner, a `DispatchQueue` for a caller that has one.
public protocol HookQueue: Sendable {
    /// Runs `work` after everything enqueued before it, never inside this call.
    func enqueue(_ work: @escaping @Sendable () -> Void)
    /// As `enqueue`, for work that is due now (an expiration): it may go
    /// ahead of other queues' work.
    func enqueueUrgently(_ work: @escaping @Sendable () -> Void)
}

extension HookQueue {
    public func enqueueUrgently(_ work: @escaping @Sendable () -> Void) {
        enqueue(work)
    }
}

extension DispatchQueue: HookQueue {
    public func enqueue(_ work: @escaping @Sendable () -> Void) {
        async(execute: work)
    }
}
