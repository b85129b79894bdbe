import CCurfew
import Foundation
import Synchronization
import Testing

@testable import Curfew

/// When a job's history row is written against when the next job starts.
/// In process, the row (with a completed job's checkpoint clear) is on
/// disk first: the next job's code could take the process down. In
/// workers, the next job starts first: the row may end with an `fdatasync`
/// (a checkpoint cleared) and may wait up to the store's busy timeout for
/// another process.
@Suite(.serialized) struct HistoryWriteTests {
    /// What the second job saw as it started; global because a C hook captures nothing.
    nonisolated(unsafe) static var seen: (firstRecorded: Bool, checkpointCleared: Bool, problems: [String])?
    nonisolated(unsafe) static var store: StateStore?
    static let lock = Mutex(())

    static func job(_ name: String, _ create: curfew_create_fn) -> PluginJob {
        let chunk: curfew_chunk_fn = { _, _ in CURFEW_CHUNK_DONE }
        let expire: curfew_expire_fn = { _, _, _ in }
        return PluginJob(
            name: name, summary: "Done at once.", pluginPath: "/\(name).so", isContinuous: false,
            hooks: JobHooks(create: create, chunk: chunk, expire: expire, destroy: nil), index: 0)
    }

    /// What `body` reads, tried up to five times; each failure is added to `problems`.
    static func read<T>(_ problems: inout [String], _ body: () throws -> T) -> T? {
        for _ in 0..<5 {
            do { return try body() } catch { problems.append("\(error)") }
            usleep(10_000)
        }
        return nil
    }

    /// Fails when the next job starts first (as in a worker): its create saw
    /// the completed job with no row yet and its checkpoint still kept.
    @Test func inProcessACompletedJobsRowIsOnDiskBeforeTheNextJobStarts() async throws {
        let folder = Fixtures.temporaryFolder("state")
        let store = try StateStore(folder: folder)
        try store.saveCheckpoint(JobKey(job: "first", plugin: "/first.so"), bytes: [1, 2, 3])
        // The second job reads through a connection of its own: what is committed, not what waits on the run's.
        let reader = try StateStore(folder: folder)
        Self.lock.withLock { _ in (Self.store, Self.seen) = (reader, nil) }
        defer { Self.lock.withLock { _ in (Self.store, Self.seen) = (nil, nil) } }
        let first = Self.job("first") { _, _ in CURFEW_OK }
        let second = Self.job("second") { _, _ in
            HistoryWriteTests.lock.withLock { _ in
                guard let store = HistoryWriteTests.store else { return }
                // A read that fails is tried again (and said): only what is committed counts.
                var problems: [String] = []
                let recorded = HistoryWriteTests.read(&problems) { try store.history().contains { $0.job == "first" } } ?? false
                let cleared = HistoryWriteTests.read(&problems) { try store.checkpoint(job: "first") == nil } ?? false
                HistoryWriteTests.seen = (recorded, cleared, problems)
            }
            return CURFEW_OK
        }
        var configuration = RunConfiguration(policy: try GrantPolicy(budget: .seconds(30)), maxConcurrentJobs: 1)
        configuration.state = store
        let runner = Runner(jobs: [first, second], configuration: configuration)
        #expect(await runner.run().map(\.outcome) == [.completed, .completed])
        #expect(runner.stateProblems.isEmpty, "\(runner.stateProblems)")
        let seen = try #require(Self.lock.withLock { _ in Self.seen }, "the second job never ran")
        #expect(seen.firstRecorded, "reads that failed: \(seen.problems)")
        #expect(seen.checkpointCleared, "reads that failed: \(seen.problems)")
    }
}

extension ProcessTests.Second {
    @Suite(.timeLimit(.minutes(1))) struct HistoryWriteWorkerTests {
        /// Before: under `--isolate plugin` the second job waited for the
        /// first one's row, which waited (up to the store's busy timeout)
        /// for the lock the test holds until the second starts. The store
        /// waits 50 s here: beside a build, the second took over 10 s to start.
        @Test func inAWorkerTheNextJobStartsWhileTheLastRowWaitsForTheStore() async throws {
            let plugin = try Fixtures.compile("history_jobs.c")
            let marker = Fixtures.temporaryFolder("marker") + "/second-started"
            let store = try StateStore(folder: Fixtures.temporaryFolder("state"), retention: StateStore.defaultRetention, writer: nil, waitingUpTo: .seconds(50))
            // Another process's hold on the store, taken as the first job starts.
            let connection = try SQLiteConnection(path: store.path)
            try connection.execute("PRAGMA busy_timeout = 5000")
            let holder = Mutex(connection)
            let held = Mutex(false)
            var configuration = RunConfiguration(policy: try GrantPolicy(budget: .seconds(30)), maxConcurrentJobs: 1, parameters: ["marker": marker])
            configuration.isolation = .plugin
            configuration.workerExecutable = Fixtures.curfewExecutable
            configuration.state = store
            let runner = Runner(jobs: try PluginLoader().load(plugin).jobs, configuration: configuration) { event in
                guard case .started(let job, _, _) = event, job == "first" else { return }
                let took = holder.withLock { (try? $0.execute("BEGIN IMMEDIATE")) != nil }
                held.withLock { $0 = took }
            }
            // Lets go once the second job has started, or after 40 s. When it
            // waited for the row instead, the row's write gave up at the
            // store's timeout first: a lost row and a state problem.
            let released = DispatchSemaphore(value: 0)
            let sawSecond = Mutex(false)
            OSThread.detach {
                let start = ContinuousClock.now
                while ContinuousClock.now - start < .seconds(40) {
                    if access(marker, F_OK) == 0 {
                        sawSecond.withLock { $0 = true }
                        break
                    }
                    usleep(2000)
                }
                holder.withLock { _ = try? $0.execute("COMMIT") }
                released.signal()
            }
            let results = await runner.run()
            released.wait()
            #expect(results.map(\.outcome) == [.completed, .completed])
            #expect(held.withLock { $0 }, "the test never held the store")
            #expect(sawSecond.withLock { $0 }, "the second job did not start while the first one's row waited")
            #expect(Set(try store.history().map(\.job)) == ["first", "second"])
            #expect(runner.stateProblems.isEmpty, "\(runner.stateProblems)")
        }
    }
}
