import CCurfew
import CSQLite
import CurfewFormats
import Synchronization

/// What the host remembers between runs: each job's checkpoint, the history
/// of every run and job, and each job's chunk-time estimate. One SQLite
/// database (`state.db`, WAL) in a folder of this user's, with one
/// connection, used under a lock; a writer reads a job's checkpoint as the
/// job is admitted on a second one, which waits for no write.
///
/// Durability: a checkpoint save, and a job end that clears one, commits
/// with `synchronous=FULL` (on disk when it returns, power loss included);
/// everything else commits with `NORMAL`, which in WAL mode survives the
/// host being killed and may lose the last commits only to a power loss.
///
/// One host writes a store: opened as a `writer`, the store holds its
/// folder's ``StoreLock`` for its life, and a second writer is refused.
/// Readers (`history`, `state list`) open it beside the writer, and SQLite
/// has each wait up to ``busyTimeout`` for the other.
public final class StateStore: @unchecked Sendable {
    // Safe because the connection is only used under `lock`, and the
    // reader's under its own.

    /// The schema this Curfew writes; a store of a higher version is refused.
    public static let schemaVersion = 6
    /// The largest checkpoint a job may save: the header's `CURFEW_MAX_CHECKPOINT`.
    public static let maximumCheckpointBytes = Int(CURFEW_MAX_CHECKPOINT)
    /// How many finished runs of each job the history keeps by default.
    public static let defaultRetention = 1000
    /// How long a write waits for another host's before it fails.
    public static let busyTimeout: Duration = .seconds(10)
    /// The file's SQLite application id: "Crfw".
    static let applicationID: Int32 = 0x4372_6677

    /// The folder holding the store.
    public let folder: String
    /// The database file.
    public let path: String
    /// How many finished runs of each job the history keeps.
    public let retention: Int
    /// How long this store's writes wait for another process's:
    /// ``busyTimeout`` but in tests that hold a store for longer.
    let busyWait: Duration

    /// The writer's hold on the folder, or `nil` for a reader.
    public let writerLock: StoreLock?
    /// The store's schema: ``schemaVersion``, or an older one a reader found
    /// (only a writer migrates: a host of the older Curfew may still be
    /// writing it, and takes no lock). Set once, in `init`.
    private(set) var schema = StateStore.schemaVersion
    private let connection: SQLiteConnection
    private let lock = Mutex(())
    /// A writer's second connection, for reading a job's checkpoint as it
    /// is admitted: a WAL reader waits for no writer, so the admission does
    /// not wait behind the connection's writes (a history row, or the WAL
    /// checkpoint SQLite runs in a commit). Opened on first use;
    /// `nil` inside when it cannot be, and the one connection serves.
    private let reader = ThreadLocked<(connection: SQLiteConnection?, tried: Bool)>((nil, false))

    /// Opens the store in `folder`, creating both (the folder with mode 700)
    /// when missing, and brings an older schema up to date. A `writer` takes
    /// the folder's lock first, naming itself in it.
    ///
    /// - Throws: A folder that is not this user's or that others can write;
    ///   a store another writer holds (`.stateLocked`, naming it); a file
    ///   that is not a Curfew store; one written by a newer Curfew (refused,
    ///   never altered); SQLite's own failures.
    public convenience init(
        folder: String, retention: Int = StateStore.defaultRetention, writer: StoreLock.Holder? = nil
    ) throws(CurfewError) {
        try self.init(folder: folder, retention: retention, writer: writer, waitingUpTo: Self.busyTimeout)
    }

    init(folder: String, retention: Int, writer: StoreLock.Holder?, waitingUpTo busyWait: Duration) throws(CurfewError) {
        self.busyWait = busyWait
        guard folder.hasPrefix("/") else {
            throw CurfewError(.stateUnavailable, "the state folder must be an absolute path, not '\(folder)'")
        }
        try PrivateFolder.prepare(folder, what: "the state folder", code: .stateUnavailable)
        writerLock = try writer.map { holder throws(CurfewError) in try StoreLock(folder: folder, holder: holder) }
        self.folder = folder
        self.path = folder.hasSuffix("/") ? folder + "state.db" : folder + "/state.db"
        madePrivate = try Self.makePrivate(folder: folder, store: path, fixing: writer != nil)
        self.retention = max(1, retention)
        connection = try SQLiteConnection(path: path)
        connection.waitWhenBusy(upTo: busyWait)
        try checkKind()
        try connection.execute("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL")
        schema = try Self.migrate(connection, path: path, upgrading: writer != nil)
        if writer != nil { interrupted = try Self.markInterrupted(connection) }
    }

    /// How many runs a host that held the store before left `running`
    /// (it was killed, or its machine went down): marked `interrupted`
    /// as this writer opened the store.
    public private(set) var interrupted = 0

    /// The reason an interrupted run's row gives.
    static let interruptedReason =
        "its end was never recorded (its host was killed, its machine went down, or the store refused the row); how the job ended is not known"

    /// Marks every run still `running` as `interrupted`: for a writer, which
    /// holds the store alone, none of them is still going.
    private static func markInterrupted(_ connection: SQLiteConnection) throws(CurfewError) -> Int {
        try connection.query(
            "UPDATE job_runs SET outcome = ?, reason = ? WHERE outcome = ?",
            [.text(Outcome.interrupted.rawValue), .text(interruptedReason), .text(Outcome.running.rawValue)])
        return connection.changes
    }

