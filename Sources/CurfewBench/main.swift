// curfew-bench: each case against its baseline, in the same run, several
// repetitions; medians, min and max, and the median of the paired ratios.
//
//   "$(Scripts/build-bench)"                      the full run (a few minutes)
//   "$(Scripts/build-bench)" --json               the same as JSON
//   "$(Scripts/build-bench)" --only chunk-noop --repetitions 9
//   swift run curfew-bench --tiny                 every case once, tiny sizes (CI)
//
// Scripts/build-bench builds it beside the release `curfew` that
// Scripts/install installs (the Swift runtime linked in): the rows that
// start `curfew` measure the binary a user runs.
import CLibFFI
import Curfew
import Dispatch
import Synchronization
import _CurfewFFI
import _CurfewShims

// MARK: Options

struct Options {
    var tiny = false
    var json = false
    var repetitions = 5
    var only: Set<String> = []
}

func parseOptions() -> Options {
    var options = Options()
    var arguments = CommandLine.arguments.dropFirst()
    while let argument = arguments.popFirst() {
        switch argument {
        case "--tiny": options.tiny = true
        case "--json": options.json = true
        case "--repetitions":
            guard let text = arguments.popFirst(), let count = Int(text), count >= 1 else { usage("--repetitions needs a positive number") }
            options.repetitions = count
        case "--only":
            guard let name = arguments.popFirst() else { usage("--only needs a case name") }
            options.only.insert(name)
        case "-h", "--help":
            print("USAGE: curfew-bench [--tiny] [--json] [--repetitions <n>] [--only <case> ...]")
            print("CASES: " + BenchCase.allCases.map(\.rawValue).joined(separator: ", "))
            Syscalls.exit(0)
        default: usage("unknown argument '\(argument)'")
        }
    }
    if options.tiny { options.repetitions = 1 }
    return options
}

func usage(_ message: String) -> Never {
    printError("Error: \(message)\nUsage: curfew-bench [--tiny] [--json] [--repetitions <n>] [--only <case> ...]")
    Syscalls.exit(64)
}

func printError(_ text: String) {
    try? Syscalls.writeAll(Syscalls.standardError, Array((text + "\n").utf8))
}

// MARK: The cases

enum BenchCase: String, CaseIterable {
    case chunkNoop = "chunk-noop"
    case chunk1us = "chunk-1us"
    case chunk100us = "chunk-100us"
    case expiration1k = "expiration-1k"
    case expiration10k = "expiration-10k"
    case scaling
    case pluginLoad = "plugin-load"
    case liveJobs = "live-jobs"
    case foreign
    case tasks
    case checkpoint
    // The CLI's paths, each a fresh `curfew` process.
    case isolateJob = "isolate-job"
    case workerStart = "worker-start"
    case race
    case isolatePlugin = "isolate-plugin"
    case list
    case output
    case events
}

/// The folder this executable was built into (beside `curfew` and the plugins).
func buildFolder() -> String {
    let executable = (try? Syscalls.linkTarget("/proc/self/exe")) ?? CommandLine.arguments[0]
    return String(executable[..<(executable.lastIndex(of: "/") ?? executable.startIndex)])
}

func benchPluginPath() -> String { buildFolder() + "/libCurfewBenchJobs.so" }

struct Bench {
    let options: Options
    let buildFolder: String
    let benchPlugin: String
    let benchJobs: [String: PluginJob]
    let workFolder: String
    /// The folder holding curfew.h, for the C the CLI cases compile.
    let include: String

    init(options: Options) throws {
        self.options = options
        buildFolder = CurfewBench.buildFolder()
        benchPlugin = benchPluginPath()
        let plugin = try PluginLoader().load(benchPlugin)
        benchJobs = Dictionary(uniqueKeysWithValues: plugin.jobs.map { ($0.name, $0) })
        guard let root = packageRoot(from: buildFolder) else { throw CurfewError(.notFound, "no include/curfew.h above \(buildFolder)") }
        include = root + "/include"
        workFolder = "/tmp/curfew-bench-\(Syscalls.processID)"
        try? Syscalls.makeFolder(workFolder, permissions: 0o755)
    }

    func size(_ full: Int, tiny: Int) -> Int { options.tiny ? tiny : full }

    /// Runs one job to its end with the host and returns the wall time in nanoseconds.
    func hostRun(_ jobs: [PluginJob], parameters: [String: String], concurrency: Int = 1) async -> (Double, [JobResult]) {
        let configuration = RunConfiguration(
            policy: try! GrantPolicy(budget: .seconds(3600)), maxConcurrentJobs: concurrency, parameters: parameters)
        let runner = Runner(jobs: jobs, configuration: configuration)
        let start = now()
        let results = await runner.run()
        return (Double(now() - start), results)
    }

