import CCurfew
import Dispatch
import Glibc
import Synchronization

/// Runs one job against virtual time, on one thread, and checks that it
/// keeps the contract: what `curfew test` does.
///
/// Each chunk advances virtual time by a fixed cost (or the grant is made to
/// expire just before a chosen chunk), so a 180 s grant is exercised in
/// milliseconds and a chunked job gives the same trace every time. A hook
/// that does not return within a wall-clock limit is reported and abandoned.
///
/// - Important: The grant's time is virtual: the harness never waits for a
///   budget in real time.
public struct JobHarness: Sendable {
    /// How virtual time moves.
    public enum Mode: Sendable, Equatable {
        /// Every chunk costs this much virtual time.
        case chunkCost(Duration)
        /// Chunks cost nothing and the grant expires just before chunk `n` (from 1).
        case expireAtChunk(Int)
    }

    public var job: PluginJob
    public var policy: GrantPolicy
    public var mode: Mode
    public var parameters: [String: String]
    /// The wall-clock time a hook may take before it is reported as not returning.
    public var hookTimeout: Duration
    /// Chunks after which a job that never finishes nor expires is stopped.
    public var maximumChunks: Int
    /// Where the job's checkpoints go (memory by default: a test leaves no trace).
    public var checkpoints: any CheckpointKeeper = MemoryCheckpoints()
    /// What the job's chunks were seen to take before: the first prediction.
    public var estimate: ChunkEstimate = .empty

    public init(
        job: PluginJob, policy: GrantPolicy = GrantPolicy(), mode: Mode = .chunkCost(.seconds(1)),
        parameters: [String: String] = [:], hookTimeout: Duration = .seconds(5), maximumChunks: Int = 1_000_000
    ) {
        self.job = job
        self.policy = policy
        self.mode = mode
        self.parameters = parameters
        self.hookTimeout = hookTimeout
        self.maximumChunks = maximumChunks
    }

    /// Runs the job and returns its trace, outcome and contract violations.
    public func run() -> HarnessReport {
        let context = HarnessContext(harness: self)
        let finished = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            context.drive()
            finished.signal()
        }
        // The watchdog: a hook that overstays is reported, and its thread abandoned.
        while finished.wait(timeout: .now() + .milliseconds(20)) == .timedOut {
            if let stuck = context.overstayingHook() {
                return context.report(abandoning: stuck)
            }
        }
        return context.report(abandoning: nil)
    }
}

/// One line of a harness trace.
public struct HarnessEvent: Sendable, Equatable, CustomStringConvertible {
    /// Virtual time since the grant began.
    public let time: Duration
    /// What happened, e.g. `chunk`, `log`, `expire`.
    public let kind: String
    /// The details, in words.
    public let detail: String
    /// For a `chunk`, its number, from 1.
    public var chunk: Int?
    /// A host call from a thread the job started, not from a hook: where it
    /// falls in the trace, and whether it comes at all before the job ends,
    /// depends on real time, so it may vary from run to run.
    public var fromJobThread = false

    public init(time: Duration, kind: String, detail: String, chunk: Int? = nil, fromJobThread: Bool = false) {
        self.time = time
        self.kind = kind
        self.detail = detail
        self.chunk = chunk
        self.fromJobThread = fromJobThread
    }

    public var description: String {
        let seconds = String(format3(time.seconds))
        let what = chunk.map { "\(kind) \($0)" } ?? kind
        let line = String(repeating: " ", count: max(0, 9 - seconds.count)) + seconds + "s  " + what + (detail.isEmpty ? "" : "  " + detail)
        return fromJobThread ? line + "  (job thread: may vary)" : line
    }
}

/// What a harness run found.
public struct HarnessReport: Sendable {
    public let job: String
    public let trace: [HarnessEvent]
    public let outcome: Outcome
    public let reason: String
    public let chunks: Int
    /// Contract violations, each a sentence; empty when the job kept the contract.
    public let violations: [String]
}

/// Seconds with three decimals.
func format3(_ seconds: Double) -> String {
    let thousandths = Int64((seconds * 1000).rounded())
    let sign = thousandths < 0 ? "-" : ""
    let magnitude = thousandths.magnitude
    let fraction = String(magnitude % 1000)
    return "\(sign)\(magnitude / 1000)." + String(repeating: "0", count: 3 - fraction.count) + fraction
}