    /// What opening the store made private, a sentence each (a writer's
    /// warnings): checkpoints and history are the user's alone.
    public private(set) var madePrivate: [String] = []

    /// Creates the store mode 600 when missing (SQLite gives its WAL and
    /// shared memory files the store's own mode); when `fixing` (a writer),
    /// makes the state folder mode 700 when others could read or enter it,
    /// and the store's files 600 when others could read them. What it
    /// changed, a sentence each.
    private static func makePrivate(folder: String, store: String, fixing: Bool) throws(CurfewError) -> [String] {
        if let created = try? Syscalls.open(store, .readWrite, [.create, .noFollow, .nonBlocking], permissions: 0o600) {
            Syscalls.close(created)
        }
        guard fixing else { return [] }
        var changed: [String] = []
        if let info = try? Syscalls.linkStatus(folder), info.mode & 0o077 != 0 {
            do throws(SystemError) {
                try Syscalls.changeMode(folder, to: 0o700)
            } catch {
                throw CurfewError(.stateUnavailable, "others can read the state folder \(folder), and it cannot be made private: \(error.message)")
            }
            changed.append("the state folder \(folder) was mode \(String(info.mode & 0o777, radix: 8)); it is 700 now, so only you read checkpoints and history")
        }
        for file in [store, store + "-wal", store + "-shm"] {
            guard let fd = try? Syscalls.open(file, .read, [.noFollow, .nonBlocking]) else { continue }
            defer { Syscalls.close(fd) }
            guard let info = try? Syscalls.status(of: fd), info.isRegular, info.mode & 0o077 != 0 else { continue }
            do throws(SystemError) {
                try Syscalls.changeMode(of: fd, to: 0o600)
            } catch {
                throw CurfewError(.stateUnavailable, "others can read \(file), and it cannot be made private: \(error.message)")
            }
            changed.append("\(file) was mode \(String(info.mode & 0o777, radix: 8)); it is 600 now")
        }
        return changed
    }

    /// Where the store lives when `--state` does not say: systemd's
    /// `$STATE_DIRECTORY` (its first entry), else `$XDG_STATE_HOME/curfew`,
    /// else `~/.local/state/curfew`; `nil` when none of them is an absolute path.
    public static func defaultFolder(environment: [String: String]) -> String? {
        defaultFolder { environment[$0] }
    }

    /// ``defaultFolder(environment:)`` for this process's environment.
    public static func defaultFolder() -> String? {
        defaultFolder(Syscalls.environmentValue)
    }

    private static func defaultFolder(_ variable: (String) -> String?) -> String? {
        if let systemd = variable("STATE_DIRECTORY")?.split(separator: ":").first, systemd.hasPrefix("/") {
            return String(systemd)
        }
        if let xdg = variable("XDG_STATE_HOME"), xdg.hasPrefix("/") { return xdg + "/curfew" }
        if let home = variable("HOME"), home.hasPrefix("/") { return home + "/.local/state/curfew" }
        return nil
    }

    /// `path` made absolute from the working folder (symlinks kept): how the
    /// store names plugins, so runs from elsewhere name the same file.
    public static func absolutePath(_ path: String) -> String {
        guard !path.hasPrefix("/"), var folder = Syscalls.currentDirectory() else { return path }
        if !folder.hasSuffix("/") { folder += "/" }
        return folder + (path.hasPrefix("./") ? String(path.dropFirst(2)) : path)
    }

    // MARK: Checkpoints

    /// Saves `bytes` as the job's checkpoint, durably (the commit is on disk
    /// when this returns). Zero bytes clear it.
    public func saveCheckpoint(_ key: JobKey, bytes: [UInt8]) throws(CurfewError) {
        try Self.checkSize(bytes.count)
        try locked { connection throws(CurfewError) in
            try connection.query("PRAGMA synchronous = FULL")
            defer { _ = try? connection.query("PRAGMA synchronous = NORMAL") }
            if bytes.isEmpty {
                try connection.query("DELETE FROM checkpoints WHERE plugin_path = ? AND job = ?", [.text(key.plugin), .text(key.job)])
            } else {
                try connection.query(
                    "INSERT OR REPLACE INTO checkpoints (plugin_path, job, data, saved_at) VALUES (?, ?, ?, ?)",
                    [.text(key.plugin), .text(key.job), .blob(bytes), .integer(Self.wallMilliseconds())])
            }
            durableCommitCount += 1
        }
    }

    /// Refuses a checkpoint of `count` bytes, over the limit, wherever it is kept.
    static func checkSize(_ count: Int) throws(CurfewError) {
        guard count <= maximumCheckpointBytes else {
            throw CurfewError(
                .checkpointTooLarge, "a checkpoint of \(count) bytes is over the limit of \(maximumCheckpointBytes) bytes (1 MiB)")
        }
    }

