import CurfewFormats
import Glibc
import _CurfewShims

/// Validates plugin files in a scanner worker process, so a plugin whose
/// constructor or entry function crashes or hangs is rejected with a reason
/// instead of taking the host down, and caches the results by (real path,
/// size, mtime, host ABI), so a rescan of an unchanged folder loads nothing.
///
/// Jobs found this way carry no hooks: they run in workers
/// (`--isolate job`), or are loaded in process once the scan has vouched for
/// their file.
///
/// - Important: It never loads a plugin into the calling process: that is
///   the scanner worker's job.
public struct SafeScanner: Sendable {
    /// The executable started as the scanner: `curfew` itself.
    public var workerExecutable: String
    /// The cache file; `nil` for no cache.
    public var cacheFile: String?
    /// How long loading one file may take before it counts as hanging.
    public var timeoutPerFile: Duration
    /// Load every file again, whatever the cache says (the new answers are cached).
    public var rescan = false

    public init(workerExecutable: String = "/proc/self/exe", cacheFile: String? = SafeScanner.defaultCacheFile,
                timeoutPerFile: Duration = .seconds(10)) {
        self.workerExecutable = workerExecutable
        self.cacheFile = cacheFile
        self.timeoutPerFile = timeoutPerFile
    }

    /// `$XDG_CACHE_HOME/curfew/scan-v1.json`, else `~/.cache/curfew/scan-v1.json`.
    public static var defaultCacheFile: String? {
        if let cache = getenv("XDG_CACHE_HOME").map({ String(cString: $0) }), cache.hasPrefix("/") {
            return cache + "/curfew/scan-v1.json"
        }
        guard let home = getenv("HOME").map({ String(cString: $0) }), !home.isEmpty else { return nil }
        return home + "/.cache/curfew/scan-v1.json"
    }

    /// What a scan found, and how.
    public struct Report: Sendable {
        public var scan: PluginScan
        /// Files answered from the cache.
        public var fromCache = 0
        /// Files loaded by a scanner worker.
        public var scannedInWorker = 0
        /// Scanner workers started (more than one when a plugin crashed one).
        public var workersStarted = 0
    }

    /// Scans `paths` as ``PluginLoader/scan(_:)`` does, loading nothing in this process.
    ///
    /// - Parameter shouldStop: Asked between reads (every 100 ms at the
    ///   most); once it says yes, the scanner worker is killed and the files
    ///   not answered yet are left out of the report.
    public func scan(
        _ paths: [String], loader: PluginLoader = PluginLoader(), shouldStop: @escaping @Sendable () -> Bool = { false }
    ) -> Report {
        var rejected: [RejectedPlugin] = []
        let files = loader.candidates(paths, rejected: &rejected)
        var cache = ScanCache(path: cacheFile)
        var results: [String: FileResult] = [:]
        var keys: [String: ScanCache.Key] = [:]
        var misses: [String] = []
        var report = Report(scan: PluginScan())
        for file in files {
            // A manifest's result depends on its library too, which the key does not cover.
            let key = file.path.hasSuffix(ForeignManifestReader.suffix) ? nil : ScanCache.key(for: file.path)
            keys[file.path] = key
            if !rescan, let key, let cached = cache.lookup(key) {
                results[file.path] = cached
                report.fromCache += 1
            } else {
                misses.append(file.path)
            }
        }
        var remaining = misses[...]
        // Only what a file itself caused is remembered: its answer, or the crash
        // or hang it caused while loading (until the file changes: a hang costs
        // the whole timeout on every run otherwise; `rescan` asks again), not a
        // failure of the host's.
        var cacheable = Set<String>()
        while !remaining.isEmpty && !shouldStop() {
            report.workersStarted += 1
            let (answered, stuck) = scanInWorker(Array(remaining), shouldStop: shouldStop)
            for (file, result) in answered {
                results[file] = result
                cacheable.insert(file)
                report.scannedInWorker += 1
            }
            remaining = remaining.drop { results[$0] != nil }
            if let stuck {
                results[stuck.file] = .rejected(code: CurfewError.Code.loadFailed.rawValue, reason: stuck.reason)
                if stuck.causedByFile { cacheable.insert(stuck.file) }
                report.scannedInWorker += 1
                remaining = remaining.drop { $0 == stuck.file }
            } else if !remaining.isEmpty && !shouldStop() {
                // The scanner stopped without a word about the next file: count it once, go on.
                results[remaining.first!] = .rejected(
                    code: CurfewError.Code.loadFailed.rawValue, reason: "The scanner worker stopped before loading it.")
                remaining = remaining.dropFirst()
            }
        }
        for file in misses where cacheable.contains(file) {
            if let key = keys[file] ?? nil, let result = results[file] { cache.store(key, result) }
        }
        cache.save()
        report.scan = PluginLoader.assemble(
            files.compactMap { file in results[file.path].map { (file.path, $0.outcome(path: file.path)) } }, rejected: rejected)
        return report
    }

