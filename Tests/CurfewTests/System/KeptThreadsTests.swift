import Dispatch
import Glibc
import Synchronization
import Testing

@testable import Curfew

/// Threads kept for the next piece of blocking work: reused while they
/// wait, never making one piece wait behind another, gone once idle.
@Suite(.timeLimit(.minutes(1))) struct KeptThreadsTests {
    /// Polls `condition` every millisecond for up to ten seconds.
    func eventually(_ condition: () -> Bool) -> Bool {
        for _ in 0..<10_000 {
            if condition() { return true }
            usleep(1000)
        }
        return condition()
    }

    /// Runs `body` on `threads` and returns the thread it ran on.
    func threadOf(_ threads: KeptThreads, _ body: @escaping @Sendable () -> Void = {}) -> pthread_t? {
        let ran = DispatchSemaphore(value: 0)
        let id = Mutex<pthread_t>(0)
        guard threads.run({
            id.withLock { $0 = pthread_self() }
            body()
            ran.signal()
        }) else { return nil }
        guard ran.wait(timeout: .now() + 10) == .success else { return nil }
        return id.withLock { $0 }
    }

    @Test func aThreadWaitingForWorkRunsTheNextPiece() throws {
        let threads = KeptThreads(idleTime: .seconds(30))
        let first = try #require(threadOf(threads))
        #expect(eventually { threads.waitingCount == 1 })
        let second = try #require(threadOf(threads))
        #expect(second == first, "the waiting thread ran it")
        #expect(first != pthread_self())
    }

    /// A supervisor blocks for its worker's whole life: the next piece must
    /// get a thread of its own, not wait behind it.
    @Test func workGivenWhileEveryKeptThreadIsBusyGetsANewThread() throws {
        let threads = KeptThreads(idleTime: .seconds(30))
        let release = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        let busy = Mutex<pthread_t>(0)
        let ran = threads.run {
            busy.withLock { $0 = pthread_self() }
            started.signal()
            release.wait()
        }
        try #require(ran)
        try #require(started.wait(timeout: .now() + 10) == .success)
        let other = try #require(threadOf(threads), "ran while the first was still busy")
        #expect(other != busy.withLock { $0 })
        release.signal()
        #expect(eventually { threads.waitingCount == 2 })
    }

    @Test func aThreadIdleForItsTimeLeaves() throws {
        let threads = KeptThreads(idleTime: .milliseconds(300))
        _ = try #require(threadOf(threads))
        #expect(eventually { threads.waitingCount == 1 }, "it waits first")
        #expect(eventually { threads.waitingCount == 0 })
        // Work after that starts a thread again.
        #expect(threadOf(threads) != nil)
    }
}