    /// The job's last saved checkpoint, or `nil` when it has none.
    ///
    /// - Throws: For one over the limit (the file was written by something
    ///   else): it is refused unread, not handed to a job whole.
    public func checkpoint(_ key: JobKey) throws(CurfewError) -> [UInt8]? {
        try reading { connection throws(CurfewError) in
            guard let row = try connection.query(
                "SELECT length(data), CASE WHEN length(data) <= ?3 THEN data END FROM checkpoints WHERE \(pluginColumn) = ?1 AND job = ?2",
                [.text(key.plugin), .text(key.job), .integer(Int64(Self.maximumCheckpointBytes))]).first
            else { return nil }
            guard let bytes = row[1].blob else {
                throw CurfewError(
                    .checkpointTooLarge,
                    "the stored checkpoint of '\(key.job)' is \(row[0].integer ?? 0) bytes, over the limit of \(Self.maximumCheckpointBytes) bytes (1 MiB)")
            }
            return bytes
        }
    }

    /// Every job's checkpoint: name, plugin, size and when it was saved,
    /// by name, then plugin.
    public func checkpoints() throws(CurfewError) -> [CheckpointInfo] {
        try locked { connection throws(CurfewError) in
            try connection.query("SELECT job, \(pluginColumn), length(data), saved_at FROM checkpoints ORDER BY job, 2").map { row in
                CheckpointInfo(
                    job: row[0].text ?? "", plugin: row[1].text ?? "", bytes: Int(row[2].integer ?? 0),
                    savedAt: WallTime(milliseconds: row[3].integer ?? 0))
            }
        }
    }

    /// Clears the checkpoint of every job named `job`, whatever its plugin,
    /// or of every job when `job` is `nil`, as durably as one is saved (a
    /// power loss must not bring it back).
    ///
    /// - Returns: How many were cleared.
    @discardableResult
    public func clearCheckpoints(job: String?) throws(CurfewError) -> Int {
        try locked { connection throws(CurfewError) in
            try connection.query("PRAGMA synchronous = FULL")
            defer { _ = try? connection.query("PRAGMA synchronous = NORMAL") }
            if let job {
                try connection.query("DELETE FROM checkpoints WHERE job = ?", [.text(job)])
            } else {
                try connection.query("DELETE FROM checkpoints")
            }
            let cleared = connection.changes
            if cleared > 0 { durableCommitCount += 1 }
            return cleared
        }
    }

    // MARK: Schedules

    /// Keeps a one-off run asked of `curfew serve`; returns its id.
    public func addRunRequest(job: String, parameters: [String: String], earliest: WallTime) throws(CurfewError) -> Int64 {
        let text = JSONLine.object(parameters)
        return try locked { connection throws(CurfewError) in
            try connection.query(
                "INSERT INTO run_requests (job, parameters, earliest, made_at) VALUES (?, ?, ?, ?)",
                [.text(job), .text(text), .integer(earliest.milliseconds), .integer(Self.wallMilliseconds())])
            guard let id = try connection.query("SELECT last_insert_rowid()").first?.first?.integer, id > 0 else {
                throw CurfewError(.stateUnavailable, "the state store \(path) gave no id to the one-off run it kept")
            }
            return id
        }
    }

    /// The one-off runs not yet run, earliest first. The rows are outside
    /// data: one that does not read back as a request the control socket
    /// would take (a job name, at most 64 parameters of at most 1024 bytes
    /// each with no NUL, a time from 1970 to 2200) is left out.
    public func runRequests() throws(CurfewError) -> [RunRequest] {
        try locked { connection throws(CurfewError) in
            guard schema >= 6 else { return [] }
            var requests: [RunRequest] = []
            let rows = try connection.query(
                "SELECT id, job, parameters, earliest FROM run_requests ORDER BY earliest, id LIMIT \(RunRequest.maximumPending)")
            for row in rows {
                guard let id = row[0].integer, id > 0, let job = row[1].text, JobNaming.isValidName(job), let text = row[2].text,
                    let earliest = row[3].integer, (0...RunRequest.latest.milliseconds).contains(earliest),
                    text.utf8.count <= 1 << 20, case .object(let members)? = try? JSONReader.parse(Array(text.utf8)),
                    members.count <= RunRequest.maximumParameters
                else { continue }
                var parameters: [String: String] = [:]
                for (name, value) in members {
                    guard let value = value.stringValue, RunRequest.isParameter(name, value) else { break }
                    parameters[name] = value
                }
                guard parameters.count == members.count else { continue }
                requests.append(RunRequest(id: id, job: job, parameters: parameters, earliest: WallTime(milliseconds: earliest)))
            }
            return requests
        }
    }

    /// Forgets a one-off run: it ran.
    public func removeRunRequest(id: Int64) throws(CurfewError) {
        try locked { connection throws(CurfewError) in
            try connection.query("DELETE FROM run_requests WHERE id = ?", [.integer(id)])
        }
    }

    /// Keeps `job`'s schedule: its next run (`nil`: none until asked), its
    /// failures in a row and the runs skipped because it was still running.
    public func saveSchedule(_ schedule: ScheduleRecord) throws(CurfewError) {
        try locked { connection throws(CurfewError) in
            try connection.query(
                "INSERT OR REPLACE INTO schedules (job, next_run, failures, skipped, updated_at, paused) VALUES (?, ?, ?, ?, ?, ?)",
                [.text(schedule.job), schedule.nextRun.map { .integer($0.milliseconds) } ?? .null,
                 .integer(Int64(schedule.failures)), .integer(Int64(schedule.skipped)), .integer(Self.wallMilliseconds()),
                 .integer(schedule.isPaused ? 1 : 0)])
        }
    }

