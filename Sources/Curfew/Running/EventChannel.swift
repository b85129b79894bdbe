import CCurfew
import Dispatch
import Synchronization

/// Delivers a run's events to its handler, in the order they were posted,
/// on one serial queue, so the handler never runs under the runner's locks
/// and each job's `finished` is its last event.
///
/// Each event carries the instant it happened — when it was posted, or the
/// instant a worker read off the shared monotonic clock — not the instant
/// the handler got to it: a handler busy with one job's flood of output
/// does not make another job's events late.
final class EventChannel: Sendable {
    private let queue = DispatchQueue(label: "curfew.events")
    private let clock: any CurfewClock
    private let handler: @Sendable (RunEvent, CurfewInstant) -> Void

    init(clock: any CurfewClock, handler: @escaping @Sendable (RunEvent, CurfewInstant) -> Void) {
        self.clock = clock
        self.handler = handler
    }

    /// Queues an event that happened `at` (now, when not given), and work to
    /// run right after the handler has seen it.
    func post(_ event: RunEvent, at time: CurfewInstant? = nil, then: (@Sendable () -> Void)? = nil) {
        let time = time ?? clock.now()
        queue.async { [handler] in
            handler(event, time)
            then?()
        }
    }
}
