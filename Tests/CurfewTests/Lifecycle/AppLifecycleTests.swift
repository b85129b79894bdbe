import Dispatch
import Synchronization
import Testing

@testable import Curfew

/// The host's app state and its events, and what they do to grants, on a
/// hand-stepped clock.
@Suite struct AppLifecycleTests {
    let clock = ManualClock()
    let queue = DispatchQueue(label: "lifecycle-tests")

    @Test func statesMoveOneStepAtATimeThroughInactive() {
        #expect(AppState.background.path(to: .active).map(\.event) == [.willEnterForeground, .didBecomeActive])
        #expect(AppState.active.path(to: .background).map(\.event) == [.willResignActive, .didEnterBackground])
        #expect(AppState.active.path(to: .background).map(\.state) == [.inactive, .background])
        #expect(AppState.inactive.path(to: .active).map(\.event) == [.didBecomeActive])
        #expect(AppState.inactive.path(to: .background).map(\.event) == [.didEnterBackground])
        #expect(AppState.background.path(to: .inactive).map(\.event) == [.willEnterForeground])
        #expect(AppState.active.path(to: .inactive).map(\.event) == [.willResignActive])
        for state in AppState.allCases { #expect(state.path(to: state).isEmpty) }
        #expect(AppState.allCases.filter(\.runsGrantClocks) == [.background], "only the background runs grants down")
    }

    @Test func everySubscriberHearsEachEventInOrderAndTerminateOnce() {
        let app = AppLifecycle()
        let heard = Mutex<[String]>([])
        let first = app.subscribe { event, state in heard.withLock { $0.append("1 \(event.rawValue) \(state.rawValue)") } }
        let second = app.subscribe { event, _ in heard.withLock { $0.append("2 \(event.rawValue)") } }
        #expect(first.state == .background && !first.terminated)
        #expect(app.move(to: .active) == [.willEnterForeground, .didBecomeActive])
        #expect(app.move(to: .active).isEmpty, "already there")
        #expect(app.current == .active)
        app.unsubscribe(second.token)
        #expect(app.move(to: .background) == [.willResignActive, .didEnterBackground])
        app.terminate()
        app.terminate()
        #expect(app.move(to: .active).isEmpty, "a terminated host moves no more")
        #expect(app.isTerminated)
        #expect(heard.withLock { $0 } == [
            "1 will-enter-foreground inactive", "2 will-enter-foreground",
            "1 did-become-active active", "2 did-become-active",
            "1 will-resign-active inactive", "1 did-enter-background background",
            "1 will-terminate background",
        ])
        #expect(app.subscribe { _, _ in }.terminated)
    }

    @Test func aHeldGrantHasNoDeadlineAndItsReleaseStartsTheWholeBudget() {
        let manager = GrantManager(clock: clock, policy: try! GrantPolicy(budget: .seconds(10), grace: .seconds(2)))
        let expired = Mutex<[ExpirationReason]>([])
        let grant = try! manager.makeGrant(name: "job", handlerQueue: queue)
        grant.hold()  // the host is in the foreground as the job starts
        grant.start(observer: GrantObserver(expiring: { reason in expired.withLock { $0.append(reason) } }))
        #expect(grant.timeRemaining == nil, "unlimited, as backgroundTimeRemaining is in the foreground")
        #expect(grant.deadline == nil && grant.expirationPoint == nil)
        clock.advance(by: .seconds(3600))
        #expect(expired.withLock { $0 }.isEmpty, "time in the foreground does not count")
        #expect(grant.beginTask(name: "work") != .invalid)

        grant.release()
        #expect(grant.timeRemaining == .seconds(10), "the whole budget from entering the background")
        clock.advance(by: .seconds(7))
        grant.hold()  // back to the foreground before the expiration point
        #expect(grant.timeRemaining == nil)
        clock.advance(by: .seconds(60))
        #expect(expired.withLock { $0 }.isEmpty)
        grant.release()
        #expect(grant.timeRemaining == .seconds(10), "each entry to the background starts the clock afresh")
        clock.advance(by: .seconds(8))
        #expect(expired.withLock { $0 } == [.timeout])

        // An expiration under way is never undone: its deadline holds in the foreground.
        grant.hold()
        #expect(grant.timeRemaining == .seconds(2))
    }

    /// A clock whose timers cannot be stopped: each fires even once
    /// cancelled, as a timer already due does when the cancel comes a moment
    /// too late (a thread has taken it and waits for the grant's lock).
    final class LateCancelClock: CurfewClock {
        let clock = ManualClock()
        struct Timer: CurfewTimer { func cancel() {} }
        func now() -> CurfewInstant { clock.now() }
        func schedule(at deadline: CurfewInstant, _ work: @escaping @Sendable () -> Void) -> any CurfewTimer {
            _ = clock.schedule(at: deadline, work)
            return Timer()
        }
    }

    @Test func aTimerCancelledTooLateExpiresNoHeldGrantAndNoGrantRearmedSince() {
        let late = LateCancelClock()
        let manager = GrantManager(clock: late, policy: try! GrantPolicy(budget: .seconds(10), grace: .seconds(2)))
        let calls = Mutex<[String]>([])
        let grant = try! manager.makeGrant(name: "job", handlerQueue: queue)
        grant.start(observer: GrantObserver(
            expiring: { reason in calls.withLock { $0.append("expiring \(reason.rawValue)") } },
            deadline: { _ in calls.withLock { $0.append("deadline") } }))
        late.clock.advance(by: .seconds(5))
        grant.hold()  // the first timers (due at 8 s and 10 s) still fire
        late.clock.advance(by: .seconds(6))
        #expect(calls.withLock { $0 }.isEmpty, "a held grant does not expire")
        grant.release()  // a new budget: expiring at 19 s, its deadline at 21 s
        grant.hold()
        grant.release()  // and again: the timers of the first release fire too
        late.clock.advance(by: .seconds(7))
        #expect(calls.withLock { $0 }.isEmpty)
        late.clock.advance(by: .seconds(1))
        #expect(calls.withLock { $0 } == ["expiring timeout"])
        late.clock.advance(by: .seconds(2))
        #expect(calls.withLock { $0 } == ["expiring timeout", "deadline"])
    }

    @Test func aWorkersGrantIsReleasedUpToItsHostsDeadline() {
        let manager = GrantManager(clock: clock, policy: try! GrantPolicy(budget: .seconds(10), grace: .seconds(2)))
        let grant = try! manager.makeGrant(name: "job", handlerQueue: queue)
        grant.hold()
        grant.start(observer: GrantObserver())
        grant.release(deadline: clock.now().advanced(by: .seconds(4)))
        #expect(grant.timeRemaining == .seconds(4))
        #expect(grant.expirationPoint == clock.now().advanced(by: .seconds(2)))
    }

    @Test func aCancelInTheForegroundStillEndsTheJobWithinItsLead() {
        let manager = GrantManager(clock: clock, policy: try! GrantPolicy(budget: .seconds(10), grace: .seconds(2)))
        let deadlines = Mutex(0)
        let grant = try! manager.makeGrant(name: "job", handlerQueue: queue)
        grant.hold()
        grant.start(observer: GrantObserver(deadline: { _ in deadlines.withLock { $0 += 1 } }))
        _ = grant.beginTask(name: "stuck")
        grant.expireNow(.cancelled)
        Grant.timerQueue.sync {}
        #expect(grant.timeRemaining == .seconds(2))
        grant.release()  // entering the background does not give an expiring grant more time
        #expect(grant.timeRemaining == .seconds(2))
        clock.advance(by: .seconds(2))
        #expect(deadlines.withLock { $0 } == 1)
    }
}
