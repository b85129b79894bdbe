import Foundation
import Testing

@testable import Curfew
@testable import CurfewCLI
@testable import CurfewHost

/// One-off runs (`curfew ctl run JOB --param … --at …`): on the schedule,
/// in the store, on the control socket and from the command line.
@Suite struct RunRequestTests {
    let start = WallTime(milliseconds: 1_000_000)

    func at(_ seconds: Double) -> WallTime { start.later(by: .milliseconds(Int64(seconds * 1000))) }

    @Test func aRequestRunsAJobThatIsNotEnabledOrPausedAtItsTime() {
        var schedule = Schedule(seed: 1)
        var off = JobPolicy()
        off.enabled = false
        schedule.add(job: "off", policy: off, isContinuous: false, persisted: nil, now: start)
        schedule.add(job: "paused", policy: JobPolicy(), isContinuous: false, persisted: ScheduleRecord(job: "paused", nextRun: nil, failures: 0, skipped: 0, isPaused: true), now: start)
        #expect(schedule.takeDue(now: at(100)).isEmpty)
        schedule.setRequest(job: "off", at: at(200))
        schedule.setRequest(job: "paused", at: at(300))
        #expect(schedule.nextWake == at(200))
        #expect(schedule.takeDue(now: at(250)) == [.start("off")])
        // Taken: the request is not due again after the run.
        schedule.finished(job: "off", outcome: .completed, requested: nil, now: at(260))
        #expect(schedule.takeDue(now: at(400)) == [.start("paused")])
        #expect(schedule.nextWake == nil)
    }

    @Test func theStoreKeepsRequestsUntilTheyRan() throws {
        let store = try StateStore(folder: Fixtures.temporaryFolder("state"))
        let first = try store.addRunRequest(job: "tally", parameters: ["word": "later", "n": "2"], earliest: at(20))
        let second = try store.addRunRequest(job: "tally", parameters: [:], earliest: at(10))
        #expect(try store.runRequests() == [
            RunRequest(id: second, job: "tally", parameters: [:], earliest: at(10)),
            RunRequest(id: first, job: "tally", parameters: ["word": "later", "n": "2"], earliest: at(20)),
        ])
        try store.removeRunRequest(id: second)
        // A row that does not read back is dropped, not trusted.
        try SQLiteConnection(path: store.path).execute("INSERT INTO run_requests (job, parameters, earliest, made_at) VALUES ('x', '[1', 5, 5)")
        #expect(try store.runRequests().map(\.id) == [first])
    }

    @Test func theControlSocketChecksWhatARequestCarries() throws {
        let server = try Server(options: Server.Options(folders: []), onEvent: { _, _ in }, onNotice: { _ in })
        func answer(_ text: String) -> String { server.answer(Array(text.utf8)) }
        #expect(answer(#"{"command": "cancel", "job": "a", "params": {}}"#).contains(#"only run takes \"params\" and \"at\""#))
        #expect(answer(#"{"command": "run", "job": "a", "params": [1]}"#).contains(#"\"params\" must be an object of strings"#))
        #expect(answer(#"{"command": "run", "job": "a", "params": {"k": 1}}"#).contains("each parameter is a name and a string"))
        #expect(answer(#"{"command": "run", "job": "a", "at": -5}"#).contains(#"\"at\" must be milliseconds since 1970"#))
        let many = (0..<65).map { "\"k\($0)\": \"v\"" }.joined(separator: ",")
        #expect(answer(#"{"command": "run", "job": "a", "params": {"# + many + "}}").contains("at most 64 parameters"))
        // Well formed, for a job this server does not have.
        #expect(answer(#"{"command": "run", "job": "a", "params": {"k": "v"}, "at": 5}"#).contains("no job is named 'a'"))
    }

    @Test func theCommandLineReadsParametersAndATime() throws {
        let parsed = try Invocation(parsing: ["ctl", "run", "tally", "--param", "word=hi", "--at", "2026-12-24 17:00 UTC"])
        guard case .control(let options) = parsed else {
            Issue.record("not ctl")
            return
        }
        #expect(options.action == .runOnce("tally", parameters: ["word": "hi"], at: WallTime(milliseconds: 1_798_131_600_000)))
        #expect(throws: UsageError.self) { try Invocation(parsing: ["ctl", "cancel", "tally", "--param", "a=b"]) }
        #expect(throws: UsageError.self) { try Invocation(parsing: ["ctl", "run", "tally", "--at", "2026-12-24 17:00 UTC", "--in", "5m"]) }
        #expect(throws: UsageError.self) { try Invocation(parsing: ["ctl", "run", "tally", "--at", "every day"]) }
    }
}

