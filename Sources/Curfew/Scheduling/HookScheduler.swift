import Dispatch
import Glibc
import _CurfewShims

/// Where an in-process job's hooks run: threads of the host's own, as many as
/// the machine has cores, shared by every job's ``Lane``.
///
/// A job that waits between chunks holds no thread, so a thousand live jobs
/// cost a thousand lanes (a few dozen bytes each), not a thousand threads.
/// Plugin code may still block or spin in a hook; a monitor thread notices a
/// thread that has been in one piece of work for longer than
/// ``stallNanoseconds`` while other lanes wait, and adds a thread for them,
/// as Go's runtime does for a goroutine stuck in a system call. Threads
/// beyond the cores leave once they have idled for a second.
///
/// - Important: Start no work on it in a process that will `fork` without
///   `exec` (the fork server): a child has none of its threads.
public final class HookScheduler: @unchecked Sendable {
    /// The scheduler every runner in this process uses.
    public static let shared = HookScheduler(threads: max(2, RunConfiguration.activeProcessorCount))

    /// Threads that never leave once started: the cores (at least two, so a
    /// task's expiration handler is not queued behind a chunk on one core).
    let baseThreads: Int
    /// Threads at most, stuck ones included.
    let maximumThreads: Int
    /// How long one piece of work may hold a thread before the monitor
    /// counts the thread as stuck and lets another one start.
    let stallNanoseconds: UInt64
    /// How often the monitor looks, while work waits and no thread is idle.
    let monitorTickNanoseconds: UInt64
    /// How long a thread beyond the base idles before it leaves.
    let idleExitNanoseconds: UInt64

    // Everything below, the lanes' queues included, is guarded by `mutex`.
    private let mutex = ThreadLock()
    private let workAvailable: ThreadCondition
    private let monitorWake: ThreadCondition
    private var readyHead: Lane?
    private var readyTail: Lane?
    private var threads = 0
    /// Threads waiting for work, and the signals sent to them not yet taken.
    private var sleepers = 0
    private var wakeups = 0
    /// Per thread slot: when its current work began (monotonic ns), 0 when
    /// it is between works, `freeSlot` when no thread has the slot.
    private var busySince: [UInt64] = []
    private var monitorStarted = false
    private var monitorSleeping = false
    private static let freeSlot = UInt64.max

    init(
        threads: Int, maximumThreads: Int = 512, stall: Duration = .milliseconds(10),
        monitorTick: Duration = .milliseconds(2), idleExit: Duration = .seconds(1)
    ) {
        baseThreads = max(1, threads)
        self.maximumThreads = max(baseThreads, maximumThreads)
        stallNanoseconds = UInt64(max(stall.nanoseconds, 1))
        monitorTickNanoseconds = UInt64(max(monitorTick.nanoseconds, 1))
        idleExitNanoseconds = UInt64(max(idleExit.nanoseconds, 1))
        workAvailable = mutex.makeCondition()
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

    // MARK: Lanes

    /// Queues `work` on `lane`; an `urgent` lane that was idle goes ahead
    /// of the lanes that wait (its own earlier work still comes first).
    func enqueue(_ work: @escaping @Sendable () -> Void, on lane: Lane, urgent: Bool = false) {
        withLock {
            if lane.first == nil {
                lane.first = work
            } else {
                lane.rest.append(work)
            }
            guard !lane.scheduled else { return }
            lane.scheduled = true
            if urgent {
                pushReadyFront(lane)
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

    private func pushReady(_ lane: Lane) {
        lane.nextReady = nil
        if let tail = readyTail {
            tail.nextReady = lane
        } else {
            readyHead = lane
        }
        readyTail = lane
    }

    private func pushReadyFront(_ lane: Lane) {
        lane.nextReady = readyHead
        readyHead = lane
        if readyTail == nil { readyTail = lane }
    }

    private func popReady() -> Lane? {
        guard let lane = readyHead else { return nil }
        readyHead = lane.nextReady
        if readyHead == nil { readyTail = nil }
        lane.nextReady = nil
        return lane
    }

    /// Work is ready: wakes a sleeping thread, starts one while there are
    /// fewer than the base, or else tells the monitor. With the lock held.
    private func wakeOrGrow() {
        if sleepers > wakeups {
            wakeups += 1
            workAvailable.signal()
        } else if threads < baseThreads {
            startThread()
        } else if !monitorStarted {
            monitorStarted = true
            if !Thread.detach({ [self] in monitorLoop() }) { monitorStarted = false }
        } else if monitorSleeping {
            monitorSleeping = false
            monitorWake.signal()
        }
    }

    /// With the lock held.
    private func startThread() {
        let slot: Int
        if let free = busySince.firstIndex(of: Self.freeSlot) {
            slot = free
        } else {
            slot = busySince.count
            busySince.append(0)
        }
        busySince[slot] = 0
        threads += 1
        if !Thread.detach({ [self] in workerLoop(slot: slot) }) {
            threads -= 1
            busySince[slot] = Self.freeSlot
        }
    }

    private func workerLoop(slot: Int) {
        lock()
        while true {
            if let lane = popReady() {
                busySince[slot] = curfew_shim_monotonic_nanoseconds()
                let work = lane.first!
                if lane.restHead < lane.rest.count {
                    lane.first = lane.rest[lane.restHead]
                    lane.restHead += 1
                    if lane.restHead == lane.rest.count {
                        lane.rest = []
                        lane.restHead = 0
                    }
                } else {
                    lane.first = nil
                }
                unlock()
                work()
                lock()
                busySince[slot] = 0
                if lane.first != nil {
                    pushReady(lane)  // behind the lanes that waited meanwhile
                } else {
                    lane.scheduled = false
                }
                continue
            }
            sleepers += 1
            var timedOut = false
            if threads > baseThreads {
                timedOut = workAvailable.wait(nanoseconds: idleExitNanoseconds)
            } else {
                workAvailable.wait()
            }
            sleepers -= 1
            if wakeups > 0 { wakeups -= 1 }
            if timedOut && readyHead == nil && threads > baseThreads {
                threads -= 1
                busySince[slot] = Self.freeSlot
                unlock()
                return
            }
        }
    }

    /// Adds a thread when work waits, none is idle, and threads are stuck.
    private func monitorLoop() {
        lock()
        while true {
            guard readyHead != nil, sleepers <= wakeups else {
                monitorSleeping = true
                monitorWake.wait()
                monitorSleeping = false
                continue
            }
            monitorWake.wait(nanoseconds: monitorTickNanoseconds)
            guard readyHead != nil, sleepers <= wakeups, threads < maximumThreads else { continue }
            let now = curfew_shim_monotonic_nanoseconds()
            var stuck = 0
            for since in busySince where since != 0 && since != Self.freeSlot && now &- since >= stallNanoseconds {
                stuck += 1
            }
            if threads < baseThreads + stuck { startThread() }
        }
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
    fileprivate var rest: [@Sendable () -> Void] = []
    fileprivate var restHead = 0
    /// In the ready list or running on a thread.
    fileprivate var scheduled = false
    fileprivate var nextReady: Lane?

    fileprivate init(scheduler: HookScheduler) {
        self.scheduler = scheduler
    }

    public func enqueue(_ work: @escaping @Sendable () -> Void) {
        scheduler.enqueue(work, on: self)
    }

    /// As ``enqueue(_:)``, ahead of other lanes' waiting work when this lane
    /// is idle: for an expiration, which is due now.
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