    /// How each job's last recorded run ended, and when, by name: what
    /// `status` shows of a job before it runs again after a restart.
    public func lastRuns() throws(CurfewError) -> [String: (outcome: Outcome, ended: WallTime)] {
        try locked { connection throws(CurfewError) in
            var last: [String: (outcome: Outcome, ended: WallTime)] = [:]
            // One row a job, found through the (job, id) index.
            for row in try connection.query(
                "SELECT job, outcome, ended_at FROM job_runs WHERE id IN (SELECT max(id) FROM job_runs WHERE outcome != ? GROUP BY job)",
                [.text(Outcome.running.rawValue)])
            {
                // Outside data: an outcome this Curfew does not know is no outcome.
                guard let job = row[0].text, let outcome = row[1].text.flatMap(Outcome.init(rawValue:)) else { continue }
                last[job] = (outcome, WallTime(milliseconds: row[2].integer ?? 0))
            }
            return last
        }
    }

    /// Every job's kept schedule, by name.
    public func schedules() throws(CurfewError) -> [String: ScheduleRecord] {
        try locked { connection throws(CurfewError) in
            var records: [String: ScheduleRecord] = [:]
            let paused = schema >= 4 ? "paused" : "0"
            for row in try connection.query("SELECT job, next_run, failures, skipped, \(paused) FROM schedules") {
                // Outside data: counts are clamped, not trusted.
                let record = ScheduleRecord(
                    job: row[0].text ?? "", nextRun: row[1].integer.map { WallTime(milliseconds: $0) },
                    failures: Int(clamping: max(0, min(row[2].integer ?? 0, 1_000_000))),
                    skipped: Int(clamping: max(0, row[3].integer ?? 0)), isPaused: (row[4].integer ?? 0) != 0)
                records[record.job] = record
            }
            return records
        }
    }

    // MARK: History

    /// Records the start of a run and returns its id.
    public func beginRun(isolation: Isolation, hostVersion: String = HostInfo.version) throws(CurfewError) -> Int64 {
        try locked { connection throws(CurfewError) in
            try connection.query(
                "INSERT INTO runs (started_at, host_version, isolation, pid) VALUES (?, ?, ?, ?) RETURNING id",
                [.integer(Self.wallMilliseconds()), .text(hostVersion), .text(isolation.rawValue), .integer(Int64(Syscalls.processID))]
            ).first?.first?.integer ?? 0
        }
    }

    /// Records that a job's run began: its row, outcome `running`, whose id
    /// ``record(_:estimate:)`` is given (``JobRecord/id``) to complete it;
    /// `nil` when another process holds the store past ``beginTimeout``
    /// (waited for no longer: this store's other calls wait behind it, a
    /// job's checkpoint among them; its end is recorded as before). A row
    /// left `running` by a host that died is marked `interrupted` by the next writer.
    public func beginJob(_ record: JobRecord) throws(CurfewError) -> Int64? {
        try locked { connection throws(CurfewError) -> Int64? in
            connection.waitWhenBusy(upTo: Self.beginTimeout)
            defer { connection.waitWhenBusy(upTo: busyWait) }
            do throws(CurfewError) {
                return try insertRunning(record, on: connection)
            } catch where error.code == .stateBusy {
                return nil
            }
        }
    }

    /// How long a job's start row waits for a store another process holds.
    static let beginTimeout: Duration = .milliseconds(250)

    private func insertRunning(_ record: JobRecord, on connection: SQLiteConnection) throws(CurfewError) -> Int64 {
        try connection.query(
            """
            INSERT INTO job_runs (run_id, job, plugin_path, plugin_hash, isolation, started_at, ended_at, outcome,
                reason, chunks, checkpoint_bytes, host_version, sandbox)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, '', 0, 0, ?8, ?9) RETURNING id
            """,
            [
                .integer(record.runID), .text(record.job), .text(record.pluginPath), .text(record.pluginHash),
                .text(record.isolation.rawValue), .integer(record.startedAt.milliseconds), .text(Outcome.running.rawValue),
                .text(record.hostVersion), .text(record.sandbox),
            ]
        ).first?.first?.integer ?? 0
    }

    /// Records the end of run `id`; a run that recorded no job leaves no
    /// row (nothing reads a run without its jobs').
    public func endRun(_ id: Int64) throws(CurfewError) {
        try locked { connection throws(CurfewError) in
            try connection.transaction { () throws(CurfewError) in
                try connection.query("UPDATE runs SET ended_at = ? WHERE id = ?", [.integer(Self.wallMilliseconds()), .integer(id)])
                try Self.forgetIfEmpty(run: id, on: connection)
            }
        }
    }

    /// Deletes run `id` if it has ended and no job's row names it; a run
    /// still going (this host's, or another's on the same folder) stays.
    private static func forgetIfEmpty(run id: Int64, on connection: SQLiteConnection) throws(CurfewError) {
        try connection.query(
            """
            DELETE FROM runs WHERE id = ?1 AND ended_at IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM job_runs WHERE run_id = ?1)
            """, [.integer(id)])
    }

    /// The steps SQLite has taken for this store's queries (for tests: what
    /// recording costs, counted).
    var virtualMachineSteps: Int { lock.withLock { _ in connection.virtualMachineSteps } }

