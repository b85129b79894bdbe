import CurfewFormats
import Dispatch
import Synchronization
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
    /// The program that runs the batch servers, which fork a scanner per
    /// plugin library: `curfew-scanner` (see ``scanner(beside:)``), a C
    /// program of a few pages whose forks cost a fraction of the host
    /// image's; `nil` for `workerExecutable` itself (`curfew __scanbatch.N`),
    /// as when `curfew` is copied alone or built by SwiftPM alone.
    public var batchExecutable: String?
    /// The scan cache's folder (a file per plugin folder); `nil` for no cache.
    public var cacheFolder: String?
    /// How long loading one file may take before it counts as hanging.
    public var timeoutPerFile: Duration
    /// Load every file again, whatever the cache says (the new answers are cached).
    public var rescan = false
    /// Fork each scanner worker from a fork server started for the scan
    /// (a fork, not a process start, per file); with `false`, or when the
    /// server cannot fork, each is started with `posix_spawn`.
    public var usesForkServer = true
    /// Copy each plugin library into ``snapshotFolder`` before its scan,
    /// and vet and hand out the copy (``PluginJob/loadPath``): the code a
    /// job runs is then what was scanned, whatever happens to the user's
    /// file (see ``PluginSnapshots``). Off, files are scanned where they
    /// are, as `list` does: it runs nothing.
    public var takesSnapshots = false
    /// Where snapshots are kept; `nil` for a folder of the temporary folder
    /// that this process removes when it exits.
    public var snapshotFolder: String? = SafeScanner.defaultSnapshotFolder
    /// Confine each scanner before it opens its file (a constructor is
    /// plugin code): it writes nothing, reaches no network, execs nothing and
    /// cannot reach processes outside its scan (the scanners of one scan
    /// share a domain: they can signal each other, as before); it reads every
    /// file, as a library's dependencies may be anywhere.
    public var sandboxed = false

    public init(workerExecutable: String = "/proc/self/exe", cacheFolder: String? = SafeScanner.defaultCacheFolder,
                timeoutPerFile: Duration = .seconds(10)) {
        self.workerExecutable = workerExecutable
        self.batchExecutable = SafeScanner.scanner(beside: workerExecutable)
        self.cacheFolder = cacheFolder
        self.timeoutPerFile = timeoutPerFile
    }

    /// The scanner program's name (built by `Scripts/build-scanner`).
    public static let scannerName = "curfew-scanner"

    /// `curfew-scanner` for the host at `executable`: in the folder of its
    /// real path (a build folder), else in `../libexec/curfew/` from there
    /// (as `Scripts/install` installs it); the first that is an executable
    /// regular file, or `nil`.
    public static func scanner(beside executable: String) -> String? {
        guard let path = Syscalls.realPath(executable) else { return nil }
        guard let slash = path.lastIndex(of: "/") else { return nil }
        let folder = String(path[...slash])
        for candidate in [folder + scannerName, folder + "../libexec/curfew/" + scannerName] {
            if (try? Syscalls.fileStatus(candidate))?.isRegular == true, Syscalls.isExecutable(candidate) { return candidate }
        }
        return nil
    }

    /// systemd's `$CACHE_DIRECTORY` (its first entry) `/scan-v2`, else
    /// `$XDG_CACHE_HOME/curfew/scan-v2`, else `~/.cache/curfew/scan-v2`;
    /// `nil` (no cache) when none names an absolute folder: a relative
    /// `HOME` would put the cache wherever the host happens to run.
    public static var defaultCacheFolder: String? {
        defaultCacheFolder(Syscalls.environmentValue)
    }

    static func defaultCacheFolder(_ variable: (String) -> String?, leaf: String = "scan-v2") -> String? {
        if let systemd = variable("CACHE_DIRECTORY")?.split(separator: ":").first, systemd.hasPrefix("/") {
            return systemd + "/" + leaf
        }
        if let cache = variable("XDG_CACHE_HOME"), cache.hasPrefix("/") {
            return cache + "/curfew/" + leaf
        }
        guard let home = variable("HOME"), home.hasPrefix("/") else { return nil }
        return home + "/.cache/curfew/" + leaf
    }

    /// `snapshots` beside the default cache folder (``defaultCacheFolder``).
    public static var defaultSnapshotFolder: String? {
        defaultCacheFolder(Syscalls.environmentValue, leaf: "snapshots")
    }

    /// The snapshots of ``snapshotFolder``, or why there are none.
    private func snapshots() -> Result<PluginSnapshots, CurfewError> {
        guard let snapshotFolder else {
            return Self.temporarySnapshots.withLock { made in
                if case .success = made { return made! }
                made = Result { () throws(CurfewError) in try PluginSnapshots.temporary() }
                return made!
            }
        }
        return Result { () throws(CurfewError) in try PluginSnapshots(folder: snapshotFolder) }
    }

    /// The temporary snapshot folder, made on first need, one for the process.
    private static let temporarySnapshots = Mutex<Result<PluginSnapshots, CurfewError>?>(nil)

    /// What a scan found, and how.
    public struct Report: Sendable {
        public var scan: PluginScan
        /// Files answered from the cache.
        public var fromCache = 0
        /// Files loaded by a scanner worker.
        public var scannedInWorker = 0
        /// Scanner workers started (more than one when a plugin crashed one).
        public var workersStarted = 0
        /// Why no snapshots were taken, when they were asked for: the
        /// files were scanned, and are loaded, where they are.
        public var snapshotProblem: String?
        /// The files that load where they are, though snapshots were asked for, and why.
        public var snapshotNotes: [String] = []
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
        var cache = ScanCache(folder: cacheFolder)
        var results: [String: FileResult] = [:]
        var keys: [String: ScanCache.Key] = [:]
        results.reserveCapacity(files.count)
        keys.reserveCapacity(files.count)
        var misses: [String] = []
        var report = Report(scan: PluginScan())
        var snapshots: PluginSnapshots?
        if takesSnapshots {
            switch self.snapshots() {
            case .success(let made): snapshots = made
            case .failure(let error): report.snapshotProblem = error.description
            }
        }
        // Each file's snapshot, and the file each snapshot is of.
        var loadPaths: [String: String] = [:]
        var filesOf: [String: String] = [:]
        var uncopied = 0
        // A manifest's result depends on its library too, which the key does not cover.
        let listed = files.map { file in
            file.path.hasSuffix(ForeignManifestReader.suffix)
                ? nil : file.known.map { ScanCache.key(real: $0.real, status: $0.status) } ?? ScanCache.key(for: file.path)
        }
        let taken = snapshots.map { Self.take(listed, into: $0) } ?? []
        for (index, file) in files.enumerated() {
            var key = listed[index]
            if snapshots != nil, key != nil {
                switch taken[index] {
                case .success(let snapshot)?:
                    key = snapshot.key
                    if let why = snapshot.inPlace {
                        report.snapshotNotes.append("\(file.path) loads from its own file, not a snapshot: \(why)")
                    } else {
                        loadPaths[file.path] = snapshot.path
                        filesOf[snapshot.path] = file.path
                    }
                case .failure(let error)?:
                    results[file.path] = .rejected(code: error.code.rawValue, reason: error.description)
                    uncopied += 1
                    continue
                case nil: break
                }
            }
            keys[file.path] = key
            if !rescan, let key, let cached = cache.lookup(key) {
                results[file.path] = cached
                report.fromCache += 1
            } else {
                misses.append(file.path)
            }
        }
        // One process per file, so a verdict comes from a process that loaded
        // that file alone (plugin code can write on its scanner's channel),
        // as many at once as the machine has cores, each a fork of one
        // server (a fork costs a third of a process start). Only what a file itself
        // caused is remembered: its answer, or the crash or hang it caused
        // while loading (until the file changes: a hang costs the whole
        // timeout on every run otherwise; `rescan` asks again), not a failure
        // of the host's, nor a scan the caller stopped.
        // Plugin libraries first, all from this thread (see scanForked);
        // then, each on a thread of its own, manifests and whatever that
        // left.
        // The shards the answers go to are read while the files are scanned,
        // on a thread of their own (a rescan has not read them), once the
        // scan's servers are started.
        let unread = misses.compactMap { keys[$0] ?? nil }.map(\.path)
        var read: (() -> ScanCache)?
        // A scanner loads a file's snapshot; its answer is about the file.
        let native = misses.filter { !$0.hasSuffix(ForeignManifestReader.suffix) }.map { loadPaths[$0] ?? $0 }
        let scannerEnvironment = scannerEnvironment
        let forked = scanForked(native, environment: scannerEnvironment, shouldStop: shouldStop) {
            read = cache.loading(shardsOf: unread)
        }
        let answers = Mutex(forked.answers)
        let queue = forked.stopped ? [] : misses.filter { $0.hasSuffix(ForeignManifestReader.suffix) } + forked.left
        // Twice as many scans as cores at once, each on a thread of its own
        // (a scan mostly waits for its worker: a pool sized to the cores
        // would leave them idle while workers start and exit).
        let width = queue.isEmpty ? 0 : max(1, min(queue.count, 2 * RunConfiguration.activeProcessorCount, 16))
        let next = Atomic<Int>(0)
        // A plugin library goes to a C scanner; a manifest to a Swift one
        // (it reads JSON and checks symbols with libffi's types).
        let launchers = (
            native: Launcher(executable: workerExecutable, forking: usesForkServer, native: true, environment: scannerEnvironment),
            manifest: Launcher(executable: workerExecutable, forking: usesForkServer, native: false, environment: scannerEnvironment))
        let scans = DispatchGroup()
        let scanNext: @Sendable () -> Void = {
            while !shouldStop() {
                let index = next.add(1, ordering: .relaxed).oldValue
                guard index < queue.count else { return }
                guard let answer = scanAlone(queue[index], launchers: launchers, shouldStop: shouldStop) else { return }
                answers.withLock { $0[queue[index]] = answer }
            }
        }
        var started = 0
        for _ in 0..<width {
            scans.enter()
            if OSThread.detach({ scanNext(); scans.leave() }) { started += 1 } else { scans.leave() }
        }
        if started == 0 && !queue.isEmpty { scanNext() }  // no thread could start: scan here
        scans.wait()
        launchers.native.close()
        launchers.manifest.close()
        if let read { cache = read() }
        var cacheable = Set<String>()
        for (scanned, answer) in answers.withLock({ $0 }) {
            let file = filesOf[scanned] ?? scanned
            results[file] = answer.result.naming(file, for: scanned)
            if answer.cacheable { cacheable.insert(file) }
        }
        report.scannedInWorker = results.count - report.fromCache - uncopied
        report.workersStarted = report.scannedInWorker
        for file in misses where cacheable.contains(file) {
            if let key = keys[file] ?? nil, let result = results[file] { cache.store(key, result) }
        }
        let forgotten = cache.save()
        snapshots?.sweep(current: taken.compactMap { try? $0?.get() }.filter { $0.inPlace == nil }.map(\.key), gone: forgotten)
        report.scan = PluginLoader.assemble(
            files.compactMap { file in
                results[file.path].map { (file.path, $0.outcome(path: file.path, loadPath: loadPaths[file.path])) }
            }, rejected: rejected)
        return report
    }

    /// The snapshot of each file `keys` describe (`nil` for a file with no
    /// key), taken on as many threads as the machine has cores: copying is
    /// mostly the file system's metadata work, which runs in parallel.
    private static func take(_ keys: [ScanCache.Key?], into snapshots: PluginSnapshots) -> [Result<PluginSnapshots.Taken, CurfewError>?] {
        let taken = Mutex([Result<PluginSnapshots.Taken, CurfewError>?](repeating: nil, count: keys.count))
        let next = Atomic<Int>(0)
        let width = min(keys.count, RunConfiguration.activeProcessorCount)
        DispatchQueue.concurrentPerform(iterations: max(width, 1)) { _ in
            while true {
                let index = next.add(1, ordering: .relaxed).oldValue
                guard index < keys.count else { return }
                guard let key = keys[index] else { continue }
                let result = Result { () throws(CurfewError) in try snapshots.take(key) }
                taken.withLock { $0[index] = result }
            }
        }
        return taken.withLock { $0 }
    }

    /// Loads `file` in a scanner worker of its own: its verdict, and whether
    /// the file alone decided it (not the host: a worker it could not start),
    /// or `nil` when the caller asked to stop.
    ///
    /// The worker's word counts only if it is about this file, said once,
    /// and followed by a clean exit: plugin code runs in the worker and can
    /// write on its channel, but it cannot speak for another file.
    private func scanAlone(
        _ file: String, launchers: (native: Launcher, manifest: Launcher), shouldStop: @Sendable () -> Bool, attempt: Int = 1
    ) -> (result: FileResult, cacheable: Bool)? {
        func rejected(_ reason: String) -> FileResult { .rejected(code: CurfewError.Code.loadFailed.rawValue, reason: reason) }
        let native = !file.hasSuffix(ForeignManifestReader.suffix)
        let request: [UInt8]
        if native {
            guard let bytes = ScannerFrames.request(file) else {
                return Self.pathTooLongVerdict
            }
            request = bytes
        } else {
            request = Array((ScannerLines.request(file) + "\n").utf8)
        }
        let launcher = native ? launchers.native : launchers.manifest
        guard let channel = try? Syscalls.socketPair(.stream) else { return (rejected("Cannot start a scanner worker."), false) }
        var forkFailed = false
        let worker = launcher.start(channel: channel[1], forkFailed: &forkFailed)
        Syscalls.close(channel[1])
        guard let worker else {
            Syscalls.close(channel[0])
            // Forking is off from now on: a new socket, for a spawned worker.
            if forkFailed { return scanAlone(file, launchers: launchers, shouldStop: shouldStop, attempt: attempt) }
            return (rejected("Cannot start a scanner worker (\(workerExecutable))."), false)
        }
        var closed = false
        defer { if !closed { Syscalls.close(channel[0]) } }
        /// Kills the worker, or lets it exit (it said it is done) and then
        /// kills what it left in its group: its wait status, or `nil` when unknown.
        func end(killing: Bool) -> Int32? { worker.end(killing ? .kill : Teardown([.wait(allowed: .seconds(2))])) }
        WorkerProtocol.send(bytes: request, to: channel[0])

        var reply: any ScannerReply = native ? ScannerFrames(file: file) : ScannerLines(file: file)
        var said = ScannerSaid()
        var bytes = [UInt8](repeating: 0, count: 65536)
        let clock = MonotonicClock()
        let deadline = clock.now().advanced(by: timeoutPerFile)
        while true {
            if shouldStop() {
                _ = end(killing: true)
                return nil
            }
            if !Syscalls.waitForInput(channel[0], milliseconds: 100) {
                guard clock.now() >= deadline else { continue }
                // No end within the timeout: loading the file hangs.
                _ = end(killing: true)
                return hungVerdict
            }
            let count = bytes.withUnsafeMutableBytes { buffer in (try? Syscalls.read(channel[0], into: buffer)) ?? -1 }
            if count <= 0 { break }
            let events = bytes.withUnsafeBytes { reply.read(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
            guard said.hear(events) else { break }
        }
        let ended = end(killing: said.problem != nil || !said.finished)
        if said.endedBeforeLoading && attempt < 3 {
            // It ended before it loaded anything (say, forked as its server
            // died, it left at once): no verdict on the file. Another worker,
            // on another socket.
            Syscalls.close(channel[0])
            closed = true
            return scanAlone(file, launchers: launchers, shouldStop: shouldStop, attempt: attempt + 1)
        }
        return said.verdict(status: ended)
    }

    /// The verdict on a file whose path is longer than a scanner reads.
    static let pathTooLongVerdict: (result: FileResult, cacheable: Bool) = (
        .rejected(code: CurfewError.Code.loadFailed.rawValue, reason: "Cannot be loaded: its path is longer than \(CURFEW_SCAN_MAX_PATH) bytes."),
        true
    )

    /// The verdict on a file whose loading hung past the timeout.
    var hungVerdict: (result: FileResult, cacheable: Bool) {
        let seconds = Int(timeoutPerFile.seconds.rounded())
        return (
            .rejected(
                code: CurfewError.Code.loadFailed.rawValue,
                reason: "Hung while loading: no answer within \(seconds) s (its constructor or entry function never returned)."),
            true
        )
    }

    /// The scanners' environment: a helper's, and when ``sandboxed``, the
    /// word that they confine themselves (see `scanner.c`, and
    /// ``serve(_:channel:)`` for manifests' scanners).
    var scannerEnvironment: [String] {
        let environment = WorkerProtocol.helperEnvironment().filter { !$0.hasPrefix(CURFEW_SCAN_SANDBOX_VARIABLE + "=") }
        return sandboxed ? environment + ["\(CURFEW_SCAN_SANDBOX_VARIABLE)=1"] : environment
    }

    /// Starts scanner workers: forked by a fork server started on first
    /// need, else (or once forking fails) each with `posix_spawn`.
    final class Launcher: Sendable {
        private let executable: String
        /// The argument that starts one scanner.
        private let argument: String
        private let environment: [String]
        private let forks: LazyForkServer

        /// - Parameter native: C scanners of plugin libraries
        ///   (`__scanserver`, `__scanfile`), else Swift ones (`__worker`).
        init(executable: String, forking: Bool, native: Bool, environment: [String]) {
            self.executable = executable
            argument = native ? CURFEW_SCAN_FILE_ARGUMENT : WorkerProtocol.workerArgument
            self.environment = environment
            forks = LazyForkServer(
                executable: executable, argument: native ? CURFEW_SCAN_SERVER_ARGUMENT : IsolationWorker.forkServerArgument,
                environment: environment, enabled: forking)
        }

        /// A scanner worker whose fd 3 is `channel` and whose stdout and
        /// stderr go to /dev/null; `nil` when none could start.
        /// When a fork fails, `nil` and `forkFailed`: the server may have
        /// forked a child with `channel` before it died, so that socket must
        /// not go to another worker (two would read one message).
        func start(channel: Int32, forkFailed: inout Bool) -> (any TeardownTarget)? {
            let null = (try? Syscalls.open("/dev/null", .write)) ?? -1
            defer { if null >= 0 { Syscalls.close(null) } }
            if forks.isOn {
                if let forked = forks.fork(channel: channel, out: null, err: null) { return ForkedWorker(forked.child, of: forked.server) }
                forkFailed = true
                return nil
            }
            let spawned = Syscalls.spawnWorker(
                executable, arguments: [executable, argument], environment: environment, channel: channel, out: null, err: null)
            guard case .success(let pid) = spawned else { return nil }
            return HelperProcess(pid: pid)
        }

        /// The scan is over: the fork server, if any, leaves.
        func close() {
            forks.close()
        }
    }

    /// The worker's side: loads each file and reports it (`curfew __worker`, first message `scan`).
    static func serve(_ files: [String], channel: Int32) -> Int32 {
        // Confined as a C scanner confines itself (scanner.c), while this
        // process has one thread; unconfined, it loads nothing.
        var unconfined: Sandbox.Failure?
        if Syscalls.environmentValue(CURFEW_SCAN_SANDBOX_VARIABLE) != nil {
            do throws(Sandbox.Failure) { try Sandbox.applyForScan() } catch { unconfined = error }
        }
        for file in files {
            if let unconfined {
                WorkerProtocol.send(FileResult.unconfined(unconfined.message).message(file: file), to: channel)
                continue
            }
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
    let modes: [String]

    init(_ job: PluginJob) {
        modes = job.backgroundModes
        name = job.name
        summary = job.summary
        continuous = job.isContinuous
        chunked = job.isChunked
        foreignLibrary = job.foreignLibrary
    }

    /// Reads a job from the cache or a scanner worker: an object with a
    /// string name and summary (else `nil`), whose other members count only
    /// when they are what the host writes.
    init?(reading reader: inout JSONReader) throws(JSONSyntaxError) {
        var name: String?
        var summary: String?
        var continuous = false
        var chunked = false
        var library: String?
        var modes: [String] = []
        let object = try reader.readObjectIfOne { reader, key, kind throws(JSONSyntaxError) in
            switch key {
            case "name" where kind == .string: name = try reader.readString()
            case "summary" where kind == .string: summary = try reader.readString()
            case "continuous" where kind == .bool: continuous = try reader.readBool()
            case "chunked" where kind == .bool: chunked = try reader.readBool()
            case "library" where kind == .string: library = try reader.readString()
            case "modes" where kind == .array:
                // Kept only if still a list of modes.
                var valid = true
                try reader.readArray { reader throws(JSONSyntaxError) in
                    guard reader.nextKind() == .string else {
                        valid = false
                        return
                    }
                    let mode = try reader.readString()
                    if modes.count < BackgroundMode.maximumCount && BackgroundMode.isValidName(mode) {
                        modes.append(mode)
                    } else {
                        valid = false
                    }
                }
                if !valid { modes = [] }
            default: break  // skipped
            }
        }
        guard object, let name, let summary else { return nil }
        self.name = name
        self.summary = summary
        self.continuous = continuous
        self.chunked = chunked
        foreignLibrary = library
        self.modes = modes
    }

    var json: String {
        var line = JSONLine("name", name)
        line.add("summary", summary)
        line.addRaw("continuous", continuous ? "true" : "false")
        line.addRaw("chunked", chunked ? "true" : "false")
        if let foreignLibrary { line.add("library", foreignLibrary) }
        if !modes.isEmpty { line.add("modes", modes) }
        return line.text
    }
}

/// What a scan of one file found.
enum FileResult: Sendable, Equatable {
    case jobs([ScannedJob])
    case rejected(code: String, reason: String)

    /// Reads a verdict: `rejected` with its code and reason, else the jobs
    /// listed (those that read right), else no result. With its type and
    /// file, when it is an object with a string `type` and `file` (a
    /// scanner worker's message has both, a cache entry's result a type).
    static func read(_ reader: inout JSONReader) throws(JSONSyntaxError) -> (result: FileResult, type: String?, file: String?) {
        var type: String?
        var file: String?
        var code: String?
        var reason: String?
        var jobs: [ScannedJob]?
        _ = try reader.readObjectIfOne { reader, key, kind throws(JSONSyntaxError) in
            switch key {
            case "type" where kind == .string: type = try reader.readString()
            case "file" where kind == .string: file = try reader.readString()
            case "code" where kind == .string: code = try reader.readString()
            case "reason" where kind == .string: reason = try reader.readString()
            case "jobs" where kind == .array:
                var list: [ScannedJob] = []
                try reader.readArray { reader throws(JSONSyntaxError) in
                    if let job = try ScannedJob(reading: &reader) { list.append(job) }
                }
                jobs = list
            default: break  // skipped
            }
        }
        if type == "rejected" { return (.rejected(code: code ?? "load-failed", reason: reason ?? ""), type, file) }
        if let jobs { return (.jobs(jobs), type, file) }
        return (.rejected(code: "load-failed", reason: "The scanner worker gave no result."), type, file)
    }

    /// The verdict as JSON: a scanner worker's answer about `file`, or,
    /// without a file, a scan cache entry's result (its entry has the path).
    func message(file: String?) -> String {
        switch self {
        case .jobs(let jobs):
            var line = JSONLine("type", "scanned")
            if let file { line.add("file", file) }
            line.addRaw("jobs", "[" + jobs.map(\.json).joined(separator: ",") + "]")
            return line.text
        case .rejected(let code, let reason):
            var line = JSONLine("type", "rejected")
            if let file { line.add("file", file) }
            line.add("code", code)
            line.add("reason", reason)
            return line.text
        }
    }

    /// This verdict on the snapshot at `snapshot`, told of `file`: a
    /// reason names the user's file, not the copy (a loader's error quotes
    /// the path it loaded).
    func naming(_ file: String, for snapshot: String) -> FileResult {
        guard case .rejected(let code, let reason) = self, file != snapshot else { return self }
        return .rejected(code: code, reason: reason.replacing(snapshot, with: file))
    }

    /// The plugin at `path` this verdict describes, its code at `loadPath`.
    func outcome(path: String, loadPath: String? = nil) -> Result<LoadedPlugin, CurfewError> {
        switch self {
        case .jobs(let jobs):
            let jobs = jobs.enumerated().map { index, job in
                PluginJob(
                    scannedName: job.name, summary: job.summary, pluginPath: path, isContinuous: job.continuous,
                    isChunked: job.chunked, foreignLibrary: job.foreignLibrary, index: index, backgroundModes: job.modes)
            }
            return .success(LoadedPlugin(path: path, jobs: jobs, loadPath: loadPath))
        case .rejected(let code, let reason):
            return .failure(CurfewError(CurfewError.Code(rawValue: code), reason))
        }
    }
}
