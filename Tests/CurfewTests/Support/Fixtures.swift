import Foundation
import Glibc
import Synchronization

@testable import Curfew
import CurfewCLI

/// Paths of the package and its build products, and fixture plugins compiled
/// with `cc` at test time.
enum Fixtures {
    /// The package's root folder.
    static let packageRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static let includeFolder = packageRoot.appendingPathComponent("include").path
    static let sourceFolder = packageRoot.appendingPathComponent("Tests/Fixtures").path

    /// The folder holding the test binary, where SwiftPM also puts `curfew`
    /// and the example plugins (`swift test` builds every product).
    static let buildFolder: String = {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: executable).deletingLastPathComponent().path
    }()

    /// The environment for a `curfew` the tests start: this one, with a scan
    /// cache and a state folder of the test run's own, so the tests neither
    /// read nor grow the user's (thousands of fixture files would make every
    /// scan slow, and their runs would fill the user's history).
    static let environment: [String: String] = {
        var environment = ProcessInfo.processInfo.environment
        environment["XDG_CACHE_HOME"] = workRoot + "/cache"
        environment["XDG_STATE_HOME"] = workRoot + "/state"
        environment.removeValue(forKey: "STATE_DIRECTORY")
        // No cgroups but in the tests of them (which set it "on"): a host that
        // makes them ends what any killed host left in its cgroup and says
        // so, on another test's stderr.
        environment[WorkerCgroups.offVariable] = "off"
        return environment
    }()

    /// What a test of cgroups adds to a `curfew`'s environment.
    static let withCgroups = [WorkerCgroups.offVariable: "on"]

    /// A policy whose grant expires after `expiry`, with seconds to spare
    /// before its hard deadline: for a test of what a job does when its
    /// grant expires, not of the deadline. A small budget's default lead, a
    /// quarter of it, is too short on a loaded machine for a debug-built job
    /// to end its chunk and run its expire hook.
    static func expiring(after expiry: Duration) throws -> GrantPolicy {
        try GrantPolicy(budget: expiry + expirySlack, grace: expirySlack)
    }

    static let expirySlack: Duration = .seconds(5)

    /// The environment for one `curfew` with `arguments`: a state folder of
    /// its own unless the test chose one, so what one test's run learns (a
    /// job's chunk times, its checkpoint) cannot change another's.
    static func environment(for arguments: [String]) -> [String: String] {
        guard !arguments.contains("--state") else { return environment }
        var environment = environment
        environment["XDG_STATE_HOME"] = temporaryFolder("state")
        return environment
    }

    /// Whether this run is the suite's pass under a sanitizer (`.ci/run` sets
    /// `CURFEW_TEST_SANITIZER`): then the few tests that need an address-space
    /// limit, measure memory, or race a tight budget with megabytes of output
    /// are skipped, for AddressSanitizer reserves terabytes of shadow memory
    /// and runs everything a few times slower.
    static let sanitized = ProcessInfo.processInfo.environment["CURFEW_TEST_SANITIZER"] != nil

    /// The `curfew` executable built with the tests, with its scanner beside it.
    static var curfewExecutable: String {
        _ = scannerExecutable
        return buildFolder + "/curfew"
    }

    /// `curfew-scanner`, built by `Scripts/build-scanner` beside `curfew`
    /// once a run, so the tests' `curfew` scans as an installed one does;
    /// `nil` under a sanitizer (plugins built with AddressSanitizer load only
    /// where its runtime is, in the instrumented `curfew`, whose own image
    /// then runs the scans).
    static let scannerExecutable: String? = {
        guard !sanitized else { return nil }
        // Built under another name and renamed: a `curfew` never finds half of one.
        let output = buildFolder + "/.curfew-scanner-\(getpid())"
        let result = try? runBlocking(packageRoot.path + "/Scripts/build-scanner", [output], in: nil, timeout: nil, environment: [:])
        guard let result, result.status == 0 else { fatalError("Scripts/build-scanner failed: \(result?.stderr ?? "did not start")") }
        let installed = buildFolder + "/" + SafeScanner.scannerName
        guard rename(output, installed) == 0 else { fatalError("cannot put curfew-scanner beside curfew: errno \(errno)") }
        return installed
    }()

    /// The example plugins built by SwiftPM.
    static var examplePlugins: [String] {
        ["ExampleTimerCounter", "ExampleEarlyFinish", "ExampleTaskDriven", "ExampleSwiftJob", "ExampleSwiftTasks"].map {
            "\(buildFolder)/lib\($0).so"
        }
    }

    /// `--allow-write folder` where `isolation` confines the job (a
    /// worker's sandbox is on by default), else nothing: for a fixture that
    /// writes where its test reads.
    static func allowingWrite(_ folder: String, in isolation: Isolation) -> [String] {
        isolation == .none ? [] : ["--allow-write", folder]
    }

    /// A fresh folder under the test run's work folder (see `workRoot`).
    static func temporaryFolder(_ name: String = "dir") -> String {
        let path = workRoot + "/\(name)-\(nextSerial())"
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// The folder every fixture, scratch folder, cache and state folder of
    /// this test run goes in: new for each run (a folder named by the process
    /// id was found again when the id came round, and a test's copy into it
    /// failed with "File exists"), mode 755 as a folder made by the user is,
    /// and removed when the run exits unless `CURFEW_TEST_KEEP` is set, to look
    /// at what a failed test left. Only the test process removes it: a child
    /// forked without exec that calls `exit` runs the same handler.
    static let workRoot: String = {
        var template = Array((NSTemporaryDirectory() + "curfew-tests-XXXXXX").utf8CString)
        guard mkdtemp(&template) != nil else { fatalError("mkdtemp failed: \(String(cString: strerror(errno)))") }
        let path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        chmod(path, 0o755)
        if ProcessInfo.processInfo.environment["CURFEW_TEST_KEEP"] == nil {
            _ = workRootOwner  // read here, in the test process, not first in a child
            atexit {
                guard getpid() == Fixtures.workRootOwner else { return }
                try? FileManager.default.removeItem(atPath: Fixtures.workRoot)
            }
        }
        return path
    }()

    /// The process that made `workRoot`.
    private static let workRootOwner = getpid()

    private static let serial = Atomic<Int>(0)
    private static func nextSerial() -> Int { serial.add(1, ordering: .relaxed).newValue }

    /// Compiles `Tests/Fixtures/<source>` into a shared object of its own
    /// (a new path, so a new copy of its globals when loaded).
    static func compile(_ source: String, defines: [String] = [], extraFlags: [String] = []) throws -> String {
        let output = workRoot + "/\(source.replacingOccurrences(of: ".c", with: ""))-\(nextSerial()).so"
        let arguments = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-fvisibility=hidden",
                         "-I", includeFolder] + defines.map { "-D\($0)" } + extraFlags
            + ["\(sourceFolder)/\(source)", "-o", output, "-lpthread"]
        let result = try runBlocking("/usr/bin/env", ["cc"] + arguments, in: nil, timeout: nil, environment: [:])
        guard result.status == 0 else {
            throw FixtureError.compileFailed(source: source, output: result.stderr)
        }
        return output
    }

    /// Runs a program to completion and returns its exit status and output.
    /// With a `timeout`, a program still running then is killed (SIGKILL, its
    /// status 128 + 9) so a hang fails the test instead of stalling the suite.
    ///
    /// The wait happens on a thread of its own: a test waiting for a program
    /// must not hold one of the few threads every other test runs on.
    /// `environment` adds to (or replaces in) the suite's environment.
    static func run(
        _ executable: String, _ arguments: [String], in folder: String? = nil, timeout: Duration? = nil,
        environment extra: [String: String] = [:]
    ) async throws -> (status: Int32, stdout: String, stderr: String) {
        try await offPool { try runBlocking(executable, arguments, in: folder, timeout: timeout, environment: extra) }
    }

    static func runBlocking(
        _ executable: String, _ arguments: [String], in folder: String?, timeout: Duration?, environment extra: [String: String]
    ) throws -> (status: Int32, stdout: String, stderr: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment(for: arguments).merging(extra) { $1 }
        if let folder { process.currentDirectoryURL = URL(fileURLWithPath: folder) }
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        // The timer holds neither the process nor its pipes (a test's timeout
        // outlives most programs: holding them kept a thousand pipes open), and
        // signals nothing once the program is reaped.
        let ended = Mutex(false)
        defer { ended.withLock { $0 = true } }
        if let timeout {
            let pid = process.processIdentifier
            let nanoseconds = Int(timeout.components.seconds) * 1_000_000_000 + Int(timeout.components.attoseconds / 1_000_000_000)
            DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(nanoseconds)) { [weak process] in
                ended.withLock { ended in
                    if !ended, process?.isRunning ?? true { kill(pid, SIGKILL) }
                }
            }
        }
        // Read both pipes before waiting, so a chatty child cannot block on a full pipe.
        let group = DispatchGroup()
        let errData = Mutex(Data())
        DispatchQueue.global().async(group: group) {
            let data = err.fileHandleForReading.readDataToEndOfFile()
            errData.withLock { $0 = data }
        }
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        group.wait()
        try? out.fileHandleForReading.close()
        try? err.fileHandleForReading.close()
        // Foundation reaps its children from a signal source; seen once here to
        // leave one a zombie for ever. Reap it here if it has not.
        var status: Int32 = 0
        var reaped = false
        while process.isRunning {
            if waitpid(process.processIdentifier, &status, WNOHANG) == process.processIdentifier {
                reaped = true
                break
            }
            usleep(2_000)
        }
        let code: Int32 =
            if reaped {
                status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
            } else {
                process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
            }
        return (code, String(decoding: outData, as: UTF8.self),
                String(decoding: errData.withLock { $0 }, as: UTF8.self))
    }
}

