import Dispatch
import Synchronization
import Testing

@testable import Curfew

/// Grant semantics, on a hand-stepped clock.
@Suite struct GrantTests {
    let clock = ManualClock()
    let queue = DispatchQueue(label: "grant-tests")

    final class Calls: Sendable {
        let log = Mutex<[String]>([])
        func add(_ entry: String) { log.withLock { $0.append(entry) } }
        var entries: [String] { log.withLock { $0 } }
    }

    func observer(_ calls: Calls) -> GrantObserver {
        GrantObserver(
            expiring: { calls.add("expiring:\($0.rawValue)") },
            drained: { calls.add("drained") },
            deadline: { calls.add("deadline:\($0.joined(separator: ","))") })
    }

    /// The one place the rules of a budget and its grace live: every caller
    /// (flags, the serve config, a worker's run) gets this refusal.
    @Test(arguments: [
        (Duration.milliseconds(400), Duration?.some(.milliseconds(400)), "The grace 0.400s must be positive and shorter than the budget 0.400s."),
        (.seconds(1), .some(.zero), "The grace 0.000s must be positive and shorter than the budget 1.000s."),
        (.microseconds(999), nil, "The budget 0.999ms is below the least a grant may have, 1ms."),
    ])
    func aPolicyThatCannotBeKeptIsRefused(budget: Duration, grace: Duration?, reason: String) {
        #expect(throws: CurfewError(.invalidGrant, reason)) { try GrantPolicy(budget: budget, grace: grace) }
    }

    @Test func leadIsTheGraceOrFiveSecondsScaledDownForSmallBudgets() throws {
        #expect(GrantPolicy().lead == .seconds(5))
        #expect(try GrantPolicy(budget: .seconds(600)).lead == .seconds(5))
        #expect(try GrantPolicy(budget: .seconds(8)).lead == .seconds(2))
        #expect(try GrantPolicy(budget: .milliseconds(400)).lead == .milliseconds(100))
        #expect(try GrantPolicy(budget: .seconds(180), grace: .seconds(30)).lead == .seconds(30))
        #expect(try GrantPolicy(budget: .seconds(1), grace: .milliseconds(1)).lead == .milliseconds(1))
    }

    @Test func expirationHandlerRunsOnceAtBudgetMinusLead() {
        let manager = GrantManager(clock: clock, policy: GrantPolicy())
        let calls = Calls()
        let grant = try! manager.beginGrant(name: "job", handlerQueue: queue, observer: observer(calls))
        let task = grant.beginTask(name: "work") { calls.add("handler:\($0.rawValue)") }
        #expect(task != .invalid)

        clock.advance(by: .seconds(174))
        #expect(calls.entries.isEmpty)
        #expect(!grant.isExpiring)
        #expect(grant.timeRemaining == .seconds(6))

        clock.advance(by: .seconds(1))
        queue.sync {}  // the handlers run on the handler queue
        #expect(calls.entries == ["expiring:timeout", "handler:timeout"])
        #expect(grant.isExpiring)
        #expect(grant.expirationReason == .timeout)
        #expect(grant.timeRemaining == .seconds(5))

        clock.advance(by: .seconds(2))
        queue.sync {}
        #expect(calls.entries == ["expiring:timeout", "handler:timeout"], "the handler runs once")
    }

    @Test func timeRemainingCountsDownToZeroAtTheDeadline() {
        let manager = GrantManager(clock: clock, policy: try! GrantPolicy(budget: .seconds(10)))
        let grant = try! manager.beginGrant(name: "job", handlerQueue: queue)
        #expect(grant.timeRemaining == .seconds(10))
        clock.advance(by: .milliseconds(2500))
        #expect(grant.timeRemaining == .milliseconds(7500))
        clock.advance(by: .seconds(30))
        #expect(grant.timeRemaining == .zero)
    }

    @Test func deadlineReportsTheTasksStillOpen() {
        let manager = GrantManager(clock: clock, policy: try! GrantPolicy(budget: .seconds(10)))
        let calls = Calls()
        let grant = try! manager.beginGrant(name: "job", handlerQueue: queue, observer: observer(calls))
        _ = grant.beginTask(name: "upload")
        let finished = grant.beginTask(name: "index")
        grant.endTask(finished)
        clock.advance(by: .milliseconds(9999))
        #expect(!calls.entries.contains { $0.hasPrefix("deadline") })
        clock.advance(by: .milliseconds(1))
        #expect(calls.entries.last == "deadline:upload")
    }

