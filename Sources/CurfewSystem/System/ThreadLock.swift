import Glibc

/// A pthread mutex and conditions on it, for the host's own threads that
/// wait for a deadline (``TimerThread``).
///
/// The mutex is adaptive (a waiter spins a moment before it sleeps, as
/// these locks are held briefly), and timed waits read `CLOCK_MONOTONIC`,
/// the clock of ``MonotonicClock``. Its memory is never freed: the threads
/// that use it keep their owner alive for the process's life.
package final class ThreadLock: @unchecked Sendable {
    fileprivate let mutex: UnsafeMutablePointer<pthread_mutex_t>

    package init() {
        mutex = Self.makeMutex()
    }

    /// An adaptive mutex, for the caller to destroy and free (or keep).
    package static func makeMutex() -> UnsafeMutablePointer<pthread_mutex_t> {
        let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP))
        pthread_mutex_init(mutex, &attributes)
        pthread_mutexattr_destroy(&attributes)
        return mutex
    }

    /// A condition to wait on with this lock held.
    package func makeCondition() -> ThreadCondition {
        let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
        return ThreadCondition(condition: condition, mutex: mutex)
    }

    package func lock() { pthread_mutex_lock(mutex) }
    package func unlock() { pthread_mutex_unlock(mutex) }
}

/// A condition of a ``ThreadLock``: every call but ``signal()`` with the lock held.
package struct ThreadCondition: @unchecked Sendable {
    fileprivate let condition: UnsafeMutablePointer<pthread_cond_t>
    fileprivate let mutex: UnsafeMutablePointer<pthread_mutex_t>

    /// Waits until signalled (or woken spuriously).
    package func wait() {
        pthread_cond_wait(condition, mutex)
    }

    /// Waits until signalled or until `deadline` (monotonic nanoseconds);
    /// true when the time ran out.
    @discardableResult
    package func wait(until deadline: UInt64) -> Bool {
        var time = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        return pthread_cond_timedwait(condition, mutex, &time) == ETIMEDOUT
    }

    /// Wakes one waiter.
    package func signal() {
        pthread_cond_signal(condition)
    }
}

/// A value guarded by a pthread mutex: for state that several threads
/// touch at a high rate (a run's events), where Swift's `Mutex`, a
/// priority-inheriting futex on Linux, takes every contended acquire
/// through the kernel's rt-mutex code.
package final class ThreadLocked<Value>: @unchecked Sendable {
    // Safe because `value` is read and written only with `mutex` held.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    package init(_ value: Value) {
        self.value = value
        mutex = ThreadLock.makeMutex()
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    package func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