    /// The bare loop: read the monotonic clock, compare with a deadline, call the chunk.
    func bareLoop(_ symbol: String, count: Int, spinNanoseconds: Int64) -> Double {
        typealias Chunk = @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Int64
        typealias Make = @convention(c) (Int64, Int64, Int64) -> UnsafeMutableRawPointer?
        let handle = try! Syscalls.dlopenPlugin(benchPlugin).get()
        let chunk = unsafeBitCast(Syscalls.dlsym(handle, symbol)!, to: Chunk.self)
        let make = unsafeBitCast(Syscalls.dlsym(handle, "bench_make_state")!, to: Make.self)
        let state = make(Int64(count), spinNanoseconds, 0)
        defer { CStrings.free(state) }
        let deadline = now() + 3_600_000_000_000
        let start = now()
        while curfew_shim_monotonic_nanoseconds() < deadline {
            if chunk(nil, state) != 0 { break }
        }
        return Double(now() - start)
    }

    func chunkOverhead(_ name: String, spinNanoseconds: Int64, count: Int, target: Row.Target) async -> Row {
        var row = Row(
            name: name, measure: "ns per chunk", unit: "ns", baselineName: "bare clock-check + call loop", target: target)
        let job = spinNanoseconds == 0 ? benchJobs["bench-noop"]! : benchJobs["bench-spin"]!
        let symbol = spinNanoseconds == 0 ? "bench_noop_chunk" : "bench_spin_chunk"
        for _ in 0..<options.repetitions {
            row.baseline.append(bareLoop(symbol, count: count, spinNanoseconds: spinNanoseconds) / Double(count))
            let (elapsed, results) = await hostRun([job], parameters: ["count": "\(count)", "spin-ns": "\(spinNanoseconds)"])
            precondition(results.first?.chunks == UInt64(count), "the host ran \(results.first?.chunks ?? 0) chunks")
            row.values.append(elapsed / Double(count))
        }
        return row
    }

    /// Lateness of expiration handlers with `count` live grants whose
    /// expiration points spread over `spread`; also resident bytes per grant.
    func expiration(count: Int, spread: Double) -> [Row] {
        var lateness = Row(
            name: "expiration, \(count) grants", measure: "handler lateness p99", unit: "ms",
            baselineName: "bare DispatchSourceTimer", target: .absoluteAtMost(0.5, "p99 < 0.5 ms"))
        var p50 = Row(name: "expiration, \(count) grants", measure: "handler lateness p50", unit: "ms", baselineName: "bare DispatchSourceTimer")
        var worst = Row(name: "expiration, \(count) grants", measure: "handler lateness max", unit: "ms", baselineName: "bare DispatchSourceTimer")
        var memory = Row(
            name: "expiration, \(count) grants", measure: "memory per live grant", unit: "B",
            baselineName: "bare DispatchSourceTimer", target: .absoluteAtMost(4096, "< 4 KiB"))
        let first = 0.5 + Double(count) * 2e-6  // time to set them all up first
        for _ in 0..<options.repetitions {
            let handlers = DispatchQueue(label: "bench.handlers")
            // Curfew: a grant per job, each with a task whose expiration handler records the lateness.
            let samples = Mutex<[Double]>([])
            let group = DispatchGroup()
            let before = heapBytes()
            var grants: [Grant] = []
            grants.reserveCapacity(count)
            for index in 0..<count {
                let budget = first + spread * Double(index) / Double(count) + 0.1
                let manager = GrantManager(policy: try! GrantPolicy(budget: .nanoseconds(Int64(budget * 1e9)), grace: .milliseconds(100)))
                let grant = try! manager.makeGrant(name: "g\(index)", handlerQueue: handlers)
                grant.start(observer: GrantObserver())
                let expected = grant.expirationPoint!.nanoseconds
                group.enter()
                _ = grant.beginTask(name: "t") { _ in
                    let late = Double(now()) - Double(expected)
                    samples.withLock { $0.append(late / 1e6) }
                    group.leave()
                }
                grants.append(grant)
            }
            let after = heapBytes()
            group.wait()
            grants.forEach { $0.finish() }
            let curfew = samples.withLock { $0 }
            lateness.values.append(percentile(curfew, 99))
            p50.values.append(percentile(curfew, 50))
            worst.values.append(curfew.max() ?? .nan)
            memory.values.append((after - before) / Double(count))

            // Baseline: a bare strict timer per deadline, same spread, one queue.
            let bare = Mutex<[Double]>([])
            let bareGroup = DispatchGroup()
            let bareBefore = heapBytes()
            var timers: [any DispatchSourceTimer] = []
            let start = now()
            for index in 0..<count {
                let due = start + UInt64((first + spread * Double(index) / Double(count)) * 1e9)
                let timer = DispatchSource.makeTimerSource(flags: .strict, queue: handlers)
                bareGroup.enter()
                timer.setEventHandler {
                    bare.withLock { $0.append((Double(now()) - Double(due)) / 1e6) }
                    timer.cancel()
                    bareGroup.leave()
                }
                timer.schedule(deadline: DispatchTime(uptimeNanoseconds: due), leeway: .nanoseconds(0))
                timer.activate()
                timers.append(timer)
            }
            let bareAfter = heapBytes()
            bareGroup.wait()
            let baseline = bare.withLock { $0 }
            lateness.baseline.append(percentile(baseline, 99))
            p50.baseline.append(percentile(baseline, 50))
            worst.baseline.append(baseline.max() ?? .nan)
            memory.baseline.append((bareAfter - bareBefore) / Double(count))
        }
        return [p50, lateness, worst, memory]
    }

