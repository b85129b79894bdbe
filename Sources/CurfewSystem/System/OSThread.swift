import Dispatch
import Glibc
import Synchronization
import _CurfewShims

/// A detached thread, for a blocking loop that must not hold a Dispatch worker.
package enum OSThread {
    /// Runs `body` on a new detached thread; false when none could be made.
    @discardableResult
    package static func detach(_ body: @escaping @Sendable () -> Void) -> Bool {
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
}