extension Fixtures {
    /// Whether `clone3` is let through here (a container's call filter may
    /// refuse it: the fork server then forks and the host moves the worker),
    /// asked of a compiled probe, once for the whole test run (two suites
    /// running at once must not build the same file together).
    static func clone3IsLetThrough() throws -> Bool {
        try clone3Probe.get()
    }

    private static let clone3Probe = Result { () throws -> Bool in
        let output = workRoot + "/clone3_probe"
        let arguments = ["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", sourceFolder + "/clone3_probe.c", "-o", output]
        let built = try runBlocking("/usr/bin/env", arguments, in: nil, timeout: nil, environment: [:])
        guard built.status == 0 else { throw FixtureError.compileFailed(source: "clone3_probe.c", output: built.stderr) }
        return try runBlocking(output, [], in: nil, timeout: .seconds(10), environment: [:]).status == 0
    }

    /// Whether process `pid` is gone within two seconds (a zombie counts as
    /// gone: it runs nothing).
    static func isGone(_ pid: pid_t) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(2)
        while ContinuousClock.now < deadline {
            let state = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8))?.split(separator: " ").dropFirst(2).first
            if state == nil || state == "Z" { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return false
    }

    /// Runs blocking work (a wait for a process, a read of its output, a scan
    /// that waits for its worker) on a thread of its own: the tests share a
    /// pool as wide as the machine has cores, and a test blocking one of them
    /// starves the others. Expectations stay outside `body`, on the test.
    static func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Foundation.Thread { continuation.resume(with: Result { try body() }) }.start()
        }
    }

    /// Reads `handle`, off the pool, until `done` says so of what came, or its end.
    static func read(_ handle: FileHandle, startingWith text: String = "", until done: @escaping @Sendable (String) -> Bool) async -> String {
        (try? await offPool {
            var text = text
            while !done(text) {
                let data = handle.availableData
                if data.isEmpty { break }
                text += String(decoding: data, as: UTF8.self)
            }
            return text
        }) ?? text
    }

    /// Reads `handle` to its end, off the pool.
    static func readToEnd(_ handle: FileHandle) async -> String {
        await read(handle) { _ in false }
    }

    /// Starts `curfew` with `arguments`, its stdout on a pipe (returned) and
    /// its stderr discarded, for a test that talks to it while it runs.
    static func startCurfew(_ arguments: [String], environment extra: [String: String] = [:]) throws -> (Process, Pipe) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: curfewExecutable)
        process.environment = environment(for: arguments).merging(extra) { _, given in given }
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        return (process, output)
    }

    /// Waits for `process` to exit, off the pool.
    static func wait(for process: Process) async {
        _ = try? await offPool { process.waitUntilExit() }
    }
}