extension ProcessTests.First {
    @Suite(.timeLimit(.minutes(2))) struct RunRequestServeTests {
        /// Asked for in three seconds, the server stopped at once: the next
        /// server on the store runs it with its parameter, and forgets it.
        @Test func aRequestWithAParameterSurvivesARestart() async throws {
            let folder = Fixtures.temporaryFolder("served")
            let state = Fixtures.temporaryFolder("state")
            let config = Fixtures.temporaryFolder("config") + "/curfew.json"
            try #"{"jobs": {"tally": {"enabled": false, "budget": "150ms"}, "asks": {"enabled": false}, "flaky": {"enabled": false}}}"#
                .write(toFile: config, atomically: true, encoding: .utf8)
            try FileManager.default.copyItem(atPath: try Fixtures.compile("serve_jobs.c", defines: ["VERSION=1"]), toPath: folder + "/jobs.so")
            let serve = try ServeProcess(folder: folder, state: state, extra: ["--config", config])
            await serve.wait(for: "control socket")
            let asked = try await serve.control(["ctl", "run", "tally", "--param", "word=later", "--in", "3s"])
            #expect(asked.status == 0 && asked.out.contains("Asked for a run of 'tally' with 1 parameter at"), "\(asked.out)")
            #expect(await serve.stop() == 0)
            #expect(try serve.logs("tally").isEmpty, "not yet due")

            let again = try ServeProcess(folder: folder, state: state, extra: ["--config", config])
            await again.wait(for: "control socket")
            let now = try await again.control(["ctl", "run", "tally", "--param", "word=now"])
            #expect(now.status == 0, "\(now.out)")
            await again.wait(for: "\"message\":\"word now\"")
            await again.wait(for: "\"message\":\"word later\"")
            await again.wait(for: "\"event\":\"finished\"", count: 2)
            #expect(await again.stop() == 0)
            #expect(try again.logs("tally").filter { $0.hasPrefix("word") } == ["word now", "word later"])
            #expect(try StateStore(folder: state).runRequests().isEmpty, "each forgotten once it ran")
        }
    }
}

/// `overlap` and `starting_deadline`: what a run that comes due while the
/// last is going, or too late, does.
@Suite struct OverlapTests {
    let start = WallTime(milliseconds: 1_000_000)

    func at(_ seconds: Double) -> WallTime { start.later(by: .milliseconds(Int64(seconds * 1000))) }

    func every(_ seconds: Int64, overlap: Overlap? = nil, deadline: Duration? = nil) -> JobPolicy {
        var policy = JobPolicy()
        policy.every = .seconds(seconds)
        policy.overlap = overlap
        policy.startingDeadline = deadline
        return policy
    }

    @Test(arguments: [Overlap.queue, .replace])
    func aSlotThatMeetsARunningRunRunsOnceItEnds(overlap: Overlap) {
        var schedule = Schedule(seed: 1)
        schedule.add(job: "j", policy: every(10, overlap: overlap), isContinuous: false, persisted: nil, now: start)
        #expect(schedule.takeDue(now: start) == [.start("j")])
        schedule.started(job: "j", now: start)
        let expected: Schedule.Due = overlap == .queue ? .queued("j") : .replace("j")
        #expect(schedule.takeDue(now: at(10)) == [expected])
        #expect(schedule.takeDue(now: at(20)) == [expected], "one run waits, however many slots pass")
        #expect(schedule.finished(job: "j", outcome: .expired, requested: nil, now: at(25)) == at(25))
        #expect(schedule.takeDue(now: at(25)) == [.start("j")])
        schedule.started(job: "j", now: at(25))
        // Then back on its slots.
        #expect(schedule.finished(job: "j", outcome: .completed, requested: nil, now: at(26)) == at(30))
        #expect(schedule.entries["j"]?.skipped == 0)
    }

