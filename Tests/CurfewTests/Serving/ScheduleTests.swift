import Testing

@testable import Curfew
@testable import CurfewHost

/// `curfew serve`'s schedules on a hand-stepped wall clock: no test waits.
@Suite struct ScheduleTests {
    let start = WallTime(milliseconds: 1_000_000)

    func at(_ seconds: Double) -> WallTime { start.later(by: .milliseconds(Int64(seconds * 1000))) }

    func policy(every: Duration? = nil, jitter: Duration? = nil, earliest: Duration? = nil, retry: RetryPolicy? = nil) -> JobPolicy {
        var policy = JobPolicy()
        policy.every = every
        policy.jitter = jitter
        policy.earliestBegin = earliest
        policy.retry = retry
        return policy
    }

    /// Ten thousand due at once come out earliest first, then by name; a
    /// paused, disabled or removed job's queued time is passed over.
    @Test func manyJobsDueAtOnceComeOutEarliestFirstAndStaleTimesArePassedOver() {
        var schedule = Schedule(seed: 1)
        let names = (0..<10_000).map { "job-\(String(9_999 - $0))" }
        for (index, name) in names.enumerated() {
            var due = policy(every: .seconds(3600))
            due.earliestBegin = .milliseconds(Int64(index % 3))
            schedule.add(job: name, policy: due, isContinuous: false, persisted: nil, now: start)
        }
        let paused = schedule.setPaused(job: "job-5", true)
        #expect(paused)
        schedule.remove(job: "job-6")
        let wake1 = schedule.nextWake
        #expect(wake1 == start)
        let taken = schedule.takeDue(now: at(1)).map { due -> String in
            guard case .start(let name) = due else { return "" }
            return name
        }
        #expect(taken.count == 9_998 && !taken.contains("job-5") && !taken.contains("job-6"))
        let place = Dictionary(uniqueKeysWithValues: names.enumerated().map { ($1, $0) })
        let times = taken.map { place[$0]! % 3 }
        #expect(times == times.sorted(), "earliest first")
        let wake2 = schedule.nextWake
        #expect(wake2 == at(3600), "the paused job waits; the next wake is the next slot")
        let resumed = schedule.setPaused(job: "job-5", false)
        #expect(resumed)
        let wake3 = schedule.nextWake
        #expect(wake3 == start.later(by: .milliseconds(Int64(place["job-5"]! % 3))), "resumed, it is due at once")
    }

    /// Before: a job that asked for its next run in 0 s respawned about
    /// 65 times a second.
    @Test func aJobsOwnRequestIsHeldToTheFloorEveryHas() {
        var schedule = Schedule(seed: 1)
        schedule.add(job: "a", policy: policy(), isContinuous: false, persisted: nil, now: start)
        #expect(schedule.takeDue(now: start) == [.start("a")])
        #expect(schedule.finished(job: "a", outcome: .completed, requested: .zero, now: at(1)) == at(1.1))
        _ = schedule.takeDue(now: at(1.1))
        #expect(schedule.finished(job: "a", outcome: .completed, requested: .milliseconds(250), now: at(2)) == at(2.25))
    }