    func scaling() async -> Row {
        var row = Row(
            name: "scaling, 4 CPU-bound jobs", measure: "throughput --jobs 2 ÷ --jobs 1", unit: "×",
            baselineName: "--jobs 1", target: .atLeast(1.8))
        let job = benchJobs["bench-cpu"]!
        let parameters = ["count": "\(size(2500, tiny: 20))", "work": "20000"]
        for _ in 0..<options.repetitions {
            let (one, _) = await hostRun(Array(repeating: job, count: 4), parameters: parameters, concurrency: 1)
            let (two, _) = await hostRun(Array(repeating: job, count: 4), parameters: parameters, concurrency: 2)
            // Throughput is work over time: the ratio of the times, inverted.
            row.values.append(one / two)
            row.baseline.append(1)
        }
        row.note = "value is the speed-up itself"
        return row
    }

    func pluginLoad() throws -> Row {
        let count = size(500, tiny: 5)
        var row = Row(
            name: "plugin load, \(count) files", measure: "µs per file", unit: "µs",
            baselineName: "bare dlopen + dlsym", target: .atMost(1.3))
        let source = buildFolder + "/libExampleEarlyFinish.so"
        let bytes = try readAll(source)
        for repetition in 0..<options.repetitions {
            // Fresh copies every time: a path dlopen has seen is not loaded again.
            let bareFolder = "\(workFolder)/bare-\(repetition)"
            let scanFolder = "\(workFolder)/scan-\(repetition)"
            for folder in [bareFolder, scanFolder] {
                try? Syscalls.makeFolder(folder, permissions: 0o755)
                for index in 0..<count { try writeAll("\(folder)/plugin-\(index).so", bytes) }
            }
            // Interleaved batches: dlopen gets slower as more libraries are
            // loaded, so neither side may do all of its loads last.
            let batch = max(1, count / 10)
            var bare: UInt64 = 0
            var scanned: UInt64 = 0
            var loaded = 0
            for first in stride(from: 0, to: count, by: batch) {
                let indices = first..<min(first + batch, count)
                // Both sides load from a fresh batch folder the files were just moved into.
                for folder in [bareFolder, scanFolder] {
                    try? Syscalls.makeFolder("\(folder)/batch-\(first)", permissions: 0o755)
                    for index in indices {
                        try? Syscalls.rename("\(folder)/plugin-\(index).so", to: "\(folder)/batch-\(first)/plugin-\(index).so")
                    }
                }
                var start = now()
                for index in indices {
                    let handle = try? Syscalls.dlopenPlugin("\(bareFolder)/batch-\(first)/plugin-\(index).so").get()
                    precondition(handle.flatMap { Syscalls.dlsym($0, "curfew_plugin_entry") } != nil)
                }
                bare += now() - start
                start = now()
                let scan = PluginLoader().scan(["\(scanFolder)/batch-\(first)"])
                scanned += now() - start
                loaded += scan.plugins.count + scan.rejected.count
            }
            precondition(loaded == count)
            row.baseline.append(Double(bare) / Double(count) / 1000)
            row.values.append(Double(scanned) / Double(count) / 1000)
        }
        row.note = "copies of one plugin, scanned a batch folder at a time: within a batch all but one are rejected as duplicate job names, after full validation"
        return row
    }

