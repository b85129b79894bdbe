import CCurfew
import Dispatch
import Synchronization

/// Delivers a run's events to its handler, in the order they were posted,
/// on one serial queue, so the handler never runs under the runner's locks
/// and each job's `finished` is its last event.
final class EventChannel: Sendable {
    private let queue = DispatchQueue(label: "curfew.events")
    private let handler: @Sendable (RunEvent) -> Void

    init(handler: @escaping @Sendable (RunEvent) -> Void) {
        self.handler = handler
    }

    /// Queues an event, and work to run right after the handler has seen it.
    func post(_ event: RunEvent, then: (@Sendable () -> Void)? = nil) {
        queue.async { [handler] in
            handler(event)
            then?()
        }
    }
}