    @Test func waitingJobsAreServedInTurnOnceEachAndAskedForOnesFirst() {
        var waiting = WaitingJobs()
        for name in ["a", "b", "c", "b"] { waiting.append(name) }
        waiting.remove("c")
        waiting.putFirst(["x", "b"])
        #expect(waiting.contains("b") && !waiting.contains("c"))
        var order: [String] = []
        while let next = waiting.popFirst() { order.append(next) }
        #expect(order == ["x", "b", "a"], "asked-for first, in their order; each once; a removed one never")
        #expect(waiting.isEmpty)
        for index in 0..<5_000 { waiting.append("j\(index)") }
        for index in 0..<2_500 { #expect(waiting.popFirst() == "j\(index)") }
        waiting.append("j0")
        #expect(waiting.popFirst() == "j2500", "a job queued again waits its new turn")
    }

    @Test func aJobWithEveryRunsOnEachSlotFromTheFirst() {
        var schedule = Schedule(seed: 1)
        schedule.add(job: "a", policy: policy(every: .seconds(10)), isContinuous: false, persisted: nil, now: start)
        #expect(schedule.takeDue(now: start) == [.start("a")], "a new job runs at once")
        #expect(schedule.takeDue(now: at(1)).isEmpty, "one instance at a time, and nothing is due yet")
        // The run took 3 s: the next slot is still 10 s after the first, not after the end.
        #expect(schedule.finished(job: "a", outcome: .completed, requested: nil, now: at(3)) == at(10))
        #expect(schedule.takeDue(now: at(9.999)).isEmpty)
        #expect(schedule.takeDue(now: at(10)) == [.start("a")])
        let wake4 = schedule.nextWake
        #expect(wake4 == at(20))
    }

    @Test func aRunThatComesDueWhileTheLastGoesOnIsSkippedAndRecorded() {
        var schedule = Schedule(seed: 1)
        schedule.add(job: "slow", policy: policy(every: .seconds(2)), isContinuous: false, persisted: nil, now: start)
        #expect(schedule.takeDue(now: start) == [.start("slow")])
        schedule.started(job: "slow", now: start)
        #expect(schedule.takeDue(now: at(2)) == [.skip("slow")])
        #expect(schedule.takeDue(now: at(4)) == [.skip("slow")])
        #expect(schedule.entries["slow"]?.skipped == 2)
        #expect(schedule.finished(job: "slow", outcome: .completed, requested: nil, now: at(5)) == at(6))
        #expect(schedule.takeDue(now: at(6)) == [.start("slow")])
    }

    /// Before, a run that only waited for a `--jobs` slot counted every
    /// slot that came meanwhile as skipped, though no run had started.
    @Test func aSlotThatComesWhileTheRunStillWaitsForASlotIsNoSkip() {
        var schedule = Schedule(seed: 1)
        schedule.add(job: "queued", policy: policy(every: .seconds(2)), isContinuous: false, persisted: nil, now: start)
        #expect(schedule.takeDue(now: start) == [.start("queued")])
        #expect(schedule.takeDue(now: at(2)) == [.merged("queued")])
        #expect(schedule.entries["queued"]?.skipped == 0)
        schedule.started(job: "queued", now: at(3))
        #expect(schedule.entries["queued"]?.runningSince == at(3))
        #expect(schedule.takeDue(now: at(4)) == [.skip("queued")])
        #expect(schedule.entries["queued"]?.skipped == 1)
    }

    @Test func aJobsOwnRequestSetsItsNextRunOrTheLaterOfItAndEvery() {
        var schedule = Schedule(seed: 1)
        schedule.add(job: "asks", policy: policy(), isContinuous: false, persisted: nil, now: start)
        schedule.add(job: "both", policy: policy(every: .seconds(60)), isContinuous: false, persisted: nil, now: start)
        #expect(schedule.takeDue(now: start) == [.start("asks"), .start("both")])
        #expect(schedule.finished(job: "asks", outcome: .completed, requested: .seconds(30), now: at(1)) == at(31))
        // The operator's every is a floor: a job cannot ask to run more often.
        #expect(schedule.finished(job: "both", outcome: .expired, requested: .seconds(5), now: at(1)) == at(60))
        #expect(schedule.takeDue(now: at(60)) == [.start("asks"), .start("both")])
        #expect(schedule.finished(job: "both", outcome: .completed, requested: .seconds(500), now: at(61)) == at(561))
        // No request and no every: it runs no more until asked.
        #expect(schedule.finished(job: "asks", outcome: .completed, requested: nil, now: at(61)) == nil)
        let wake5 = schedule.nextWake
        #expect(wake5 == at(561))
    }

    @Test func earliestBeginHoldsTheFirstRunBack() {
        var schedule = Schedule(seed: 1)
        schedule.add(job: "late", policy: policy(every: .seconds(5), earliest: .seconds(30)), isContinuous: false, persisted: nil, now: start)
        let wake6 = schedule.nextWake
        #expect(wake6 == at(30))
        #expect(schedule.takeDue(now: at(29)).isEmpty)
        #expect(schedule.takeDue(now: at(30)) == [.start("late")])
    }

    @Test func jitterStaysWithinItsBoundsAndSpreads() {
        var seen = Set<Int64>()
        for seed in 0..<200 as Range<UInt64> {
            var schedule = Schedule(seed: seed)
            schedule.add(job: "j", policy: policy(every: .seconds(10), jitter: .seconds(2)), isContinuous: false, persisted: nil, now: start)
            let first = schedule.nextWake!.milliseconds - start.milliseconds
            #expect((0...2000).contains(first))
            _ = schedule.takeDue(now: schedule.nextWake!)
            // Jitter moves each run, never the slots: no drift.
            let second = schedule.finished(job: "j", outcome: .completed, requested: nil, now: at(1))!.milliseconds - start.milliseconds
            #expect((10_000...12_000).contains(second))
            seen.insert(first / 100)
        }
        #expect(seen.count > 15, "200 seeds spread over the 2 s")
    }

    @Test func aScheduleMissedWhileTheHostWasDownRunsOnceAtStart() {
        var schedule = Schedule(seed: 1)
        // The store says the next run was an hour ago: 360 slots of 10 s were missed.
        schedule.add(job: "a", policy: policy(every: .seconds(10)), isContinuous: false, persisted: ScheduleRecord(job: "a", nextRun: at(-3600), failures: 0, skipped: 0), now: start)
        schedule.add(job: "future", policy: policy(every: .seconds(10)), isContinuous: false, persisted: ScheduleRecord(job: "future", nextRun: at(7), failures: 0, skipped: 0), now: start)
        #expect(schedule.takeDue(now: start) == [.start("a")], "once, not once per missed slot")
        #expect(schedule.takeDue(now: at(0.5)).isEmpty)
        #expect(schedule.entries["a"]?.nextRun == at(10))
        #expect(schedule.entries["future"]?.nextRun == at(7), "a time still to come is kept")
    }

    @Test func failuresRetryWithExponentialBackoffThenGoBackToTheSchedule() {
        let retry = RetryPolicy(attempts: 3, delay: .seconds(1), maximumDelay: .seconds(3))
        var schedule = Schedule(seed: 7)
        schedule.add(job: "f", policy: policy(every: .seconds(60), retry: retry), isContinuous: false, persisted: nil, now: start)
        var now = start
        var waits: [Int64] = []
        for outcome in [Outcome.failed, .crashed, .terminated] {
            #expect(schedule.takeDue(now: now) == [.start("f")])
            let next = schedule.finished(job: "f", outcome: outcome, requested: nil, now: now)!
            waits.append(next.milliseconds - now.milliseconds)
            now = next
        }
        // Each wait is between half its ceiling (1 s, 2 s, then 3 s: capped) and all of it.
        #expect((500...1000).contains(waits[0]) && (1000...2000).contains(waits[1]) && (1500...3000).contains(waits[2]), "\(waits)")
        #expect(schedule.entries["f"]?.failures == 3)
        // Attempts spent: the next failure waits for the schedule's next slot.
        #expect(schedule.takeDue(now: now) == [.start("f")])
        #expect(schedule.finished(job: "f", outcome: .failed, requested: nil, now: now) == at(60))
        #expect(schedule.entries["f"]?.failures == 0)
    }

    @Test func expiringIsNotAFailure() {
        var schedule = Schedule(seed: 1)
        schedule.add(job: "e", policy: policy(every: .seconds(5)), isContinuous: false, persisted: nil, now: start)
        _ = schedule.takeDue(now: start)
        #expect(schedule.finished(job: "e", outcome: .expired, requested: nil, now: at(1)) == at(5))
        #expect(schedule.entries["e"]?.failures == 0)
    }

    @Test func aContinuousJobIsRestartedWithBackoffUnlessTheHostStopped() {
        let retry = RetryPolicy(attempts: 3, delay: .seconds(1), maximumDelay: .seconds(8))
        var schedule = Schedule(seed: 3)
        schedule.add(job: "c", policy: policy(retry: retry), isContinuous: true, persisted: nil, now: start)
        _ = schedule.takeDue(now: start)
        let first = schedule.finished(job: "c", outcome: .completed, requested: nil, now: at(1))!
        #expect((500...1000).contains(first.milliseconds - at(1).milliseconds))
        _ = schedule.takeDue(now: first)
        let second = schedule.finished(job: "c", outcome: .crashed, requested: nil, now: first)!
        #expect((1000...2000).contains(second.milliseconds - first.milliseconds))
        // A run that lasted the longest delay forgets earlier failures.
        _ = schedule.takeDue(now: second)
        let later = second.later(by: .seconds(9))
        let third = schedule.finished(job: "c", outcome: .crashed, requested: nil, now: later)!
        #expect((500...1000).contains(third.milliseconds - later.milliseconds))
        _ = schedule.takeDue(now: third)
        #expect(schedule.finished(job: "c", outcome: .expired, requested: nil, stopped: true, now: third) == nil)
    }

    @Test func pausedAndDisabledJobsDoNotRunButCanBeStartedByHand() {
        var schedule = Schedule(seed: 1)
        var off = policy(every: .seconds(1))
        off.enabled = false
        schedule.add(job: "off", policy: off, isContinuous: false, persisted: nil, now: start)
        schedule.add(job: "p", policy: policy(every: .seconds(1)), isContinuous: false, persisted: nil, now: start)
        let paused = schedule.setPaused(job: "p", true)
        #expect(paused)
        #expect(schedule.takeDue(now: at(5)).isEmpty)
        let wake7 = schedule.nextWake
        #expect(wake7 == nil)
        let started = schedule.startNow(job: "p", now: at(5))
        let again = schedule.startNow(job: "p", now: at(5))
        let unknown = schedule.startNow(job: "nobody", now: at(5))
        #expect(started)
        #expect(!again, "one instance at a time")
        #expect(!unknown)
    }

    /// Before: a job given `every` by a config read again had no slot, and
    /// after its next run it ran no more.
    @Test func anEveryGivenByAReloadedConfigStartsItsSlots() {
        var schedule = Schedule(seed: 1)
        schedule.add(job: "a", policy: policy(), isContinuous: false, persisted: nil, now: start)
        _ = schedule.takeDue(now: start)
        #expect(schedule.finished(job: "a", outcome: .completed, requested: nil, now: at(1)) == nil)
        schedule.update(job: "a", policy: policy(every: .seconds(10)), now: at(2))
        let wake8 = schedule.nextWake
        #expect(wake8 == at(12))
        #expect(schedule.takeDue(now: at(12)) == [.start("a")])
        #expect(schedule.finished(job: "a", outcome: .completed, requested: nil, now: at(13)) == at(22))
        // Taken away again: the run it has stays, then it runs only when asked.
        schedule.update(job: "a", policy: policy(), now: at(14))
        #expect(schedule.takeDue(now: at(22)) == [.start("a")])
        #expect(schedule.finished(job: "a", outcome: .completed, requested: nil, now: at(23)) == nil)
    }

    @Test func retryCeilingsDoubleUpToTheMaximumWithoutOverflow() {
        let retry = RetryPolicy(attempts: 1000, delay: .seconds(1), maximumDelay: .seconds(100))
        #expect(retry.ceiling(attempt: 1) == .seconds(1))
        #expect(retry.ceiling(attempt: 4) == .seconds(8))
        #expect(retry.ceiling(attempt: 1000) == .seconds(100))
    }
}
