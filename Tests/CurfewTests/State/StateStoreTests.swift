import Foundation
import CurfewFormats
import Synchronization
import Testing

@testable import Curfew
@testable import CurfewCLI

/// The state store on its own: where it lives, what it refuses, and what
/// it keeps (checkpoints, history, estimates).
@Suite struct StateStoreTests {
    @Test func theFolderComesFromTheFlagThenSystemdThenXDGThenHome() {
        #expect(StateStore.defaultFolder(environment: ["STATE_DIRECTORY": "/var/lib/curfew:/var/lib/other", "HOME": "/h"]) == "/var/lib/curfew")
        #expect(StateStore.defaultFolder(environment: ["XDG_STATE_HOME": "/x", "HOME": "/h"]) == "/x/curfew")
        #expect(StateStore.defaultFolder(environment: ["HOME": "/h"]) == "/h/.local/state/curfew")
        // Relative values are no location (the XDG rule): the next one is used.
        #expect(StateStore.defaultFolder(environment: ["STATE_DIRECTORY": "rel", "XDG_STATE_HOME": "rel", "HOME": "/h"]) == "/h/.local/state/curfew")
        #expect(StateStore.defaultFolder(environment: ["HOME": "relhome"]) == nil)
    }

    @Test func aNewStoreIsMadeInAFolderOfMode700() throws {
        let folder = Fixtures.temporaryFolder("state") + "/a/b"
        let store = try StateStore(folder: folder)
        var info = stat()
        #expect(stat(folder, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o700)
        #expect(FileManager.default.fileExists(atPath: store.path))
    }

    /// Before: in a folder that existed with mode 755, the store was 644,
    /// and another user read its checkpoints and history.
    @Test func aWriterMakesTheStoreItsUsersAloneWhateverTheFolderWas() throws {
        let folder = Fixtures.temporaryFolder("state")
        chmod(folder, 0o755)
        let reader = try StateStore(folder: folder)
        var info = stat()
        #expect(stat(reader.path, &info) == 0 && info.st_mode & 0o777 == 0o600, "made 600, whatever the umask")
        chmod(reader.path, 0o644)
        try reader.saveCheckpoint(job: "j", bytes: [1])
        let writer = try StateStore(folder: folder, writer: .current())
        for file in [writer.path, writer.path + "-wal", writer.path + "-shm"] where FileManager.default.fileExists(atPath: file) {
            #expect(stat(file, &info) == 0 && info.st_mode & 0o077 == 0, "\(file): \(String(info.st_mode & 0o777, radix: 8))")
        }
        #expect(stat(folder, &info) == 0 && info.st_mode & 0o777 == 0o700)
        #expect(writer.madePrivate.contains { $0.contains("was mode 755") }, "said: \(writer.madePrivate)")
        #expect(writer.madePrivate.contains { $0.contains("state.db was mode 644") }, "said: \(writer.madePrivate)")
    }

