import Foundation
import Synchronization
import Testing

@testable import Curfew

extension ProcessTests.Second {
    /// Jobs under a moving app state, in process on a stepped clock and in
    /// workers, with `lifecycle_jobs.c`: each job logs the events it hears,
    /// the state then, and whether its time runs.
    @Suite(.timeLimit(.minutes(2))) struct LifecycleRunTests {
        let clock = ManualClock()

        /// The fixture, compiled once per test: `release()` reaches the copy its jobs run from.
        let path: String

        init() throws {
            path = try Fixtures.compile("lifecycle_jobs.c")
        }

        func jobs(_ names: String...) throws -> [PluginJob] {
            let plugin = try PluginLoader().load(path)
            return names.compactMap { name in plugin.jobs.first { $0.name == name } }
        }

        /// Lets the spinner's chunk return (the same handle the loader got: dlopen of one path loads once).
        func release() throws {
            let symbol = try #require(dlsym(dlopen(path, RTLD_NOW), "lifecycle_release"))
            unsafeBitCast(symbol, to: (@convention(c) () -> Void).self)()
        }

        /// A runner of `jobs` under `app`, started; its results come through the returned task.
        func start(
            _ jobs: [PluginJob], app: AppLifecycle, budget: Duration = .seconds(10), isolation: Isolation = .none,
            clock: any CurfewClock, maxConcurrentJobs: Int = 4
        ) -> (Runner, EventLog, Task<[JobResult], Never>) {
            var configuration = RunConfiguration(
                policy: try! GrantPolicy(budget: budget, grace: budget / 5), maxConcurrentJobs: maxConcurrentJobs)
            configuration.lifecycle = app
            configuration.isolation = isolation
            configuration.workerExecutable = Fixtures.curfewExecutable
            let events = EventLog()
            let runner = Runner(jobs: jobs, configuration: configuration, clock: clock) { events.record($0) }
            return (runner, events, Task { await runner.run() })
        }

        /// Waits (a handshake, never a budget) until the job has logged `line`.
        func heard(_ line: String, from job: String, in events: EventLog) async throws {
            let give = ContinuousClock.now + .seconds(20)
            while !events.logs(of: job).contains(line) {
                guard ContinuousClock.now < give else {
                    Issue.record("'\(job)' never said '\(line)': \(events.logs(of: job))")
                    throw CancellationError()
                }
                try await Task.sleep(for: .milliseconds(2))
            }
        }

        @Test func aJobHearsItsEventsInOrderAndItsTimeRunsOnlyInTheBackground() async throws {
            let app = AppLifecycle(state: .active)
            let (runner, events, results) = start(try jobs("listener"), app: app, clock: clock)
            try await heard("launch in active, unlimited", from: "listener", in: events)
            #expect(runner.status().first?.timeRemaining == nil)
            clock.advance(by: .seconds(3600))
            #expect(events.expirations(of: "listener").isEmpty, "an hour in the foreground is not ten seconds of budget")

            #expect(app.move(to: .inactive) == [.willResignActive])
            try await heard("will-resign-active in inactive, unlimited", from: "listener", in: events)
            #expect(app.move(to: .background) == [.didEnterBackground])
            try await heard("did-enter-background in background, limited", from: "listener", in: events)
            #expect(runner.status().first?.timeRemaining == .seconds(10), "the whole budget, from entering the background")
            clock.advance(by: .seconds(9))
            let result = await results.value[0]
            #expect(result.outcome == .expired)
            #expect(events.logs(of: "listener") == [
                "launch in active, unlimited", "will-resign-active in inactive, unlimited",
                "did-enter-background in background, limited", "expire timeout",
            ])
        }

        @Test func willEnterForegroundLetsAJobEndItsTaskEarly() async throws {
            let app = AppLifecycle()
            let (_, events, results) = start(try jobs("ender"), app: app, clock: clock)
            try await heard("launch in background, limited", from: "ender", in: events)
            app.move(to: .active)
            let result = await results.value[0]
            #expect(result.outcome == .completed, "\(result.reason)")
            #expect(result.reason == "all tasks ended")
            #expect(Array(events.logs(of: "ender").prefix(3)) == [
                "launch in background, limited", "will-enter-foreground in active, unlimited", "ending the task early",
            ] || Array(events.logs(of: "ender").prefix(3)) == [
                "launch in background, limited", "will-enter-foreground in inactive, unlimited", "ending the task early",
            ])
            #expect(!events.logs(of: "ender").contains("task expired"))
        }

        @Test func willTerminateComesBeforeTheShutdownExpiration() async throws {
            let app = AppLifecycle()
            let (runner, events, results) = start(try jobs("listener"), app: app, clock: clock)
            try await heard("launch in background, limited", from: "listener", in: events)
            app.terminate()
            runner.shutdown()
            #expect(await results.value[0].outcome == .expired)
            #expect(events.logs(of: "listener") == [
                "launch in background, limited", "will-terminate in background, limited", "expire shutdown",
            ])
        }

        /// Waits until `jobs` jobs have finished; shuts the runner down if one
        /// of `names` says anything (it launched), so a run that should have
        /// refused it still ends, on the stepped clock, and the test can fail.
        func endWhenAllFinish(_ runner: Runner, _ events: EventLog, jobs: Int, orWhenOneOf names: [String]) async throws {
            let give = ContinuousClock.now + .seconds(20)
            while events.all.filter({ if case .finished = $0 { true } else { false } }).count < jobs {
                if names.contains(where: { !events.logs(of: $0).isEmpty }) || ContinuousClock.now > give {
                    runner.shutdown()
                    return
                }
                try await Task.sleep(for: .milliseconds(2))
            }
        }

        /// A terminating host launches nothing: a job waiting for a slot when
        /// will-terminate comes is refused, not started later unwarned.
        @Test func aJobWaitingWhenTheHostWillTerminateIsRefused() async throws {
            let app = AppLifecycle()
            let (runner, events, results) = start(try jobs("ender", "listener"), app: app, clock: clock, maxConcurrentJobs: 1)
            try await heard("launch in background, limited", from: "ender", in: events)
            app.terminate()
            try await heard("will-terminate in background, limited", from: "ender", in: events)
            // The running job goes on until it is stopped; here it is cancelled alone.
            runner.cancel(job: "ender")
            try await endWhenAllFinish(runner, events, jobs: 2, orWhenOneOf: ["listener"])
            let outcomes = await results.value
            #expect(outcomes.map(\.outcome) == [.expired, .refused])
            #expect(outcomes[1].reason == "the host was shutting down before the job started")
            #expect(events.logs(of: "listener").isEmpty)
        }

        @Test func aRunnerStartedAfterTheHostWillTerminateLaunchesNothing() async throws {
            let app = AppLifecycle()
            app.terminate()
            let (runner, events, results) = start(try jobs("listener", "ender"), app: app, clock: clock)
            try await endWhenAllFinish(runner, events, jobs: 2, orWhenOneOf: ["listener", "ender"])
            let outcomes = await results.value
            #expect(outcomes.map(\.outcome) == [.refused, .refused])
            #expect(outcomes.allSatisfy { $0.reason == "the host was shutting down before the job started" })
            #expect(events.logs(of: "listener").isEmpty && events.logs(of: "ender").isEmpty)
        }

        /// Before: the expiration that follows will-terminate, asked for while
        /// a chunk ran, was called as the chunk returned, before the event.
        @Test func willTerminateDuringAChunkStillComesBeforeTheExpiration() async throws {
            let app = AppLifecycle()
            let (runner, events, results) = start(try jobs("spinner"), app: app, clock: clock)
            try await heard("spinning", from: "spinner", in: events)
            app.terminate()
            runner.shutdown()
            // The expiration is asked for while the chunk still runs; then it returns.
            while events.expirations(of: "spinner").isEmpty { try await Task.sleep(for: .milliseconds(2)) }
            try release()
            #expect(await results.value[0].outcome == .expired)
            #expect(events.logs(of: "spinner") == [
                "launch in background, limited", "spinning", "will-terminate in background, limited", "expire shutdown",
            ])
        }

        @Test(arguments: [Isolation.job, .plugin])
        func aJobInAWorkerHearsTheHostsEventsAndItsGrantWaitsForTheBackground(isolation: Isolation) async throws {
            let app = AppLifecycle(state: .active)
            let (runner, events, results) = start(
                try jobs("listener", "ender"), app: app, budget: .milliseconds(400), isolation: isolation, clock: MonotonicClock())
            try await heard("launch in active, unlimited", from: "listener", in: events)
            try await heard("launch in active, unlimited", from: "ender", in: events)
            #expect(runner.status().allSatisfy { $0.timeRemaining == nil }, "no deadline in the foreground")
            app.move(to: .background)
            try await heard("did-enter-background in background, limited", from: "listener", in: events)
            let remaining = runner.status().compactMap(\.timeRemaining)
            #expect(remaining.count == 2 && remaining.allSatisfy { $0 <= .milliseconds(400) && $0 > .zero }, "\(remaining)")
            let outcomes = await results.value.map(\.outcome)
            #expect(outcomes == [.expired, .expired])
            // (What a hook reads of the state depends on how far the host has moved by then.)
            let heardEvents = events.logs(of: "listener").map { $0.split(separator: " ")[0] }
            #expect(heardEvents == ["launch", "will-resign-active", "did-enter-background", "expire"], "\(events.logs(of: "listener"))")
            #expect(events.logs(of: "ender").last == "task expired")
        }
    }
}
