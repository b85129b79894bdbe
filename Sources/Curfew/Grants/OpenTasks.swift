/// A job's open background tasks, in the order they began: begin, end and
/// lookup by identifier are O(1) (amortised), and the order is kept for
/// expiration, which calls the handlers oldest first.
///
/// Ended tasks leave a hole that is swept once holes are half the storage,
/// so a sweep's cost is paid for by the ends that made it due.
struct OpenTasks<Task> {
    private var slots: [(id: UInt64, task: Task)?] = []
    /// Where each open task's slot is.
    private var positions: [UInt64: Int] = [:]

    /// How many tasks are open.
    var count: Int { positions.count }
    var isEmpty: Bool { positions.isEmpty }

    /// Adds a task under `id`, which must not be open.
    mutating func append(_ id: UInt64, _ task: Task) {
        precondition(positions[id] == nil, "task \(id) is open already")
        positions[id] = slots.count
        slots.append((id, task))
    }

    /// The task open under `id`, if any.
    subscript(id: UInt64) -> Task? {
        positions[id].flatMap { slots[$0]?.task }
    }

    func contains(_ id: UInt64) -> Bool { positions[id] != nil }

    /// Ends the task open under `id`: the task, or `nil` when none is.
    @discardableResult
    mutating func remove(_ id: UInt64) -> Task? {
        guard let position = positions.removeValue(forKey: id) else { return nil }
        let task = slots[position]?.task
        slots[position] = nil
        if positions.isEmpty {
            slots.removeAll(keepingCapacity: slots.count <= 64)
        } else if slots.count >= 64 && positions.count * 2 < slots.count {
            sweep()
        }
        return task
    }

    /// Ends every task: the open ones, oldest first.
    mutating func removeAll() -> [(id: UInt64, task: Task)] {
        defer {
            slots = []
            positions = [:]
        }
        return ordered
    }

    /// The open tasks, oldest first.
    var ordered: [(id: UInt64, task: Task)] {
        slots.compactMap { $0 }
    }

    /// The open tasks' identifiers, oldest first (none, at no cost, for a
    /// job that opened no task: every chunked job as its grant expires).
    var orderedIDs: [UInt64] {
        isEmpty ? [] : slots.compactMap { $0?.id }
    }

    private mutating func sweep() {
        // Typed, or inference keeps the holes (compactMap to an optional element).
        let open: [(id: UInt64, task: Task)] = slots.compactMap { $0 }
        for (position, slot) in open.enumerated() { positions[slot.id] = position }
        slots = open
    }
}
