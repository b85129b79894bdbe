import CSQLite
import Curfew

extension Bench {
    /// One checkpoint save, as a job calls `checkpoint_save` from its chunk
    /// (through the runner and the state store), against the bare SQLite
    /// it stands on: `INSERT OR REPLACE` and its commit, WAL with
    /// `synchronous=FULL`, in a database on the same disk.
    func checkpoint() async throws -> [Row] {
        let count = size(500, tiny: 5)
        let bytes = 64
        var row = Row(
            name: "checkpoint save, \(bytes) bytes", measure: "µs per save", unit: "µs",
            baselineName: "SQLite INSERT OR REPLACE + commit, WAL, synchronous=FULL", target: .atMost(1.3))
        let folder = workFolder + "/state"
        let store = try StateStore(folder: folder)
        let bare = try BareSQLite(path: workFolder + "/bare.db")
        let parameters = ["count": "\(count)", "bytes": "\(bytes)"]
        for repetition in 0...options.repetitions {
            var configuration = RunConfiguration(
                policy: try! GrantPolicy(budget: .seconds(3600)), maxConcurrentJobs: 1, parameters: parameters)
            configuration.state = store
            let runner = Runner(jobs: [benchJobs["bench-checkpoint"]!], configuration: configuration)
            let start = now()
            let results = await runner.run()
            let saves = Double(now() - start)
            precondition(results.first?.outcome == .completed, "bench-checkpoint: \(results.first?.reason ?? "no result")")
            let baseline = try bare.saves(count, bytes: bytes)
            if repetition == 0 && !options.tiny { continue }  // warm-up
            row.values.append(saves / Double(count) / 1000)
            row.baseline.append(baseline / Double(count) / 1000)
        }
        row.note = "the whole run of a job that saves once a chunk, divided by its saves; both databases in \(workFolder)"
        return [row, try await checkpointThroughAWorker()]
    }

    /// A 1 MiB save from a job in a worker (its bytes cross the channel to
    /// the host, which commits them) against the same save in process.
    func checkpointThroughAWorker() async throws -> Row {
        let count = size(40, tiny: 2)
        let bytes = Int(StateStore.maximumCheckpointBytes)
        var row = Row(
            name: "checkpoint save, 1 MiB, --isolate job", measure: "ms per save", unit: "ms",
            baselineName: "the same save in process", target: .atMost(2))
        let store = try StateStore(folder: workFolder + "/state-large")
        func run(_ isolation: Isolation) async -> Double {
            var configuration = RunConfiguration(
                policy: try! GrantPolicy(budget: .seconds(3600)), maxConcurrentJobs: 1, parameters: ["count": "\(count)", "bytes": "\(bytes)"])
            configuration.state = store
            configuration.isolation = isolation
            configuration.workerExecutable = buildFolder + "/curfew"
            let runner = Runner(jobs: [benchJobs["bench-checkpoint"]!], configuration: configuration)
            let start = now()
            let results = await runner.run()
            precondition(results.first?.outcome == .completed, "bench-checkpoint: \(results.first?.reason ?? "no result")")
            return Double(now() - start) / Double(count) / 1e6
        }
        for repetition in 0...options.repetitions {
            let worker = await run(.job)
            let inProcess = await run(.none)
            if repetition == 0 && !options.tiny { continue }  // warm-up
            row.values.append(worker)
            row.baseline.append(inProcess)
        }
        row.note = "\(count) saves a run, the worker's start included (one run each way, interleaved)"
        return row
    }
}

/// The bare SQLite baseline: one prepared statement, a commit each.
final class BareSQLite {
    private var handle: OpaquePointer?
    private var statement: OpaquePointer?

    init(path: String) throws {
        guard sqlite3_open(path, &handle) == SQLITE_OK else { throw CurfewError(.stateUnavailable, "cannot open \(path)") }
        sqlite3_exec(handle, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v BLOB)", nil, nil, nil)
        sqlite3_prepare_v2(handle, "INSERT OR REPLACE INTO t (k, v) VALUES ('job', ?)", -1, &statement, nil)
    }

    deinit {
        sqlite3_finalize(statement)
        sqlite3_close(handle)
    }

    /// Nanoseconds for `count` saves of `bytes` bytes, each its own transaction.
    func saves(_ count: Int, bytes: Int) throws -> Double {
        var block = [UInt8](repeating: 0, count: bytes)
        let start = now()
        for index in 0..<count {
            block[0] = UInt8(truncatingIfNeeded: index)
            let status = block.withUnsafeBytes { buffer -> Int32 in
                sqlite3_bind_blob(statement, 1, buffer.baseAddress, Int32(buffer.count), nil)
                defer { sqlite3_reset(statement) }
                return sqlite3_step(statement)
            }
            guard status == SQLITE_DONE else { throw CurfewError(.stateUnavailable, "the bare insert failed (\(status))") }
        }
        return Double(now() - start)
    }
}
