import Testing

@testable import Curfew
@testable import CurfewHost

/// Jobs with `on` in `serve`'s schedule, on a hand-stepped wall clock.
@Suite struct CalendarScheduleTests {
    /// 2026-12-07 00:00:00 UTC, a Monday.
    let monday = WallTime(milliseconds: 1_796_601_600_000)

    func at(hours: Double) -> WallTime { monday.later(by: .milliseconds(Int64(hours * 3_600_000))) }

    func policy(_ expressions: String...) throws -> JobPolicy {
        var policy = JobPolicy()
        policy.calendar = try expressions.map { text throws(CurfewError) in try CalendarEvent(text) }
        return policy
    }

    @Test func aNewJobWaitsForItsFirstElapseThenRunsAtEach() throws {
        var schedule = Schedule(seed: 1)
        schedule.add(job: "nightly", policy: try policy("Mon..Fri *-*-* 02:00 UTC"), isContinuous: false, persisted: nil, now: at(hours: 1))
        #expect(schedule.entries["nightly"]?.nextRun == at(hours: 2))
        #expect(schedule.takeDue(now: at(hours: 1.99)).isEmpty)
        #expect(schedule.takeDue(now: at(hours: 2)) == [.start("nightly")])
        // Tuesday 02:00, whatever the run took.
        let next = schedule.finished(job: "nightly", outcome: .completed, requested: nil, now: at(hours: 2.5))
        #expect(next == at(hours: 26))
        // Friday's run is followed by Monday's.
        _ = schedule.takeDue(now: at(hours: 98))
        #expect(schedule.finished(job: "nightly", outcome: .completed, requested: nil, now: at(hours: 98.1)) == at(hours: 7 * 24 + 2))
    }

    @Test func aRunMissedWhileTheHostWasDownRunsOnceAtStart() throws {
        var schedule = Schedule(seed: 1)
        let missed = ScheduleRecord(job: "nightly", nextRun: at(hours: 2), failures: 0, skipped: 0, isPaused: false)
        // Three days later: one run now, not three.
        schedule.add(job: "nightly", policy: try policy("*-*-* 02:00 UTC"), isContinuous: false, persisted: missed, now: at(hours: 74))
        #expect(schedule.takeDue(now: at(hours: 74)) == [.start("nightly")])
        #expect(schedule.finished(job: "nightly", outcome: .completed, requested: nil, now: at(hours: 74.5)) == at(hours: 98))
    }

    @Test func aFailedRunIsRetriedBetweenElapses() throws {
        var schedule = Schedule(seed: 1)
        var retrying = try policy("*-*-* 02:00 UTC")
        retrying.retry = RetryPolicy(attempts: 1, delay: .seconds(60), maximumDelay: .seconds(60))
        schedule.add(job: "nightly", policy: retrying, isContinuous: false, persisted: nil, now: at(hours: 1))
        _ = schedule.takeDue(now: at(hours: 2))
        let retried = schedule.finished(job: "nightly", outcome: .failed, requested: nil, now: at(hours: 2.1))
        let retry = try #require(retried)
        #expect(retry > at(hours: 2.1) && retry <= at(hours: 2.1).later(by: .seconds(60)))
        _ = schedule.takeDue(now: retry)
        #expect(schedule.finished(job: "nightly", outcome: .failed, requested: nil, now: retry.later(by: .seconds(1))) == at(hours: 26))
    }

    @Test func aJumpOfTheWallClockMovesCalendarsNotPeriods() throws {
        var schedule = Schedule(seed: 1)
        schedule.add(job: "nightly", policy: try policy("*-*-* 02:00 UTC"), isContinuous: false, persisted: nil, now: at(hours: 1))
        var periodic = JobPolicy()
        periodic.every = .seconds(3600)
        schedule.add(job: "hourly", policy: periodic, isContinuous: false, persisted: nil, now: at(hours: 1))
        _ = schedule.takeDue(now: at(hours: 1))
        schedule.finished(job: "hourly", outcome: .completed, requested: nil, now: at(hours: 1))
        // The wall clock goes 30 minutes ahead: 02:00 on it is 01:30 here.
        #expect(schedule.wallClockMoved(lead: .seconds(1800), now: at(hours: 1)) == ["nightly"])
        #expect(schedule.entries["nightly"]?.nextRun == at(hours: 1.5))
        #expect(schedule.entries["hourly"]?.nextRun == at(hours: 2))
    }

