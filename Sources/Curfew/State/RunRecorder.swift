import Dispatch
import Synchronization

/// Writes one runner's run into the state store: the run when it begins
/// and ends, and each job's end (with what follows from it: see
/// ``StateStore/record(_:estimate:)``). A store that fails does not stop
/// the run: what it said is kept in ``problems`` for the caller to show.
final class RunRecorder: Sendable {
    private struct State {
        var runID: Int64?
        /// The `running` row of each job begun and not yet recorded, by name.
        var begun: [String: Int64] = [:]
        /// Each plugin file's content hash, read once a run.
        var hashes: [String: String] = [:]
        var problems: [String] = []
    }

    let store: StateStore
    private let isolation: Isolation
    /// The sandbox every job of the run has, as the history keeps it.
    private let sandbox: String
    private let state = Mutex(State())
    /// A job's start row is written here, in order before its end: a job
    /// never waits to start for a store another process holds.
    private let writes = DispatchQueue(label: "curfew.history", target: SerialQueue.host)

    init(store: StateStore, isolation: Isolation, sandbox: SandboxPolicy?) {
        self.store = store
        self.isolation = isolation
        self.sandbox = SandboxPolicy.summary(sandbox, isolation: isolation)
    }

    /// Records the run's start.
    func begin() {
        do throws(CurfewError) {
            let id = try store.beginRun(isolation: isolation)
            state.withLock { $0.runID = id }
        } catch {
            note("the run was not recorded: \(error.description)")
        }
    }

    /// Records that `job` began: a row that says `running` until its end
    /// is recorded, so a host killed meanwhile leaves the run in history.
    func begin(_ job: PluginJob) {
        guard let runID = state.withLock({ $0.runID }) else { return }
        let now = WallTime.now()
        writes.async { [self] in
            var record = JobRecord(
                runID: runID, job: job.name, pluginPath: StateStore.absolutePath(job.pluginPath), pluginHash: hash(of: job.loadPath),
                isolation: isolation, startedAt: now, endedAt: now, outcome: .running, reason: "", chunks: 0, progress: nil)
            record.sandbox = sandbox
            do throws(CurfewError) {
                if let id = try store.beginJob(record) { state.withLock { $0.begun[job.name] = id } }
            } catch {
                note("the start of job '\(job.name)' was not recorded: \(error.description)")
            }
        }
    }

    /// Records how one job ended, at `endedAt` (its start is that less its
    /// elapsed time): the row may be written a while after.
    func record(_ result: JobResult, endedAt end: WallTime = .now()) {
        writes.sync { write(result, endedAt: end) }
    }

    private func write(_ result: JobResult, endedAt end: WallTime) {
        guard let runID = state.withLock({ $0.runID }) else {
            // No history, but a completed job's checkpoint still goes: its next run starts afresh.
            if result.outcome == .completed {
                do throws(CurfewError) {
                    try store.saveCheckpoint(JobKey(job: result.job, plugin: StateStore.absolutePath(result.pluginPath)), bytes: [])
                } catch {
                    note("the checkpoint of completed job '\(result.job)' was not cleared: \(error.description)")
                }
            }
            return
        }
        var record = JobRecord(
            runID: runID, job: result.job, pluginPath: StateStore.absolutePath(result.pluginPath), pluginHash: hash(of: result.loadPath),
            isolation: isolation, startedAt: end.earlier(by: result.elapsed), endedAt: end, outcome: result.outcome,
            reason: result.reason, chunks: result.chunks, progress: result.progress)
        record.id = state.withLock { $0.begun.removeValue(forKey: result.job) } ?? 0
        record.sandbox = sandbox
        do throws(CurfewError) {
            try store.record(record, estimate: result.estimate)
        } catch {
            note("the end of job '\(result.job)' was not recorded: \(error.description)")
        }
    }

    /// Records the run's end.
    func end() {
        guard let runID = state.withLock({ $0.runID }) else { return }
        do throws(CurfewError) {
            try store.endRun(runID)
        } catch {
            note("the end of the run was not recorded: \(error.description)")
        }
    }

    /// What the store refused so far, oldest first.
    var problems: [String] { state.withLock { $0.problems } }

    private func note(_ problem: String) {
        state.withLock { $0.problems.append(problem) }
    }

    private func hash(of path: String) -> String {
        if let known = state.withLock({ $0.hashes[path] }) { return known }
        let hash = PluginFingerprint.contentHash(of: path) ?? "unreadable"
        state.withLock { $0.hashes[path] = hash }
        return hash
    }
}

/// A plugin file's content, in 16 hex digits: which build of a plugin a
/// history row ran.
enum PluginFingerprint {
    /// FNV-1a (64-bit) of the file's bytes, prefixed `fnv1a64:`; `nil` when
    /// it cannot be read or is not a regular file. At most the size the
    /// file had when opened is read: a plugin replaced by a link to
    /// `/dev/zero` once hashed forever. Not a defence against a forger (the
    /// file is the user's own): it tells builds apart.
    static func contentHash(of path: String) -> String? {
        guard let fd = try? Syscalls.open(path, .read, [.nonBlocking]) else { return nil }
        defer { Syscalls.close(fd) }
        guard let info = try? Syscalls.status(of: fd), info.isRegular else { return nil }
        var left = info.size
        var hash = FNV1a()
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while left > 0 {
            let wanted = Int(min(Int64(buffer.count), left))
            guard let count = buffer.withUnsafeMutableBytes({ bytes in try? Syscalls.read(fd, into: UnsafeMutableRawBufferPointer(rebasing: bytes[..<wanted])) })
            else { return nil }
            if count == 0 { break }
            buffer.withUnsafeBytes { hash.add(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
            left -= Int64(count)
        }
        return "fnv1a64:" + hash.hex
    }
}
