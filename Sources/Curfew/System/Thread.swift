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

    /// Runs `body` on a new thread and returns its result once it ends: how
    /// a fork server runs Swift that locks a `Mutex` before it forks.
    ///
    /// Swift's `Mutex` stores its holder's thread id, which each thread
    /// reads the first time it locks one and keeps. A forked child's one
    /// thread keeps what its parent's forking thread had read, so if that
    /// thread ever locked a `Mutex`, a `Mutex` the child's thread holds while
    /// another thread waits for it ends the child ("Unknown error occurred
    /// while attempting to acquire a Mutex"). A thread that never locked one
    /// forks safely. `nil` when no thread could be made.
    static func runJoined(_ body: @escaping @Sendable () -> Int32) -> Int32? {
        final class Box: @unchecked Sendable {
            let body: @Sendable () -> Int32
            var result: Int32 = 0
            init(_ body: @escaping @Sendable () -> Int32) { self.body = body }
        }
        let box = Box(body)
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { argument in
            let box = Unmanaged<Box>.fromOpaque(argument!).takeUnretainedValue()
            box.result = box.body()
            return nil
        }, Unmanaged.passUnretained(box).toOpaque())
        guard created == 0 else { return nil }
        pthread_join(thread, nil)
        return box.result
    }
}
