import Glibc
import Synchronization
import Testing

@testable import Curfew

extension ProcessTests.First {
    /// Why a fork server forks from a thread that has run no Swift
    /// (`curfew_shim_fork_server_on_fresh_thread`), shown for `Mutex`:
    /// Swift's `Mutex` keeps each thread's id, and a forked child's one
    /// thread has its parent's forking thread's. The runtime's lock for
    /// making a lazy global does the same; `FoundationPluginTests` runs a
    /// job that contends for one in workers the server forked.
    @Suite(.timeLimit(.minutes(1))) struct ForkedChildTests {
        final class Shared: @unchecked Sendable {
            let mutex = Mutex(0)
        }

        /// Runs `body` on a new thread and returns its result once it ends;
        /// `nil` when no thread could be made.
        func runJoined(_ body: @escaping @Sendable () -> Int32) -> Int32? {
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

        /// Locks `shared.mutex` once (on a joined thread when `joined`), then
        /// forks from a new thread: the child holds the mutex while a second
        /// thread waits for it. The child's exit status, or the signal that
        /// ended it (negated).
        func contendInChild(_ shared: Shared, joined: Bool) -> Int32 {
            runJoined({ forkAndContend(shared, joined: joined) }) ?? 99
        }

        func forkAndContend(_ shared: Shared, joined: Bool) -> Int32 {
            if joined {
                _ = runJoined { shared.mutex.withLock { $0 += 1 }; return 0 }
            } else {
                shared.mutex.withLock { $0 += 1 }  // the forking thread's id is now kept
            }
            let pid = fork()
            if pid == 0 {
                // A crash here is the expected failure: it ends the child at
                // once, with no Swift backtracer or sanitizer report (under
                // ASan the backtracer it started once outlived the child and
                // held the test run's output open), and writes nothing.
                for signal in [SIGILL, SIGTRAP, SIGABRT, SIGSEGV, SIGBUS] { Glibc.signal(signal, SIG_DFL) }
                let null = open("/dev/null", O_WRONLY)
                dup2(null, 1)
                dup2(null, 2)
                let contend: @Sendable () -> Int32 = {
                    var other = pthread_t()
                    shared.mutex.withLock { _ in
                        _ = pthread_create(&other, nil, { argument in
                            let shared = Unmanaged<Shared>.fromOpaque(argument!).takeUnretainedValue()
                            shared.mutex.withLock { $0 += 1 }
                            return nil
                        }, Unmanaged.passUnretained(shared).toOpaque())
                        usleep(50_000)  // the other thread waits in the kernel meanwhile
                    }
                    pthread_join(other, nil)
                    return shared.mutex.withLock { $0 } == 2 ? 0 : 3
                }
                _exit(contend())
            }
            // A child stuck on a lock another thread of this process held at
            // the fork is killed after 20 s (and counts as a failure).
            var status: Int32 = 0
            var waited = 0
            while waitpid(pid, &status, WNOHANG) == 0 {
                if waited == 2000 { kill(pid, SIGKILL) }
                usleep(10_000)
                waited += 1
            }
            let signal = status & 0x7f
            return signal == 0 ? (status >> 8) & 0xff : -signal
        }

        @Test func aMutexLockedOnlyOnAJoinedThreadLeavesTheForkedChildSound() {
            #expect(contendInChild(Shared(), joined: true) == 0)
        }

        /// What the joined thread avoids, so the test above cannot pass for
        /// a toolchain whose `Mutex` forgets thread ids: a mutex locked on
        /// the forking thread itself ends the child.
        @Test func aMutexLockedOnTheForkingThreadEndsTheForkedChild() {
            #expect(contendInChild(Shared(), joined: false) != 0)
        }
    }
}