enum FixtureError: Error, CustomStringConvertible {
    case compileFailed(source: String, output: String)
    case missingSymbol(String)

    var description: String {
        switch self {
        case .compileFailed(let source, let output): "cc failed for \(source):\n\(output)"
        case .missingSymbol(let name): "fixture symbol \(name) not found"
        }
    }
}

/// The counters and controls `runner_jobs.c` exports.
struct RunnerFixture {
    let path: String
    private let countFunction: @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>) -> Int64
    private let releaseFunction: @convention(c) () -> Void

    init() throws {
        path = try Fixtures.compile("runner_jobs.c")
        // The same handle the loader gets: dlopen of one path loads once.
        guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL),
              let count = dlsym(handle, "fixture_count"),
              let release = dlsym(handle, "fixture_release")
        else { throw FixtureError.missingSymbol("fixture_count") }
        countFunction = unsafeBitCast(count, to: (@convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>) -> Int64).self)
        releaseFunction = unsafeBitCast(release, to: (@convention(c) () -> Void).self)
    }

    /// One counter of one job, summed over its runs (-1 before its first run).
    func count(_ job: String, _ counter: String) -> Int64 {
        job.withCString { job in counter.withCString { countFunction(job, $0) } }
    }

    /// Unblocks the jobs that wait for the test ("stuck", "stuck-expire").
    func release() {
        releaseFunction()
    }

    /// The fixture's jobs, loaded the way the host loads them.
    func jobs(_ names: String...) throws -> [PluginJob] {
        let plugin = try PluginLoader().load(path)
        return try names.map { name in
            guard let job = plugin.jobs.first(where: { $0.name == name }) else { throw FixtureError.missingSymbol(name) }
            return job
        }
    }
}

