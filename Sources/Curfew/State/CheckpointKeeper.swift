import CCurfew
import Synchronization

/// Where a run's checkpoints are kept: the state store in the host, the
/// host (over the channel) in a worker, memory in `curfew test`.
public protocol CheckpointKeeper: Sendable {
    /// Saves `bytes` as the job's checkpoint, durably when it returns; zero bytes clear it.
    func saveCheckpoint(_ key: JobKey, bytes: [UInt8]) throws(CurfewError)
    /// The job's last saved checkpoint, or `nil`.
    func checkpoint(_ key: JobKey) throws(CurfewError) -> [UInt8]?
}

extension StateStore: CheckpointKeeper {}

/// A job as the store knows it: its name in its plugin, named by the
/// plugin's absolute path (symlinks kept). Two plugins that share a job name
/// keep two checkpoints and two estimates, and a checkout elsewhere, with
/// its own copy of a plugin, never resumes from this one's.
public struct JobKey: Hashable, Sendable, CustomStringConvertible {
    public let job: String
    /// The plugin file's absolute path, or "" for a checkpoint kept from a
    /// store of before schema 3 whose plugin no history named.
    public let plugin: String

    public init(job: String, plugin: String) {
        self.job = job
        self.plugin = plugin
    }

    public var description: String { plugin.isEmpty ? job : "\(job) (\(plugin))" }
}

extension PluginJob {
    /// This job's key in the state store.
    public var stateKey: JobKey { JobKey(job: name, plugin: StateStore.absolutePath(pluginPath)) }
}

/// A job whose checkpoint cannot be read does not run: it would start over
/// from zero as if it had none, and its first save would overwrite the one
/// the store could not give back.
enum CheckpointCheck {
    /// `job`'s checkpoint (`nil`: none, or no store), or why the job must not run.
    static func read(_ job: PluginJob, _ checkpoints: (any CheckpointKeeper)?) -> Result<[UInt8]?, Refusal> {
        do throws(CurfewError) {
            return .success(try checkpoints?.checkpoint(job.stateKey))
        } catch {
            // Clearing loses the checkpoint: advised only when it cannot be read back at all.
            let remedy = error.code == .stateBusy || error.code == .stateLocked
                ? "it runs again when the store answers" : "`curfew state clear \(job.name)` lets it start afresh"
            return .failure(Refusal(
                reason: "its checkpoint could not be read (\(error.description)), so it did not run rather than start over; \(remedy)"))
        }
    }

    struct Refusal: Error {
        let reason: String
    }
}

extension CurfewError {
    /// What `checkpoint_save` returns for a save that failed with this error.
    var checkpointStatus: curfew_status { code == .checkpointTooLarge ? CURFEW_TOO_LARGE : CURFEW_UNAVAILABLE }
}

/// Checkpoints kept in memory for one process's life: `curfew test`'s,
/// where a job's saves and loads behave as in a run but leave no trace.
public final class MemoryCheckpoints: CheckpointKeeper {
    private let saved: Mutex<[JobKey: [UInt8]]>

    public init(_ saved: [JobKey: [UInt8]] = [:]) {
        self.saved = Mutex(saved)
    }

    public func saveCheckpoint(_ key: JobKey, bytes: [UInt8]) throws(CurfewError) {
        try StateStore.checkSize(bytes.count)
        saved.withLock { $0[key] = bytes.isEmpty ? nil : bytes }
    }

    public func checkpoint(_ key: JobKey) throws(CurfewError) -> [UInt8]? {
        saved.withLock { $0[key] }
    }

    /// The checkpoint a job of this name saved, from whichever plugin.
    public func checkpoint(job: String) -> [UInt8]? {
        saved.withLock { $0.first { $0.key.job == job }?.value }
    }
}
