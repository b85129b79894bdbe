import Dispatch
import Synchronization

/// A serial queue hooks and handlers are enqueued on.
public protocol HookQueue: Sendable {
    /// Runs `work` after everything enqueued before it, never inside this call.
    func enqueue(_ work: @escaping @Sendable () -> Void)
}

extension DispatchQueue: HookQueue {
    public func enqueue(_ work: @escaping @Sendable () -> Void) {
        async(execute: work)
    }
}

/// A job's hooks, or a piece of the host's own serial work, on libdispatch's
/// worker threads: a serial `DispatchQueue` that targets ``hooks`` (or
/// ``host``).
///
/// A job that waits between chunks holds no thread, so a thousand live jobs
/// cost a thousand queues, not a thousand threads. A hook that blocks or
/// spins holds one of libdispatch's workers; its workqueue monitor adds a
/// worker for the other queues when it sees its workers blocked
/// (ARCHITECTURE.md says how soon).
public final class SerialQueue: HookQueue, @unchecked Sendable {
    // Safe because `queue` is immutable and `queued` atomic.

    /// The one concurrent queue every job's serial queues target: the hooks
    /// of all jobs share libdispatch's utility-QoS workers, as many as the
    /// cores. Utility, not default: libdispatch keeps each QoS's workers
    /// apart, and Swift's tasks run on the default ones, so hooks that spin
    /// on every core cannot stop the host's own code (libdispatch adds
    /// workers only for those that block). On Linux it also runs them at
    /// nice 2: background work yields to the host's and the machine's.
    public static let hooks = DispatchQueue(label: "curfew.hooks", qos: .utility, attributes: .concurrent)

    /// Where the host's own serial work runs (a run's events, admissions, a
    /// worker's status, the server): a QoS above Swift's tasks' and the
    /// hooks', with workers of its own.
    public static let host = DispatchQueue(label: "curfew.host", qos: .userInitiated, attributes: .concurrent)

    private let queue: DispatchQueue
    private let target: DispatchQueue
    /// Work enqueued and not yet finished.
    private let queued = Atomic<Int>(0)

    /// A queue on `target`: ``hooks``, ``host``, or a serial queue, for a
    /// runner whose jobs share one thread (tests).
    public init(label: String, target: DispatchQueue = SerialQueue.hooks) {
        queue = DispatchQueue(label: label, target: target)
        self.target = target
    }

    public func enqueue(_ work: @escaping @Sendable () -> Void) {
        queued.add(1, ordering: .relaxed)
        queue.async {
            work()
            self.queued.subtract(1, ordering: .releasing)
        }
    }

    /// As ``enqueue(_:)``, behind the work other queues have waiting now:
    /// for work that enqueues its own sequel (a chunk loop's next slice). A
    /// serial queue runs on one thread everything it is given while it runs,
    /// so a loop that enqueued itself directly would keep its thread from
    /// every other queue for as long as it ran.
    public func enqueueAfterOthers(_ work: @escaping @Sendable () -> Void) {
        queued.add(1, ordering: .relaxed)
        target.async {
            self.queue.async {
                work()
                self.queued.subtract(1, ordering: .releasing)
            }
        }
    }

    /// Whether work is queued or running on it now.
    public var isBusy: Bool {
        queued.load(ordering: .acquiring) > 0
    }
}
