import CurfewFormats
import Dispatch
import Synchronization
import _CurfewShims

/// A worker's checkpoints: the host keeps them. A save goes to the host on
/// the channel and returns when the host answers (the host has committed it
/// by then); a load is answered here, from what the run message brought
/// and what this worker's jobs saved since.
final class WorkerCheckpoints: CheckpointKeeper {
    private struct State {
        var saved: [String: [UInt8]] = [:]
        var nextID: UInt64 = 1
        var waiting: [UInt64: Answer] = [:]
        var hostGone = false
    }

    /// One save's answer, filled in by the channel's reader.
    private final class Answer: Sendable {
        let signal = DispatchSemaphore(value: 0)
        let outcome = Mutex<(status: HostMessage.SaveStatus, message: String)?>(nil)
    }

    /// How long a save waits for the host: longer than the host waits for a busy store.
    static let answerTimeout: DispatchTimeInterval = .seconds(Int(StateStore.busyTimeout.seconds) + 5)

    private let state = Mutex(State())
    private let send: @Sendable (String) -> Void
    private let attaching: @Sendable (String, Int32) -> Bool

    /// The smallest checkpoint that crosses in a sealed memory file rather
    /// than as base64 in its line: below it, one line costs less than a
    /// file and a descriptor.
    static let attachedFrom = 16 << 10

    /// - Parameters:
    ///   - send: Sends a line to the host.
    ///   - attaching: Sends a line with a descriptor attached; false when it could not.
    init(send: @escaping @Sendable (String) -> Void, attaching: @escaping @Sendable (String, Int32) -> Bool = { _, _ in false }) {
        self.send = send
        self.attaching = attaching
    }

    /// The checkpoint a run message brought for `job`.
    func seed(job: String, bytes: [UInt8]?) {
        state.withLock { $0.saved[job] = bytes }
    }

    /// `job` has ended in this worker: what it saved or was given goes.
    func forget(job: String) {
        state.withLock { _ = $0.saved.removeValue(forKey: job) }
    }

    /// How many jobs' checkpoints this worker holds (for tests).
    var heldCount: Int { state.withLock { $0.saved.count } }

    // A worker serves one plugin, so a job's name is key enough here; the
    // host keys what it keeps by plugin too.
    func checkpoint(_ key: JobKey) throws(CurfewError) -> [UInt8]? {
        state.withLock { $0.saved[key.job] }
    }

    func saveCheckpoint(_ key: JobKey, bytes: [UInt8]) throws(CurfewError) {
        let job = key.job
        try StateStore.checkSize(bytes.count)
        let answer = Answer()
        let id = try state.withLock { state throws(CurfewError) -> UInt64 in
            guard !state.hostGone else { throw CurfewError(.stateUnavailable, "the host is gone") }
            defer { state.nextID += 1 }
            state.waiting[state.nextID] = answer
            return state.nextID
        }
        var message = JSONLine("type", "checkpoint")
        message.add("job", job)
        message.add("id", Int64(clamping: id))
        // A large one crosses in a sealed memory file, not as base64 in its
        // line: nothing to encode, scan or decode on either side. Base64
        // where no such file can be made or sent (a send that fails before
        // its first byte leaves the stream whole).
        let file = bytes.count >= Self.attachedFrom ? bytes.withUnsafeBytes { curfew_shim_sealed_memory_file($0.baseAddress, UInt($0.count)) } : -1
        var attached = message
        attached.add("size", Int64(bytes.count))
        let sent = file >= 0 && attaching(attached.text, file)
        if file >= 0 { Syscalls.close(file) }
        if !sent {
            message.add("data", Base64.encode(bytes))
            send(message.text)
        }
        // The host answers every save it gets; one it never gets (the job
        // left the worker meanwhile) must not hold the thread for ever.
        if answer.signal.wait(timeout: .now() + Self.answerTimeout) == .timedOut {
            state.withLock { _ = $0.waiting.removeValue(forKey: id) }
        }
        let (status, text) = answer.outcome.withLock { $0 } ?? (.unavailable, "the host did not answer")
        switch status {
        case .ok:
            state.withLock { $0.saved[job] = bytes.isEmpty ? nil : bytes }
        case .tooLarge:
            throw CurfewError(.checkpointTooLarge, text)
        case .unavailable:
            throw CurfewError(.stateUnavailable, text)
        }
    }

    /// The host's answer to save `id` (from the channel's reader).
    func answered(id: UInt64, status: HostMessage.SaveStatus, message: String) {
        guard let answer = state.withLock({ $0.waiting.removeValue(forKey: id) }) else { return }
        answer.outcome.withLock { $0 = (status, message) }
        answer.signal.signal()
    }

    /// The channel ended: every save waiting, and every later one, fails.
    func hostGone() {
        let waiting = state.withLock { state -> [UInt64: Answer] in
            state.hostGone = true
            defer { state.waiting.removeAll() }
            return state.waiting
        }
        for answer in waiting.values {
            answer.outcome.withLock { $0 = (.unavailable, "the host is gone") }
            answer.signal.signal()
        }
    }
}
