// A Swift job whose `create` makes a lazy global while another thread waits
// for it. Swift makes a global on first use under a lock of its runtime
// that stores the holder's thread id, which the runtime keeps per thread; a
// worker forked from a thread that had already taken such a lock holds it
// under its parent's id, and the thread that waits for it spins for good.
import CurfewJob
import Foundation

/// Signalled by `slowGlobal`'s initializer as it begins.
private let initializing = DispatchSemaphore(value: 0)
/// Signalled by the other thread just before it reads `slowGlobal`.
private let reading = DispatchSemaphore(value: 0)

/// A global whose making waits for the other thread to come to read it,
/// then a tenth of a second more: that thread waits for its lock meanwhile.
private let slowGlobal: Int = {
    initializing.signal()
    reading.wait()
    usleep(100_000)
    return 42
}()

struct ContendedGlobalJob: Job {
    static let name = "contended-global"
    static let summary = "Makes a lazy global while another thread waits for it (a test fixture)."

    init(context: JobContext) throws {
        let read = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            initializing.wait()
            reading.signal()
            precondition(slowGlobal == 42)
            read.signal()
        }
        let made = slowGlobal  // this thread makes it: the other waits for `initializing`
        read.wait()
        context.log("both threads read the global, \(made)")
    }

    mutating func chunk(_ context: JobContext) -> ChunkResult {
        .done
    }

    mutating func expire(reason: ExpirationReason, context: JobContext) {}
}