    /// Records how a job's run ended, in one transaction with what follows
    /// from it: a completed job's checkpoint is cleared (its next run starts
    /// afresh), its chunk-time estimate is kept, and the job's history
    /// beyond ``retention`` runs is pruned.
    ///
    /// Clearing a checkpoint is as durable as saving one (a power loss must
    /// not bring back finished work): that commit is on disk when this
    /// returns. A job that leaves no checkpoint to clear commits its row as
    /// the rest of the history does, without a sync of its own.
    public func record(_ record: JobRecord, estimate: ChunkEstimate? = nil) throws(CurfewError) {
        try locked { connection throws(CurfewError) in
            // Whether a checkpoint is there is known only inside the
            // transaction (another host may save one): on finding one to clear,
            // the first try writes nothing and the second commits with a sync.
            for durable in [false, true] {
                if durable { try connection.query("PRAGMA synchronous = FULL") }
                defer { if durable { _ = try? connection.query("PRAGMA synchronous = NORMAL") } }
                if try write(record, estimate: estimate, durably: durable, on: connection) { return }
            }
        }
    }

    /// How many commits synced the log (`synchronous=FULL`): what tests read.
    var durableCommits: Int { lock.withLock { _ in durableCommitCount } }
    private var durableCommitCount = 0

    /// ``record(_:estimate:)``'s transaction; false, having written nothing,
    /// when it must clear a checkpoint and `durably` is false.
    private func write(
        _ record: JobRecord, estimate: ChunkEstimate?, durably durable: Bool, on connection: SQLiteConnection
    ) throws(CurfewError) -> Bool {
        let written = try connection.transaction { () throws(CurfewError) -> Bool in
            let key: [SQLiteConnection.Value] = [.text(record.pluginPath), .text(record.job)]
            let stored = try connection.query("SELECT length(data) FROM checkpoints WHERE plugin_path = ? AND job = ?", key).first
            if record.outcome == .completed && stored != nil && !durable { return false }
            let checkpointBytes = stored?.first?.integer ?? 0
            if record.outcome == .completed {
                try connection.query("DELETE FROM checkpoints WHERE plugin_path = ? AND job = ?", key)
            }
            // Over the row its start wrote, when it wrote one (``beginJob(_:)``):
            // its run, job and plugin stay, so the indexes on them are not
            // written again (a replace deletes and inserts every entry).
            let values: [SQLiteConnection.Value] = [
                .integer(record.runID), .text(record.job), .text(record.pluginPath), .text(record.pluginHash),
                .text(record.isolation.rawValue), .integer(record.startedAt.milliseconds),
                .integer(record.endedAt.milliseconds), .text(record.outcome.rawValue), .text(record.reason),
                .integer(Int64(clamping: record.chunks)), record.progress.map { .integer($0.completed) } ?? .null,
                record.progress.map { .integer($0.total) } ?? .null, .integer(checkpointBytes),
                .text(record.hostVersion), .text(record.sandbox),
            ]
            var updated = false
            if record.id > 0 {
                try connection.query(
                    """
                    UPDATE job_runs SET plugin_hash = ?4, isolation = ?5, started_at = ?6, ended_at = ?7, outcome = ?8, reason = ?9,
                        chunks = ?10, progress_completed = ?11, progress_total = ?12, checkpoint_bytes = ?13, host_version = ?14,
                        sandbox = ?15
                    WHERE id = ?16 AND run_id = ?1 AND job = ?2 AND plugin_path = ?3
                    """, values + [.integer(record.id)])
                updated = connection.changes > 0
            }
            if !updated {
                try connection.query(
                    """
                    INSERT INTO job_runs (run_id, job, plugin_path, plugin_hash, isolation, started_at, ended_at, outcome,
                        reason, chunks, progress_completed, progress_total, checkpoint_bytes, host_version, sandbox)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """, values)
            }
            if let estimate {
                try connection.query(
                    """
                    INSERT INTO estimates (job, plugin_path, mean_ns, deviation_ns, samples) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT (job, plugin_path) DO UPDATE
                        SET mean_ns = excluded.mean_ns, deviation_ns = excluded.deviation_ns, samples = excluded.samples
                    """,
                    [
                        .text(record.job), .text(record.pluginPath), .integer(estimate.mean), .integer(estimate.deviation),
                        .integer(Int64(clamping: estimate.samples)),
                    ])
            }
            // The oldest runs of this job beyond the retention, and each run
            // they leave without a row: only those. A sweep of every run
            // without rows cost each job's end a look at every run the store
            // remembers, once its history was full (on 1,075 runs, a run of
            // 200 jobs took 1.45 times as long: BENCHMARKS.md).
            let pruned = try connection.query(
                """
                DELETE FROM job_runs WHERE job = ?1 AND id <= (
                    SELECT id FROM job_runs WHERE job = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)
                RETURNING run_id
                """, [.text(record.job), .integer(Int64(retention))])
            for runID in Set(pruned.compactMap { $0.first?.integer }) {
                try Self.forgetIfEmpty(run: runID, on: connection)
            }
            return true
        }
        if written && durable { durableCommitCount += 1 }
        return written
    }

    /// Finished job runs, newest first: of `job` only when given, ended at
    /// or after `since` when given, at most `limit`.
    public func history(job: String? = nil, since: WallTime? = nil, limit: Int = 50) throws(CurfewError) -> [JobRecord] {
        try locked { connection throws(CurfewError) in
            try connection.query(
                """
                SELECT id, run_id, job, plugin_path, plugin_hash, isolation, started_at, ended_at, outcome, reason, chunks,
                    progress_completed, progress_total, checkpoint_bytes, host_version, \(sandboxColumn)
                FROM job_runs WHERE (?1 IS NULL OR job = ?1) AND (?2 IS NULL OR ended_at >= ?2)
                ORDER BY id DESC LIMIT ?3
                """,
                [job.map { .text($0) } ?? .null, since.map { .integer($0.milliseconds) } ?? .null, .integer(Int64(max(0, limit)))]
            ).map(JobRecord.init(row:))
        }
    }

