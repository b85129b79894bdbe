import CCurfew
import Foundation
import Synchronization
import Testing

@testable import Curfew

/// A job's history row is written after the next job has started, not
/// before: the write ends with an `fdatasync` and may wait up to the
/// store's busy timeout for another process, and the next job does not
/// wait for either. The row still says when the job ended.
@Suite(.serialized) struct HistoryWriteTests {
    /// The test's hold on the store's write lock; global because a C hook captures nothing.
    nonisolated(unsafe) static var holder: SQLiteConnection?
    nonisolated(unsafe) static var path: String?
    static let lock = Mutex(())

    static func job(_ name: String, _ create: curfew_create_fn) -> PluginJob {
        let chunk: curfew_chunk_fn = { _, _ in CURFEW_CHUNK_DONE }
        let expire: curfew_expire_fn = { _, _, _ in }
        return PluginJob(
            name: name, summary: "Done at once.", pluginPath: "/\(name).so", isContinuous: false,
            hooks: JobHooks(create: create, chunk: chunk, expire: expire, destroy: nil), index: 0)
    }

    /// Before: the first job's row waited for the lock the test holds (the
    /// store's 10 s busy timeout) before the second job could start, and
    /// the second job's start is what lets go of the lock.
    @Test func theNextJobStartsWhileAJobsHistoryRowWaitsForTheStore() async throws {
        let store = try StateStore(folder: Fixtures.temporaryFolder("state"))
        let path = store.path
        defer { Self.lock.withLock { _ in Self.holder = nil } }
        // The first job takes the store's write lock as another process would.
        let first = Self.job("first") { _, _ in
            HistoryWriteTests.lock.withLock { _ in
                guard HistoryWriteTests.holder == nil, let path = HistoryWriteTests.path,
                    let connection = try? SQLiteConnection(path: path), (try? connection.execute("BEGIN IMMEDIATE")) != nil
                else { return }
                HistoryWriteTests.holder = connection
            }
            return CURFEW_OK
        }
        // The second lets go of it.
        let second = Self.job("second") { _, _ in
            HistoryWriteTests.lock.withLock { _ in
                _ = try? HistoryWriteTests.holder?.execute("COMMIT")
                HistoryWriteTests.holder = nil
            }
            return CURFEW_OK
        }
        Self.lock.withLock { _ in Self.path = path }
        var configuration = RunConfiguration(policy: GrantPolicy(budget: .seconds(30)), maxConcurrentJobs: 1)
        configuration.state = store
        let runner = Runner(jobs: [first, second], configuration: configuration)
        let started = ContinuousClock.now
        let results = await runner.run()
        let elapsed = ContinuousClock.now - started
        #expect(results.map(\.outcome) == [.completed, .completed])
        #expect(Self.lock.withLock { _ in Self.holder } == nil, "the second job never ran")
        #expect(elapsed < .seconds(5), "the second job waited \(elapsed) for the first one's history row")
        let rows = Dictionary(uniqueKeysWithValues: try store.history().map { ($0.job, $0) })
        #expect(Set(rows.keys) == ["first", "second"])
        // Its row says when it ended, not when the row could be written (after the second had started).
        if let first = rows["first"], let second = rows["second"] {
            #expect(first.endedAt.milliseconds <= second.startedAt.milliseconds + 1, "first ended \(first.endedAt), second started \(second.startedAt)")
        }
        #expect(runner.stateProblems.isEmpty, "\(runner.stateProblems)")
    }
}
