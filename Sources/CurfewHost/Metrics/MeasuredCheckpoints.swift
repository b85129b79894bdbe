import Curfew

/// The state store as a serving host's runs save checkpoints to it, each
/// save timed for the metrics: how long it took to be durable (or
/// refused), and how large it was.
struct MeasuredCheckpoints: CheckpointKeeper {
    let store: StateStore
    /// Told of each save: the job, its bytes, the seconds it took, whether it was kept.
    let saved: @Sendable (String, Int, Double, Bool) -> Void

    func saveCheckpoint(_ key: JobKey, bytes: [UInt8]) throws(CurfewError) {
        let start = ContinuousClock.now
        do throws(CurfewError) {
            try store.saveCheckpoint(key, bytes: bytes)
        } catch {
            saved(key.job, bytes.count, (ContinuousClock.now - start).seconds, false)
            throw error
        }
        saved(key.job, bytes.count, (ContinuousClock.now - start).seconds, true)
    }

    func checkpoint(_ key: JobKey) throws(CurfewError) -> [UInt8]? {
        try store.checkpoint(key)
    }
}