    // MARK: Estimates

    /// Every estimate the store keeps, by job name and plugin path: read in
    /// one query when a run starts.
    public func estimates() throws(CurfewError) -> [JobKey: ChunkEstimate] {
        try locked { connection throws(CurfewError) in
            var all: [JobKey: ChunkEstimate] = [:]
            for row in try connection.query("SELECT job, plugin_path, mean_ns, deviation_ns, samples FROM estimates") {
                guard let job = row[0].text, let plugin = row[1].text, let mean = row[2].integer, let deviation = row[3].integer,
                    let samples = row[4].integer,
                    let estimate = ChunkEstimate(mean: mean, deviation: deviation, samples: UInt64(clamping: samples))
                else { continue }
                all[JobKey(job: job, plugin: plugin)] = estimate
            }
            return all
        }
    }

    /// What the store knows of how long the chunks of `job`, of the plugin at
    /// `plugin`, take (a job of the same name in another plugin is another job).
    public func estimate(job: String, plugin: String) throws(CurfewError) -> ChunkEstimate? {
        try estimates()[JobKey(job: job, plugin: plugin)]
    }

    // MARK: Files

    /// Moves what the write-ahead log holds into `state.db` and empties the
    /// log: done as a host exits, so that `state.db` alone holds the store
    /// (a copy of it alone is whole).
    public func checkpointLog() throws(CurfewError) {
        try locked { connection throws(CurfewError) in
            let row = try connection.query("PRAGMA wal_checkpoint(TRUNCATE)").first
            // (busy, log frames, frames checkpointed): busy means a reader kept part of the log.
            if row?.first?.integer == 1 {
                throw CurfewError(.stateBusy, "the state store \(path) could not fold its log into state.db: a reader held it")
            }
        }
    }

    /// The copy itself: its connection is closed once this returns.
    private func copy(to destination: String) throws(CurfewError) {
        let target = try SQLiteConnection(path: destination)
        try locked { connection throws(CurfewError) in try connection.copy(into: target) }
        try target.execute("PRAGMA journal_mode = DELETE")
    }

    /// Copies the store, whole and consistent while hosts write it, into a
    /// new file at `destination` (mode 600, never over an existing file),
    /// with SQLite's online backup.
    public func backup(to destination: String) throws(CurfewError) {
        do throws(SystemError) {
            Syscalls.close(try Syscalls.open(destination, .write, [.create, .exclusive, .noFollow], permissions: 0o600))
        } catch {
            throw CurfewError(.stateUnavailable, "cannot create \(destination): \(error.message)")
        }
        do throws(CurfewError) {
            try copy(to: destination)
        } catch {
            for file in [destination, destination + "-journal", destination + "-wal", destination + "-shm"] { try? Syscalls.unlink(file) }
            throw error
        }
    }

    // MARK: Opening

    @discardableResult
    private func locked<T>(_ body: (SQLiteConnection) throws(CurfewError) -> T) throws(CurfewError) -> T {
        try lock.withLock { _ throws(CurfewError) -> T in try body(connection) }
    }

    /// Runs a read on a writer's second connection (``reader``), which sees
    /// every commit made before it starts; a reader store has one connection.
    private func reading<T>(_ body: (SQLiteConnection) throws(CurfewError) -> T) throws(CurfewError) -> T {
        guard writerLock != nil else { return try locked(body) }
        let read = reader.withLock { reader -> Result<T, CurfewError>? in
            if !reader.tried {
                reader.tried = true
                // Not made anew: a store removed meanwhile is read as missing.
                let opened = try? SQLiteConnection(path: path, creating: false)
                opened?.waitWhenBusy(upTo: busyWait)
                if (try? opened?.execute("PRAGMA query_only = 1")) != nil {
                    reader.connection = opened
                }
            }
            guard let connection = reader.connection else { return nil }
            do throws(CurfewError) {
                return .success(try body(connection))
            } catch {
                return .failure(error)
            }
        }
        guard let read else { return try locked(body) }
        return try read.get()
    }

    /// Holds the writer's lock while `body` runs (for tests: what waits for it).
    func holdingWriterLock<T>(_ body: () -> T) -> T {
        lock.withLock { _ in body() }
    }

    /// Refuses a file that is some other program's database.
    private func checkKind() throws(CurfewError) {
        let id = try connection.query("PRAGMA application_id").first?.first?.integer ?? 0
        if id == Int64(Self.applicationID) { return }
        let tables = try connection.query("SELECT count(*) FROM sqlite_schema").first?.first?.integer ?? 0
        guard id == 0 && tables == 0 else {
            throw CurfewError(.stateUnavailable, "\(path) is not a Curfew state store; it was left as it is. Choose another folder with --state")
        }
    }

