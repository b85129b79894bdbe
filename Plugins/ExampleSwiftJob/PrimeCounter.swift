// A chunked job written in Swift with the CurfewJob SDK: it counts the
// primes below a limit, 20,000 candidates per chunk, and reports progress.
// When its grant expires first, it saves where it got to as a checkpoint,
// and its next run goes on from there.
//
// Parameters: --param limit=N (default 3,000,000); --param again=S asks
// `curfew serve` to run it again S seconds after it completes;
// --param on-power=1 asks it to run only on external power.
import CurfewJob

struct PrimeCounter: Job {
    static let name = "swift-primes"
    static let summary = "Counts primes in chunks (written in Swift)."

    let limit: Int
    var next = 2
    var primes = 0

    /// Where a run got to: saved when its grant expires, loaded by the next run.
    struct Position: Codable {
        var limit: Int
        var next: Int
        var primes: Int
    }

    init(context: JobContext) throws {
        limit = context.parameter("limit").flatMap { Int($0) } ?? 3_000_000
        guard limit >= 2 else { throw PrimeCounterError.limitTooSmall(limit) }
        // A checkpoint for another limit, or one that does not decode, is no place to resume.
        if let saved = try? context.loadCheckpoint(as: Position.self), saved.limit == limit,
            (2...limit).contains(saved.next), (0...saved.next).contains(saved.primes)
        {
            (next, primes) = (saved.next, saved.primes)
            context.log("resumed at \(next) with \(primes) primes so far, from its checkpoint")
        }
        if context.parameter("on-power") == "1" {
            do throws(ConditionsError) {
                try context.requireConditions([.externalPower])
            } catch {
                context.log("runs whatever the power: \(error)")
            }
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
        if let again = context.parameter("again").flatMap({ Int64($0) }) { try? context.requestNextRun(after: .seconds(again)) }
        return .done
    }

    mutating func expire(reason: ExpirationReason, context: JobContext) {
        let saved = (try? context.saveCheckpoint(encoding: Position(limit: limit, next: next, primes: primes))) != nil
        context.log("stopped at \(next) with \(primes) primes so far\(saved ? "; checkpoint saved" : "")", level: .warning)
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
