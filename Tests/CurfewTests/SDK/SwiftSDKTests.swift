import CCurfew
import Synchronization
import Testing

@testable import Curfew
@testable import CurfewJob

/// Plugins written with the CurfewJob SDK, built by SwiftPM, each with its
/// own copy of the SDK, loaded into this one process.
@Suite(.timeLimit(.minutes(1))) struct SwiftSDKTests {
    func jobs() throws -> [PluginJob] {
        let scan = PluginLoader().scan(Fixtures.examplePlugins.filter { $0.contains("ExampleSwift") })
        #expect(scan.rejected.isEmpty, "\(scan.rejected)")
        return scan.jobs
    }

    func run(_ jobs: [PluginJob], policy: GrantPolicy? = nil, parameters: [String: String]) async -> [JobResult] {
        let configuration = RunConfiguration(policy: try! policy ?? GrantPolicy(budget: .seconds(10)), maxConcurrentJobs: 2, parameters: parameters)
        return await Runner(jobs: jobs, configuration: configuration).run()
    }

    @Test func twoSwiftPluginsRunSideBySide() async throws {
        let jobs = try jobs()
        #expect(jobs.map(\.name) == ["swift-primes", "swift-uploader"])
        #expect(jobs.map(\.isChunked) == [true, false])
        let results = await run(jobs, parameters: ["limit": "50000", "files": "3", "file-ms": "5"])
        #expect(results.map(\.outcome) == [.completed, .completed])
        #expect(results[0].progress == JobProgress(completed: 50000, total: 50000))
        #expect(results[1].reason == "all tasks ended")
    }

    @Test func aSwiftExpirationHandlerEndsItsTask() async throws {
        let uploader = try jobs().filter { $0.name == "swift-uploader" }
        let result = try #require(await run(uploader, policy: Fixtures.expiring(after: .milliseconds(225)), parameters: ["files": "1000"]).first)
        #expect(result.outcome == .expired)
        // The SDK gives every job an expire hook (TaskDrivenJob's default does nothing).
        #expect(result.reason == "time ran out; cleanup ran")
    }

    /// The uploader's handler ended its task while its queue could still
    /// report progress, after the host destroyed the job: `curfew test` said
    /// so in some runs. Its queue ends the task, as its last host call; the
    /// harness runs the handler on its own thread, so the old code fails
    /// this every run.
    @Test func theSwiftUploadersQueueEndsItsTaskAsItsLastHostCall() throws {
        let uploader = try #require(try jobs().first { $0.name == "swift-uploader" })
        let report = JobHarness(job: uploader, parameters: ["files": "3", "file-ms": "50"]).run()
        #expect(report.outcome == .expired && report.violations.isEmpty, "\(report.violations)")
        let end = try #require(report.trace.lastIndex { $0.kind == "end task" })
        #expect(report.trace[end].fromJobThread, "the queue ends it, not the handler")
        #expect(!report.trace[(end + 1)...].contains { $0.fromJobThread }, "nothing from the queue after it")
    }

    /// swift-primes asks to run on external power: a host that watches
    /// conditions hears it, a batch says it cannot.
    @Test func aSwiftJobRequiresConditions() async throws {
        let primes = try jobs().filter { $0.name == "swift-primes" }
        for watches in [true, false] {
            var configuration = RunConfiguration(policy: try GrantPolicy(budget: .seconds(10)), parameters: ["limit": "100", "on-power": "1"])
            configuration.watchesConditions = watches
            let heard = Mutex<[String]>([])
            let result = try #require(await Runner(jobs: primes, configuration: configuration) { event, _ in
                switch event {
                case .conditionsRequired(_, let conditions): heard.withLock { $0.append("required \(conditions.sorted())") }
                case .log(_, _, let text) where text.hasPrefix("runs whatever"): heard.withLock { $0.append(text) }
                default: break
                }
            }.run().first)
            #expect(result.outcome == .completed)
            #expect(heard.withLock { $0 } == [watches ? "required [external power]" : "runs whatever the power: \(ConditionsError.unavailable)"])
        }
    }

    /// swift-primes saves a Codable position when its grant expires; the next run decodes it and goes on.
    @Test func aCodableCheckpointCarriesASwiftJobAcrossRuns() async throws {
        let primes = try jobs().filter { $0.name == "swift-primes" }
        var configuration = RunConfiguration(policy: try Fixtures.expiring(after: .milliseconds(225)), parameters: ["limit": "200000000"])
        let checkpoints = MemoryCheckpoints()
        configuration.checkpoints = checkpoints
        let first = try #require(await Runner(jobs: primes, configuration: configuration).run().first)
        #expect(first.outcome == .expired)
        let saved = String(decoding: try #require(checkpoints.checkpoint(job: "swift-primes")), as: UTF8.self)
        let next = try #require(first.progress?.completed)
        #expect(saved.hasPrefix("{\"limit\":200000000,\"next\":\(next),\"primes\":"), "\(saved)")
        let logs = Mutex<[String]>([])
        let second = try #require(
            await Runner(jobs: primes, configuration: configuration) { event in
                if case .log(_, _, let message) = event { logs.withLock { $0.append(message) } }
            }.run().first)
        #expect(second.outcome == .expired)
        #expect(logs.withLock { $0 }.first?.hasPrefix("resumed at \(next) with ") == true, "\(logs.withLock { $0 })")
    }

    @Test func aSwiftJobAsksForItsNextRun() async throws {
        let primes = try jobs().filter { $0.name == "swift-primes" }
        let configuration = RunConfiguration(parameters: ["limit": "1000", "again": "90"])
        let asked = Mutex<[Duration]>([])
        let result = try #require(
            await Runner(jobs: primes, configuration: configuration) { event in
                if case .nextRunRequested(_, let delay) = event { asked.withLock { $0.append(delay) } }
            }.run().first)
        #expect(result.outcome == .completed)
        #expect(asked.withLock { $0 } == [.seconds(90)])
    }

    /// A newer host's event reaches a Swift job as nothing, not as a second launch.
    @Test func anAppEventTheSDKDoesNotKnowIsNotPassedOn() {
        let known: [CurfewJob.AppEvent] = [.launch, .willResignActive, .didEnterBackground, .willEnterForeground, .didBecomeActive, .willTerminate]
        for (raw, event) in known.enumerated() {
            #expect(CurfewJob.AppEvent(curfew_app_event(rawValue: UInt32(raw))) == event)
        }
        for raw in [6, 99, UInt32.max] {
            #expect(CurfewJob.AppEvent(curfew_app_event(rawValue: raw)) == nil)
        }
    }

    /// The words a job and its host share are one set of types, spelt in C
    /// as curfew.h spells them; a value from a newer side reads as the
    /// documented default (a reason as a timeout, a state as the
    /// background, a level as info).
    @Test func theSDKAndTheHostShareOneVocabulary() {
        #expect(CurfewJob.ExpirationReason.self == Curfew.ExpirationReason.self)
        #expect(CurfewJob.AppState.self == Curfew.AppState.self)
        #expect(CurfewJob.AppEvent.self == Curfew.AppEvent.self)
        #expect(CurfewJob.LogLevel.self == Curfew.LogLevel.self)
        #expect(CurfewJob.BackgroundTaskIdentifier.self == Curfew.BackgroundTaskIdentifier.self)
        #expect(CurfewJob.Condition.self == Curfew.Condition.self)
        #expect(Condition.allCases.map(\.cValue) == [
            CURFEW_CONDITION_EXTERNAL_POWER, CURFEW_CONDITION_NETWORK, CURFEW_CONDITION_STORAGE, CURFEW_CONDITION_CPU, CURFEW_CONDITION_MEMORY,
            CURFEW_CONDITION_BATTERY,
        ].map(\.rawValue))
        #expect(ExpirationReason.allCases.map(\.cValue) == [CURFEW_EXPIRE_TIMEOUT, CURFEW_EXPIRE_SHUTDOWN, CURFEW_EXPIRE_CANCELLED, CURFEW_EXPIRE_STALLED, CURFEW_EXPIRE_CONDITIONS])
        #expect(AppState.allCases.map(\.cValue) == [CURFEW_APP_STATE_ACTIVE, CURFEW_APP_STATE_INACTIVE, CURFEW_APP_STATE_BACKGROUND])
        #expect(LogLevel.allCases.map(\.cValue) == [CURFEW_LOG_DEBUG, CURFEW_LOG_INFO, CURFEW_LOG_WARNING, CURFEW_LOG_ERROR])
        #expect(
            AppEvent.allCases.map(\.cValue) == [
                CURFEW_APP_EVENT_LAUNCH, CURFEW_APP_EVENT_WILL_RESIGN_ACTIVE, CURFEW_APP_EVENT_DID_ENTER_BACKGROUND,
                CURFEW_APP_EVENT_WILL_ENTER_FOREGROUND, CURFEW_APP_EVENT_DID_BECOME_ACTIVE, CURFEW_APP_EVENT_WILL_TERMINATE,
            ])
        for event in AppEvent.allCases { #expect(AppEvent(event.cValue) == event) }
        for reason in ExpirationReason.allCases { #expect(ExpirationReason(reason.cValue) == reason) }
        for state in AppState.allCases { #expect(AppState(state.cValue) == state) }
        for level in LogLevel.allCases { #expect(LogLevel(level.cValue) == level) }
        #expect(ExpirationReason(curfew_expire_reason(rawValue: 77)) == .timeout)
        #expect(AppState(curfew_app_state(rawValue: 77)) == .background)
        #expect(LogLevel(curfew_log_level(rawValue: 77)) == .info)
        #expect(BackgroundTaskIdentifier.invalid.rawValue == 0)  // CURFEW_TASK_INVALID
    }

    @Test func delaysBecomePositiveNanoseconds() {
        #expect(delayNanoseconds(.milliseconds(200)) == 200_000_000)
        #expect(delayNanoseconds(.zero) == 1)
        #expect(delayNanoseconds(.seconds(-5)) == 1)
        #expect(delayNanoseconds(.seconds(9_223_372_036) + .milliseconds(900)) == .max)
        #expect(delayNanoseconds(.seconds(Int64.max)) == .max)
    }

    @Test func aThrowingInitFailsTheJobWithItsError() async throws {
        let primes = try jobs().filter { $0.name == "swift-primes" }
        let result = try #require(await run(primes, parameters: ["limit": "1"]).first)
        #expect(result.outcome == .failed)
        #expect(result.reason == "create failed: limit must be at least 2, not 1")
    }

    /// Every refusal of the host reaches a Swift job as a typed error: a
    /// task not begun, a next run not taken, a checkpoint larger than any the
    /// host keeps (a host that lies: before, `nil`, as for no checkpoint).
    @Test func theHostsRefusalsAreTypedErrors() {
        var table = curfew_host()
        table.abi_version = CURFEW_ABI_VERSION
        table.struct_size = UInt32(MemoryLayout<curfew_host>.size)
        table.begin_background_task = { _, _, _, _ in CURFEW_TASK_INVALID }
        table.request_next_run = { _, seconds in seconds < 0 ? CURFEW_ERROR : CURFEW_UNAVAILABLE }
        table.checkpoint_load = { _, _, _ in Int(CURFEW_MAX_CHECKPOINT) + 1 }
        withUnsafePointer(to: &table) { host in
            let context = JobContext(host: host, raw: OpaquePointer(bitPattern: 1)!, tasks: TaskHandlers())
            #expect(throws: TaskError.refused) { try context.beginBackgroundTask(name: "t") { _ in } }
            #expect(throws: NextRunError.invalidDelay) { try context.requestNextRun(after: .seconds(-1)) }
            #expect(throws: NextRunError.unavailable) { try context.requestNextRun(after: .seconds(1)) }
            #expect(throws: CheckpointError.unreadable) { try context.loadCheckpoint() }
            // A job that asks again and again while refused keeps nothing for it.
            let tasks = TaskHandlers()
            let asking = JobContext(host: host, raw: OpaquePointer(bitPattern: 1)!, tasks: tasks)
            for _ in 0..<1000 { _ = try? asking.beginBackgroundTask(name: "again") { _ in } }
            #expect(tasks.count == 0)
        }
        // Each says what went wrong in words a log line can carry.
        let errors: [any Error & CustomStringConvertible] = [
            TaskError.refused, NextRunError.invalidDelay, NextRunError.unavailable, CheckpointError.tooLarge,
            CheckpointError.unavailable, CheckpointError.notEncodable("at a"), CheckpointError.notDecodable("at b"), CheckpointError.unreadable,
        ]
        for error in errors { #expect(!error.description.isEmpty && !error.description.contains("(")) }
        #expect(CheckpointError.notDecodable("at b").description.hasSuffix("at b"))
    }
}