    @Test func skipIsTheDefault() {
        var schedule = Schedule(seed: 1)
        schedule.add(job: "j", policy: every(10), isContinuous: false, persisted: nil, now: start)
        _ = schedule.takeDue(now: start)
        schedule.started(job: "j", now: start)
        #expect(schedule.takeDue(now: at(10)) == [.skip("j")])
        #expect(schedule.finished(job: "j", outcome: .completed, requested: nil, now: at(15)) == at(20))
    }

    @Test func aSlotMissedPastItsStartingDeadlineIsSkipped() {
        var schedule = Schedule(seed: 1)
        let missed = ScheduleRecord(job: "j", nextRun: at(-100), failures: 0, skipped: 0)
        schedule.add(job: "j", policy: every(1000, deadline: .seconds(30)), isContinuous: false, persisted: missed, now: start)
        #expect(schedule.takeDue(now: start).isEmpty)
        #expect(schedule.entries["j"]?.skipped == 1)
        #expect(schedule.entries["j"]?.nextRun == at(900), "on from its next slot")
        // A slot taken late at run time (the host busy) is skipped too.
        var busy = Schedule(seed: 1)
        busy.add(job: "j", policy: every(1000, deadline: .seconds(30)), isContinuous: false, persisted: nil, now: start)
        #expect(busy.takeDue(now: at(31)) == [.late("j")])
        #expect(busy.entries["j"]?.isRunning == false)
        // Within the deadline, it runs.
        var other = Schedule(seed: 1)
        other.add(job: "j", policy: every(1000, deadline: .seconds(30)), isContinuous: false, persisted: ScheduleRecord(job: "j", nextRun: at(-10), failures: 0, skipped: 0), now: start)
        #expect(other.takeDue(now: start) == [.start("j")])
        // One waiting for a --jobs slot past the deadline is abandoned.
        let abandoned = other.abandon(job: "j")
        #expect(abandoned)
        #expect(other.entries["j"]?.skipped == 1)
    }