    @Test func endingTwiceOrAnInvalidIdIsHarmless() {
        let manager = GrantManager(clock: clock)
        let calls = Calls()
        let grant = try! manager.beginGrant(name: "job", handlerQueue: queue, observer: observer(calls))
        let task = grant.beginTask(name: "work")
        #expect(grant.endTask(task))
        #expect(!grant.endTask(task))
        #expect(!grant.endTask(.invalid))
        #expect(!grant.endTask(BackgroundTaskIdentifier(rawValue: 987_654)))
        #expect(calls.entries == ["drained"], "only the real end drains the grant")
    }

    @Test func taskIdentifiersAreUniqueAcrossGrants() {
        let manager = GrantManager(clock: clock)
        let first = try! manager.beginGrant(name: "a", handlerQueue: queue)
        let second = try! manager.beginGrant(name: "b", handlerQueue: queue)
        let ids = [first.beginTask(name: "1"), second.beginTask(name: "2"), first.beginTask(name: "3")]
        #expect(Set(ids).count == 3)
        #expect(!ids.contains(.invalid))
        #expect(!second.endTask(ids[0]), "a task of one grant cannot be ended through another")
    }

    @Test func noTaskBeginsOnceTheGrantIsExpiring() {
        let manager = GrantManager(clock: clock, policy: try! GrantPolicy(budget: .seconds(20)))
        let grant = try! manager.beginGrant(name: "job", handlerQueue: queue)
        _ = grant.beginTask(name: "keep")
        clock.advance(by: .seconds(15))
        #expect(grant.isExpiring)
        #expect(grant.beginTask(name: "late") == .invalid)
    }

    @Test func aHandlerIsSkippedWhenAnEarlierHandlerEndedItsTask() {
        let manager = GrantManager(clock: clock, policy: try! GrantPolicy(budget: .seconds(20)))
        let calls = Calls()
        let grant = try! manager.beginGrant(name: "job", handlerQueue: queue, observer: observer(calls))
        let second = Mutex(BackgroundTaskIdentifier.invalid)
        _ = grant.beginTask(name: "first") { _ in
            calls.add("first")
            grant.endTask(second.withLock { $0 })
        }
        second.withLock { $0 = grant.beginTask(name: "second") { _ in calls.add("second") } }
        clock.advance(by: .seconds(15))
        queue.sync {}
        #expect(calls.entries == ["expiring:timeout", "first"])
    }

    @Test func closingStopsNewTasksAndTheExpirationButTheDeadlineHoldsUntilFinish() {
        let manager = GrantManager(clock: clock, policy: try! GrantPolicy(budget: .seconds(20)))
        let calls = Calls()
        let grant = try! manager.beginGrant(name: "job", handlerQueue: queue, observer: observer(calls))
        let task = grant.beginTask(name: "work")
        #expect(!grant.closeIfDrained())
        grant.endTask(task)
        #expect(grant.closeIfDrained())
        #expect(grant.beginTask(name: "after") == .invalid)
        #expect(clock.armedTimerCount == 1, "the deadline stays armed while the job finishes")
        clock.advance(by: .seconds(20))
        #expect(calls.entries == ["drained", "deadline:"], "a closed grant does not expire, but its deadline holds")

        let second = try! manager.beginGrant(name: "job2", handlerQueue: queue, observer: observer(calls))
        #expect(second.closeIfDrained())
        second.finish()
        #expect(clock.armedTimerCount == 0)
        clock.advance(by: .seconds(60))
        #expect(calls.entries == ["drained", "deadline:"], "a finished grant fires nothing")
    }

    @Test func anExpirationAskedForBeforeTheStartHappensAtTheStart() throws {
        let manager = GrantManager(clock: clock, policy: try GrantPolicy(budget: .seconds(20)))
        let calls = Calls()
        let grant = try manager.makeGrant(name: "job", handlerQueue: queue)
        #expect(grant.beginTask(name: "early") == .invalid, "no task before the start")
        grant.expireNow(.shutdown)
        grant.start(observer: observer(calls))
        Grant.timerQueue.sync {}
        #expect(calls.entries == ["expiring:shutdown"])
        #expect(grant.timeRemaining == .seconds(5))
    }