    /// Background-task bookkeeping: beginning and ending many tasks, and
    /// expiring many, each handler ending its own task, against a bare
    /// dictionary of handlers under a lock.
    func tasks() -> [Row] {
        let perGrant = Grant.maximumOpenTasks
        let grantCount = options.tiny ? 1 : 10
        let total = perGrant * grantCount
        let name = "tasks, \(grantCount) × \(perGrant) open"
        var pairs = Row(
            name: name, measure: "ns per begin + end (all begun, then all ended)", unit: "ns",
            baselineName: "bare Dictionary insert + remove under a Mutex")
        var handlers = Row(
            name: name, measure: "ns per expiration handler that ends its task", unit: "ns",
            baselineName: "bare Dictionary of handlers under a Mutex")
        let queue = DispatchQueue(label: "bench.tasks")
        let policy = try! GrantPolicy(budget: .seconds(60), grace: .seconds(1))
        for _ in 0..<options.repetitions {
            // Begin and end.
            var start = now()
            for _ in 0..<grantCount {
                let grant = try! GrantManager(policy: policy).beginGrant(name: "g", handlerQueue: queue)
                var ids: [BackgroundTaskIdentifier] = []
                ids.reserveCapacity(perGrant)
                for _ in 0..<perGrant { ids.append(grant.beginTask(name: "t")) }
                for id in ids { precondition(grant.endTask(id)) }
                grant.finish()
            }
            pairs.values.append(Double(now() - start) / Double(total))
            start = now()
            for _ in 0..<grantCount {
                let table = Mutex<[UInt64: String]>([:])
                var next: UInt64 = 0
                var ids: [UInt64] = []
                ids.reserveCapacity(perGrant)
                for _ in 0..<perGrant {
                    next += 1
                    let id = next
                    table.withLock { $0[id] = "t" }
                    ids.append(id)
                }
                for id in ids { precondition(table.withLock { $0.removeValue(forKey: id) } != nil) }
            }
            pairs.baseline.append(Double(now() - start) / Double(total))

            // Expiration: every handler ends its own task.
            let group = DispatchGroup()
            var grants: [Grant] = []
            for _ in 0..<grantCount {
                let grant = try! GrantManager(policy: policy).beginGrant(name: "g", handlerQueue: queue)
                for _ in 0..<perGrant {
                    let id = Locked(BackgroundTaskIdentifier.invalid)
                    group.enter()
                    let begun = grant.beginTask(name: "t") { _ in
                        grant.endTask(id.value.withLock { $0 })
                        group.leave()
                    }
                    id.value.withLock { $0 = begun }
                }
                grants.append(grant)
            }
            start = now()
            grants.forEach { $0.expireNow(.cancelled) }
            group.wait()
            handlers.values.append(Double(now() - start) / Double(total))
            precondition(grants.allSatisfy { $0.openTaskCount == 0 })
            grants.forEach { $0.finish() }
            let table = Locked<[UInt64: @Sendable () -> Void]>([:])
            let bareGroup = DispatchGroup()
            for id in 0..<UInt64(total) {
                bareGroup.enter()
                table.value.withLock {
                    $0[id] = {
                        _ = table.value.withLock { $0.removeValue(forKey: id) }
                        bareGroup.leave()
                    }
                }
            }
            start = now()
            queue.async {
                for id in 0..<UInt64(total) { table.value.withLock { $0[id] }?() }
            }
            bareGroup.wait()
            handlers.baseline.append(Double(now() - start) / Double(total))
        }
        pairs.note = "each grant holds the most open tasks a job may have (Grant.maximumOpenTasks); ended in the order begun"
        return [pairs, handlers]
    }

