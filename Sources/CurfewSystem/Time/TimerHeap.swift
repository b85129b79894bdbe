import Synchronization

/// An armed timer of the ``TimerThread``: a deadline and the work to run at it.
///
/// Firing and cancelling race for the work through one atomic state, so a
/// cancel takes no lock: a job that ends cancels its timers from the work
/// of other timers (a burst of expirations), which must not wait for the
/// lock the timer thread holds while it takes the next.
package final class TimerEntry: CurfewTimer, @unchecked Sendable {
    private static let armed: UInt8 = 0
    private static let fired: UInt8 = 1
    private static let cancelled: UInt8 = 2

    /// Armed, then fired (taken by the heap) or cancelled, whichever came first.
    private let state = Atomic<UInt8>(TimerEntry.armed)
    /// Read and cleared only by whichever moved `state` off armed.
    private var work: (@Sendable () -> Void)?
    private unowned let owner: TimerThread

    package init(work: @escaping @Sendable () -> Void, owner: TimerThread) {
        self.work = work
        self.owner = owner
    }

    /// After it returns, the work does not start (it may be running now, if
    /// it fired first). Its captures are released here, at once, not at
    /// the deadline.
    package func cancel() {
        guard state.compareExchange(expected: Self.armed, desired: Self.cancelled, ordering: .acquiringAndReleasing).exchanged else {
            return
        }
        let captures = work
        work = nil
        owner.timerCancelled()
        _ = captures
    }

    /// For the heap, as the deadline comes: the work, unless it was cancelled.
    package func takeForFiring() -> (@Sendable () -> Void)? {
        guard state.compareExchange(expected: Self.armed, desired: Self.fired, ordering: .acquiringAndReleasing).exchanged else {
            return nil
        }
        defer { work = nil }
        return work
    }

    package var isCancelled: Bool {
        state.load(ordering: .acquiring) == Self.cancelled
    }
}

/// The deadlines of armed timers, earliest first: a binary heap whose items
/// hold their ordering inline. Its owner guards it with a lock.
///
/// A cancelled timer stays in the heap until it reaches the top, or until
/// cancelled ones are half the heap, when they all go at once. Timers are
/// cancelled outside the owner's lock (``TimerEntry/cancel()``), so the
/// owner counts them, and passes its count in.
///
/// The heap holds one reference to each entry, unmanaged, so moving an item
/// while the owner holds its lock costs no reference counting.
package struct TimerHeap {
    private struct Item {
        let deadline: UInt64
        /// Ties on the deadline fire in the order armed.
        let order: UInt64
        /// Retained while the item is in the heap.
        let reference: Unmanaged<TimerEntry>

        var isCancelled: Bool {
            reference._withUnsafeGuaranteedRef { $0.isCancelled }
        }

        func fires(before other: Item) -> Bool {
            deadline != other.deadline ? deadline < other.deadline : order < other.order
        }
    }

    private var items: [Item] = []
    private var armed: UInt64 = 0

    /// Timers in the heap, cancelled ones included.
    package var count: Int { items.count }

    /// The earliest deadline in the heap (a cancelled timer's included), or
    /// `nil` when it is empty.
    package var nextDeadline: UInt64? { items.first?.deadline }

    package mutating func insert(_ entry: TimerEntry, at deadline: UInt64) {
        armed &+= 1
        items.append(Item(deadline: deadline, order: armed, reference: .passRetained(entry)))
        siftUp(items.count - 1)
    }

    /// Whether cancelled timers, `cancelled` of them by the owner's count,
    /// are enough to be worth a ``removeCancelled()``: half the heap, and at
    /// least 64.
    package func wantsCompaction(cancelled: Int) -> Bool {
        cancelled >= 64 && cancelled * 2 >= items.count
    }

    /// Drops every cancelled timer; returns how many went.
    package mutating func removeCancelled() -> Int {
        let before = items.count
        items.removeAll {
            guard $0.isCancelled else { return false }
            $0.reference.release()
            return true
        }
        for index in stride(from: items.count / 2 - 1, through: 0, by: -1) { siftDown(index) }
        return before - items.count
    }

    /// Takes the work of the earliest timer due at `now`, and of those due at
    /// the very same instant (ties, in the order armed), at most `limit`,
    /// into `due`; drops cancelled ones it meets at the top and returns how
    /// many.
    package mutating func takeDue(at now: UInt64, limit: Int, into due: inout [@Sendable () -> Void]) -> Int {
        var taken = 0
        var dropped = 0
        var instant: UInt64?
        while let top = items.first, top.isCancelled || (instant.map { top.deadline == $0 } ?? (top.deadline <= now)) {
            removeTop()
            let entry = top.reference.takeRetainedValue()
            if let work = entry.takeForFiring() {
                due.append(work)
                instant = top.deadline
                taken += 1
                if taken == limit { break }
            } else {
                dropped += 1
            }
        }
        return dropped
    }

    private mutating func removeTop() {
        let last = items.removeLast()
        if !items.isEmpty {
            items[0] = last
            siftDown(0)
        }
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard items[child].fires(before: items[parent]) else { return }
            items.swapAt(child, parent)
            child = parent
        }
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            guard left < items.count else { return }
            var first = left
            if left + 1 < items.count && items[left + 1].fires(before: items[left]) { first = left + 1 }
            guard items[first].fires(before: items[parent]) else { return }
            items.swapAt(first, parent)
            parent = first
        }
    }
}