/// Collects run events for later checks.
final class EventLog: Sendable {
    private let events = Mutex<[RunEvent]>([])

    func record(_ event: RunEvent) {
        events.withLock { $0.append(event) }
    }

    var all: [RunEvent] { events.withLock { $0 } }

    func logs(of job: String) -> [String] {
        all.compactMap { event in
            if case .log(job, _, let message) = event { return message }
            return nil
        }
    }

    func expirations(of job: String) -> [ExpirationReason] {
        all.compactMap { event in
            if case .expiring(job, let reason) = event { return reason }
            return nil
        }
    }
}

/// The text `curfew` prints for a usage error in `arguments`, or `nil` when they parse.
func usageErrorText(_ arguments: [String]) -> String? {
    do {
        _ = try CurfewCLI.Invocation(parsing: arguments)
        return nil
    } catch {
        return CurfewCLI.Help.errorText(error)
    }
}

/// One line of `curfew run --json` output, with the fields tests look at.
struct OutputEvent: Decodable {
    let event: String
    let job: String?
    let plugin: String?
    let outcome: String?
    let reason: String?
    let chunks: Int?
    let elapsed: Double?
    let code: String?
    let message: String?
    /// A `next-run` event's delay, in seconds.
    let after: Double?
    /// Seconds since the run began.
    let time: Double?

    /// Every line of `text`, decoded.
    static func all(in text: String) throws -> [OutputEvent] {
        try text.split(separator: "\n").map { try JSONDecoder().decode(OutputEvent.self, from: Data($0.utf8)) }
    }
}

extension StateStore {
    /// The plugin the store tests' own saves name.
    static let testPlugin = "/plugins/test.so"

    /// Saves `job`'s checkpoint as a job of ``testPlugin``.
    func saveCheckpoint(job: String, bytes: [UInt8]) throws(CurfewError) {
        try saveCheckpoint(JobKey(job: job, plugin: Self.testPlugin), bytes: bytes)
    }

    /// The checkpoint of the job named `job`, whatever its plugin (a test's
    /// run has one plugin of that name); `nil` when it has none.
    func checkpoint(job: String) throws(CurfewError) -> [UInt8]? {
        guard let entry = try checkpoints().first(where: { $0.job == job }) else { return nil }
        return try checkpoint(JobKey(job: job, plugin: entry.plugin))
    }
}
