import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Curfew

/// The threads in-process hooks run on: lanes keep their order, threads stay
/// at the cores however many lanes there are, and a hook that blocks does not
/// stop the others. Where a test counts threads, its scheduler counts no
/// thread as stuck (a loaded machine may hold a thread off its core for
/// longer than the usual 10 ms).
@Suite(.timeLimit(.minutes(1))) struct HookSchedulerTests {
    /// Waits for `semaphore` at most `seconds`; false when it never came.
    func waited(_ semaphore: DispatchSemaphore, seconds: Double = 10) -> Bool {
        semaphore.wait(timeout: .now() + seconds) == .success
    }

    @Test func eachLaneRunsItsWorkInOrderAndOneAtATime() {
        let scheduler = HookScheduler(threads: 2, stall: .seconds(60))  // no thread counts as stuck
        let lanes = (0..<40).map { _ in scheduler.makeLane() }
        let perLane = 200
        let seen = Mutex([[Int]](repeating: [], count: lanes.count))
        let inside = Mutex([Int](repeating: 0, count: lanes.count))
        let overlaps = Atomic<Int>(0)
        let done = DispatchSemaphore(value: 0)
        let remaining = Atomic<Int>(lanes.count * perLane)
        for item in 0..<perLane {
            for (index, lane) in lanes.enumerated() {
                lane.enqueue {
                    if inside.withLock({ $0[index] += 1; return $0[index] }) != 1 {
                        overlaps.add(1, ordering: .relaxed)
                    }
                    seen.withLock { $0[index].append(item) }
                    inside.withLock { $0[index] -= 1 }
                    if remaining.subtract(1, ordering: .sequentiallyConsistent).newValue == 0 { done.signal() }
                }
            }
        }
        #expect(waited(done))
        #expect(overlaps.load(ordering: .relaxed) == 0)
        seen.withLock { seen in
            for order in seen { #expect(order == Array(0..<perLane)) }
        }
        #expect(scheduler.threadCount <= 2)
    }

    /// Before: a lane kept every piece of work it had run, and what it
    /// captured, until it was empty once; a run's events, a lane that a
    /// flood of output never lets empty, grew the host by hundreds of MiB.
    @Test func aLaneThatNeverEmptiesReleasesTheWorkItHasRun() {
        final class Released: Sendable { let count = Atomic<Int>(0) }
        final class Token: Sendable {
            let released: Released
            init(_ released: Released) { self.released = released }
            deinit { released.count.add(1, ordering: .relaxed) }
        }
        let scheduler = HookScheduler(threads: 2, stall: .seconds(60))
        let lane = scheduler.makeLane()
        let released = Released()
        let (go, reached, finish) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        lane.enqueue { go.wait() }
        let count = 1000
        for _ in 0..<count {
            let token = Token(released)
            lane.enqueue { _ = token }
        }
        // The lane is not empty while this waits: the work behind it must be gone already.
        lane.enqueue {
            reached.signal()
            finish.wait()
        }
        for _ in 0..<2 { lane.enqueue {} }
        go.signal()
        #expect(waited(reached))
        #expect(released.count.load(ordering: .relaxed) == count)
        finish.signal()
    }

    @Test func aThousandLanesShareTheCoresThreads() {
        let scheduler = HookScheduler(threads: 2, stall: .seconds(60))  // no thread counts as stuck
        let done = DispatchSemaphore(value: 0)
        let remaining = Atomic<Int>(1000)
        let lanes = (0..<1000).map { _ in scheduler.makeLane() }
        for lane in lanes {
            lane.enqueue {
                if remaining.subtract(1, ordering: .sequentiallyConsistent).newValue == 0 { done.signal() }
            }
        }
        #expect(waited(done))
        #expect(scheduler.threadCount == 2)
    }

    @Test func aBlockedHookGetsTheOtherLanesAThreadAndTheExtraOneLeaves() {
        let scheduler = HookScheduler(
            threads: 1, stall: .milliseconds(5), monitorTick: .milliseconds(1), idleExit: .milliseconds(50))
        let blocked = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        let other = DispatchSemaphore(value: 0)
        scheduler.makeLane().enqueue {
            entered.signal()
            blocked.wait()
        }
        #expect(waited(entered))
        let lane = scheduler.makeLane()
        lane.enqueue { other.signal() }
        // The only thread is blocked: the other lane runs on a thread the monitor adds.
        #expect(waited(other))
        #expect(scheduler.threadCount == 2)
        blocked.signal()
        // Past its idle time the extra thread leaves.
        let deadline = ContinuousClock.now + .seconds(10)
        while scheduler.threadCount > 1 && ContinuousClock.now < deadline { usleep(2000) }
        #expect(scheduler.threadCount == 1)
        // And the base thread still works.
        lane.enqueue { other.signal() }
        #expect(waited(other))
    }

    /// The names of work in the order it ran, and a signal once `count` have.
    final class RunOrder: Sendable {
        let done = DispatchSemaphore(value: 0)
        private let ran = Mutex<[String]>([])
        private let count: Int
        init(count: Int) { self.count = count }
        func record(_ name: String) -> @Sendable () -> Void {
            { [self] in if ran.withLock({ $0.append(name); return $0.count }) == count { done.signal() } }
        }
        var names: [String] { ran.withLock { $0 } }
    }

    /// Holds the one thread of `scheduler` in work on `lane` until the
    /// returned semaphore is signalled.
    func occupy(_ lane: Lane) -> DispatchSemaphore {
        let release = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        lane.enqueue {
            entered.signal()
            release.wait()
        }
        #expect(waited(entered))
        return release
    }

    @Test func urgentLanesGoAheadOfWaitingLanesInTheirOrderButNotOfTheirOwnWork() {
        let scheduler = HookScheduler(threads: 1, stall: .seconds(60))
        let runs = RunOrder(count: 5)
        let record = runs.record
        let busy = scheduler.makeLane()
        let release = occupy(busy)
        // The busy lane's own next work stays behind its running work, urgent
        // or not; once that ends, the lane joins the urgent ones.
        busy.enqueueUrgently(record("busy, urgent"))
        scheduler.makeLane().enqueueUrgently(record("urgent 1"))
        scheduler.makeLane().enqueue(record("first"))
        scheduler.makeLane().enqueue(record("second"))
        // Urgent lanes go ahead of the others in the order they came.
        scheduler.makeLane().enqueueUrgently(record("urgent 2"))
        release.signal()
        #expect(waited(runs.done))
        #expect(runs.names == ["urgent 1", "urgent 2", "busy, urgent", "first", "second"])
    }

    /// Before: a lane already waiting for a thread kept its place when urgent
    /// work came, so a job whose chunk timer fired just before its grant
    /// expired ran its `expire` hook behind every other lane's waiting work
    /// (10 ms late in a burst of a thousand ends).
    @Test func urgentWorkTakesItsWaitingLaneAheadOfTheOthers() {
        let scheduler = HookScheduler(threads: 1, stall: .seconds(60))
        let runs = RunOrder(count: 5)
        let record = runs.record
        let release = occupy(scheduler.makeLane())
        let waiting = scheduler.makeLane()
        waiting.enqueue(record("waiting, first"))
        scheduler.makeLane().enqueue(record("other"))
        scheduler.makeLane().enqueue(record("other 2"))
        waiting.enqueueUrgently(record("waiting, urgent"))
        scheduler.makeLane().enqueueUrgently(record("urgent"))
        release.signal()
        #expect(waited(runs.done))
        // Its own first work still comes first; then it takes its turn among the urgent.
        #expect(runs.names == ["waiting, first", "urgent", "waiting, urgent", "other", "other 2"])
    }

    /// The lane moves from wherever it waits: the middle, the end, or
    /// behind an urgent lane that waits; the others keep their order.
    @Test(arguments: [
        (["other", "waiting", "other 2"], ["waiting, first", "waiting, urgent", "other", "other 2"]),
        (["other", "other 2", "waiting"], ["waiting, first", "waiting, urgent", "other", "other 2"]),
        (["urgent", "other", "waiting"], ["urgent", "waiting, first", "waiting, urgent", "other"]),
    ])
    func aWaitingLaneMovesFromAnyPlace(queued: [String], expected: [String]) {
        let scheduler = HookScheduler(threads: 1, stall: .seconds(60))
        let runs = RunOrder(count: expected.count)
        let release = occupy(scheduler.makeLane())
        let waiting = scheduler.makeLane()
        for name in queued {
            switch name {
            case "waiting": waiting.enqueue(runs.record("waiting, first"))
            case "urgent": scheduler.makeLane().enqueueUrgently(runs.record(name))
            default: scheduler.makeLane().enqueue(runs.record(name))
            }
        }
        waiting.enqueueUrgently(runs.record("waiting, urgent"))
        release.signal()
        #expect(waited(runs.done))
        #expect(runs.names == expected)
    }

    @Test func aLaneIsBusyWhileItsWorkIsQueuedOrRunning() {
        let scheduler = HookScheduler(threads: 1)
        let lane = scheduler.makeLane()
        #expect(!lane.isBusy)
        let release = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        let after = DispatchSemaphore(value: 0)
        lane.enqueue {
            entered.signal()
            release.wait()
        }
        #expect(waited(entered))
        #expect(lane.isBusy)
        release.signal()
        // A second lane on the one thread runs once the first is done.
        scheduler.makeLane().enqueue { after.signal() }
        #expect(waited(after))
        #expect(!lane.isBusy)
    }

    /// Live jobs in process hold no thread while they wait between chunks.
    @Test func sixtyFourTickingJobsRunOnTwoThreadsAndAllExpire() async throws {
        let fixture = try RunnerFixture()
        let tick = try fixture.jobs("tick")
        let scheduler = HookScheduler(threads: 2, stall: .seconds(60))  // no thread counts as stuck
        var configuration = RunConfiguration(
            policy: GrantPolicy(budget: .seconds(30), grace: .seconds(1)), maxConcurrentJobs: 64,
            parameters: ["tick-ms": "5"])
        configuration.scheduler = scheduler
        let runner = Runner(jobs: Array(repeating: tick[0], count: 64), configuration: configuration)
        let task = Task { await runner.run() }
        // Every job has run chunks: all 64 are live at once.
        let deadline = ContinuousClock.now + .seconds(20)
        while fixture.count("tick", "chunks") < 64 * 3 && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(fixture.count("tick", "creates") == 64)
        #expect(fixture.count("tick", "chunks") >= 64 * 3)
        #expect(scheduler.threadCount <= 2)
        runner.cancel()
        let results = await task.value
        #expect(results.count == 64)
        #expect(results.allSatisfy { $0.outcome == .expired })
        #expect(fixture.count("tick", "expires") == 64)
        #expect(fixture.count("tick", "overlaps") == 0)
        #expect(scheduler.threadCount <= 2)
    }

    // MARK: A thread that joins

    /// Starts `body` on a new thread, which may stay in the scheduler for
    /// good (a thread that joins never leaves while it is one of the base).
    func onNewThread(_ body: @escaping @Sendable () -> Void) {
        #expect(Thread.detach(body))
    }

    /// A worker's main thread joins the hook threads with its job's first
    /// work: the work its setup made ready runs on it, and no other thread
    /// is started or woken for it.
    @Test func theWorkASetupMakesReadyRunsOnTheThreadThatJoins() {
        let scheduler = HookScheduler(threads: 2, stall: .seconds(60))
        let first = scheduler.makeLane()
        let second = scheduler.makeLane()
        let ranOnJoiner = Mutex<[Bool]>([])
        let threadsThen = Mutex<[Int]>([])
        let done = DispatchSemaphore(value: 0)
        onNewThread {
            let joiner = pthread_self()
            let record: @Sendable () -> Void = {
                ranOnJoiner.withLock { $0.append(pthread_equal(pthread_self(), joiner) != 0) }
                threadsThen.withLock { $0.append(scheduler.threadCount) }
                done.signal()
            }
            _ = scheduler.adoptCurrentThread {
                first.enqueue(record)  // a job's `started` event
                second.enqueue(record)  // its `create`
                return true
            }
        }
        #expect(waited(done) && waited(done))
        #expect(ranOnJoiner.withLock { $0 } == [true, true])
        #expect(threadsThen.withLock { $0 } == [1, 1], "no thread was started for them")
    }

    /// A setup that cannot let its thread join (a worker that could make no
    /// thread to read its channel): the work it made ready, counting on
    /// that thread, goes to another.
    @Test func aThreadThatDoesNotJoinLeavesItsWorkToAnother() {
        let scheduler = HookScheduler(threads: 2, stall: .seconds(60))
        let lane = scheduler.makeLane()
        let elsewhere = Atomic<Bool>(false)
        let done = DispatchSemaphore(value: 0)
        let joined = Mutex<Bool?>(nil)
        let returned = DispatchSemaphore(value: 0)
        onNewThread {
            let caller = pthread_self()
            let result = scheduler.adoptCurrentThread {
                lane.enqueue {
                    elsewhere.store(pthread_equal(pthread_self(), caller) == 0, ordering: .relaxed)
                    done.signal()
                }
                return false
            }
            joined.withLock { $0 = result }
            returned.signal()
        }
        #expect(waited(returned))
        #expect(joined.withLock { $0 } == false)
        #expect(waited(done), "the work ran")
        let ranElsewhere = elsewhere.load(ordering: .relaxed)
        #expect(ranElsewhere)
    }

    /// Only what the setup makes ready is kept for the thread that joins:
    /// work that thread makes ready later, once it runs hooks like any
    /// other, goes to the ready list and runs (kept, it would never run).
    @Test func workTheJoinedThreadMakesReadyLaterIsNotKept() {
        let scheduler = HookScheduler(threads: 2, stall: .seconds(60))
        let first = scheduler.makeLane()
        let later = (0..<3).map { _ in scheduler.makeLane() }
        let done = DispatchSemaphore(value: 0)
        onNewThread {
            _ = scheduler.adoptCurrentThread {
                first.enqueue {
                    for lane in later { lane.enqueue { done.signal() } }
                }
                return true
            }
        }
        for _ in later { #expect(waited(done, seconds: 5)) }
    }
}
