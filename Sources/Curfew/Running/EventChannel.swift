import CCurfew
import Synchronization

/// Delivers a run's events to its handler, in the order they were posted,
/// on one ``SerialQueue``, so the handler never runs under the runner's
/// locks and each job's `finished` is its last event. A handler that blocks
/// (a full pipe) holds one of Dispatch's workers.
///
/// Each event carries the instant it happened — when it was posted, or the
/// instant a worker read off the shared monotonic clock — not the instant
/// the handler got to it: a handler busy with one job's flood of output
/// does not make another job's events late.
///
/// Posting enqueues nothing unless the channel is idle: events wait in a
/// list of the channel's own, and one piece of work on the queue hands them
/// to the handler in order, at most ``drainBatch`` at a time before it goes
/// behind the other queues' work. A burst of job ends (two events each)
/// costs one enqueue a batch, not one an event.
///
/// The events waiting for the handler are bounded for those who read
/// outside text (a worker's output and messages): they call
/// ``waitForRoom()`` before reading more, so a flood is held up in the
/// worker's pipe, not in the host's memory.
final class EventChannel: Sendable {
    private let lane = SerialQueue(label: "curfew.events", target: SerialQueue.host)
    private let clock: any CurfewClock
    private let handler: @Sendable (RunEvent, CurfewInstant) -> Void
    /// Events posted and not yet taken by the lane's work, oldest first, and
    /// whether that work is enqueued or running (it is, while any wait).
    private let waiting = ThreadLocked(Waiting())

    private struct Waiting {
        /// From `head` on (the slots before it are handed over already).
        var events: [Posted?] = []
        var head = 0
        var draining = false

        /// Takes up to `limit` events, oldest first.
        mutating func take(_ limit: Int) -> [Posted] {
            let end = min(events.count, head + limit)
            var taken: [Posted] = []
            taken.reserveCapacity(end - head)
            for index in head..<end {
                taken.append(events[index]!)
                events[index] = nil
            }
            head = end
            if head == events.count {
                // A flood's storage goes with it; a list of a usual size keeps its own.
                events.removeAll(keepingCapacity: events.capacity <= 1024)
                head = 0
            } else if head >= 1024 && head * 2 >= events.count {
                // A flood does not keep the slots it was handed: at most half the list.
                events.removeFirst(head)
                head = 0
                if events.capacity > 4 * max(events.count, 1024) { events = Array(events) }
            }
            return taken
        }
    }

    private struct Posted {
        let event: RunEvent
        let time: CurfewInstant
        let weight: Int
        let then: (@Sendable () -> Void)?
    }

    /// Makes, in a fork server, the waiting list's storage type a worker's
    /// first event would (see `IsolationWorker.warmUp`).
    static func warmUp() {
        var events: [Posted?] = []
        events.append(Posted(event: .log(job: "j", level: .info, message: "m"), time: CurfewInstant(nanoseconds: 1), weight: 1, then: nil))
        precondition(events.count == 1)
    }

    /// The room the waiting list holds now, in events (for tests: a flood's
    /// storage is let go once it has been handed over).
    var waitingCapacity: Int {
        waiting.withLock { $0.events.capacity }
    }

    /// The most events one piece of the lane's work hands over before it
    /// lets other lanes' work run.
    static let drainBatch = 16
    /// The bytes of text in events not yet handled (each event counts
    /// ``eventWeight`` bytes and its text).
    private let backlog = Atomic<Int>(0)

    /// How many bytes of events may wait before readers of outside text
    /// wait: 16 MiB, one largest log message.
    static let maximumBacklog = 16 << 20
    /// What an event costs in the backlog beyond its text: about what one
    /// takes in memory while it waits (the event, its strings, the queued
    /// block), so the bound holds for a flood of empty lines too.
    static let eventWeight = 1024

    init(clock: any CurfewClock, handler: @escaping @Sendable (RunEvent, CurfewInstant) -> Void) {
        self.clock = clock
        self.handler = handler
    }

    /// Queues an event that happened `at` (now, when not given), and work to
    /// run right after the handler has seen it.
    func post(_ event: RunEvent, at time: CurfewInstant? = nil, then: (@Sendable () -> Void)? = nil) {
        let time = time ?? clock.now()
        let weight = Self.weight(of: event)
        backlog.add(weight, ordering: .relaxed)
        let start = waiting.withLock { waiting -> Bool in
            waiting.events.append(Posted(event: event, time: time, weight: weight, then: then))
            guard !waiting.draining else { return false }
            waiting.draining = true
            return true
        }
        if start { lane.enqueue { [self] in drain() } }
    }

    /// On the lane: hands up to ``drainBatch`` waiting events to the handler,
    /// in order, then enqueues itself again if more wait.
    private func drain() {
        let batch = waiting.withLock { $0.take(Self.drainBatch) }
        for posted in batch {
            handler(posted.event, posted.time)
            backlog.subtract(posted.weight, ordering: .relaxed)
            posted.then?()
        }
        let more = waiting.withLock { waiting -> Bool in
            waiting.draining = waiting.head < waiting.events.count
            return waiting.draining
        }
        if more { lane.enqueueAfterOthers { [self] in drain() } }
    }

    /// Whether every event posted so far has been handed to the handler.
    var isDrained: Bool { backlog.load(ordering: .relaxed) == 0 }

    /// Blocks while more than ``maximumBacklog`` bytes of events wait. Call it
    /// holding no lock, from a thread that reads outside text, before reading.
    func waitForRoom() {
        while backlog.load(ordering: .relaxed) > Self.maximumBacklog {
            Syscalls.nap(microseconds: 1000)
        }
    }

    private static func weight(of event: RunEvent) -> Int {
        switch event {
        case .log(_, _, let message): eventWeight + message.utf8.count
        case .output(_, _, let line): eventWeight + line.utf8.count
        case .runSubmitted(_, let run): eventWeight + run.parameters.reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count }
        default: eventWeight
        }
    }
}