    /// Foreign (manifest) jobs: one whose chunk takes two integers, called
    /// directly, against the same native chunk; one whose chunk takes a
    /// double, called through `ffi_call`, against a bare `ffi_call` loop.
    func ffiNoop() async throws -> [Row] {
        let count = size(5_000_000, tiny: 1000)
        var direct = Row(
            name: "foreign job, no-op chunk (int64, int64)", measure: "ns per chunk", unit: "ns",
            baselineName: "the same as a native chunk", target: .atMost(1.2))
        var viaFFI = Row(
            name: "foreign job, no-op chunk (double, int64)", measure: "ns per chunk", unit: "ns",
            baselineName: "bare clock-check + ffi_call loop", target: .atMost(1.2))
        func job(_ symbol: String, _ indexType: String) throws -> PluginJob {
            let manifest = "\(workFolder)/\(symbol).curfew.json"
            try writeAll(manifest, Array("""
                {"library": "\(benchPlugin)", "jobs": [{"name": "ffi-noop", "summary": "A no-op through a manifest.",
                  "chunk": {"symbol": "\(symbol)", "returns": "int64", "result": "items-left",
                            "args": [{"type": "\(indexType)", "from": "chunk-index"}, {"type": "int64", "param": "count"}]}}]}
                """.utf8))
            return try ForeignLoad.job(manifest, parameters: ["count": "\(count)"])
        }
        let integers = try job("bench_foreign_step", "int64")
        let double = try job("bench_foreign_step_double", "double")
        let parameters = ["count": "\(count)"]
        for repetition in 0...options.repetitions {
            let (native, _) = await hostRun([benchJobs["bench-noop"]!], parameters: parameters)
            let (called, results) = await hostRun([integers], parameters: parameters)
            precondition(results.first?.chunks == UInt64(count))
            let (throughFFI, doubleResults) = await hostRun([double], parameters: parameters)
            precondition(doubleResults.first?.chunks == UInt64(count))
            let bare = bareFFILoop(count: count)
            if repetition == 0 && !options.tiny { continue }  // warm-up
            direct.values.append(called / Double(count))
            direct.baseline.append(native / Double(count))
            viaFFI.values.append(throughFFI / Double(count))
            viaFFI.baseline.append(bare / Double(count))
            if options.tiny { break }
        }
        return [direct, viaFFI]
    }

    /// The floor for a foreign job called through libffi: read the clock,
    /// call the prepared cif of `int64_t f(double, int64_t)`, test the result.
    func bareFFILoop(count: Int) -> Double {
        let handle = try! Syscalls.dlopenPlugin(benchPlugin).get()
        let function = unsafeBitCast(Syscalls.dlsym(handle, "bench_foreign_step_double")!, to: (@convention(c) () -> Void).self)
        let cif = UnsafeMutablePointer<ffi_cif>.allocate(capacity: 1)
        let types = UnsafeMutablePointer<UnsafeMutablePointer<ffi_type>?>.allocate(capacity: 2)
        let index = UnsafeMutablePointer<Double>.allocate(capacity: 1)
        let limit = UnsafeMutablePointer<Int64>.allocate(capacity: 1)
        let pointers = UnsafeMutablePointer<UnsafeMutableRawPointer?>.allocate(capacity: 2)
        let result = UnsafeMutablePointer<Int64>.allocate(capacity: 2)
        defer {
            cif.deallocate()
            types.deallocate()
            index.deallocate()
            limit.deallocate()
            pointers.deallocate()
            result.deallocate()
        }
        types[0] = curfew_ffi_type_double()
        types[1] = curfew_ffi_type_sint64()
        precondition(ffi_prep_cif(cif, curfew_ffi_default_abi(), 2, curfew_ffi_type_sint64(), types) == FFI_OK)
        limit.pointee = Int64(count)
        pointers[0] = UnsafeMutableRawPointer(index)
        pointers[1] = UnsafeMutableRawPointer(limit)
        let deadline = now() + 3_600_000_000_000
        let start = now()
        var step: Int64 = 0
        while curfew_shim_monotonic_nanoseconds() < deadline {
            index.pointee = Double(step)
            ffi_call(cif, function, result, pointers)
            step += 1
            if result.pointee == 0 { break }
        }
        return Double(now() - start)
    }