    @Test func theConfigReadsThem() throws {
        let config = try ServeConfig.parse(Array(#"{"jobs": {"a": {"overlap": "replace", "starting_deadline": "5m"}}}"#.utf8), file: "c.json")
        #expect(config.policy(for: "a").overlap == .replace)
        #expect(config.policy(for: "a").startingDeadline == .seconds(300))
        #expect(throws: CurfewError.self) { try ServeConfig.parse(Array(#"{"jobs": {"a": {"overlap": "allow"}}}"#.utf8), file: "c.json") }
        #expect(throws: CurfewError.self) { try ServeConfig.parse(Array(#"{"jobs": {"a": {"starting_deadline": "10ms"}}}"#.utf8), file: "c.json") }
    }
}

/// The schedule, not a second clock, says which run carries a request.
@Suite struct RunRequestEdgeTests {
    let start = WallTime(milliseconds: 1_000_000)

    func at(_ seconds: Double) -> WallTime { start.later(by: .milliseconds(Int64(seconds * 1000))) }

    /// A request due while the job runs waits for the run's end: taking
    /// what is due returns, and the request is the next start after it.
    @Test func aRequestDueWhileTheJobRunsWaitsForItsEnd() {
        var schedule = Schedule(seed: 1)
        var policy = JobPolicy()
        policy.every = .seconds(600)
        schedule.add(job: "j", policy: policy, isContinuous: false, persisted: nil, now: start)
        #expect(schedule.takeDue(now: start) == [.start("j")])
        schedule.started(job: "j", now: start)
        schedule.setRequest(job: "j", at: at(60))
        #expect(schedule.takeDue(now: at(120)).isEmpty)
        #expect(schedule.entries["j"]?.carriesRequest == false)
        schedule.finished(job: "j", outcome: .completed, requested: nil, now: at(300))
        #expect(schedule.takeDue(now: at(300)) == [.start("j")])
        #expect(schedule.entries["j"]?.carriesRequest == true)
        // A run asked for by hand carries none; the request waits for it.
        var other = Schedule(seed: 1)
        other.add(job: "j", policy: JobPolicy(), isContinuous: false, persisted: nil, now: start)
        _ = other.takeDue(now: start)
        other.finished(job: "j", outcome: .completed, requested: nil, now: start)
        other.setRequest(job: "j", at: at(10))
        let started = other.startNow(job: "j", now: at(20))
        #expect(started && other.entries["j"]?.carriesRequest == false)
        #expect(other.takeDue(now: at(30)).isEmpty)
        other.finished(job: "j", outcome: .completed, requested: nil, now: at(40))
        #expect(other.takeDue(now: at(40)) == [.start("j")])
        #expect(other.entries["j"]?.carriesRequest == true)
        // A run that carries a request is never abandoned as late.
        let abandoned = other.abandon(job: "j")
        #expect(!abandoned)
    }

    /// Asked for 12:00, while the 10:00 slot's run goes on past it: taking
    /// what is due at 12:00 returns (it once put the request back and took
    /// it again for ever), and the request runs after that run.
    @Test(.timeLimit(.minutes(1))) func aRequestComingDueDuringARunStartedBeforeItDoesNotSpin() {
        var schedule = Schedule(seed: 1)
        var policy = JobPolicy()
        policy.every = .seconds(600)
        schedule.add(job: "j", policy: policy, isContinuous: false, persisted: nil, now: start)
        _ = schedule.takeDue(now: start)
        schedule.finished(job: "j", outcome: .completed, requested: nil, now: at(1))
        schedule.setRequest(job: "j", at: at(720))
        #expect(schedule.takeDue(now: at(600)) == [.start("j")])
        #expect(schedule.entries["j"]?.carriesRequest == false)
        schedule.started(job: "j", now: at(600))
        #expect(schedule.takeDue(now: at(720)).isEmpty)
        schedule.finished(job: "j", outcome: .completed, requested: nil, now: at(900))
        #expect(schedule.takeDue(now: at(900)) == [.start("j")])
        #expect(schedule.entries["j"]?.carriesRequest == true)
    }

    @Test func storeRowsAreCheckedAsTheSocketChecksThem() throws {
        let store = try StateStore(folder: Fixtures.temporaryFolder("state"))
        let kept = try store.addRunRequest(job: "tally", parameters: ["a": "b"], earliest: at(1))
        let connection = try SQLiteConnection(path: store.path)
        for row in [
            "('../x', '{}', 5, 5)", "('x', '{\"a\": 1}', 5, 5)", "('x', '{}', -5, 5)", "('x', '{}', 9999999999999, 5)",
            "('x', '{\"\": \"v\"}', 5, 5)",
        ] {
            try connection.execute("INSERT INTO run_requests (job, parameters, earliest, made_at) VALUES \(row)")
        }
        #expect(try store.runRequests().map(\.id) == [kept])
    }

    @Test func onlyRunTakesParametersAndATime() {
        #expect(throws: UsageError.self) { try Invocation(parsing: ["ctl", "reload", "--param", "a=b"]) }
        #expect(throws: UsageError.self) { try Invocation(parsing: ["ctl", "foreground", "--in", "5m"]) }
    }
}

/// CURFEW_CHUNK_FAILED_FINAL: a failure the job says another run cannot
/// help is not retried, in process or from a worker.
extension ProcessTests.Second {
    @Suite(.timeLimit(.minutes(1))) struct FailedForGoodTests {
        @Test(arguments: [Isolation.none, .job])
        func itEndsFailedWithTheWordsThatStopARetry(isolation: Isolation) async throws {
            let plugin = try Fixtures.compile("serve_jobs.c", defines: ["VERSION=1"])
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run", plugin, "--json", "--isolate", isolation.rawValue, "--only", "flaky", "--param", "final=1"], timeout: .seconds(30))
            let finished = try #require(try OutputEvent.all(in: result.stdout).first { $0.event == "finished" }, "\(result.stderr.prefix(300))")
            #expect(finished.outcome == "failed")
            #expect(finished.reason == "chunk returned failed, not to be retried: flaky failed")
            let ended = JobResult(
                job: "flaky", pluginPath: plugin, loadPath: plugin, isChunked: true, outcome: .failed, chunks: 1, elapsed: .zero,
                reason: finished.reason ?? "", progress: nil)
            #expect(ended.isFailedForGood)
        }

        @Test func theScheduleDoesNotRetryIt() {
            var schedule = Schedule(seed: 1)
            var policy = JobPolicy()
            policy.every = .seconds(600)
            let start = WallTime(milliseconds: 1_000_000)
            schedule.add(job: "j", policy: policy, isContinuous: false, persisted: nil, now: start)
            _ = schedule.takeDue(now: start)
            let next = schedule.finished(job: "j", outcome: .failed, requested: nil, retry: false, now: start.later(by: .seconds(1)))
            #expect(next == start.later(by: .seconds(600)), "back on its slots, no retry")
            #expect(schedule.entries["j"]?.failures == 0)
        }
    }
}

/// Where a policy edge meets another: what a review found.
@Suite struct PolicyEdgeTests {
    let start = WallTime(milliseconds: 1_000_000)

    func at(_ seconds: Double) -> WallTime { start.later(by: .milliseconds(Int64(seconds * 1000))) }

    @Test func aStartingDeadlineSkipsSlotsOnly() {
        var schedule = Schedule(seed: 1)
        var asks = JobPolicy()
        asks.startingDeadline = .seconds(30)
        // A job that asked for its own next run, missed by hours: it runs.
        let missed = ScheduleRecord(job: "asks", nextRun: at(-7200), failures: 0, skipped: 0)
        schedule.add(job: "asks", policy: asks, isContinuous: false, persisted: missed, now: start)
        #expect(schedule.takeDue(now: start) == [.start("asks")])
        // A retry missed by hours runs too.
        var every = asks
        every.every = .seconds(3600)
        let retrying = ScheduleRecord(job: "every", nextRun: at(-7200), failures: 1, skipped: 0)
        schedule.add(job: "every", policy: every, isContinuous: false, persisted: retrying, now: start)
        #expect(schedule.takeDue(now: start) == [.start("every")])
        // A run started by hand that waits for a --jobs slot is never late.
        var hand = Schedule(seed: 1)
        hand.add(job: "j", policy: every, isContinuous: false, persisted: nil, now: start)
        _ = hand.takeDue(now: start)
        hand.finished(job: "j", outcome: .completed, requested: nil, now: start)
        _ = hand.startNow(job: "j", now: at(10))
        let abandoned = hand.abandon(job: "j")
        #expect(!abandoned)
    }

    @Test func replaceDoesNotCancelARunThatCarriesARequest() {
        var schedule = Schedule(seed: 1)
        var policy = JobPolicy()
        policy.every = .seconds(60)
        policy.overlap = .replace
        schedule.add(job: "j", policy: policy, isContinuous: false, persisted: nil, now: start)
        schedule.setRequest(job: "j", at: start)
        #expect(schedule.takeDue(now: start) == [.start("j")])
        #expect(schedule.entries["j"]?.carriesRequest == true)
        schedule.started(job: "j", now: start)
        #expect(schedule.takeDue(now: at(60)) == [.queued("j")])
    }

    @Test func continuousJobsKeepTheirOwnRules() {
        var schedule = Schedule(seed: 1)
        var policy = JobPolicy()
        policy.every = .seconds(60)
        policy.overlap = .replace
        schedule.add(job: "c", policy: policy, isContinuous: true, persisted: nil, now: start)
        _ = schedule.takeDue(now: start)
        schedule.started(job: "c", now: start)
        #expect(schedule.takeDue(now: at(60)) == [.skip("c")], "a slot never replaces a continuous job")
        // One that fails for good is not restarted.
        #expect(schedule.finished(job: "c", outcome: .failed, requested: nil, retry: false, now: at(61)) == nil)
    }

    @Test func aJumpKeepsAQueuedRunDue() throws {
        var schedule = Schedule(seed: 1)
        var policy = JobPolicy()
        policy.calendar = [try CalendarEvent("*:0/10 UTC")]
        policy.overlap = .queue
        schedule.add(job: "j", policy: policy, isContinuous: false, persisted: nil, now: start)
        let first = try #require(schedule.entries["j"]?.nextRun)
        _ = schedule.takeDue(now: first)
        schedule.started(job: "j", now: first)
        let second = try #require(schedule.entries["j"]?.nextRun)
        #expect(schedule.takeDue(now: second) == [.queued("j")])
        let end = second.later(by: .seconds(1))
        #expect(schedule.finished(job: "j", outcome: .completed, requested: nil, now: end) == end)
        _ = schedule.wallClockMoved(lead: .seconds(5), now: end)
        #expect(schedule.takeDue(now: end) == [.start("j")])
    }
}

/// `submit_run`: a job asks the serving host for a run of another.
extension ProcessTests.First {
    @Suite(.timeLimit(.minutes(2))) struct SubmitRunTests {
        @Test func aJobSubmitsARunOfAnotherItsConfigLetsItStart() async throws {
            let folder = Fixtures.temporaryFolder("served")
            let state = Fixtures.temporaryFolder("state")
            let config = Fixtures.temporaryFolder("config") + "/curfew.json"
            try #"{"jobs": {"target": {"enabled": false}, "submits": {"submits": ["target"]}}}"#.write(toFile: config, atomically: true, encoding: .utf8)
            try FileManager.default.copyItem(atPath: try Fixtures.compile("submit_jobs.c"), toPath: folder + "/jobs.so")
            let serve = try ServeProcess(folder: folder, state: state, extra: ["--config", config])
            await serve.wait(for: "\"message\":\"target got submitted\"")
            #expect(await serve.stop() == 0)
            // CURFEW_OK, then CURFEW_ERROR for a job it may not start and for an odd list.
            #expect(try serve.logs("submits").filter { $0.contains("answered") } == ["target answered 0", "other answered 1", "odd answered 1"])
            #expect(try serve.logs("submits").contains("run of 'other' not submitted: the config does not let this job start it (its \"submits\")"))
            #expect(try serve.logs("target") == ["target got submitted"])
            #expect(try StateStore(folder: state).runRequests().isEmpty)
        }

        @Test func aBatchTakesNoSubmittedRun() async throws {
            let plugin = try Fixtures.compile("submit_jobs.c")
            let result = try await Fixtures.run(Fixtures.curfewExecutable, ["run", plugin, "--json", "--only", "submits"], timeout: .seconds(30))
            let logs = try OutputEvent.all(in: result.stdout).filter { $0.event == "log" }.compactMap(\.message)
            // CURFEW_UNAVAILABLE (3) each time: nobody would keep it.
            #expect(logs.filter { $0.hasSuffix("answered 3") }.count == 2, "\(logs)")
            #expect(logs.contains("odd answered 1"))
        }
    }
}

/// What a job that submits in a loop, or with bytes that are not UTF-8,
/// gets: bounded, refused, never a killed worker.
extension ProcessTests.First {
    @Suite(.timeLimit(.minutes(2))) struct SubmitRunLimitTests {
        @Test func aRunSubmitsAtMost64AndNoBytesThatAreNotUTF8() async throws {
            let folder = Fixtures.temporaryFolder("served")
            let state = Fixtures.temporaryFolder("state")
            let config = Fixtures.temporaryFolder("config") + "/curfew.json"
            try #"{"jobs": {"target": {"enabled": false}, "submits": {"submits": ["target"], "params": {"flood": "1"}}}}"#
                .write(toFile: config, atomically: true, encoding: .utf8)
            try FileManager.default.copyItem(atPath: try Fixtures.compile("submit_jobs.c"), toPath: folder + "/jobs.so")
            let serve = try ServeProcess(folder: folder, state: state, extra: ["--config", config])
            await serve.wait(for: "\"message\":\"flood done\"")
            await serve.wait(for: "\"event\":\"finished\"")
            #expect(await serve.stop() == 0)
            let logs = try serve.logs("submits")
            #expect(logs.contains("flood: 64 taken, 36 refused"), "\(logs.suffix(5))")
            #expect(logs.filter { $0.hasPrefix("runs not submitted: a run may submit 64") }.count == 1, "said once")
            #expect(logs.contains("latin answered 1"))
            #expect(try serve.events().filter { $0.event == "finished" && $0.job == "submits" }.first?.outcome == "completed")
            // Kept as asked, at most 64, to run in an hour.
            #expect(try StateStore(folder: state).runRequests().count == 64)
        }
    }
}
