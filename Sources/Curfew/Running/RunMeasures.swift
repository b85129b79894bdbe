import CurfewFormats

/// What a run measured of its own hooks, for the serving host's metrics:
/// how long its chunks took and how late its `expire` hook was called.
public struct RunMeasures: Sendable, Equatable {
    /// Upper bounds of the chunk-time buckets in nanoseconds: 10 µs to 10 s
    /// by tens, then one bucket for the longer.
    public static let chunkBounds: [UInt64] = [10_000, 100_000, 1_000_000, 10_000_000, 100_000_000, 1_000_000_000, 10_000_000_000]
    /// How many buckets ``chunkCounts`` has: one per bound, and the last
    /// (the worker channel's limit; a test holds the two together).
    public static let chunkBuckets = WorkerMessage.chunkBuckets

    /// Chunks whose time fell in each bucket (at most its bound, over the
    /// one before); empty for a run that ran no chunk.
    public internal(set) var chunkCounts: [UInt64] = []
    /// What the chunks took in all, in nanoseconds (saturating).
    public internal(set) var chunkNanoseconds: UInt64 = 0
    /// How long after its grant's expiration point the `expire` hook was
    /// called, in a run that timed out and has one (zero when it was
    /// called early, before a chunk that would overrun); `nil` otherwise.
    public internal(set) var expireLateness: Duration?

    public init() {}

    /// Measures a worker reported, for a run that called `chunks` chunks
    /// in `elapsed`: plugin code can write on the worker's channel, so the
    /// chunk times are kept only when their counts add up to `chunks` and
    /// their sum fits in `elapsed`, and the lateness only when it fits in
    /// `elapsed` too.
    package init(chunkCounts: [UInt64], chunkNanoseconds: UInt64, expireLatenessNanoseconds: UInt64?, chunks: UInt64, elapsed: Duration) {
        let limit = UInt64(max(0, elapsed.nanoseconds))
        var total: UInt64 = 0
        var fits = chunkCounts.count == Self.chunkBuckets
        for count in chunkCounts where fits {
            let (sum, overflow) = total.addingReportingOverflow(count)
            fits = !overflow
            total = sum
        }
        if fits && total == chunks && chunkNanoseconds <= limit {
            self.chunkCounts = chunkCounts
            self.chunkNanoseconds = chunkNanoseconds
        }
        if let late = expireLatenessNanoseconds, late <= limit { expireLateness = .nanoseconds(Int64(late)) }
    }

    /// The bucket of a chunk that took `nanoseconds`: one comparison for a
    /// chunk of at most 10 µs, as the chunk loop calls it after each.
    @inline(__always)
    static func bucket(_ nanoseconds: UInt64) -> Int {
        if nanoseconds <= 10_000 { return 0 }
        if nanoseconds <= 100_000 { return 1 }
        if nanoseconds <= 1_000_000 { return 2 }
        if nanoseconds <= 10_000_000 { return 3 }
        if nanoseconds <= 100_000_000 { return 4 }
        if nanoseconds <= 1_000_000_000 { return 5 }
        return nanoseconds <= 10_000_000_000 ? 6 : 7
    }

    /// Adds a slice's chunk times.
    mutating func add(_ counts: borrowing InlineArray<8, UInt64>, nanoseconds: UInt64) {
        if chunkCounts.isEmpty { chunkCounts = Array(repeating: 0, count: Self.chunkBuckets) }
        for index in 0..<Self.chunkBuckets { chunkCounts[index] &+= counts[index] }
        let (sum, overflow) = chunkNanoseconds.addingReportingOverflow(nanoseconds)
        chunkNanoseconds = overflow ? .max : sum
    }
}
