import CCurfew
import Glibc
import Synchronization

/// Delivers a run's events to its handler, in the order they were posted,
/// on one ``Lane`` of the ``HookScheduler``, so the handler never runs under
/// the runner's locks and each job's `finished` is its last event.
///
/// A lane, not a Dispatch queue: the events run on the threads the jobs'
/// hooks run on, behind any expiration due (an urgent lane goes first), and
/// a worker starts no Dispatch thread for them. A handler that blocks (a
/// full pipe) holds one thread; the scheduler's monitor adds another.
///
/// Each event carries the instant it happened — when it was posted, or the
/// instant a worker read off the shared monotonic clock — not the instant
/// the handler got to it: a handler busy with one job's flood of output
/// does not make another job's events late.
///
/// The events waiting for the handler are bounded for those who read
/// outside text (a worker's output and messages): they call
/// ``waitForRoom()`` before reading more, so a flood is held up in the
/// worker's pipe, not in the host's memory.
final class EventChannel: Sendable {
    private let lane = HookScheduler.shared.makeLane()
    private let clock: any CurfewClock
    private let handler: @Sendable (RunEvent, CurfewInstant) -> Void
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
        lane.enqueue { [self] in
            handler(event, time)
            backlog.subtract(weight, ordering: .relaxed)
            then?()
        }
    }

    /// Blocks while more than ``maximumBacklog`` bytes of events wait. Call it
    /// holding no lock, from a thread that reads outside text, before reading.
    func waitForRoom() {
        while backlog.load(ordering: .relaxed) > Self.maximumBacklog {
            usleep(1000)
        }
    }

    private static func weight(of event: RunEvent) -> Int {
        switch event {
        case .log(_, _, let message): eventWeight + message.utf8.count
        case .output(_, _, let line): eventWeight + line.utf8.count
        default: eventWeight
        }
    }
}
