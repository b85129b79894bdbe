/// How long a job's chunks take, learnt as they run, so the runner can
/// decline to start a chunk that would run past the expiration point.
///
/// The runner adds one sample a time slice, the slice's longest chunk: a
/// chunk longer than a slice (the kind worth predicting) is a sample of its
/// own, and a loop of tiny chunks pays one comparison a chunk for it.
///
/// An exponentially weighted mean and mean deviation, the way TCP estimates
/// a round trip (RFC 6298, gains 1/8 and 1/4), in whole nanoseconds so the
/// chunk loop updates it with a few integer operations. The prediction is
/// the mean plus twice the deviation: for chunks of steady length that is
/// about their length, and it widens as they vary. It is kept in the state
/// store, so a job's next run starts with what its last one learnt.
public struct ChunkEstimate: Sendable, Equatable {
    /// The weighted mean chunk time, in nanoseconds.
    public private(set) var mean: Int64
    /// The weighted mean deviation from it, in nanoseconds.
    public private(set) var deviation: Int64
    /// How many chunks it has seen (saturating).
    public private(set) var samples: UInt64

    public static let empty = ChunkEstimate(mean: 0, deviation: 0, samples: 0)!

    /// An estimate as stored; `nil` for values no estimate can have
    /// (negative, or over an hour: the store is a file, and files lie).
    public init?(mean: Int64, deviation: Int64, samples: UInt64) {
        let hour: Int64 = 3_600_000_000_000
        guard (0...hour).contains(mean), (0...hour).contains(deviation) else { return nil }
        self.mean = mean
        self.deviation = deviation
        self.samples = samples
    }

    /// The time the next chunk is predicted to take, in nanoseconds; 0 before any sample.
    @inline(__always)
    public var predicted: Int64 { mean &+ deviation &* 2 }

    /// Counts for less: what a run that declined its first chunk on an
    /// earlier run's word leaves for the next, so a stale estimate cannot
    /// keep a job from ever running a chunk again.
    public mutating func decay() {
        mean -= mean >> 2
        deviation >>= 1
    }

    /// Learns one chunk's duration (nanoseconds, clamped to an hour).
    @inline(__always)
    public mutating func add(_ nanoseconds: Int64) {
        let sample = min(max(nanoseconds, 0), 3_600_000_000_000)
        if samples == 0 {
            mean = sample
            deviation = 0
        } else {
            let error = sample &- mean
            mean &+= error >> 3
            deviation &+= ((error < 0 ? -error : error) &- deviation) >> 2
        }
        samples = samples == .max ? .max : samples &+ 1
    }
}
