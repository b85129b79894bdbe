/// An armed timer of a ``HookScheduler``: a deadline and the work to run at it.
final class TimerEntry: CurfewTimer, @unchecked Sendable {
    /// `nil` once it fired or was cancelled. Guarded by the owner's lock.
    var work: (@Sendable () -> Void)?
    private unowned let owner: HookScheduler

    init(work: @escaping @Sendable () -> Void, owner: HookScheduler) {
        self.work = work
        self.owner = owner
    }

    func cancel() {
        owner.cancel(self)
    }
}

/// The deadlines of armed timers, earliest first: a binary heap whose items
/// hold their ordering inline. Its owner guards it with a lock.
///
/// A cancelled timer stays in the heap until it reaches the top, or until
/// cancelled ones are half the heap, when they all go at once.
///
/// The heap holds one reference to each entry, unmanaged, so moving an item
/// while the owner holds its lock costs no reference counting.
struct TimerHeap {
    private struct Item {
        let deadline: UInt64
        /// Ties on the deadline fire in the order armed.
        let order: UInt64
        /// Retained while the item is in the heap.
        let reference: Unmanaged<TimerEntry>

        var isCancelled: Bool {
            reference._withUnsafeGuaranteedRef { $0.work == nil }
        }

        func fires(before other: Item) -> Bool {
            deadline != other.deadline ? deadline < other.deadline : order < other.order
        }
    }

    private var items: [Item] = []
    private var cancelled = 0
    private var armed: UInt64 = 0

    /// Timers armed and neither fired nor cancelled.
    var pendingCount: Int { items.count - cancelled }

    /// The earliest deadline in the heap (a cancelled timer's included), or
    /// `nil` when it is empty.
    var nextDeadline: UInt64? { items.first?.deadline }

    mutating func insert(_ entry: TimerEntry, at deadline: UInt64) {
        armed &+= 1
        items.append(Item(deadline: deadline, order: armed, reference: .passRetained(entry)))
        siftUp(items.count - 1)
    }

    /// Takes the entry's work away, so its captures go now, not at its
    /// deadline; the caller releases what it returns outside its lock.
    mutating func cancel(_ entry: TimerEntry) -> (@Sendable () -> Void)? {
        guard let work = entry.work else { return nil }
        entry.work = nil
        cancelled += 1
        if cancelled >= 64 && cancelled * 2 >= items.count {
            items.removeAll {
                guard $0.isCancelled else { return false }
                $0.reference.release()
                return true
            }
            cancelled = 0
            for index in stride(from: items.count / 2 - 1, through: 0, by: -1) { siftDown(index) }
        }
        return work
    }

    /// Takes the work of up to `limit` timers due at `now`, in deadline
    /// order, into `due`; drops cancelled ones it meets at the top.
    mutating func takeDue(at now: UInt64, limit: Int, into due: inout [@Sendable () -> Void]) {
        var taken = 0
        while let top = items.first, top.deadline <= now || top.isCancelled {
            removeTop()
            let entry = top.reference.takeRetainedValue()
            if let work = entry.work {
                entry.work = nil
                due.append(work)
                taken += 1
                if taken == limit { return }
            } else {
                cancelled -= 1
            }
        }
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