    /// Jobs that stay live without holding a thread (each chunk asks to be
    /// called again later), in process: resident memory and threads per live
    /// job, and how late each job's expire hook runs. Each repetition is a
    /// fresh process (`curfew-bench __live-jobs N`), so memory freed by one
    /// cannot hide the next one's.
    func liveJobs() throws -> [Row] {
        let count = size(1000, tiny: 20)
        var memory = Row(
            name: "live jobs in process, \(count)", measure: "resident bytes per live job", unit: "B",
            baselineName: "-", target: .absoluteAtMost(4096, "< 4 KiB"))
        var threads = Row(
            name: "live jobs in process, \(count)", measure: "threads", unit: "",
            baselineName: "the same with \(count / 10) live jobs", target: .atMost(1.1))
        var p50 = Row(
            name: "live jobs in process, \(count)", measure: "expire hook lateness p50", unit: "ms",
            baselineName: "a POSIX timer's signal (what timeout waits on)", target: .atMost(1))
        var p99 = Row(
            name: "live jobs in process, \(count)", measure: "expire hook lateness p99", unit: "ms",
            baselineName: "a thread that sleeps until each of the run's expiration points", target: .absoluteAtMost(0.5, "p99 < 0.5 ms"))
        var spinning = Row(
            name: "live jobs in process, \(count)", measure: "the same points seen by spinning threads, p99", unit: "ms",
            baselineName: "-")
        var burst = Row(
            name: "live jobs in process, \(count)", measure: "CPU the jobs' ends take, per core", unit: "ms",
            baselineName: "the time their expiration points span")
        let cli = CLIBench(options: options, curfew: buildFolder + "/curfew", include: include, work: workFolder)
        func child(_ jobs: Int) throws -> [Double] {
            var command = Command(["/proc/self/exe", Self.liveJobsArgument, String(jobs), options.tiny ? "tiny" : "full"])
            command.stdout = "\(workFolder)/live-jobs.out"
            try command.run()
            let values = String(decoding: try readAll(command.stdout), as: UTF8.self).split(whereSeparator: { $0 == " " || $0 == "\n" }).compactMap { Double($0) }
            guard values.count == 8 else { throw CurfewError(.unreadable, "the live-jobs child printed no result") }
            return values
        }
        for repetition in 0...options.repetitions {
            let full = try child(count)
            let tenth = try child(max(1, count / 10))
            let timer = try cli.timerLateness(count: size(200, tiny: 5))
            if repetition == 0 && !options.tiny { continue }  // warm-up
            memory.values.append(full[0])
            threads.values.append(full[1])
            threads.baseline.append(tenth[1])
            p50.values.append(full[2])
            p50.baseline.append(timer.median)
            p99.values.append(full[3])
            p99.baseline.append(full[6])
            spinning.values.append(full[7])
            burst.values.append(full[4])
            burst.baseline.append(full[5])
            if repetition == 0 { break }
        }
        memory.note = "resident set growth from before the run to when every job has run its first chunk, runner, queues and thread stacks included"
        p99.note = "the baseline replays the run's own expiration points after it, in the same process: one thread sleeps until the next (absolute clock_nanosleep, 1 ns timer slack) and notes how late it woke for each point passed; what any host whose threads sleep between expirations pays for the machine's wake-ups"
        spinning.note = "the same points replayed by one thread a core that only spins (never sleeps) and takes the next: late only when the machine takes a core away; the floor under any host"
        burst.note = "the process's CPU time from just before the first expiration to the run's end, less the live jobs' own rate measured just before, ÷ cores; a ratio above 1 means expirations come faster than the host can end jobs, and the queue that builds sets the p99"
        return [memory, threads, p50, p99, spinning, burst]
    }

    static let liveJobsArgument = "__live-jobs"

