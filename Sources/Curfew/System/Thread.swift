import Dispatch
import Glibc
import Synchronization
import _CurfewShims

/// A detached thread, for a blocking loop that must not hold a Dispatch worker.
enum Thread {
    /// Runs `body` on a new detached thread; false when none could be made.
    @discardableResult
    static func detach(_ body: @escaping @Sendable () -> Void) -> Bool {
        final class Box { let body: @Sendable () -> Void; init(_ body: @escaping @Sendable () -> Void) { self.body = body } }
        var thread = pthread_t()
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        let created = pthread_create(&thread, nil, { argument in
            let box = Unmanaged<Box>.fromOpaque(argument!).takeRetainedValue()
            box.body()
            return nil
        }, box)
        if created == 0 {
            pthread_detach(thread)
        } else {
            Unmanaged<Box>.fromOpaque(box).release()
        }
        return created == 0
    }

    /// Puts the calling thread back in the kernel's run queue as it runs,
    /// with the default slice: for a thread about to run a job's code after
    /// its own short work.
    ///
    /// A worker's main thread wakes for a `run`, spends a few hundred
    /// microseconds starting the job, then runs its `create` and first
    /// chunk. Without this call a run of 200 1 ms jobs under `--isolate
    /// job` took 0.95× as long as before the main thread ran the job; with
    /// it, 0.86× (Linux 6.18, EEVDF; BENCHMARKS.md). The slice's length is
    /// unchanged. What the kernel does differently after it was measured,
    /// not traced: the likeliest cause is that the thread starts the job's
    /// code with EEVDF's protection of the running thread's slice begun
    /// afresh, not nearly spent on the start, so the threads that start
    /// made and other processes' do not take the core soon into the chunk.
    /// A kernel before 6.12 reads no slice from the call, finds nothing to
    /// change, and leaves the thread as it was.
    static func takeFreshSlice() {
        _ = curfew_shim_set_slice(0)
    }
}

/// Threads kept for the next piece of blocking work: one whose work ends
/// waits up to ``idleTime`` for another before it leaves, and work given
/// while none waits gets a new thread, never a place behind other work. A
/// run that starts a worker per job supervises each on a thread of its
/// own: kept threads spare it making and ending a thread per job.
///
/// For work that sets nothing about its thread (name, signal mask, timer
/// slack, thread-locals) that the next work could inherit.
final class KeptThreads: @unchecked Sendable {
    // Safe because every field is used under `lock`.

    /// The threads that supervise workers.
    static let supervisors = KeptThreads(idleTime: .seconds(1))

    let idleTime: Duration
    private let lock = ThreadLock()
    private let workCame: ThreadCondition
    /// Work given to a kept thread and not taken yet.
    private var given: [@Sendable () -> Void] = []
    /// Threads waiting for work.
    private var waiting = 0

    init(idleTime: Duration) {
        self.idleTime = idleTime
        workCame = lock.makeCondition()
    }

    /// Runs `body` on a kept thread that waits, or else on a new one; false
    /// when none could be made.
    @discardableResult
    func run(_ body: @escaping @Sendable () -> Void) -> Bool {
        let handed = lock.withLock { () -> Bool in
            guard waiting > given.count else { return false }
            given.append(body)
            workCame.signal()
            return true
        }
        return handed || Thread.detach { [self] in serve(body) }
    }

    /// The threads waiting for work now (for tests).
    var waitingCount: Int { lock.withLock { waiting } }

    private func serve(_ first: @escaping @Sendable () -> Void) {
        var body = first
        while true {
            body()
            body = {}  // what it captured goes now, not when the thread next works or leaves
            lock.lock()
            waiting += 1
            let deadline = curfew_shim_monotonic_nanoseconds() &+ UInt64(max(idleTime.nanoseconds, 0))
            while given.isEmpty {
                if workCame.wait(until: deadline) && given.isEmpty {
                    waiting -= 1
                    lock.unlock()
                    return
                }
            }
            body = given.removeFirst()
            waiting -= 1
            lock.unlock()
        }
    }
}
