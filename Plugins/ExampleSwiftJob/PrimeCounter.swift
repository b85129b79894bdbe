// A job written in Swift against the C ABI directly: it counts the primes
// below a limit in chunks, reports progress, and finishes.
//
// Parameter: --param limit=N (default 3,000,000).
import CCurfew

/// The job's state, owned by the host through an opaque pointer between
/// `create` and `destroy`.
final class PrimeCounter {
    let limit: Int
    var next = 2
    var primes = 0

    init(limit: Int) {
        self.limit = limit
    }

    /// Tests a block of candidates; returns whether the work is done.
    func step(_ count: Int) -> Bool {
        let end = min(next + count, limit)
        while next < end {
            if Self.isPrime(next) { primes += 1 }
            next += 1
        }
        return next >= limit
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

// Safe because it is written once, by the entry function on the loader
// thread, before any hook can run, and only read after.
nonisolated(unsafe) private var host: UnsafePointer<curfew_host>!

private func log(_ context: OpaquePointer?, _ level: curfew_log_level, _ message: String) {
    message.withCString { host.pointee.log(context, level, $0) }
}

private func counter(_ state: UnsafeMutableRawPointer?) -> PrimeCounter {
    Unmanaged<PrimeCounter>.fromOpaque(state!).takeUnretainedValue()
}

private func cString(_ text: StaticString) -> UnsafePointer<CChar> {
    UnsafeRawPointer(text.utf8Start).assumingMemoryBound(to: CChar.self)
}

// Safe because the descriptor is written once during initialisation and only read after.
nonisolated(unsafe) private let job: UnsafeMutablePointer<curfew_job> = {
    let job = UnsafeMutablePointer<curfew_job>.allocate(capacity: 1)
    job.initialize(to: curfew_job(
        struct_size: UInt32(MemoryLayout<curfew_job>.size),
        flags: 0,
        name: cString("swift-primes"),
        summary: cString("Counts primes in chunks (written in Swift)."),
        create: { context, state in
            let limit = host.pointee.param(context, "limit").flatMap { Int(String(cString: $0)) } ?? 3_000_000
            state!.pointee = Unmanaged.passRetained(PrimeCounter(limit: limit)).toOpaque()
            return CURFEW_OK
        },
        chunk: { context, state in
            let counter = counter(state)
            let done = counter.step(20_000)
            host.pointee.report_progress(context, Int64(counter.next), Int64(counter.limit))
            guard done else { return 0 }  // CURFEW_CHUNK_CONTINUE
            log(context, CURFEW_LOG_INFO, "\(counter.primes) primes below \(counter.limit)")
            return -1  // CURFEW_CHUNK_DONE
        },
        expire: { context, state, _ in
            let counter = counter(state)
            log(context, CURFEW_LOG_WARNING, "stopped at \(counter.next) with \(counter.primes) primes so far")
        },
        destroy: { _, state in
            Unmanaged<PrimeCounter>.fromOpaque(state!).release()
        }
    ))
    return job
}()

// Safe because the table is written once during initialisation and only read after.
nonisolated(unsafe) private let jobTable: UnsafeMutablePointer<UnsafePointer<curfew_job>?> = {
    let table = UnsafeMutablePointer<UnsafePointer<curfew_job>?>.allocate(capacity: 1)
    table.initialize(to: UnsafePointer(job))
    return table
}()

// Safe for the same reason.
nonisolated(unsafe) private let descriptor: UnsafeMutablePointer<curfew_plugin> = {
    let plugin = UnsafeMutablePointer<curfew_plugin>.allocate(capacity: 1)
    plugin.initialize(to: curfew_plugin(
        abi_version: CURFEW_ABI_VERSION,
        struct_size: UInt32(MemoryLayout<curfew_plugin>.size),
        job_count: 1,
        reserved: 0,
        jobs: jobTable))
    return plugin
}()

@_cdecl("curfew_plugin_entry")
public func curfewPluginEntry(_ services: UnsafePointer<curfew_host>?) -> UnsafePointer<curfew_plugin>? {
    host = services
    return UnsafePointer(descriptor)
}
