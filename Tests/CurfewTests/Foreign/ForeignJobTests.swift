import Foundation
import Glibc
import Synchronization
import Testing

@testable import Curfew

/// Jobs from manifests, called through libffi, on a library compiled at test
/// time with no Curfew header.
@Suite(.timeLimit(.minutes(1))) struct ForeignJobTests {
    let folder: String
    let library: String
    private let countFunction: @convention(c) (UnsafePointer<CChar>) -> Int
    private let remainingFunction: @convention(c) (Int32) -> Double
    private let greetingFunction: @convention(c) () -> UnsafePointer<CChar>

    init() throws {
        folder = Fixtures.temporaryFolder("foreign")
        library = folder + "/steps.so"
        // A plain library exports everything, as a vendor library does.
        try FileManager.default.copyItem(
            atPath: try Fixtures.compile("foreign_lib.c", extraFlags: ["-fvisibility=default"]), toPath: library)
        guard let handle = dlopen(library, RTLD_NOW | RTLD_LOCAL),
              let count = dlsym(handle, "foreign_count"), let remaining = dlsym(handle, "foreign_remaining"),
              let greeting = dlsym(handle, "foreign_greeting")
        else { throw FixtureError.missingSymbol("foreign_count") }
        countFunction = unsafeBitCast(count, to: (@convention(c) (UnsafePointer<CChar>) -> Int).self)
        remainingFunction = unsafeBitCast(remaining, to: (@convention(c) (Int32) -> Double).self)
        greetingFunction = unsafeBitCast(greeting, to: (@convention(c) () -> UnsafePointer<CChar>).self)
    }

    func count(_ what: String) -> Int { what.withCString { countFunction($0) } }

    /// Writes `steps.curfew.json` (its library is `steps.so` beside it) with these jobs.
    @discardableResult
    func manifest(_ jobs: String, name: String = "steps", library: String? = nil, key: String = "library") throws -> String {
        let path = "\(folder)/\(name).curfew.json"
        let head = library.map { "\"\(key)\": \"\($0)\",\n" } ?? ""
        try "{\n\(head)\"jobs\": [\(jobs)]\n}\n".write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Runs `scan`'s jobs under `budget`, or, given `expiry`, with grants
    /// that expire after it (``Fixtures/expiring(after:)``; `budget` unused).
    func run(_ scan: PluginScan, budget: Duration = .seconds(2), expiry: Duration? = nil, parameters: [String: String] = [:],
             checkpoints: (any CheckpointKeeper)? = nil) async -> [JobResult] {
        let policy = try! expiry.map(Fixtures.expiring(after:)) ?? GrantPolicy(budget: budget)
        var configuration = RunConfiguration(policy: policy, parameters: parameters)
        configuration.checkpoints = checkpoints
        return await Runner(jobs: scan.jobs, configuration: configuration).run()
    }

    /// What `steady_step` and its hooks saw: `first`, `cleanup` or `teardown` (an index), -1 before.
    func steady(_ what: String) throws -> Int {
        let handle = try #require(dlopen(library, RTLD_NOW | RTLD_LOCAL))
        let function = try #require(dlsym(handle, "steady_count"))
        let count = unsafeBitCast(function, to: (@convention(c) (UnsafePointer<CChar>) -> Int).self)
        return what.withCString { count($0) }
    }

    /// A job of 1 ms steps that never runs out of them, taking its chunk index.
    static func steadyJob(resume: String? = nil) -> String {
        """
        {"name": "steady", "summary": "Steps for as long as it may.", \(resume.map { "\"resume\": \($0)," } ?? "")
         "chunk": {"symbol": "steady_step", "returns": "int64", "result": "items-left",
                   "args": [{"type": "int64", "from": "chunk-index"}, {"type": "int64", "value": 1000000000}]},
         "cleanup": {"symbol": "steady_cleanup", "args": [{"type": "int64", "from": "chunk-index"}]},
         "teardown": {"symbol": "steady_teardown", "args": [{"type": "int64", "from": "chunk-index"}]}}
        """
    }

    @Test func aJobThatTakesTheChunkIndexResumesWhereItsGrantExpired() async throws {
        try manifest(Self.steadyJob())
        let scan = PluginLoader().scan([folder])
        let checkpoints = MemoryCheckpoints()
        let first = try #require(await run(scan, expiry: .milliseconds(225), checkpoints: checkpoints).first)
        #expect(first.outcome == .expired)
        let reached = Int(first.chunks)
        #expect(reached > 0)
        #expect(try steady("first") == 0)
        // Cleanup and teardown get the next chunk's index, not 0, though a C hook counted the chunks.
        #expect(try steady("cleanup") == reached)
        #expect(try steady("teardown") == reached)
        #expect(checkpoints.checkpoint(job: "steady") == Array("chunk-index \(reached)".utf8))

        let second = try #require(await run(scan, expiry: .milliseconds(225), checkpoints: checkpoints).first)
        #expect(second.outcome == .expired)
        #expect(try steady("first") == reached)
        #expect(try steady("cleanup") == reached + Int(second.chunks))
        #expect(checkpoints.checkpoint(job: "steady") == Array("chunk-index \(reached + Int(second.chunks))".utf8))
    }

    @Test func resumeFalseStartsEveryRunAtChunkZero() async throws {
        try manifest(Self.steadyJob(resume: "false"))
        let scan = PluginLoader().scan([folder])
        let checkpoints = MemoryCheckpoints()
        for _ in 0..<2 {
            let result = try #require(await run(scan, expiry: .milliseconds(150), checkpoints: checkpoints).first)
            #expect(result.outcome == .expired)
            #expect(try steady("first") == 0)
        }
        #expect(checkpoints.checkpoint(job: "steady") == nil)
    }

    @Test func aCheckpointTheHostDidNotWriteStartsAtZeroAndSaysSo() async throws {
        try manifest(Self.steadyJob())
        let scan = PluginLoader().scan([folder])
        for foreign in ["chunk-index -4", "chunk-index 99999999999999999999", "chunk-index ", "{\"position\": 3}"] {
            let checkpoints = MemoryCheckpoints([try #require(scan.jobs.first).stateKey: Array(foreign.utf8)])
            var configuration = RunConfiguration(policy: try Fixtures.expiring(after: .milliseconds(150)))
            configuration.checkpoints = checkpoints
            let logs = Mutex<[String]>([])
            let runner = Runner(jobs: scan.jobs, configuration: configuration) { event in
                if case .log(_, _, let message) = event { logs.withLock { $0.append(message) } }
            }
            let result = try #require(await runner.run().first)
            #expect(result.outcome == .expired)
            #expect(try steady("first") == 0, "\(foreign)")
            #expect(logs.withLock { $0 }.contains { $0.hasPrefix("the checkpoint is not a chunk index the host saved") }, "\(foreign)")
        }
    }

    @Test func resumeMustBeABoolean() throws {
        let error = try rejection(Self.steadyJob(resume: "\"yes\""))
        #expect(error.description == "Job 'steady': \"resume\" must be true or false, not a string.")
    }

    static let stepJob = """
        {"name": "count", "summary": "Counts ten steps.",
         "chunk": {"symbol": "step", "returns": "int32", "result": "items-left",
                   "args": [{"type": "int64", "from": "chunk-index"}]}}
        """

    @Test func aCounterStepCompletesAndTheFolderScanSkipsItsLibrary() async throws {
        try manifest(Self.stepJob)
        let scan = PluginLoader().scan([folder])
        #expect(scan.rejected.isEmpty, "steps.so is the manifest's library, not a plugin: \(scan.rejected)")
        #expect(scan.jobs.map(\.name) == ["count"])
        #expect(scan.jobs.first?.foreignLibrary == library)
        let result = try #require(await run(scan).first)
        #expect(result.outcome == .completed)
        #expect(result.chunks == 10)
        #expect(count("step") == 10)
    }

    @Test func remainingTimeAndAHostOwnedStateBuffer() async throws {
        try manifest("""
            {"name": "tick", "summary": "Ticks five times.", "state": {"size": 8},
             "chunk": {"symbol": "tick", "returns": "int32", "result": "zero-continues",
                       "args": [{"type": "double", "from": "time-remaining"}, {"type": "pointer", "from": "state"}]}}
            """)
        let result = try #require(await run(PluginLoader().scan([folder]), budget: .seconds(30)).first)
        #expect(result.outcome == .completed)
        #expect(result.chunks == 5)
        #expect(remainingFunction(0) > 29 && remainingFunction(0) <= 30)
        #expect(remainingFunction(1) <= remainingFunction(0))
    }

    @Test func aStringParameter() async throws {
        try manifest("""
            {"name": "greet", "summary": "Greets someone.",
             "chunk": {"symbol": "greet", "returns": "int32", "result": "nonzero-done",
                       "args": [{"type": "string", "param": "who", "default": "nobody"}]}}
            """)
        let result = try #require(await run(PluginLoader(parameters: ["who": "Ada Lovelace"]).scan([folder])).first)
        #expect(result.outcome == .completed)
        #expect(String(cString: greetingFunction()) == "Ada Lovelace")
    }

    @Test func aUInt8ReturnIsReadUnsigned() async throws {
        try manifest("""
            {"name": "bytes", "summary": "Counts down in a byte.",
             "chunk": {"symbol": "countdown8", "returns": "uint8", "result": "items-left",
                       "args": [{"type": "uint32", "from": "chunk-index"}]}}
            """)
        let result = try #require(await run(PluginLoader().scan([folder])).first)
        #expect(result.outcome == .completed, "200 is items left, not a failure: \(result.reason)")
        #expect(result.chunks == 6)
    }

    /// A chunk whose only changing argument is a float index and whose
    /// result is a signed byte: called by the host's C hook through libffi,
    /// the index converted, the result read signed and its failure logged.
    @Test func aFloatIndexAndASignedByteResultThroughLibffi() async throws {
        try manifest("""
            {"name": "floats", "summary": "Counts in floats.",
             "chunk": {"symbol": "step_float", "returns": "int8", "result": "items-left",
                       "args": [{"type": "float", "from": "chunk-index"}, {"type": "int64", "value": 5}]}}
            """)
        let scan = PluginLoader().scan([folder])
        let hook = try #require(scan.jobs.first?.hooks.chunk)
        #expect(unsafeBitCast(hook, to: UnsafeRawPointer.self) == unsafeBitCast(ForeignJob.ffiHooks.chunk!, to: UnsafeRawPointer.self))
        let result = try #require(await run(scan).first)
        #expect(result.outcome == .failed)
        #expect(result.reason == "chunk returned failed: step_float returned -3 (items-left)")
        #expect(result.chunks == 5)
        #expect(count("float") == 5)
    }

    @Test func aJobThatRunsPastItsBudgetExpiresWithCleanupAndTeardown() async throws {
        try manifest("""
            {"name": "slow", "summary": "Never finishes.",
             "setup": {"symbol": "make_state", "returns": "pointer", "args": [{"type": "int64", "value": 64}]},
             "chunk": {"symbol": "slow_step", "args": [{"type": "pointer", "from": "state"}]},
             "cleanup": {"symbol": "on_cleanup", "args": [{"type": "pointer", "from": "state"}]},
             "teardown": {"symbol": "free_state", "args": [{"type": "pointer", "from": "state"}]}}
            """)
        let result = try #require(await run(PluginLoader().scan([folder]), expiry: .milliseconds(225)).first)
        #expect(result.outcome == .expired)
        #expect(result.reason == "time ran out; cleanup ran")
        #expect(count("setup") == 1)
        #expect(count("cleanup") == 1)
        #expect(count("teardown") == 1)
        #expect(result.chunks == UInt64(count("slow")))
    }

    @Test func aFailingChunkSaysWhatItReturned() async throws {
        try manifest("""
            {"name": "negative", "summary": "Fails at once.",
             "chunk": {"symbol": "step", "returns": "int32", "result": "items-left",
                       "args": [{"type": "int64", "value": 20}]}}
            """)
        let result = try #require(await run(PluginLoader().scan([folder])).first)
        #expect(result.outcome == .failed)
        #expect(result.reason == "chunk returned failed: step returned -11 (items-left)")
    }

    @Test func aMissingParameterFailsTheJobInCreate() async throws {
        try manifest("""
            {"name": "greet", "summary": "Greets someone.",
             "chunk": {"symbol": "greet", "returns": "int32", "result": "nonzero-done",
                       "args": [{"type": "string", "param": "who"}]}}
            """)
        let scan = PluginLoader().scan([folder])
        #expect(scan.rejected.isEmpty, "listing works without the parameter")
        let result = try #require(await run(scan).first)
        #expect(result.outcome == .failed)
        #expect(result.reason == "create failed: greet needs --param who=<value>")
        #expect(count("greet") == 0)
    }

    @Test func noBudgetReadsAsTheLargestValueOfANarrowType() async throws {
        try manifest("""
            {"name": "seconds", "summary": "Notes the seconds left.", "continuous": true,
             "chunk": {"symbol": "note_seconds", "returns": "int32", "result": "nonzero-done",
                       "args": [{"type": "int8", "from": "time-remaining"}]}}
            """)
        let configuration = RunConfiguration(policy: GrantPolicy(allowsContinuous: true))
        let results = await Runner(jobs: PluginLoader().scan([folder]).jobs, configuration: configuration).run()
        #expect(results.map(\.outcome) == [.completed])
        #expect(count("seconds") == 127, "saturated, not wrapped and not a trap")
    }

    // MARK: Validation

    @Test func theStateWithoutAStateToPass() throws {
        let error = try rejection("""
            {"name": "count", "summary": "s", "chunk": {"symbol": "slow_step", "args": [{"type": "pointer", "from": "state"}]}}
            """)
        #expect(error.description == "Job 'count': 'slow_step' takes the state, but the job has none: declare \"state\": {\"size\": N} or a setup that returns a pointer.")
    }

    @Test func negativeDoneNeedsASignedReturn() throws {
        let error = try rejection("""
            {"name": "count", "summary": "s", "chunk": {"symbol": "countdown8", "returns": "uint8", "result": "negative-done",
             "args": [{"type": "uint32", "from": "chunk-index"}]}}
            """)
        #expect(error.description == "Job 'count': the negative-done rule needs a signed integer return type, not uint8.")
    }


    func rejection(_ jobs: String, parameters: [String: String] = [:]) throws -> CurfewError {
        let path = try manifest(jobs)
        let scan = PluginLoader(parameters: parameters).scan([folder])
        #expect(scan.plugins.isEmpty)
        let rejected = try #require(scan.rejected.first)
        #expect(rejected.path == path)
        #expect(!rejected.error.description.contains("\n"))
        return rejected.error
    }

    @Test func unknownType() throws {
        let error = try rejection("""
            {"name": "count", "summary": "s", "chunk": {"symbol": "step", "returns": "int32", "result": "items-left",
             "args": [{"type": "int128", "from": "chunk-index"}]}}
            """)
        #expect(error.code == .invalidManifest)
        #expect(error.description == "Job 'count': argument 1 of chunk 'step' has unknown type 'int128'; use int8, int16, int32, int64, uint8, uint16, uint32, uint64, float, double, pointer or string.")
    }

    @Test func unknownSource() throws {
        let error = try rejection("""
            {"name": "count", "summary": "s", "chunk": {"symbol": "step", "returns": "int32", "result": "items-left",
             "args": [{"type": "int64", "from": "moon-phase"}]}}
            """)
        #expect(error.description == "Job 'count': argument 1 of chunk 'step' has unknown source 'moon-phase'; use chunk-index, time-remaining or state.")
    }

    @Test func tooManyArguments() throws {
        let arguments = Array(repeating: #"{"type": "int64", "value": 1}"#, count: 17).joined(separator: ", ")
        let error = try rejection("""
            {"name": "count", "summary": "s", "chunk": {"symbol": "step", "returns": "int32", "result": "items-left",
             "args": [\(arguments)]}}
            """)
        #expect(error.description == "Job 'count': chunk 'step' declares 17 arguments, more than the limit of 16.")
    }

    @Test func missingSymbol() throws {
        let error = try rejection("""
            {"name": "count", "summary": "s", "chunk": {"symbol": "no_such_step", "returns": "int32", "result": "items-left"}}
            """)
        #expect(error.code == .missingSymbol)
        #expect(error.description == "Job 'count': symbol 'no_such_step' (its chunk) is not in \(library).")
    }

    @Test func aParameterThatDoesNotParseAsItsType() throws {
        let error = try rejection("""
            {"name": "count", "summary": "s", "chunk": {"symbol": "step", "returns": "int32", "result": "items-left",
             "args": [{"type": "int32", "param": "start"}]}}
            """, parameters: ["start": "twelve"])
        #expect(error.code == .invalidParameter)
        #expect(error.description == "Job 'count': argument 1 of chunk 'step': --param start=twelve is not an integer, as int32 needs.")
    }

    @Test func aLiteralThatDoesNotFitItsType() throws {
        let error = try rejection("""
            {"name": "count", "summary": "s", "chunk": {"symbol": "step", "returns": "int32", "result": "items-left",
             "args": [{"type": "uint8", "value": 300}]}}
            """)
        #expect(error.description == "Job 'count': argument 1 of chunk 'step': value 300 does not fit uint8.")
    }

    @Test func aFractionWhereAnIntegerBelongs() throws {
        let error = try rejection("""
            {"name": "count", "summary": "s", "chunk": {"symbol": "step", "returns": "int32", "result": "items-left",
             "args": [{"type": "int32", "value": 1.0}]}}
            """)
        #expect(error.description == "Job 'count': argument 1 of chunk 'step': value 1.0 is not an integer, as int32 needs.")
    }

    @Test func aChunkWithoutAResultRule() throws {
        let error = try rejection("""
            {"name": "count", "summary": "s", "chunk": {"symbol": "step", "returns": "int32"}}
            """)
        #expect(error.description == "Job 'count': chunk 'step' needs a \"result\" rule: items-left, zero-continues, nonzero-done, negative-done or curfew-result.")
    }

    @Test func aMisspelledKey() throws {
        let error = try rejection("""
            {"name": "count", "summary": "s", "chunck": {"symbol": "step"}}
            """)
        #expect(error.description == "Job #0 has unknown key \"chunck\"; known: chunk, cleanup, continuous, name, resume, setup, state, summary, teardown.")
    }

    @Test func invalidJSONGivesLineAndColumn() throws {
        let path = "\(folder)/broken.curfew.json"
        try "{\n  \"jobs\": [\n    {\"name\": \"x\",, }\n  ]\n}\n".write(toFile: path, atomically: true, encoding: .utf8)
        let error = try #require(PluginLoader().scan([path]).rejected.first?.error)
        #expect(error.code == .invalidManifest)
        #expect(error.description == "Not valid JSON at line 3, column 18: expected a quoted key.")
    }

    @Test func theRestOfTheFolderStillRuns() async throws {
        try manifest(Self.stepJob)
        try "not json".write(toFile: "\(folder)/bad.curfew.json", atomically: true, encoding: .utf8)
        let scan = PluginLoader().scan([folder])
        #expect(scan.rejected.map(\.path) == ["\(folder)/bad.curfew.json"])
        #expect(scan.rejected.first?.error.description == "Not valid JSON at line 1, column 1: expected a value.")
        #expect(await run(scan).map(\.outcome) == [.completed])
    }

    // MARK: Manifests that reach too far

    func chunk(symbol: String) -> String {
        """
        {"name": "count", "summary": "s", "chunk": {"symbol": "\(symbol)", "returns": "int32", "result": "items-left"}}
        """
    }

    /// Before: `environ` made the host call into data (a crash), `fork` and
    /// `exit` ran the C library's own.
    @Test(arguments: [
        ("foreign_data", "is not a function of LIBRARY, so it cannot be called."),
        ("environ", "is not defined in LIBRARY but in a library it uses; only its own functions can be called."),
        ("fork", "is not defined in LIBRARY but in a library it uses; only its own functions can be called."),
        ("exit", "is not defined in LIBRARY but in a library it uses; only its own functions can be called."),
    ])
    func onlyTheLibrarysOwnFunctionsCanBeCalled(symbol: String, problem: String) throws {
        let error = try rejection(chunk(symbol: symbol))
        #expect(error.description == "Job 'count': symbol '\(symbol)' (its chunk) \(problem.replacingOccurrences(of: "LIBRARY", with: library))")
    }

    @Test func aNulInASymbolIsRefused() throws {
        let error = try rejection(chunk(symbol: "step\\u0000_and_more"))
        #expect(error.description == "Job 'count': the symbol of chunk contains a NUL byte, which would cut its name short.")
    }

    @Test(arguments: [
        ("steps.so\\u0000.txt", "library", "The manifest's \"library\" contains a NUL byte, which would cut the name short."),
        ("../foreign/steps.so", "library", "The manifest's \"library\" climbs out of a folder with '..'; name the library's own path."),
        ("lib/", "library", "The manifest's \"library\" names a folder, not a file."),
        ("/usr/lib/libz.so.1", "system-library", "The manifest's \"system-library\" must be a bare file name (such as libz.so.1), not a path."),
    ])
    func libraryNamesThatTrick(name: String, key: String, problem: String) throws {
        let path = try manifest(Self.stepJob, name: "tricks", library: name, key: key)
        let error = try #require(PluginLoader().scan([path]).rejected.first?.error)
        #expect(error.description == problem)
    }

    /// A bare name is the file beside the manifest, never a system library of that name.
    @Test func aBareLibraryNameIsFoundBesideTheManifestOnly() throws {
        let path = try manifest(Self.stepJob, name: "bare", library: "libz.so.1")
        let error = try #require(PluginLoader().scan([path]).rejected.first?.error)
        #expect(error.code == .loadFailed)
        #expect(error.description.hasPrefix("Its library \(folder)/libz.so.1 cannot be loaded"))
    }

    /// Before: a FIFO named as the library stalled every run for the scan's 10 s.
    @Test func aLibraryThatIsNotARegularFileIsRefusedBeforeLoading() throws {
        #expect(mkfifo(folder + "/fifo.so", 0o600) == 0)
        let path = try manifest(Self.stepJob, name: "fifo", library: "fifo.so")
        let error = try #require(PluginLoader().scan([path]).rejected.first?.error)
        #expect(error.description == "Its library \(folder)/fifo.so is not a regular file, so not a shared object.")
    }

    /// Before: loaded and run, even in a run that printed the manifest as rejected.
    @Test func aLibraryOthersCanWriteIsRefused() throws {
        let open = Fixtures.temporaryFolder("open-library")
        try FileManager.default.copyItem(atPath: library, toPath: open + "/steps.so")
        #expect(chmod(open, 0o777) == 0)
        #expect(chmod(open + "/steps.so", 0o666) == 0)
        defer { chmod(open, 0o755) }
        let path = try manifest(Self.stepJob, name: "open", library: open + "/steps.so")
        let scan = PluginLoader().scan([folder])
        #expect(!scan.jobs.contains { $0.pluginPath == path })
        let error = try #require(scan.rejected.first { $0.path == path }?.error)
        #expect(error.code == .insecure)
        #expect(error.description.hasPrefix("Its library \(open)/steps.so: File is writable by anyone (mode 666)"))
    }

    // MARK: Code nobody here wrote

    static let countBytes = """
        {"name": "count-bytes", "summary": "Reads a file a byte per chunk.",
         "setup": {"symbol": "fopen", "returns": "pointer",
                   "args": [{"type": "string", "param": "file"}, {"type": "string", "value": "r"}]},
         "chunk": {"symbol": "fgetc", "returns": "int32", "result": "negative-done",
                   "args": [{"type": "pointer", "from": "state"}]},
         "teardown": {"symbol": "fclose", "returns": "int32", "args": [{"type": "pointer", "from": "state"}]}}
        """

    @Test func theCLibrarysFgetcReadsAFileAsAJob() async throws {
        let data = Data((0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        let input = folder + "/input.bin"
        try data.write(to: URL(fileURLWithPath: input))
        try manifest(Self.countBytes, name: "libc", library: "libc.so.6", key: "system-library")
        let scan = PluginLoader(parameters: ["file": input]).scan([folder + "/libc.curfew.json"])
        #expect(scan.rejected.isEmpty, "\(scan.rejected)")
        let result = try #require(await run(scan, parameters: ["file": input]).first)
        #expect(result.outcome == .completed)
        #expect(result.chunks == 5001, "one chunk per byte, and one that meets EOF")
    }

    @Test func zlibsGzgetcDecompressesAFileAsAJob() async throws {
        let text = String(repeating: "background work in chunks\n", count: 400)
        let input = folder + "/input.txt"
        try text.write(toFile: input, atomically: true, encoding: .utf8)
        #expect(try await Fixtures.run("/usr/bin/env", ["gzip", "-k", input]).status == 0)
        try manifest("""
            {"name": "gunzip-bytes", "summary": "Decompresses a file a byte per chunk.",
             "setup": {"symbol": "gzopen", "returns": "pointer",
                       "args": [{"type": "string", "param": "file"}, {"type": "string", "value": "rb"}]},
             "chunk": {"symbol": "gzgetc", "returns": "int32", "result": "negative-done",
                       "args": [{"type": "pointer", "from": "state"}]},
             "teardown": {"symbol": "gzclose", "returns": "int32", "args": [{"type": "pointer", "from": "state"}]}}
            """, name: "zlib", library: "libz.so.1", key: "system-library")
        let scan = PluginLoader(parameters: ["file": input + ".gz"]).scan([folder + "/zlib.curfew.json"])
        #expect(scan.rejected.isEmpty, "\(scan.rejected)")
        let result = try #require(await run(scan).first)
        #expect(result.outcome == .completed)
        #expect(result.chunks == UInt64(text.utf8.count + 1))
    }
}