    /// The schema, one list of statements per version: `migrations[n]` takes
    /// a store from version n to n + 1. Released entries are never edited.
    static let migrations: [[String]] = [
        [
            "PRAGMA application_id = \(applicationID)",
            "CREATE TABLE checkpoints (job TEXT PRIMARY KEY, data BLOB NOT NULL, saved_at INTEGER NOT NULL)",
            """
            CREATE TABLE runs (id INTEGER PRIMARY KEY, started_at INTEGER NOT NULL, ended_at INTEGER,
                host_version TEXT NOT NULL, isolation TEXT NOT NULL, pid INTEGER NOT NULL)
            """,
            """
            CREATE TABLE job_runs (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL, job TEXT NOT NULL,
                plugin_path TEXT NOT NULL, plugin_hash TEXT NOT NULL, isolation TEXT NOT NULL,
                started_at INTEGER NOT NULL, ended_at INTEGER NOT NULL, outcome TEXT NOT NULL, reason TEXT NOT NULL,
                chunks INTEGER NOT NULL, progress_completed INTEGER, progress_total INTEGER,
                checkpoint_bytes INTEGER NOT NULL, host_version TEXT NOT NULL)
            """,
            "CREATE INDEX job_runs_by_job ON job_runs (job, id)",
            "CREATE INDEX job_runs_by_run ON job_runs (run_id)",
            """
            CREATE TABLE estimates (job TEXT NOT NULL, plugin_path TEXT NOT NULL, mean_ns INTEGER NOT NULL,
                deviation_ns INTEGER NOT NULL, samples INTEGER NOT NULL, PRIMARY KEY (job, plugin_path))
            """,
        ],
        [
            // `curfew serve`'s schedules: each job's next run, so a restart keeps it.
            """
            CREATE TABLE schedules (job TEXT PRIMARY KEY, next_run INTEGER, failures INTEGER NOT NULL,
                skipped INTEGER NOT NULL, updated_at INTEGER NOT NULL)
            """,
        ],
        [
            // Checkpoints keyed by plugin and job (JobKey). A kept one goes to
            // the plugin that last ran its job, else to "" (no plugin loads it;
            // `state list` shows it, to be cleared).
            """
            CREATE TABLE checkpoints_by_plugin (plugin_path TEXT NOT NULL, job TEXT NOT NULL, data BLOB NOT NULL,
                saved_at INTEGER NOT NULL, PRIMARY KEY (plugin_path, job))
            """,
            """
            INSERT INTO checkpoints_by_plugin (plugin_path, job, data, saved_at)
                SELECT coalesce((SELECT plugin_path FROM job_runs WHERE job_runs.job = checkpoints.job ORDER BY id DESC LIMIT 1), ''),
                    job, data, saved_at FROM checkpoints
            """,
            "DROP TABLE checkpoints",
            "ALTER TABLE checkpoints_by_plugin RENAME TO checkpoints",
        ],
        [
            // `curfew ctl pause` survives a restart.
            "ALTER TABLE schedules ADD COLUMN paused INTEGER NOT NULL DEFAULT 0",
            // The runs a writer marks interrupted as it opens the store, found without a scan.
            "CREATE INDEX IF NOT EXISTS job_runs_running ON job_runs (id) WHERE outcome = 'running'",
        ],
        [
            // The sandbox each run had (``SandboxPolicy/summary(_:isolation:)``); '' before it was kept.
            "ALTER TABLE job_runs ADD COLUMN sandbox TEXT NOT NULL DEFAULT ''",
        ],
        [
            // One-off runs asked of `curfew serve` (`ctl run --at`), kept until they ran.
            """
            CREATE TABLE run_requests (id INTEGER PRIMARY KEY, job TEXT NOT NULL, parameters TEXT NOT NULL,
                earliest INTEGER NOT NULL, made_at INTEGER NOT NULL)
            """,
        ],
    ]

    /// Brings the schema up to ``schemaVersion`` in one transaction, or
    /// refuses a store from a newer Curfew before changing anything.
    private static func migrate(_ connection: SQLiteConnection, path: String, upgrading: Bool) throws(CurfewError) -> Int {
        if !upgrading {
            // A reader of a store made already reads it as it is, taking no
            // write lock (a host's writes would wait for it, and `history`
            // may be asked every second).
            let version = Int(try connection.query("PRAGMA user_version").first?.first?.integer ?? 0)
            if version > 0 && version <= Self.schemaVersion { return version }
        }
        return try connection.transaction { () throws(CurfewError) -> Int in
            let version = Int(try connection.query("PRAGMA user_version").first?.first?.integer ?? 0)
            // The file is outside data: a negative version is no version of ours.
            guard version >= 0 else {
                throw CurfewError(.stateUnavailable, "\(path) has schema version \(version), which no Curfew writes; it was left as it is")
            }
            guard version <= Self.schemaVersion else {
                throw CurfewError(
                    .stateTooNew,
                    "the state store \(path) was written by a newer Curfew (schema version \(version); this one knows up to \(Self.schemaVersion)); it was left as it is. Run that Curfew, or choose another folder with --state")
            }
            // A reader makes a new store (nothing writes an empty one) but
            // reads an older one as it is.
            guard upgrading || version == 0 else { return version }
            for step in version..<Self.schemaVersion {
                for statement in Self.migrations[step] { try connection.execute(statement) }
            }
            if version < Self.schemaVersion { try connection.execute("PRAGMA user_version = \(Self.schemaVersion)") }
            return Self.schemaVersion
        }
    }

