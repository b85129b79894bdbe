// A chunked job written in Swift with the CurfewJob SDK: it counts the
// primes below a limit, 20,000 candidates per chunk, and reports progress.
// When its grant expires first, it saves where it got to as a checkpoint,
// and its next run goes on from there.
//
// Parameter: --param limit=N (default 3,000,000).
import CurfewJob

struct PrimeCounter: Job {
    static let name = "swift-primes"
    static let summary = "Counts primes in chunks (written in Swift)."

    let limit: Int
    var next = 2
    var primes = 0

    init(context: JobContext) throws {
        limit = context.parameter("limit").flatMap { Int($0) } ?? 3_000_000
        guard limit >= 2 else { throw PrimeCounterError.limitTooSmall(limit) }
        // The checkpoint: limit, next and primes, 8 bytes each, little-endian.
        if let saved = context.loadCheckpoint().flatMap(Self.numbers), saved.count == 3, saved[0] == limit,
            (2...limit).contains(saved[1]), (0...saved[1]).contains(saved[2])
        {
            (next, primes) = (saved[1], saved[2])
            context.log("resumed at \(next) with \(primes) primes so far, from its checkpoint")
        }
    }

    mutating func chunk(_ context: JobContext) -> ChunkResult {
        let end = min(next + 20_000, limit)
        while next < end {
            if Self.isPrime(next) { primes += 1 }
            next += 1
        }
        context.reportProgress(completed: Int64(next), total: Int64(limit))
        guard next >= limit else { return .continue }
        context.log("\(primes) primes below \(limit)")
        return .done
    }

    mutating func expire(reason: ExpirationReason, context: JobContext) {
        let bytes = [limit, next, primes].flatMap { number in (0..<8).map { UInt8(truncatingIfNeeded: Int64(number) >> ($0 * 8)) } }
        let saved = (try? context.saveCheckpoint(bytes)) != nil
        context.log("stopped at \(next) with \(primes) primes so far\(saved ? "; checkpoint saved" : "")", level: .warning)
    }

    /// 8-byte little-endian numbers, or `nil` for bytes that are not whole ones.
    static func numbers(_ bytes: [UInt8]) -> [Int]? {
        guard bytes.count % 8 == 0 else { return nil }
        return stride(from: 0, to: bytes.count, by: 8).map { start in
            Int((0..<8).reduce(Int64(0)) { $0 | Int64(bytes[start + $1]) << ($1 * 8) })
        }
    }

    static func isPrime(_ n: Int) -> Bool {
        if n < 4 { return n >= 2 }
        if n % 2 == 0 { return false }
        var divisor = 3
        while divisor * divisor <= n {
            if n % divisor == 0 { return false }
            divisor += 2
        }
        return true
    }
}

enum PrimeCounterError: Error, CustomStringConvertible {
    case limitTooSmall(Int)

    var description: String {
        switch self {
        case .limitTooSmall(let limit): "limit must be at least 2, not \(limit)"
        }
    }
}

@_cdecl("curfew_plugin_entry")
public func curfewPluginEntry(_ host: CurfewHostTable?) -> CurfewPluginDescriptor? {
    CurfewPlugin.export(host: host, jobs: [PrimeCounter.self])
}