    /// One scanner worker over `files`, in order: the answers it gave, and the
    /// file it was on when it crashed or hung, with why and whether the file
    /// caused it (not the host: a worker it could not start, a stop it asked for).
    private func scanInWorker(
        _ files: [String], shouldStop: @Sendable () -> Bool
    ) -> ([(String, FileResult)], (file: String, reason: String, causedByFile: Bool)?) {
        guard let channel = try? Syscalls.socketPair() else { return ([], (files[0], "Cannot start a scanner worker.", false)) }
        let null = open("/dev/null", O_WRONLY | O_CLOEXEC)
        defer { if null >= 0 { close(null) } }
        var environment = Syscalls.environment().filter { !$0.hasPrefix("SWIFT_BACKTRACE=") }
        environment.append("SWIFT_BACKTRACE=enable=no")
        let spawned = Syscalls.spawnWorker(
            workerExecutable, arguments: [workerExecutable, WorkerProtocol.workerArgument], environment: environment,
            channel: channel[1], out: null, err: null)
        close(channel[1])
        guard case .success(let pid) = spawned else {
            close(channel[0])
            return ([], (files[0], "Cannot start a scanner worker (\(workerExecutable)).", false))
        }
        defer { close(channel[0]) }
        var message = JSONLine("type", "scan")
        message.add("protocol", WorkerProtocol.version)
        message.add("files", files)

        WorkerProtocol.send(message.text, to: channel[0])

        var answers: [(String, FileResult)] = []
        var current: String?
        var buffer = LineBuffer(maximumLength: WorkerProtocol.maximumMessageBytes, dropsOverlongLines: true)
        var bytes = [UInt8](repeating: 0, count: 65536)
        let clock = MonotonicClock()
        var silentSince = clock.now()
        var finished = false
        while !finished {
            if shouldStop() {
                kill(-pid, SIGKILL)  // not reaped yet: the pid is still its own
                var status: Int32 = 0
                while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
                return (answers, nil)
            }
            var entry = pollfd(fd: channel[0], events: Int16(POLLIN), revents: 0)
            let ready = poll(&entry, 1, 100)
            if ready < 0 && errno == EINTR { continue }
            if ready == 0 && silentSince.duration(to: clock.now()) < timeoutPerFile { continue }
            silentSince = clock.now()
            if ready == 0 {
                // Nothing for a whole timeout: the file being loaded hangs.
                kill(-pid, SIGKILL)  // not reaped yet: the pid is still its own
                var status: Int32 = 0
                while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
                let seconds = Int(timeoutPerFile.seconds.rounded())
                return (answers, current.map {
                    ($0, "Hung while loading: no answer within \(seconds) s (its constructor or entry function never returned).", true)
                })
            }
            let count = bytes.withUnsafeMutableBytes { read(channel[0], $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            for line in bytes.withUnsafeBytes({ buffer.append(UnsafeRawBufferPointer(rebasing: $0[..<count])) }) {
                guard let value = try? JSONReader.parse(Array(line.utf8)), let type = value["type"]?.stringValue else { continue }
                let file = value["file"]?.stringValue ?? ""
                switch type {
                case "scanning": current = file
                case "scanned", "rejected":
                    answers.append((file, FileResult(message: value)))
                    current = nil
                case "done": finished = true
                default: break
                }
            }
        }
        // Exited but not reaped: its pid is still its own while its group is killed.
        curfew_shim_wait_exited(pid)
        kill(-pid, SIGKILL)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        guard !finished, let current else { return (answers, nil) }
        let signaled = status & 0x7F != 0 && status & 0x7F != 0x7F
        let how = signaled ? "died of \(WorkerProtocol.signalName(status & 0x7F))" : "exited with status \((status >> 8) & 0xFF)"
        return (answers, (current, "Crashed while loading: the scanner worker \(how) in its constructor or entry function.", true))
    }

    /// The worker's side: loads each file and reports it (`curfew __worker`, first message `scan`).
    static func serve(_ message: JSONValue, channel: Int32) -> Int32 {
        guard case .array(let values)? = message["files"] else { return 2 }
        for value in values {
            guard let file = value.stringValue else { continue }
            var scanning = JSONLine("type", "scanning")
            scanning.add("file", file)
            WorkerProtocol.send(scanning.text, to: channel)
            // The host checked the file's ownership before it asked.
            let scan = PluginLoader(allowsInsecurePlugins: true).scan([file])
            let result: FileResult =
                if let rejected = scan.rejected.first {
                    .rejected(code: rejected.error.code.rawValue, reason: rejected.error.description)
                } else {
                    .jobs(scan.jobs.map { ScannedJob($0) })
                }
            WorkerProtocol.send(result.message(file: file), to: channel)
        }
        WorkerProtocol.send(#"{"type":"done"}"#, to: channel)
        return 0
    }
}

/// A job as a scan reports it.
struct ScannedJob: Sendable, Equatable {
    let name: String
    let summary: String
    let continuous: Bool
    let chunked: Bool
    let foreignLibrary: String?

    init(_ job: PluginJob) {
        name = job.name
        summary = job.summary
        continuous = job.isContinuous
        chunked = job.isChunked
        foreignLibrary = job.foreignLibrary
    }

    init?(_ value: JSONValue) {
        guard let name = value["name"]?.stringValue, let summary = value["summary"]?.stringValue else { return nil }
        self.name = name
        self.summary = summary
        continuous = value["continuous"] == .bool(true)
        chunked = value["chunked"] == .bool(true)
        foreignLibrary = value["library"]?.stringValue
    }

    var json: String {
        var line = JSONLine("name", name)
        line.add("summary", summary)
        line.addRaw("continuous", continuous ? "true" : "false")
        line.addRaw("chunked", chunked ? "true" : "false")
        line.add("library", foreignLibrary)
        return line.text
    }
}

/// What a scan of one file found.
enum FileResult: Sendable, Equatable {
    case jobs([ScannedJob])
    case rejected(code: String, reason: String)

    init(message value: JSONValue) {
        if value["type"]?.stringValue == "rejected" {
            self = .rejected(code: value["code"]?.stringValue ?? "load-failed", reason: value["reason"]?.stringValue ?? "")
        } else if case .array(let jobs)? = value["jobs"] {
            self = .jobs(jobs.compactMap(ScannedJob.init))
        } else {
            self = .rejected(code: "load-failed", reason: "The scanner worker gave no result.")
        }
    }

    func message(file: String) -> String {
        switch self {
        case .jobs(let jobs):
            var line = JSONLine("type", "scanned")
            line.add("file", file)
            line.addRaw("jobs", "[" + jobs.map(\.json).joined(separator: ",") + "]")
            return line.text
        case .rejected(let code, let reason):
            var line = JSONLine("type", "rejected")
            line.add("file", file)
            line.add("code", code)
            line.add("reason", reason)
            return line.text
        }
    }

    func outcome(path: String) -> Result<LoadedPlugin, CurfewError> {
        switch self {
        case .jobs(let jobs):
            return .success(LoadedPlugin(path: path, jobs: jobs.map {
                PluginJob(
                    scannedName: $0.name, summary: $0.summary, pluginPath: path, isContinuous: $0.continuous,
                    isChunked: $0.chunked, foreignLibrary: $0.foreignLibrary)
            }))
        case .rejected(let code, let reason):
            return .failure(CurfewError(CurfewError.Code(rawValue: code), reason))
        }
    }
}