    @Test func continuousJobsAreRefusedUnlessAllowed() throws {
        let strict = GrantManager(clock: clock, policy: GrantPolicy())
        let error = #expect(throws: CurfewError.self) {
            try strict.beginGrant(name: "player", continuous: true, handlerQueue: queue)
        }
        #expect(error?.code == .continuousNotAllowed)
        #expect(error?.description.contains("--allow-continuous") == true)

        let lenient = GrantManager(clock: clock, policy: GrantPolicy(allowsContinuous: true))
        let grant = try lenient.beginGrant(name: "player", continuous: true, handlerQueue: queue)
        #expect(grant.isUnlimited)
        #expect(grant.timeRemaining == nil)
        #expect(grant.expirationPoint == nil)
        #expect(clock.armedTimerCount == 0)
        clock.advance(by: .seconds(100_000))
        #expect(!grant.isExpiring)
    }

    @Test func expireNowGivesAtMostOneLeadTimeFromNow() {
        let manager = GrantManager(clock: clock, policy: try! GrantPolicy(budget: .seconds(180)))
        let calls = Calls()
        let grant = try! manager.beginGrant(name: "job", handlerQueue: queue, observer: observer(calls))
        _ = grant.beginTask(name: "work") { calls.add("handler:\($0.rawValue)") }
        clock.advance(by: .seconds(10))
        grant.expireNow(.shutdown)
        Grant.timerQueue.sync {}
        queue.sync {}
        #expect(calls.entries == ["expiring:shutdown", "handler:shutdown"])
        #expect(grant.timeRemaining == .seconds(5))
        clock.advance(by: .seconds(5))
        #expect(calls.entries.last == "deadline:work")

        grant.expireNow(.cancelled)
        Grant.timerQueue.sync {}
        #expect(calls.entries.filter { $0.hasPrefix("expiring") }.count == 1, "a grant expires once")
    }

    /// Before: a worker's run that ended (its worker refused, crashed or
    /// finished) before the host started its grant trapped the whole host in
    /// `start`. A grant finished first starts as nothing: no timer, no call.
    @Test func aGrantFinishedBeforeItStartsStartsAsNothing() throws {
        let manager = GrantManager(clock: clock, policy: try GrantPolicy(budget: .seconds(10)))
        let calls = Calls()
        let grant = try manager.makeGrant(name: "over", handlerQueue: queue)
        grant.finish()
        grant.start(observer: observer(calls))
        #expect(clock.armedTimerCount == 0)
        #expect(grant.deadline == nil)
        clock.advance(by: .seconds(20))
        Grant.timerQueue.sync {}
        queue.sync {}
        #expect(calls.entries.isEmpty)
    }

    @Test func expireNowGivesAContinuousJobADeadline() throws {
        let manager = GrantManager(clock: clock, policy: try GrantPolicy(budget: GrantPolicy.defaultBudget, grace: .seconds(3), allowsContinuous: true))
        let calls = Calls()
        let grant = try manager.beginGrant(name: "player", continuous: true, handlerQueue: queue, observer: observer(calls))
        _ = grant.beginTask(name: "stream")
        grant.expireNow(.shutdown)
        Grant.timerQueue.sync {}
        #expect(grant.timeRemaining == .seconds(3))
        clock.advance(by: .seconds(3))
        #expect(calls.entries == ["expiring:shutdown", "deadline:stream"])
    }
}

/// The open-task table: order kept, holes swept, lookups by id.
@Suite struct OpenTasksTests {
    @Test func endsInAnyOrderKeepTheOrderOfTheRest() {
        var tasks = OpenTasks<String>()
        for id in 1...1000 { tasks.append(UInt64(id), "t\(id)") }
        // Every other one, then most of the rest: sweeps happen on the way.
        for id in stride(from: 2, through: 1000, by: 2) { #expect(tasks.remove(UInt64(id)) == "t\(id)") }
        for id in stride(from: 1, through: 900, by: 2) { #expect(tasks.remove(UInt64(id)) == "t\(id)") }
        #expect(tasks.remove(1) == nil, "ended twice")
        #expect(tasks.count == 50)
        #expect(tasks.ordered.map(\.id) == Array(stride(from: UInt64(901), through: 999, by: 2)))
        #expect(tasks[951] == "t951")
        #expect(tasks[950] == nil)
        tasks.append(2000, "late")
        #expect(tasks.ordered.last?.task == "late")
        #expect(tasks.removeAll().count == 51)
        #expect(tasks.isEmpty)
    }
}