    /// The checkpoints table's plugin column as a query reads it: before
    /// schema 3 there is none, and every checkpoint is of no known plugin.
    private var pluginColumn: String { schema >= 3 ? "plugin_path" : "''" }

    /// The history's sandbox column as a query reads it: before schema 5
    /// there is none, and every run's sandbox is unknown ('').
    private var sandboxColumn: String { schema >= 5 ? "sandbox" : "''" }

    static func wallMilliseconds() -> Int64 { WallTime.now().milliseconds }
}

/// One job's schedule as the store keeps it for `curfew serve`.
/// A one-off run asked of `curfew serve` (`curfew ctl run JOB --param …
/// --at …`): the job runs once, no sooner than `earliest`, with these
/// parameters over its own.
public struct RunRequest: Sendable, Equatable {
    /// The store's id; 0 when no store keeps it.
    public var id: Int64
    public var job: String
    public var parameters: [String: String]
    public var earliest: WallTime

    /// The most one-off runs kept waiting at once.
    public static let maximumPending = 10_000
    /// The most parameters one takes, and the longest name or value in bytes
    /// (a request to the control socket is at most 4 KiB whole).
    public static let maximumParameters = 64
    public static let maximumParameterBytes = 1024
    /// The latest time one may be asked for: the year 2200, as calendars reach.
    public static let latest = WallTime(milliseconds: 7_258_118_400_000)

    /// Whether `name` = `value` is a parameter a one-off run may carry.
    public static func isParameter(_ name: String, _ value: String) -> Bool {
        !name.isEmpty && name.utf8.count <= maximumParameterBytes && value.utf8.count <= maximumParameterBytes
            && !name.utf8.contains(0) && !value.utf8.contains(0)
    }

    public init(id: Int64, job: String, parameters: [String: String], earliest: WallTime) {
        self.id = id
        self.job = job
        self.parameters = parameters
        self.earliest = earliest
    }
}

public struct ScheduleRecord: Sendable, Equatable {
    public var job: String
    public var nextRun: WallTime?
    public var failures: Int
    public var skipped: Int
    /// Paused by the operator (`curfew ctl pause`).
    public var isPaused: Bool

    public init(job: String, nextRun: WallTime?, failures: Int, skipped: Int, isPaused: Bool = false) {
        self.job = job
        self.nextRun = nextRun
        self.failures = failures
        self.skipped = skipped
        self.isPaused = isPaused
    }
}

/// A job's saved checkpoint, as `curfew state list` shows it.
public struct CheckpointInfo: Sendable, Equatable {
    public let job: String
    /// Its plugin's absolute path ("": kept from before schema 3, no plugin known).
    public let plugin: String
    public let bytes: Int
    public let savedAt: WallTime
}

/// How one job's run ended, as the history keeps it.
public struct JobRecord: Sendable, Equatable {
    public var id: Int64 = 0
    public var runID: Int64
    public var job: String
    public var pluginPath: String
    /// The plugin file's content hash when it ran (see ``PluginFingerprint``).
    public var pluginHash: String
    public var isolation: Isolation
    public var startedAt: WallTime
    public var endedAt: WallTime
    public var outcome: Outcome
    public var reason: String
    public var chunks: UInt64
    public var progress: JobProgress?
    /// The size of the job's checkpoint when it ended (before a completed job's is cleared).
    public var checkpointBytes: Int = 0
    public var hostVersion: String = HostInfo.version
    /// The sandbox it had (``SandboxPolicy/summary(_:isolation:)``); empty when the
    /// store is older than that record.
    public var sandbox: String = ""

    public init(
        runID: Int64, job: String, pluginPath: String, pluginHash: String, isolation: Isolation, startedAt: WallTime,
        endedAt: WallTime, outcome: Outcome, reason: String, chunks: UInt64, progress: JobProgress?
    ) {
        self.runID = runID
        self.job = job
        self.pluginPath = pluginPath
        self.pluginHash = pluginHash
        self.isolation = isolation
        self.startedAt = startedAt
        self.endedAt = endedAt
        self.outcome = outcome
        self.reason = reason
        self.chunks = chunks
        self.progress = progress
    }

    /// A row of `job_runs`, in the order ``StateStore/history(job:since:limit:)`` selects.
    init(row: [SQLiteConnection.Value]) {
        let completed = row[11].integer
        let total = row[12].integer
        self.init(
            runID: row[1].integer ?? 0, job: row[2].text ?? "", pluginPath: row[3].text ?? "", pluginHash: row[4].text ?? "",
            isolation: row[5].text.flatMap(Isolation.init(rawValue:)) ?? .none,
            startedAt: WallTime(milliseconds: row[6].integer ?? 0), endedAt: WallTime(milliseconds: row[7].integer ?? 0),
            outcome: row[8].text.flatMap(Outcome.init(rawValue:)) ?? .failed, reason: row[9].text ?? "",
            chunks: UInt64(clamping: row[10].integer ?? 0),
            progress: completed.flatMap { completed in total.map { JobProgress(completed: completed, total: $0) } })
        id = row[0].integer ?? 0
        checkpointBytes = Int(row[13].integer ?? 0)
        hostVersion = row[14].text ?? ""
        sandbox = row[15].text ?? ""
    }
}

/// What Curfew is, for the records it keeps.
public enum HostInfo {
    /// This Curfew's version.
    public static let version = "0.1.0"
}
