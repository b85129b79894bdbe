import Dispatch
import Synchronization

/// Starts the host's helper processes (the fork server, pooled and scanner
/// workers) from one thread that lives as long as the process.
///
/// A helper asks for SIGKILL when its parent dies (`PR_SET_PDEATHSIG`), and
/// the kernel sends it when the *thread* that started the helper ends, not
/// the process: a helper started from a pool thread that later retires
/// would be killed in mid-job. From this thread, it dies with the host only.
package enum Spawner {
    private static let requests = Mutex<[@Sendable () -> Void]>([])
    private static let wake = DispatchSemaphore(value: 0)
    private static let started: Bool = OSThread.detach {
        while true {
            wake.wait()
            let work = requests.withLock { requests in
                defer { requests.removeAll() }
                return requests
            }
            work.forEach { $0() }
        }
    }

    /// Runs `body` on the spawner thread and returns what it returned.
    package static func run<T: Sendable>(_ body: @escaping @Sendable () -> T) -> T {
        // No thread (the system refused one): start from here, as before.
        guard started else { return body() }
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<T?>(nil)
        requests.withLock {
            $0.append {
                result.withLock { $0 = body() }
                done.signal()
            }
        }
        wake.signal()
        done.wait()
        return result.withLock { $0! }
    }
}
