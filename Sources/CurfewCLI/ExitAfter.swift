import Curfew
import Dispatch
import Synchronization

/// Runs `body` on the cooperative thread pool, blocks the calling (main)
/// thread until it returns, and exits the process with its status.
///
/// The main thread never runs the main queue, so how the process ends does
/// not depend on what a plugin loaded: with Foundation loaded, the main queue
/// is drained only by a CFRunLoop, which Curfew never runs.
///
/// The main thread waits with no signal blocked, as `dispatch_main` did, so
/// the process takes its signals even when its parent started it with them
/// blocked (Dispatch's own threads block them all).
///
/// - Parameter body: The program; its result is the exit status.
public func exitAfter(_ body: @escaping @Sendable () async -> Int32) -> Never {
    _ = SignalMask.unblockAll()
    let done = DispatchSemaphore(value: 0)
    let status = Mutex<Int32>(0)
    Task.detached {
        let result = await body()
        status.withLock { $0 = result }
        done.signal()
    }
    done.wait()
    Syscalls.exit(status.withLock { $0 })
}
