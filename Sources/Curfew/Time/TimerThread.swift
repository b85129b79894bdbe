import Glibc
import _CurfewShims

/// The one thread every ``MonotonicClock`` timer of this process fires on:
/// a heap of deadlines and a timed wait on `CLOCK_MONOTONIC` until the
/// earliest, with a timer slack of 1 µs.
///
/// A timer costs an entry in the heap (no kernel object), and firing it is
/// one wake of this thread, which runs the timer's work itself: the work is
/// the host's (a grant's state change and an enqueue), never plugin code.
/// A cancelled timer is dropped from the heap when it reaches the top, or
/// all at once when cancelled ones are half the heap.
///
/// - Important: Arm no timer in a process that will `fork` without `exec`
///   (the fork server): a child has no copy of the thread.
final class TimerThread: @unchecked Sendable {
    static let shared = TimerThread()

    /// One armed timer. Its `work` is `nil` once it fired or was cancelled.
    final class Entry: CurfewTimer, @unchecked Sendable {
        fileprivate var work: (@Sendable () -> Void)?
        fileprivate unowned let thread: TimerThread

        fileprivate init(work: @escaping @Sendable () -> Void, thread: TimerThread) {
            self.work = work
            self.thread = thread
        }

        func cancel() {
            thread.cancel(self)
        }
    }

    /// A place in the heap: what it is ordered by, inline.
    private struct Item {
        let deadline: UInt64
        /// Ties on the deadline fire in the order armed.
        let order: UInt64
        let entry: Entry

        func fires(before other: Item) -> Bool {
            deadline != other.deadline ? deadline < other.deadline : order < other.order
        }
    }

    // Everything below is guarded by `mutex`.
    private let mutex = ThreadLock()
    private let changed: ThreadCondition
    private var heap: [Item] = []
    private var cancelledInHeap = 0
    private var armed: UInt64 = 0
    private var started = false
    /// The deadline the thread sleeps until (`.max`: until told).
    private var sleepingUntil: UInt64 = 0

    init() {
        changed = mutex.makeCondition()
    }

    /// Arms a timer that runs `work` on this thread at `deadline` (monotonic
    /// nanoseconds), never inside this call.
    func schedule(at deadline: UInt64, _ work: @escaping @Sendable () -> Void) -> Entry {
        mutex.lock()
        defer { mutex.unlock() }
        armed &+= 1
        let entry = Entry(work: work, thread: self)
        heap.append(Item(deadline: deadline, order: armed, entry: entry))
        siftUp(heap.count - 1)
        if !started {
            started = true
            if !Thread.detach({ [self] in loop() }) {
                fatalError("curfew: cannot start the timer thread")
            }
        } else if deadline < sleepingUntil {
            changed.signal()
        }
        return entry
    }

    /// Timers armed and not yet fired or cancelled (for tests).
    var pendingCount: Int {
        mutex.lock()
        defer { mutex.unlock() }
        return heap.count - cancelledInHeap
    }

    /// The deadline the thread waits for now (`.max`: none; 0: it is not waiting).
    var waitingUntil: UInt64 {
        mutex.lock()
        defer { mutex.unlock() }
        return sleepingUntil
    }

    private func cancel(_ entry: Entry) {
        mutex.lock()
        defer { mutex.unlock() }
        guard entry.work != nil else { return }
        entry.work = nil  // its captures go now, not at its deadline
        cancelledInHeap += 1
        if cancelledInHeap >= 64 && cancelledInHeap * 2 >= heap.count {
            heap.removeAll { $0.entry.work == nil }
            cancelledInHeap = 0
            for index in stride(from: heap.count / 2 - 1, through: 0, by: -1) { siftDown(index) }
        }
    }

    private func loop() {
        _ = curfew_shim_set_timer_slack(1)
        var due: [@Sendable () -> Void] = []
        mutex.lock()
        while true {
            // Every timer due now, taken under one hold of the lock.
            let now = curfew_shim_monotonic_nanoseconds()
            while let top = heap.first, top.deadline <= now || top.entry.work == nil {
                removeTop()
                if let work = top.entry.work {
                    top.entry.work = nil
                    due.append(work)
                    if due.count == 64 { break }
                } else {
                    cancelledInHeap -= 1
                }
            }
            if !due.isEmpty {
                sleepingUntil = 0
                mutex.unlock()
                for work in due { work() }
                due.removeAll(keepingCapacity: true)
                mutex.lock()
                continue
            }
            guard let top = heap.first else {
                sleepingUntil = .max
                changed.wait()
                continue
            }
            sleepingUntil = top.deadline
            changed.wait(until: top.deadline)
        }
    }

    // MARK: The heap (with the lock held)

    private func removeTop() {
        let last = heap.removeLast()
        if !heap.isEmpty {
            heap[0] = last
            siftDown(0)
        }
    }

    private func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].fires(before: heap[parent]) else { return }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            guard left < heap.count else { return }
            var first = left
            if left + 1 < heap.count && heap[left + 1].fires(before: heap[left]) { first = left + 1 }
            guard heap[first].fires(before: heap[parent]) else { return }
            heap.swapAt(first, parent)
            parent = first
        }
    }
}
