import CCurfew
import Synchronization

/// Where a run's checkpoints are kept: the state store in the host, the
/// host (over the channel) in a worker, memory in `curfew test`.
public protocol CheckpointKeeper: Sendable {
    /// Saves `bytes` as `job`'s checkpoint, durably when it returns; zero bytes clear it.
    func saveCheckpoint(job: String, bytes: [UInt8]) throws(CurfewError)
    /// `job`'s last saved checkpoint, or `nil`.
    func checkpoint(job: String) throws(CurfewError) -> [UInt8]?
}

extension StateStore: CheckpointKeeper {}

extension CurfewError {
    /// What `checkpoint_save` returns for a save that failed with this error.
    var checkpointStatus: curfew_status { code == .checkpointTooLarge ? CURFEW_TOO_LARGE : CURFEW_UNAVAILABLE }
}

/// Checkpoints kept in memory for one process's life: `curfew test`'s,
/// where a job's saves and loads behave as in a run but leave no trace.
public final class MemoryCheckpoints: CheckpointKeeper {
    private let saved: Mutex<[String: [UInt8]]>

    public init(_ saved: [String: [UInt8]] = [:]) {
        self.saved = Mutex(saved)
    }

    public func saveCheckpoint(job: String, bytes: [UInt8]) throws(CurfewError) {
        try StateStore.checkSize(bytes.count)
        saved.withLock { $0[job] = bytes.isEmpty ? nil : bytes }
    }

    public func checkpoint(job: String) throws(CurfewError) -> [UInt8]? {
        saved.withLock { $0[job] }
    }
}