    /// Found again from the wall time each slot was sought after: a jump
    /// forward past a slot runs it at once, one back does not run it twice,
    /// and a running job's next slot moves with the clock.
    @Test func jumpsNeitherRepeatNorLoseASlot() throws {
        var schedule = Schedule(seed: 1)
        schedule.add(job: "nightly", policy: try policy("*-*-* 02:00 UTC"), isContinuous: false, persisted: nil, now: at(hours: 1))
        // Two hours forward at 01:00: 02:00 on the wall has passed.
        _ = schedule.wallClockMoved(lead: .seconds(7200), now: at(hours: 1))
        #expect(schedule.takeDue(now: at(hours: 1)) == [.start("nightly")])
        // While it runs, the clock goes back to where it was.
        _ = schedule.wallClockMoved(lead: .zero, now: at(hours: 1.1))
        // Tomorrow's 02:00, not today's again.
        #expect(schedule.finished(job: "nightly", outcome: .completed, requested: nil, now: at(hours: 1.5)) == at(hours: 26))
        // Running at 02:00; the clock steps an hour ahead meanwhile: the next
        // run is at tomorrow's 02:00 on the wall clock.
        var other = Schedule(seed: 1)
        other.add(job: "nightly", policy: try policy("*-*-* 02:00 UTC"), isContinuous: false, persisted: nil, now: at(hours: 1))
        _ = other.takeDue(now: at(hours: 2))
        _ = other.wallClockMoved(lead: .seconds(3600), now: at(hours: 2.1))
        #expect(other.finished(job: "nightly", outcome: .completed, requested: nil, now: at(hours: 2.5)) == at(hours: 25))
    }

    @Test func aRetryKeepsItsTimeThroughAJump() throws {
        var schedule = Schedule(seed: 1)
        var retrying = try policy("*-*-* 02:00 UTC")
        retrying.retry = RetryPolicy(attempts: 3, delay: .seconds(60), maximumDelay: .seconds(60))
        schedule.add(job: "nightly", policy: retrying, isContinuous: false, persisted: nil, now: at(hours: 1))
        _ = schedule.takeDue(now: at(hours: 2))
        let retry = schedule.finished(job: "nightly", outcome: .failed, requested: nil, now: at(hours: 2.1))
        _ = schedule.wallClockMoved(lead: .seconds(2), now: at(hours: 2.1))
        #expect(schedule.entries["nightly"]?.nextRun == retry)
    }

    /// Calendar steps finer than `every`'s floor run no more often than it.
    @Test func aCalendarRunsNoMoreOftenThanTheFloor() throws {
        var schedule = Schedule(seed: 1)
        schedule.add(job: "busy", policy: try policy("*:*:0/0.001 UTC"), isContinuous: false, persisted: nil, now: at(hours: 1))
        let first = try #require(schedule.entries["busy"]?.nextRun)
        _ = schedule.takeDue(now: first)
        let next = schedule.finished(job: "busy", outcome: .completed, requested: nil, now: first)
        #expect(next == first.later(by: Schedule.minimumGap))
    }

    /// The store kept no next run (the job ran only when asked); its new
    /// `on` runs it from the next elapse, as a reload would.
    @Test func aCalendarGivenWhileTheHostWasDownRuns() throws {
        var schedule = Schedule(seed: 1)
        let asked = ScheduleRecord(job: "nightly", nextRun: nil, failures: 0, skipped: 0)
        schedule.add(job: "nightly", policy: try policy("*-*-* 02:00 UTC"), isContinuous: false, persisted: asked, now: at(hours: 1))
        #expect(schedule.entries["nightly"]?.nextRun == at(hours: 2))
    }

    @Test func theConfigTakesOneOrSeveralExpressionsAndSaysWhatIsWrong() throws {
        func parse(_ json: String) throws(CurfewError) -> ServeConfig { try ServeConfig.parse(Array(json.utf8), file: "c.json") }
        let config = try parse(#"{"jobs": {"a": {"on": "hourly"}, "b": {"on": ["Sat,Sun 10:00 Europe/Berlin", "*-12-24 18:00"]}}}"#)
        #expect(config.jobs["a"]?.calendar?.map(\.description) == ["*-*-* *:00:00"])
        #expect(config.jobs["b"]?.calendar?.count == 2)
        func refusal(_ json: String) -> String {
            do {
                _ = try parse(json)
                return "read"
            } catch {
                return error.description
            }
        }
        #expect(refusal(#"{"jobs": {"a": {"on": "hourly", "every": "1h"}}}"#) == #"c.json: job 'a': "on": a job runs on "every" or "on", not both"#)
        #expect(refusal(#"{"jobs": {"a": {"on": "*-13-01"}}}"#) == #"c.json: job 'a': "on": "*-13-01" is not a calendar expression: its month 13 is outside 1 to 12"#)
        // A date gone by: read, and the job waits to be asked.
        #expect(refusal(#"{"jobs": {"a": {"on": "2020-01-01"}}}"#) == "read")
        #expect(refusal(#"{"jobs": {"a": {"on": "daily Mars/Olympus"}}}"#).hasSuffix(#""Mars/Olympus" is not a time zone this host can read (zones of the tz database without leap seconds)"#))
        #expect(refusal(#"{"jobs": {"a": {"on": []}}}"#).hasSuffix("must be a calendar expression such as \"Mon..Fri *-*-* 02:00\", or an array of 1 to 64 of them"))
        // A job's own `on` replaces the defaults' `every`.
        let mixed = try parse(#"{"defaults": {"every": "1h"}, "jobs": {"a": {"on": "daily"}}}"#)
        #expect(mixed.policy(for: "a").every == nil)
        #expect(mixed.policy(for: "b").every == .seconds(3600))
    }
}