    /// The child of ``liveJobs()``: prints "bytes-per-job threads p50-ms
    /// p99-ms end-cpu-per-core-ms expiration-span-ms sleeping-p99-ms
    /// spinning-p99-ms".
    static func liveJobsChild(count: Int, tiny: Bool) async throws {
        let plugin = try PluginLoader().load(benchPluginPath())
        guard let job = plugin.jobs.first(where: { $0.name == "bench-sleep" }) else { throw CurfewError(.notFound, "no bench-sleep") }
        let handle = try! Syscalls.dlopenPlugin(benchPluginPath()).get()
        typealias Count = @convention(c) () -> Int64
        typealias Samples = @convention(c) (UnsafeMutablePointer<Double>?, Int64) -> Int64
        let live = unsafeBitCast(Syscalls.dlsym(handle, "bench_sleepers_live")!, to: Count.self)
        let samples = unsafeBitCast(Syscalls.dlsym(handle, "bench_lateness")!, to: Samples.self)
        typealias Times = @convention(c) (UnsafeMutablePointer<Int64>?, Int64) -> Int64
        let expiredAt = unsafeBitCast(Syscalls.dlsym(handle, "bench_expired_at")!, to: Times.self)
        let leadMilliseconds = tiny ? 100 : 500
        let lead = Duration.milliseconds(leadMilliseconds)
        let budgetMilliseconds = tiny ? 400 : 2000
        let budget = Duration.milliseconds(budgetMilliseconds)
        let configuration = RunConfiguration(
            policy: try! GrantPolicy(budget: budget, grace: lead), maxConcurrentJobs: count,
            parameters: ["sleep-ms": "50", "lead-ns": "\(leadMilliseconds * 1_000_000)"])
        let runner = Runner(jobs: Array(repeating: job, count: count), configuration: configuration)
        let before = residentBytes()
        let started = now()
        let task = Task { await runner.run() }
        while live() < Int64(count) { Syscalls.nap(microseconds: 1000) }
        let after = residentBytes()
        let threads = threadCount()
        // The CPU the jobs' ends take: from a little before the first
        // expiration point to the end, less what the live jobs take at that
        // rate, measured over the 100 ms before.
        let firstExpiration = started + UInt64(budgetMilliseconds - leadMilliseconds) * 1_000_000
        func sleep(until instant: UInt64) {
            let now = now()
            if instant > now { Syscalls.nap(microseconds: UInt32(clamping: (instant - now) / 1000)) }
        }
        sleep(until: firstExpiration - 130_000_000)
        let (cpuBefore, timeBefore) = (processCPUNanoseconds(), now())
        sleep(until: firstExpiration - 30_000_000)
        let (cpuAtBurst, timeAtBurst) = (processCPUNanoseconds(), now())
        let results: [JobResult] = await task.value
        let (cpuAfter, timeAfter) = (processCPUNanoseconds(), now())
        let liveRate = Double(cpuAtBurst - cpuBefore) / Double(max(1, timeAtBurst - timeBefore))
        let endsCPU = Double(cpuAfter - cpuAtBurst) - liveRate * Double(timeAfter - timeAtBurst)
        let cores = Double(RunConfiguration.activeProcessorCount)
        precondition(results.allSatisfy { $0.outcome == Outcome.expired }, "a sleeping job did not expire cleanly")
        var lateness = [Double](repeating: 0, count: count)
        let got = Int(samples(&lateness, Int64(count)))
        precondition(got == count, "\(got) expire hooks ran, not \(count)")
        var ranAt = [Int64](repeating: 0, count: count)
        precondition(Int(expiredAt(&ranAt, Int64(count))) == count, "the expire hooks' times are missing")
        // Each expiration point: when its hook ran, less how late it ran.
        let points = zip(ranAt, lateness).map { Double($0) / 1e6 - $1 }
        let span = (points.max() ?? 0) - (points.min() ?? 0)
        // The same expiration points again, from 20 ms on, without the
        // host: seen by a thread that sleeps until each, then by threads
        // (one a core) that only spin.
        let offsets = points.map { UInt64(min(max(0, ($0 - (points.min() ?? 0)) * 1e6), 1e10)) }.sorted()
        var origin = now() + 20_000_000
        let sleeping = sleepingLateness(deadlines: offsets.map { origin + $0 })
        origin = now() + 20_000_000
        let spinning = spinningLateness(deadlines: offsets.map { origin + $0 }, threads: Int(cores))
        print("\((after - before) / Double(count)) \(threads) \(percentile(lateness, 50)) \(percentile(lateness, 99)) \(endsCPU / cores / 1e6) \(span) \(percentile(sleeping, 99)) \(percentile(spinning, 99))")
    }

    func run() async throws -> [Row] {
        var rows: [Row] = []
        func selected(_ benchCase: BenchCase) -> Bool { options.only.isEmpty || options.only.contains(benchCase.rawValue) }
        if selected(.chunkNoop) {
            rows.append(await chunkOverhead("chunk overhead, no-op", spinNanoseconds: 0, count: size(20_000_000, tiny: 1000), target: .atMost(1.5)))
        }
        if selected(.chunk1us) {
            rows.append(await chunkOverhead("chunk overhead, 1 µs chunks", spinNanoseconds: 1000, count: size(1_000_000, tiny: 100), target: .atMost(1.05)))
        }
        if selected(.chunk100us) {
            rows.append(await chunkOverhead("chunk overhead, 100 µs chunks", spinNanoseconds: 100_000, count: size(10_000, tiny: 5), target: .atMost(1.01)))
        }
        if selected(.expiration1k) { rows += expiration(count: size(1000, tiny: 50), spread: options.tiny ? 0.05 : 2) }
        if selected(.expiration10k) { rows += expiration(count: size(10_000, tiny: 100), spread: options.tiny ? 0.05 : 3) }
        if selected(.scaling) { rows.append(await scaling()) }
        if selected(.pluginLoad) { rows.append(try pluginLoad()) }
        if selected(.liveJobs) { rows += try liveJobs() }
        if selected(.foreign) { rows += try await ffiNoop() }
        if selected(.tasks) { rows += tasks() }
        if selected(.checkpoint) { rows += try await checkpoint() }
        let cli = CLIBench(options: options, curfew: buildFolder + "/curfew", include: include, work: workFolder)
        if selected(.isolateJob) { rows += try cli.processPerJob() }
        if selected(.workerStart) { rows.append(try await workerStart()) }
        if selected(.race) { rows.append(try cli.raceContract()) }
        if selected(.isolatePlugin) { rows += try cli.pluginMode() }
        if selected(.list) { rows += try cli.list() }
        if selected(.output) { rows += try cli.output() }
        if selected(.events) { rows += try await events() }
        return rows
    }
}