    @Test func aFolderOthersCanWriteIsRefused() throws {
        let folder = Fixtures.temporaryFolder("state")
        chmod(folder, 0o777)
        #expect {
            try StateStore(folder: folder)
        } throws: { error in
            (error as? CurfewError)?.description.contains("others can write the state folder") == true
        }
    }

    @Test func aStoreFromANewerCurfewIsRefusedAndLeftAsItIs() throws {
        let folder = Fixtures.temporaryFolder("state")
        let path = try StateStore(folder: folder).path
        try setUserVersion(path, 99)
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect {
            try StateStore(folder: folder)
        } throws: { error in
            let error = error as? CurfewError
            return error?.code == .stateTooNew
                && error?.description.contains("written by a newer Curfew (schema version 99; this one knows up to \(StateStore.schemaVersion))") == true
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
    }

    /// Before: a negative `user_version` (the file is outside data) indexed
    /// the migrations below zero and trapped.
    @Test func aNegativeSchemaVersionIsRefusedNotATrap() throws {
        let folder = Fixtures.temporaryFolder("state")
        let path = try StateStore(folder: folder).path
        try setUserVersion(path, -1)
        #expect {
            try StateStore(folder: folder)
        } throws: { error in
            (error as? CurfewError)?.description.contains("has schema version -1, which no Curfew writes") == true
        }
    }

    /// A store of schema 2 kept checkpoints by job name alone: each goes to
    /// the plugin that last ran its job, and one no history names is listed
    /// under no plugin, loaded by none.
    @Test func aSchema2StoresCheckpointsMoveToThePluginThatLastRanTheirJob() throws {
        let folder = Fixtures.temporaryFolder("state")
        do {
            let old = try SQLiteConnection(path: folder + "/state.db")
            for statement in StateStore.migrations[0] + StateStore.migrations[1] { try old.execute(statement) }
            try old.execute("PRAGMA user_version = 2")
            try old.execute("INSERT INTO runs (id, started_at, host_version, isolation, pid) VALUES (1, 0, 'v', 'none', 1)")
            for (job, plugin) in [("sums", "/old/sums.so"), ("sums", "/new/sums.so")] {
                try old.query(
                    """
                    INSERT INTO job_runs (run_id, job, plugin_path, plugin_hash, isolation, started_at, ended_at, outcome,
                        reason, chunks, checkpoint_bytes, host_version) VALUES (1, ?, ?, 'h', 'none', 0, 1, 'expired', '', 1, 3, 'v')
                    """, [.text(job), .text(plugin)])
            }
            try old.query("INSERT INTO checkpoints (job, data, saved_at) VALUES ('sums', x'010203', 5)")
            try old.query("INSERT INTO checkpoints (job, data, saved_at) VALUES ('lost', x'09', 6)")
        }
        // A reader reads it as it is: a host of the older Curfew may still write it.
        let reader = try StateStore(folder: folder)
        #expect(try reader.checkpoints().map { "\($0.job) \($0.plugin) \($0.bytes)" } == ["lost  1", "sums  3"])
        #expect(try reader.checkpoint(JobKey(job: "sums", plugin: "")) == [1, 2, 3])
        #expect(try SQLiteConnection(path: reader.path).query("PRAGMA user_version").first?.first == .integer(2))
        // Its writer migrates it.
        let store = try StateStore(folder: folder, writer: .current())
        #expect(try store.checkpoint(JobKey(job: "sums", plugin: "/new/sums.so")) == [1, 2, 3])
        #expect(try store.checkpoint(JobKey(job: "sums", plugin: "/old/sums.so")) == nil)
        #expect(try store.checkpoints().map { "\($0.job) \($0.plugin) \($0.bytes)" } == ["lost  1", "sums /new/sums.so 3"])
        #expect(try store.clearCheckpoints(job: "lost") == 1)
        let version = try SQLiteConnection(path: store.path).query("PRAGMA user_version").first?.first
        #expect(version == .integer(Int64(StateStore.schemaVersion)))
    }

    /// Before: with no run in the history (its start could not be written),
    /// a completed job kept its checkpoint, and its next run resumed finished work.
    @Test func aCompletedJobsCheckpointIsClearedEvenWithoutARunRecorded() throws {
        let store = try StateStore(folder: Fixtures.temporaryFolder("state"))
        try store.saveCheckpoint(job: "j", bytes: [1])
        let recorder = RunRecorder(store: store, isolation: .none, sandbox: nil)
        recorder.record(JobResult(
            job: "j", pluginPath: StateStore.testPlugin, loadPath: StateStore.testPlugin, isChunked: true, outcome: .completed, chunks: 1, elapsed: .zero, reason: "work done",
            progress: nil))
        #expect(try store.checkpoint(job: "j") == nil)
    }

    @Test func aDatabaseOfAnotherProgramIsRefused() throws {
        let folder = Fixtures.temporaryFolder("state")
        let connection = try SQLiteConnection(path: folder + "/state.db")
        try connection.execute("CREATE TABLE notes (text TEXT)")
        #expect {
            try StateStore(folder: folder)
        } throws: { error in
            (error as? CurfewError)?.description.contains("is not a Curfew state store") == true
        }
    }

    @Test func aCheckpointIsKeptUntilClearedAndTheLimitIsOneMiB() throws {
        let store = try StateStore(folder: Fixtures.temporaryFolder("state"))
        #expect(try store.checkpoint(job: "a") == nil)
        // One limit: the header's, which a worker's channel message enforces too.
        #expect(StateStore.maximumCheckpointBytes == 1 << 20)
        #expect(WorkerMessage.maximumCheckpointBytes == StateStore.maximumCheckpointBytes)
        try store.saveCheckpoint(job: "a", bytes: [1, 2, 3])
        try store.saveCheckpoint(job: "b", bytes: [UInt8](repeating: 7, count: StateStore.maximumCheckpointBytes))
        #expect(try store.checkpoint(job: "a") == [1, 2, 3])
        #expect {
            try store.saveCheckpoint(job: "a", bytes: [UInt8](repeating: 0, count: StateStore.maximumCheckpointBytes + 1))
        } throws: { error in
            (error as? CurfewError)?.code == .checkpointTooLarge
        }
        #expect(try store.checkpoint(job: "a") == [1, 2, 3], "a refused save keeps the last checkpoint")
        #expect(try store.checkpoints().map(\.job) == ["a", "b"])
        #expect(try store.checkpoints().map(\.bytes) == [3, StateStore.maximumCheckpointBytes])
        try store.saveCheckpoint(job: "a", bytes: [])
        #expect(try store.checkpoint(job: "a") == nil, "zero bytes clear it")
        #expect(try store.clearCheckpoints(job: nil) == 1)
        #expect(try store.checkpoints().isEmpty)
    }

    /// A job being admitted reads its checkpoint on a connection of its
    /// own: it waits for none of the writer's work (a history row, or the
    /// WAL checkpoint SQLite runs inside a commit, 4 ms), and sees every
    /// save committed before it. Before, the read took the writer's lock.
    @Test func aCheckpointIsReadWithoutWaitingForTheWriter() throws {
        let store = try StateStore(folder: Fixtures.temporaryFolder("state"), writer: .current())
        let key = JobKey(job: "a", plugin: StateStore.testPlugin)
        try store.saveCheckpoint(key, bytes: [1, 2, 3])
        let read = DispatchSemaphore(value: 0)
        let got = Mutex<[UInt8]?>(nil)
        let answered = store.holdingWriterLock { () -> Bool in
            // A thread of its own: Dispatch's pool may be busy with other tests.
            Thread.detachNewThread {
                got.withLock { $0 = try? store.checkpoint(key) }
                read.signal()
            }
            return read.wait(timeout: .now() + 10) == .success
        }
        if !answered { read.wait() }  // the lock is free now: let the read finish
        #expect(answered, "the read waited for the writer's lock")
        #expect(got.withLock { $0 } == [1, 2, 3])
        try store.saveCheckpoint(key, bytes: [4])
        #expect(try store.checkpoint(key) == [4], "a save committed before the read is seen")
    }

    @Test func historyKeepsEveryOutcomeNewestFirstAndACompletedJobsCheckpointIsCleared() throws {
        let store = try StateStore(folder: Fixtures.temporaryFolder("state"))
        let run = try store.beginRun(isolation: .job)
        try store.saveCheckpoint(job: "j", bytes: [9, 9])
        let outcomes = Outcome.allCases.filter { $0 != .completed } + [.completed]
        for outcome in outcomes {
            try store.record(record(run, "j", outcome, chunks: 3))
        }
        let history = try store.history(job: "j")
        #expect(history.map(\.outcome) == outcomes.reversed())
        #expect(history.allSatisfy { $0.isolation == .job && $0.chunks == 3 && $0.hostVersion == HostInfo.version })
        // Until `completed` the checkpoint was there; then it was cleared.
        let sizes = Dictionary(uniqueKeysWithValues: history.map { ($0.outcome, $0.checkpointBytes) })
        #expect(sizes[.failed] == 2)
        #expect(sizes[.completed] == 2, "the size it had when the job ended")
        #expect(try store.checkpoint(job: "j") == nil)
        #expect(try store.history(job: "other").isEmpty)
        #expect(try store.history(limit: 2).count == 2)
    }

    /// A job's end completes the row its start wrote, in place (its id
    /// stays, `running` goes); where another writer removed that row, the
    /// end is a row of its own. Either way the job has one row.
    @Test func aJobsEndCompletesTheRowItsStartWrote() throws {
        let store = try StateStore(folder: Fixtures.temporaryFolder("state"))
        let run = try store.beginRun(isolation: .job)
        var started = record(run, "j", .running, chunks: 0)
        started.id = try #require(try store.beginJob(started))
        #expect(try store.history(job: "j").map(\.outcome) == [.running])
        var ended = record(run, "j", .completed, chunks: 7)
        ended.id = started.id
        try store.record(ended)
        let history = try store.history(job: "j")
        #expect(history.map(\.id) == [started.id] && history.map(\.outcome) == [.completed] && history.map(\.chunks) == [7])

        let again = try #require(try store.beginJob(record(run, "k", .running, chunks: 0)))
        let connection = try SQLiteConnection(path: store.path)
        _ = try connection.query("DELETE FROM job_runs WHERE id = ?", [.integer(again)])
        var lost = record(run, "k", .failed, chunks: 2)
        lost.id = again
        try store.record(lost)
        #expect(try store.history(job: "k").map(\.outcome) == [.failed])
        #expect(try connection.query("SELECT count(*) FROM job_runs WHERE outcome = 'running'").first?.first?.integer == 0)
    }

    /// A sync (`synchronous=FULL`) costs a job's end more than its row: only
    /// a checkpoint's clearing, which a power loss must not undo, pays one.
    @Test func onlyAJobEndThatClearsACheckpointSyncsTheLog() throws {
        let store = try StateStore(folder: Fixtures.temporaryFolder("state"))
        let run = try store.beginRun(isolation: .job)
        try store.saveCheckpoint(job: "kept", bytes: [1])
        let saved = store.durableCommits
        #expect(saved == 1, "a save syncs")
        for outcome in Outcome.allCases {
            try store.record(record(run, "free", outcome, chunks: 1))
        }
        try store.record(record(run, "kept", .expired, chunks: 1))
        #expect(store.durableCommits == saved, "no checkpoint cleared: no sync")
        try store.record(record(run, "kept", .completed, chunks: 1))
        #expect(store.durableCommits == saved + 1, "the clearing syncs")
        #expect(try store.checkpoint(job: "kept") == nil)
        let kept = try store.history(job: "kept")
        #expect(kept.map(\.outcome) == [.completed, .expired])
        #expect(kept.map(\.checkpointBytes) == [1, 1])
        #expect(try store.history(job: "free").count == Outcome.allCases.count)
        // Cleared by hand (`curfew state clear`, or a job's end with no run recorded): synced too.
        try store.saveCheckpoint(job: "free", bytes: [2])
        try store.clearCheckpoints(job: "free")
        #expect(store.durableCommits == saved + 3)
    }

    @Test func historyKeepsTheLastNRunsOfEachJob() throws {
        let store = try StateStore(folder: Fixtures.temporaryFolder("state"), retention: 5)
        let run = try store.beginRun(isolation: .none)
        for index in 0..<12 {
            try store.record(record(run, "a", .completed, chunks: UInt64(index)))
            try store.record(record(run, "b", .expired, chunks: UInt64(index)))
        }
        #expect(try store.history(job: "a").map(\.chunks) == [11, 10, 9, 8, 7])
        #expect(try store.history(job: "b").map(\.chunks) == [11, 10, 9, 8, 7])
    }

    /// Before: pruning removed every run without job rows, a live run of
    /// another host on the same folder among them.
    @Test func pruningKeepsARunStillGoing() throws {
        let folder = Fixtures.temporaryFolder("state")
        let other = try StateStore(folder: folder).beginRun(isolation: .none)
        let store = try StateStore(folder: folder, retention: 1)
        let run = try store.beginRun(isolation: .none)
        for index in 0..<3 { try store.record(record(run, "a", .completed, chunks: UInt64(index))) }
        let rows = try SQLiteConnection(path: store.path).query("SELECT count(*) FROM runs WHERE id = ?", [.integer(other)])
        #expect(rows.first?.first == .integer(1))
    }

    /// Before: once a job's history was full, each of its ends looked at
    /// every run the store remembers (a sweep for runs left without rows):
    /// a run of 200 jobs on a store of 1,075 runs took 1.45 times as long.
    /// Counted in SQLite's steps, not timed: one end costs the same with 20
    /// runs remembered as with 1,000.
    @Test func recordingAJobsEndCostsTheSameHoweverManyRunsTheStoreRemembers() throws {
        func steps(remembering count: Int) throws -> (steps: Int, runs: Int64?, first: Int64?) {
            let store = try StateStore(folder: Fixtures.temporaryFolder("state"), retention: 1)
            for index in 0..<count {  // ended runs, each with the one row of a job of its own
                let run = try store.beginRun(isolation: .none)
                try store.record(record(run, "other-\(index)", .completed, chunks: 1))
                try store.endRun(run)
            }
            let first = try store.beginRun(isolation: .none)
            try store.record(record(first, "a", .completed, chunks: 1))
            try store.endRun(first)
            let run = try store.beginRun(isolation: .none)
            let before = store.virtualMachineSteps
            try store.record(record(run, "a", .completed, chunks: 2))  // prunes the first row of "a"
            let steps = store.virtualMachineSteps - before
            let connection = try SQLiteConnection(path: store.path)
            let runs = try connection.query("SELECT count(*) FROM runs").first?.first?.integer
            let firstLeft = try connection.query("SELECT count(*) FROM runs WHERE id = ?", [.integer(first)]).first?.first?.integer
            return (steps, runs, firstLeft)
        }
        let few = try steps(remembering: 20)
        let many = try steps(remembering: 1000)
        #expect(many.steps <= few.steps + few.steps / 2, "\(few.steps) steps with 20 runs, \(many.steps) with 1,000")
        // The run the prune left without rows is gone; the others, and the one going on, stay.
        #expect(few.first == 0 && many.first == 0)
        #expect(few.runs == 21 && many.runs == 1001)
    }

    /// A run that recorded no job leaves no row once it ends; one going on stays.
    @Test func aRunWithoutJobsLeavesNoRow() throws {
        let store = try StateStore(folder: Fixtures.temporaryFolder("state"))
        let empty = try store.beginRun(isolation: .none)
        let going = try store.beginRun(isolation: .none)
        try store.endRun(empty)
        let rows = try SQLiteConnection(path: store.path).query("SELECT id FROM runs")
        #expect(rows.compactMap { $0.first?.integer } == [going])
    }

    /// Before: a time before 1970 (a file may hold one) trapped the formatter.
    @Test func aTimeBefore1970IsFormattedNotATrap() {
        #expect(CurfewMain.formatTimestamp(WallTime(milliseconds: -1), iso: true) == "1969-12-31T23:59:59.999Z")
        #expect(CurfewMain.formatTimestamp(WallTime(milliseconds: 1_500), iso: true) == "1970-01-01T00:00:01.500Z")
        // The extremes a row may hold: formatted, whatever the year reads, never a trap.
        for extreme in [Int64.min, .max, .min + 1] {
            #expect(!CurfewMain.formatTimestamp(WallTime(milliseconds: extreme), iso: true).isEmpty)
            #expect(!CurfewMain.formatTimestamp(WallTime(milliseconds: extreme), iso: false).isEmpty)
        }
    }

    /// The store is a file: a checkpoint written into it past the limit (by
    /// hand, or by another program) is refused when read, not handed to a job
    /// or a worker's run message whole.
    @Test func aStoredCheckpointOverTheLimitIsRefusedWhenRead() throws {
        let store = try StateStore(folder: Fixtures.temporaryFolder("state"))
        let connection = try SQLiteConnection(path: store.path)
        try connection.query(
            "INSERT INTO checkpoints (plugin_path, job, data, saved_at) VALUES ('/p.so', 'big', zeroblob(?), 0)",
            [.integer(Int64(StateStore.maximumCheckpointBytes) + 1)])
        #expect {
            try store.checkpoint(job: "big")
        } throws: { error in
            (error as? CurfewError)?.code == .checkpointTooLarge
                && (error as? CurfewError)?.description == "the stored checkpoint of 'big' is 1048577 bytes, over the limit of 1048576 bytes (1 MiB)"
        }
        #expect(try store.checkpoints().map(\.bytes) == [StateStore.maximumCheckpointBytes + 1], "listed, to be cleared")
    }

    @Test func historySinceAWallTime() throws {
        let store = try StateStore(folder: Fixtures.temporaryFolder("state"))
        let run = try store.beginRun(isolation: .none)
        var old = record(run, "a", .completed, chunks: 1)
        old.endedAt = WallTime.now().earlier(by: .seconds(7200))
        try store.record(old)
        try store.record(record(run, "a", .completed, chunks: 2))
        #expect(try store.history(since: WallTime.now().earlier(by: .seconds(3600))).map(\.chunks) == [2])
    }

    @Test func anEstimateIsKeptAndOneOutOfRangeIsNoEstimate() throws {
        let store = try StateStore(folder: Fixtures.temporaryFolder("state"))
        let run = try store.beginRun(isolation: .none)
        var estimate = ChunkEstimate.empty
        estimate.add(700_000_000)
        try store.record(record(run, "a", .expired, chunks: 1), estimate: estimate)
        #expect(try store.estimate(job: "a", plugin: StateStore.testPlugin) == estimate)
        #expect(try store.estimate(job: "a", plugin: "/other/a.so") == nil, "another plugin's job of that name is another job")
        // A file is outside data: a negative mean is no estimate.
        let connection = try SQLiteConnection(path: store.path)
        try connection.execute("UPDATE estimates SET mean_ns = -5")
        #expect(try store.estimate(job: "a", plugin: StateStore.testPlugin) == nil)
    }

    @Test func twoStoresOnOneFolderBothWrite() async throws {
        let folder = Fixtures.temporaryFolder("state")
        let first = try StateStore(folder: folder)
        let second = try StateStore(folder: folder)
        await withTaskGroup(of: Void.self) { group in
            for (index, store) in [first, second].enumerated() {
                group.addTask {
                    for step in 0..<50 { try? store.saveCheckpoint(job: "job-\(index)", bytes: [UInt8(step)]) }
                }
            }
        }
        #expect(try first.checkpoint(job: "job-1") == [49])
        #expect(try second.checkpoint(job: "job-0") == [49])
    }

    @Test func anEstimateLearnsSteadyChunksAndWidensForVaryingOnes() {
        var steady = ChunkEstimate.empty
        for _ in 0..<10 { steady.add(700_000_000) }
        #expect(steady.predicted == 700_000_000)
        var varying = ChunkEstimate.empty
        for index in 0..<20 { varying.add(index % 2 == 0 ? 10_000_000 : 90_000_000) }
        #expect(varying.predicted > 90_000_000, "mean plus twice the deviation covers the long ones")
        #expect(ChunkEstimate(mean: 3_600_000_000_001, deviation: 0, samples: 1) == nil)
    }

    private func record(_ run: Int64, _ job: String, _ outcome: Outcome, chunks: UInt64) -> JobRecord {
        JobRecord(
            runID: run, job: job, pluginPath: StateStore.testPlugin, pluginHash: "fnv1a64:0", isolation: .job,
            startedAt: WallTime.now().earlier(by: .seconds(1)), endedAt: WallTime.now(), outcome: outcome, reason: "r",
            chunks: chunks, progress: nil)
    }

    @Test func aSchedulesNextRunFailuresAndSkipsAreKept() throws {
        let folder = Fixtures.temporaryFolder("state")
        let store = try StateStore(folder: folder)
        try store.saveSchedule(ScheduleRecord(job: "a", nextRun: WallTime(milliseconds: 42), failures: 2, skipped: 1))
        try store.saveSchedule(ScheduleRecord(job: "b", nextRun: nil, failures: 0, skipped: 0))
        try store.saveSchedule(ScheduleRecord(job: "a", nextRun: WallTime(milliseconds: 43), failures: 0, skipped: 1))
        let kept = try StateStore(folder: folder).schedules()
        #expect(kept == [
            "a": ScheduleRecord(job: "a", nextRun: WallTime(milliseconds: 43), failures: 0, skipped: 1),
            "b": ScheduleRecord(job: "b", nextRun: nil, failures: 0, skipped: 0),
        ])
    }

    /// A store of schema 1 (before schedules) gains the table and keeps its checkpoints.
    @Test func aVersionOneStoreIsBroughtUpToDate() throws {
        let folder = Fixtures.temporaryFolder("state")
        let store = try StateStore(folder: folder)
        try store.saveCheckpoint(job: "j", bytes: [7])
        let connection = try SQLiteConnection(path: store.path)
        try connection.execute("DROP TABLE schedules; ALTER TABLE job_runs DROP COLUMN sandbox; DROP TABLE run_requests; PRAGMA user_version = 1")
        // Its writer brings it up to date; a reader would read it as it is.
        let reopened = try StateStore(folder: folder, writer: .current())
        #expect(try reopened.checkpoint(job: "j") == [7])
        #expect(try reopened.schedules().isEmpty)
        try reopened.saveSchedule(ScheduleRecord(job: "j", nextRun: nil, failures: 0, skipped: 0))
        #expect(try reopened.runRequests().isEmpty)
        _ = try reopened.addRunRequest(job: "j", parameters: [:], earliest: WallTime(milliseconds: 5))
    }

    /// A store of schema 4 (before the sandbox was kept) is read as it is,
    /// its runs' sandbox unknown (""), and its writer adds the column.
    @Test func aSchema4StoresRunsHaveNoSandboxUntilOneIsRecorded() throws {
        let folder = Fixtures.temporaryFolder("state")
        var sandboxed = record(0, "j", .completed, chunks: 1)
        sandboxed.sandbox = "on; network on"
        let path = try { () throws -> String in
            // One writer at a time: this one lets go at the end of the closure.
            let store = try StateStore(folder: folder, writer: .current())
            sandboxed.runID = try store.beginRun(isolation: .job)
            try store.record(sandboxed)
            #expect(try store.history().map(\.sandbox) == ["on; network on"])
            return store.path
        }()
        let connection = try SQLiteConnection(path: path)
        try connection.execute("ALTER TABLE job_runs DROP COLUMN sandbox; DROP TABLE run_requests; PRAGMA user_version = 4")
        #expect(try StateStore(folder: folder).history().map(\.sandbox) == [""], "a reader reads it as it is")
        let writer = try StateStore(folder: folder, writer: .current())
        try writer.record(sandboxed)
        #expect(try writer.history().map(\.sandbox) == ["on; network on", ""])
    }

    private func setUserVersion(_ path: String, _ version: Int) throws {
        let connection = try SQLiteConnection(path: path)
        try connection.execute("PRAGMA user_version = \(version)")
    }
}