extension Bench {
    /// The zygote decision (issue 42): a job's worker forked by the fork
    /// server, a process that has run Swift and forks without `exec`,
    /// against a spare `posix_spawn`ed (an `exec`ed `curfew`) from the pool,
    /// as `--isolate job` runs without the server. The host here is this
    /// process; the workers are the release `curfew` beside it.
    func workerStart() async throws -> Row {
        let count = size(200, tiny: 4)
        let folder = workFolder + "/worker-start"
        try? Syscalls.makeFolder(folder, permissions: 0o755)
        try compileC(Programs.spinPlugin(names: (0..<count).map { "start-\($0)" }), to: folder + "/libstart.so", include: include, shared: true, work: workFolder)
        let jobs = try PluginLoader().load(folder + "/libstart.so").jobs
        var row = Row(
            name: "--isolate job, worker start, \(count) no-op jobs", measure: "ms per job, --jobs 1, forked by the fork server",
            unit: "ms", baselineName: "a spawned, exec'ed spare from the pool")
        func perJob(forking: Bool) async throws -> Double {
            var configuration = RunConfiguration(policy: GrantPolicy(), maxConcurrentJobs: 1, parameters: ["spin-ns": "0"])
            configuration.isolation = .job
            configuration.usesForkServer = forking
            configuration.workerExecutable = buildFolder + "/curfew"
            let start = now()
            let runner = Runner(jobs: jobs, configuration: configuration)
            let results = await runner.run()
            let elapsed = Double(now() - start)
            if let failed = results.first(where: { $0.outcome != .completed }) {
                throw CurfewError(.loadFailed, "worker-start: \(failed.job) \(failed.outcome): \(failed.reason)")
            }
            // The server falls back to spawning in silence: each side must be what it says.
            let starts = runner.workerStarts
            guard forking ? starts.forked == count : starts.spawned == count else {
                throw CurfewError(.loadFailed, "worker-start: \(starts.forked) forked, \(starts.spawned) spawned, of \(count)")
            }
            return elapsed / Double(count) / 1e6
        }
        if !options.tiny {
            _ = try await perJob(forking: true)
            _ = try await perJob(forking: false)
        }
        for _ in 0..<options.repetitions {
            row.values.append(try await perJob(forking: true))
            row.baseline.append(try await perJob(forking: false))
        }
        row.note = "each run starts its own fork server or pool; a run's first worker waits for it"
        return row
    }
}

/// Loads one foreign job from a manifest, the way a scan does.
enum ForeignLoad {
    static func job(_ manifest: String, parameters: [String: String]) throws -> PluginJob {
        let scan = PluginLoader(parameters: parameters).scan([manifest])
        if let rejected = scan.rejected.first { throw rejected.error }
        return scan.jobs[0]
    }
}

if CommandLine.arguments.count == 4, CommandLine.arguments[1] == Bench.liveJobsArgument, let count = Int(CommandLine.arguments[2]) {
    do {
        try await Bench.liveJobsChild(count: count, tiny: CommandLine.arguments[3] == "tiny")
        Syscalls.exit(0)
    } catch {
        printError("Error: \(error)")
        Syscalls.exit(1)
    }
}
let options = parseOptions()
var status: Int32 = 0
var workFolder: String?
do {
    let bench = try Bench(options: options)
    workFolder = bench.workFolder
    let rows = try await bench.run()
    print(options.json ? jsonText(rows, options: options) : table(rows))
    for row in rows where row.note != nil && !options.json {
        print("note: \(row.name): \(row.note!)")
    }
} catch {
    printError("Error: \(error)")
    status = 1
}
// Copies of plugins, caches and scratch files: hundreds of megabytes at full size.
if let workFolder { removeTree(workFolder) }
Syscalls.exit(status)

/// A value under a lock that closures can share.
final class Locked<Value: Sendable>: Sendable {
    let value: Mutex<Value>
    init(_ value: Value) { self.value = Mutex(value) }
}
