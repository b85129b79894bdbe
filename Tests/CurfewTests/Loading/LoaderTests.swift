import CurfewFormats
import Foundation
import Glibc
import Testing

@testable import Curfew

/// The loader, against plugins compiled at test time that each break one rule.
@Suite struct LoaderTests {
    /// Variant numbers of `bad_plugin.c`.
    enum Variant: Int {
        case entryNull = 1, abiMismatch, structTooSmall, noExpire, noChunkNoCreate, emptyName, invalidName,
            duplicateName, zeroJobs, tooManyJobs, nullJobs, nullName, unknownFlags, jobStructTooSmall, nullJob,
            multilineSummary, reservedSet, good, longName
    }

    func rejection(_ variant: Variant) throws -> CurfewError {
        let path = try Fixtures.compile("bad_plugin.c", defines: ["VARIANT=\(variant.rawValue)"])
        let scan = PluginLoader().scan([path])
        #expect(scan.plugins.isEmpty)
        let rejected = try #require(scan.rejected.first)
        #expect(rejected.path == path)
        #expect(!rejected.error.description.contains("\n"), "a rejection is one line")
        return rejected.error
    }

    @Test func aGoodPluginLoadsWithItsJobs() throws {
        let path = try Fixtures.compile("bad_plugin.c", defines: ["VARIANT=\(Variant.good.rawValue)"])
        let plugin = try PluginLoader().load(path)
        #expect(plugin.jobs.map(\.name) == ["fixture-job", "fixture-second"])
        #expect(plugin.jobs.map(\.summary) == ["A fixture job.", "Another fixture job."])
        #expect(plugin.jobs.allSatisfy { $0.isChunked && !$0.isContinuous && $0.pluginPath == path })
    }

    /// A worker checks the job it runs, at the place the scan found it
    /// (a plugin of 250 jobs was validated whole by each job's worker); a
    /// job that moved is still found by name, one that is gone is refused.
    @Test func aWorkerChecksOnlyItsJobAtItsPlace() throws {
        let path = try Fixtures.compile("bad_plugin.c", defines: ["VARIANT=\(Variant.good.rawValue)"])
        let scanned = try PluginLoader().load(path)
        #expect(scanned.jobs.map(\.index) == [0, 1])
        let opened = try PluginLoader().open(path)
        #expect(try opened.job(1, named: "fixture-second").name == "fixture-second")
        #expect(try opened.job(0, named: "fixture-second").index == 1, "moved: found by name")
        #expect(try opened.job(7, named: "fixture-job").index == 0, "past the end: found by name")
        #expect(throws: CurfewError.self) { try opened.job(0, named: "no-such-job") }
    }

    /// A folder's files are listed in the order of their names' bytes,
    /// compared with memcmp: a shorter prefix first, and bytes past ASCII
    /// after it, as `ls` sorts in the C locale.
    @Test func filesAreOrderedByTheBytesOfTheirNames() {
        let names = ["b", "a", "ab", "é", "Z", "", "a\u{0}", "aa", "\u{7F}", "日本"]
        #expect(names.sorted(by: Syscalls.bytesPrecede) == names.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
        #expect(names.sorted(by: Syscalls.bytesPrecede) == ["", "Z", "a", "a\u{0}", "aa", "ab", "b", "\u{7F}", "é", "日本"])
    }

    @Test func notAnELFFile() throws {
        let folder = Fixtures.temporaryFolder()
        let path = folder + "/garbage.so"
        try "this is not a shared object\n".write(toFile: path, atomically: true, encoding: .utf8)
        let error = try #require(PluginLoader().scan([path]).rejected.first?.error)
        #expect(error.code == .notELF)
        #expect(error.description == "Not an ELF shared object (it does not start with the ELF magic bytes).")
    }

    @Test func emptyFile() throws {
        let path = Fixtures.temporaryFolder() + "/empty.so"
        #expect(FileManager.default.createFile(atPath: path, contents: Data()))
        let error = try #require(PluginLoader().scan([path]).rejected.first?.error)
        #expect(error.code == .emptyFile)
        #expect(error.description == "Empty file (0 bytes), not a shared object.")
    }

    @Test(.timeLimit(.minutes(1))) func aFIFOIsRefusedWithoutBlocking() throws {
        let path = Fixtures.temporaryFolder() + "/pipe.so"
        #expect(mkfifo(path, 0o600) == 0)
        let error = try #require(PluginLoader().scan([path]).rejected.first?.error)
        #expect(error.code == .notELF)
        #expect(error.description == "Not a regular file, so not a shared object.")
        #expect(PluginLoader().scan([URL(fileURLWithPath: path).deletingLastPathComponent().path]).rejected.isEmpty,
                "a folder scan skips what is not a regular file")
    }

    @Test func anELFFileThatIsNotALoadableLibrary() async throws {
        // An object file: ELF magic, but dlopen refuses it.
        let object = Fixtures.temporaryFolder() + "/object.so"
        let result = try await Fixtures.run("/usr/bin/env", ["cc", "-c", "-x", "c", "/dev/null", "-o", object])
        #expect(result.status == 0)
        let error = try #require(PluginLoader().scan([object]).rejected.first?.error)
        #expect(error.code == .loadFailed)
        #expect(error.description.hasPrefix("Cannot be loaded: "))
        #expect(error.underlying != nil)
    }

    @Test func missingEntry() async throws {
        let folder = Fixtures.temporaryFolder()
        let source = folder + "/plain.c"
        try "int add(int a, int b) { return a + b; }\n".write(toFile: source, atomically: true, encoding: .utf8)
        let library = folder + "/plain.so"
        #expect(try await Fixtures.run("/usr/bin/env", ["cc", "-shared", "-fPIC", source, "-o", library]).status == 0)
        let error = try #require(PluginLoader().scan([library]).rejected.first?.error)
        #expect(error.code == .missingEntry)
        #expect(error.description == "No 'curfew_plugin_entry' symbol: not a Curfew plugin, or its entry is not exported (mark it CURFEW_EXPORT).")
    }

    @Test func entryReturnedNullWithItsLoggedReason() throws {
        let error = try rejection(.entryNull)
        #expect(error.code == .entryDeclined)
        #expect(error.description == "The plugin declined to load (its entry returned NULL): needs FIXTURE_TOKEN to be set.")
    }

    @Test func abiVersionMismatchNamesBothVersions() throws {
        let error = try rejection(.abiMismatch)
        #expect(error.code == .abiVersionMismatch)
        #expect(error.description == "ABI version 7, this host speaks 2; rebuild the plugin against this host's curfew.h.")
    }

    @Test func descriptorTooSmall() throws {
        let error = try rejection(.structTooSmall)
        #expect(error.code == .structTooSmall)
        #expect(error.description == "Plugin descriptor struct_size is 8 bytes, at least 24 expected for ABI version 2.")
    }

    @Test func jobDescriptorTooSmall() throws {
        let error = try rejection(.jobStructTooSmall)
        #expect(error.code == .structTooSmall)
        #expect(error.description == "Job #0 struct_size is 12 bytes, at least 56 expected.")
    }

    @Test func chunkedJobWithoutExpire() throws {
        let error = try rejection(.noExpire)
        #expect(error.code == .missingHook)
        #expect(error.description == "Job 'fixture-job' has a chunk hook but no expire hook; a chunked job needs expire for its cleanup.")
    }

    @Test func jobWithNeitherChunkNorCreate() throws {
        let error = try rejection(.noChunkNoCreate)
        #expect(error.code == .missingHook)
        #expect(error.description == "Job 'fixture-job' has neither chunk nor create; a task-driven job starts its work in create.")
    }

    @Test func emptyJobName() throws {
        let error = try rejection(.emptyName)
        #expect(error.code == .invalidJobName)
        #expect(error.description == "Job #0 has an empty name.")
    }

    @Test func nullJobName() throws {
        let error = try rejection(.nullName)
        #expect(error.code == .invalidJobName)
        #expect(error.description == "Job #0 has a NULL name.")
    }

    @Test func invalidJobName() throws {
        let error = try rejection(.invalidName)
        #expect(error.code == .invalidJobName)
        #expect(error.description == "Job #0 has an invalid name 'Bad Name!': use [a-z0-9._-], starting with a letter or digit.")
    }

    @Test func overlongJobName() throws {
        let error = try rejection(.longName)
        #expect(error.code == .invalidJobName)
        #expect(error.description == "Job #0 has a name longer than 64 bytes.")
    }

    @Test func duplicateJobNameInOnePlugin() throws {
        let error = try rejection(.duplicateName)
        #expect(error.code == .duplicateJobName)
        #expect(error.description == "Job name 'fixture-job' is declared twice; job names must be unique.")
    }

    @Test func duplicateJobNameAcrossPlugins() throws {
        let first = try Fixtures.compile("bad_plugin.c", defines: ["VARIANT=\(Variant.good.rawValue)"])
        let second = try Fixtures.compile("bad_plugin.c", defines: ["VARIANT=\(Variant.good.rawValue)"])
        let scan = PluginLoader().scan([first, second])
        #expect(scan.plugins.map(\.path) == [first])
        let rejected = try #require(scan.rejected.first)
        #expect(rejected.path == second)
        #expect(rejected.error.code == .duplicateJobName)
        #expect(rejected.error.description == "Job name 'fixture-job' is already declared by \(first); job names must be unique.")
    }

    @Test func noJobs() throws {
        let error = try rejection(.zeroJobs)
        #expect(error.code == .invalidJobCount)
        #expect(error.description == "The plugin declares no jobs (job_count is 0).")
    }

    @Test func absurdJobCount() throws {
        let error = try rejection(.tooManyJobs)
        #expect(error.code == .invalidJobCount)
        #expect(error.description == "The plugin declares 100000 jobs, more than the limit of 256.")
    }

    @Test func nullJobTable() throws {
        let error = try rejection(.nullJobs)
        #expect(error.code == .invalidDescriptor)
        #expect(error.description == "Plugin descriptor field 'jobs' is NULL but job_count is 2.")
    }

    @Test func nullJobPointer() throws {
        let error = try rejection(.nullJob)
        #expect(error.code == .invalidDescriptor)
        #expect(error.description == "Job #0 is a NULL pointer.")
    }

    @Test func unknownFlags() throws {
        let error = try rejection(.unknownFlags)
        #expect(error.code == .unknownFlags)
        #expect(error.description == "Job 'fixture-job' has unknown flags 0x80; this host knows 0x1.")
    }

    @Test func multilineSummary() throws {
        let error = try rejection(.multilineSummary)
        #expect(error.code == .invalidSummary)
        #expect(error.description == "Job 'fixture-job' has a summary with a line break or control character; keep it to one line.")
    }

    @Test func reservedFieldSet() throws {
        let error = try rejection(.reservedSet)
        #expect(error.code == .invalidDescriptor)
        #expect(error.description == "Plugin descriptor field 'reserved' is 1, must be 0.")
    }

    @Test func missingPath() throws {
        let path = Fixtures.temporaryFolder() + "/nothing-here"
        let error = try #require(PluginLoader().scan([path]).rejected.first?.error)
        #expect(error.code == .notFound)
        #expect(error.description == "No such file or folder.")
    }

    @Test func aFolderScanTakesSharedObjectsInNameOrderAndTheRestStillLoad() throws {
        let folder = Fixtures.temporaryFolder()
        let good = try Fixtures.compile("bad_plugin.c", defines: ["VARIANT=\(Variant.good.rawValue)"])
        let bad = try Fixtures.compile("bad_plugin.c", defines: ["VARIANT=\(Variant.abiMismatch.rawValue)"])
        try FileManager.default.copyItem(atPath: good, toPath: folder + "/b-good.so")
        try FileManager.default.copyItem(atPath: bad, toPath: folder + "/a-bad.so")
        try "notes".write(toFile: folder + "/README.txt", atomically: true, encoding: .utf8)
        try "hidden".write(toFile: folder + "/.hidden.so", atomically: true, encoding: .utf8)
        let scan = PluginLoader().scan([folder, folder + "/b-good.so"])
        #expect(scan.plugins.map(\.path) == [folder + "/b-good.so"], "loaded once, though named twice")
        #expect(scan.rejected.map(\.path) == [folder + "/a-bad.so"], "other files are not plugin candidates")
    }

    /// Before: a plugin dated after 2262 trapped `list` and `run` (seconds × 10⁹).
    @Test func aFileDatedBeyond64BitNanosecondsIsRead() throws {
        let folder = Fixtures.temporaryFolder("dated")
        let plugin = folder + "/plugin.so"
        try FileManager.default.copyItem(atPath: Fixtures.examplePlugins[1], toPath: plugin)
        for seconds in [10_413_792_000] {  // the year 2300 (file systems clamp times before 1901)
            var times = [timespec(tv_sec: seconds, tv_nsec: 0), timespec(tv_sec: seconds, tv_nsec: 0)]
            #expect(utimensat(AT_FDCWD, plugin, &times, 0) == 0)
            let status = try Syscalls.fileStatus(plugin)
            #expect(status.modified == (seconds > 0 ? .max : .min))
            #expect(ScanCache.key(for: plugin) != nil)
            #expect(PluginLoader().scan([plugin]).jobs.map(\.name) == ["sum-squares"])
        }
    }
}

/// The scan cache's own format.
@Suite struct ScanCacheFormatTests {
    /// Before: a shard's version was written but never read, so a shard of
    /// the format before background modes vouched for jobs without them.
    @Test func aShardOfAnotherFormatIsNotRead() throws {
        let folder = Fixtures.temporaryFolder("cache")
        let file = Fixtures.temporaryFolder("plugins") + "/p.so"
        try Data("x".utf8).write(to: URL(fileURLWithPath: file))
        let key = try #require(ScanCache.key(for: file))
        var cache = ScanCache(folder: folder)
        cache.store(key, .rejected(code: "not-elf", reason: "Not an ELF file."))
        cache.save()
        let shard = folder + "/" + ScanCache.shardName(for: key.path)
        var fresh = ScanCache(folder: folder)
        #expect(fresh.lookup(key) == .rejected(code: "not-elf", reason: "Not an ELF file."))
        let text = try String(contentsOfFile: shard, encoding: .utf8)
        #expect(text.hasPrefix("{\"version\":\(ScanCache.version),"))
        try text.replacingOccurrences(of: "{\"version\":\(ScanCache.version),", with: "{\"version\":2,")
            .write(toFile: shard, atomically: false, encoding: .utf8)
        var old = ScanCache(folder: folder)
        #expect(old.lookup(key) == nil)
    }
}

/// The scan cache's shards are read a value at a time, straight into keys
/// and results. That reading is held to the whole-tree reading it replaced
/// (kept here as the oracle): every shard gives the same entries, or none.
@Suite struct ScanCacheReadingTests {
    /// The whole-tree reading: a shard parsed into a `JSONValue`, then its
    /// entries picked out of it.
    /// A job as text: every field the host keeps.
    static func describe(name: String, summary: String, continuous: Bool, chunked: Bool, library: String?, modes: [String]) -> String {
        "\(name)|\(summary)|\(continuous)|\(chunked)|\(library ?? "-")|\(modes)"
    }

    static func describe(_ result: FileResult) -> String {
        switch result {
        case .jobs(let jobs):
            "jobs " + jobs.map {
                describe(name: $0.name, summary: $0.summary, continuous: $0.continuous, chunked: $0.chunked, library: $0.foreignLibrary, modes: $0.modes)
            }.joined(separator: "; ")
        case .rejected(let code, let reason): "rejected \(code): \(reason)"
        }
    }

    static func oracle(_ bytes: [UInt8]) -> [String: String] {
        guard let root = try? JSONReader.parse(bytes), root["version"]?.integerValue == Int64(ScanCache.version),
            root["abi"]?.numberValue == Double(PluginLoader.abiVersion), case .array(let list)? = root["entries"]
        else { return [:] }
        func job(_ value: JSONValue) -> String? {
            guard let name = value["name"]?.stringValue, let summary = value["summary"]?.stringValue else { return nil }
            var modes: [String] = []
            if case .array(let names)? = value["modes"] {
                let texts = names.compactMap(\.stringValue)
                if texts.count == names.count && texts.count <= BackgroundMode.maximumCount && texts.allSatisfy(BackgroundMode.isValidName) {
                    modes = texts
                }
            }
            return describe(
                name: name, summary: summary, continuous: value["continuous"] == .bool(true), chunked: value["chunked"] == .bool(true),
                library: value["library"]?.stringValue, modes: modes)
        }
        var entries: [String: String] = [:]
        for entry in list {
            guard let file = entry["path"]?.stringValue, let size = entry["size"]?.integerValue,
                let mtime = entry["mtime"]?.integerValue, let ctime = entry["ctime"]?.integerValue,
                let device = entry["device"]?.integerValue, let inode = entry["inode"]?.integerValue,
                let result = entry["result"], let type = result["type"]?.stringValue, type == "scanned" || type == "rejected"
            else { continue }
            let verdict: String =
                if type == "rejected" {
                    "rejected \(result["code"]?.stringValue ?? "load-failed"): \(result["reason"]?.stringValue ?? "")"
                } else if case .array(let jobs)? = result["jobs"] {
                    "jobs " + jobs.compactMap(job).joined(separator: "; ")
                } else {
                    "rejected load-failed: The scanner worker gave no result."
                }
            let key = ScanCache.Key(
                path: file, size: size, mtime: mtime, ctime: ctime, device: UInt64(bitPattern: device), inode: UInt64(bitPattern: inode))
            entries[file] = "\(key) \(verdict)"
        }
        return entries
    }

    /// The entries as the cache reads them, described as the oracle does.
    static func read(_ bytes: [UInt8]) -> [String: String] {
        ((try? ScanCache.entries(ofShard: bytes)) ?? [:]).mapValues { "\($0.key) \(describe($0.result))" }
    }

    func expectSame(_ text: String, _ comment: Comment? = nil) {
        let bytes = Array(text.utf8)
        #expect(Self.read(bytes) == Self.oracle(bytes), comment)
    }

    static let entry =
        #"{"path":"/p/a.so","size":15328,"mtime":1796159659799410255,"ctime":1796178551504966183,"device":65024,"inode":1679889,"#
        + #""result":{"type":"scanned","jobs":[{"name":"a","summary":"An \"a\" job. \u00e9","continuous":false,"chunked":true,"#
        + #""library":"/l/a.so","modes":["audio","x-fetch"]}]}}"#
    static let rejected =
        #"{"result":{"reason":"Not ELF.","code":"not-elf","type":"rejected"},"inode":2,"device":1,"ctime":3,"mtime":4,"size":5,"path":"/p/b.so"}"#

    static func shard(_ entries: [String], version: String = "\(ScanCache.version)", abi: String = "\(PluginLoader.abiVersion)") -> String {
        "{\"version\":\(version),\"abi\":\(abi),\"entries\":[\n" + entries.joined(separator: ",\n") + "\n]}\n"
    }

    /// Shards as the host writes them, and with every way an entry or the
    /// whole can be off: reordered, unknown or missing members, members of
    /// another kind, numbers that are no `Int64`, odd modes, duplicates,
    /// another version or ABI, text that is not JSON.
    @Test func everyShardReadsAsTheWholeTreeReadIt() {
        func entry(_ old: String, _ new: String) -> String { Self.entry.replacingOccurrences(of: old, with: new) }
        var odd: [String] = [Self.entry, Self.rejected]
        odd += [
            entry("/p/a.so\"", "/p/c.so\",\"extra\":[1,{\"x\":null}]"),
            entry("\"size\":15328", "\"size\":\"15328\""),
            entry("\"size\":15328", "\"size\":15328.0"),
            entry("\"inode\":1679889", "\"inode\":18446744073709551615"),
            entry("\"inode\":1679889", "\"inode\":-1"),
            entry("\"type\":\"scanned\"", "\"type\":\"other\""),
            entry("\"type\":\"scanned\",", ""),
            entry("\"jobs\":[", "\"jobs\":[7,{\"name\":\"b\"},"),
            entry("\"jobs\":[{", "\"jobs\":{\"x\":[{").replacingOccurrences(of: "}]}}", with: "}]}}}"),
            entry("\"x-fetch\"", "7"),
            entry("\"x-fetch\"", "\"no such mode\""),
            entry("\"x-fetch\"", Array(repeating: "\"x-more\"", count: BackgroundMode.maximumCount).joined(separator: ",")),
            entry("\"continuous\":false", "\"continuous\":\"true\""),
            entry("\"chunked\":true", "\"chunked\":1"),
            entry("\"library\":\"/l/a.so\"", "\"library\":null"),
        ]
        func rejected(_ old: String, _ new: String) -> String { Self.rejected.replacingOccurrences(of: old, with: new) }
        odd += [
            rejected("\"code\":\"not-elf\",", ""),
            rejected("\"reason\":\"Not ELF.\"", "\"reason\":[]"),
            rejected("\"result\":{", "\"result\":[{").replacingOccurrences(of: "\"},", with: "\"}],"),
            "7", "[]", "{}",
        ]
        for entry in odd { expectSame(Self.shard([entry, Self.rejected]), "\(entry)") }
        expectSame(Self.shard(odd), "all at once")
        expectSame(Self.shard([Self.entry, Self.entry]), "one path twice")
        expectSame(Self.shard([Self.entry.replacingOccurrences(of: "\"size\":15328,", with: "\"size\":15328,\"size\":1,")]), "a duplicate key")
        for (version, abi) in [("2", "1"), ("3.0", "1"), ("\"3\"", "1"), ("3", "1.0"), ("3", "2"), ("3", "1e0")] {
            expectSame(Self.shard([Self.entry], version: version, abi: abi), "version \(version), abi \(abi)")
        }
        for text in ["", "[]", "{\"version\":3}", Self.shard([Self.entry]) + "x", String(Self.shard([Self.entry]).dropLast(4))] {
            expectSame(text, "\(text.prefix(40))")
        }
        #expect(Self.oracle(Array(Self.shard([Self.entry, Self.rejected]).utf8)).count == 2, "the oracle reads what the host writes")
    }

    /// Random damage to a shard (bytes changed, dropped or doubled) never
    /// makes the two readings part.
    @Test func aDamagedShardReadsAsTheWholeTreeReadIt() {
        var generator = SystemRandomNumberGenerator()
        let text = Array(Self.shard([Self.entry, Self.rejected, Self.entry.replacingOccurrences(of: "/p/a.so", with: "/p/d.so")]).utf8)
        let alphabet = Array("{}[]:,\"\\0123456789.-eE tfnlu".utf8)
        for _ in 0..<3000 {
            var bytes = text
            for _ in 0..<Int.random(in: 1...3, using: &generator) {
                let at = Int.random(in: 0..<bytes.count, using: &generator)
                switch Int.random(in: 0..<3, using: &generator) {
                case 0: bytes[at] = alphabet.randomElement(using: &generator)!
                case 1: bytes.remove(at: at)
                default: bytes.insert(bytes[at], at: at)
                }
            }
            #expect(Self.read(bytes) == Self.oracle(bytes), "\(String(decoding: bytes, as: UTF8.self))")
        }
    }
}

/// What a Swift scanner worker says, line by line, read once each: a
/// message's type, its file and its verdict.
@Suite struct ScannerLinesTests {
    func events(_ text: String) -> [ScanEvent] {
        var lines = ScannerLines(file: "/p/a.json")
        return Array(text.utf8).withUnsafeBytes { lines.read($0) }
    }

    @Test func eachLineIsAMessageAboutTheFileOrAProblem() {
        let scanned = #"{"type":"scanned","file":"/p/a.json","jobs":[{"name":"a","summary":"A.","continuous":false,"chunked":true}]}"#
        #expect(events(#"{"type":"scanning","file":"/p/a.json"}"# + "\n" + scanned + "\n" + #"{"type":"done"}"# + "\n")
            == [.loading, .answer(.jobs([ScannedJob(PluginJob(scannedName: "a", summary: "A.", pluginPath: "/p/a.json",
                isContinuous: false, isChunked: true, foreignLibrary: nil, index: 0, backgroundModes: []))])), .done])
        #expect(events(#"{"type":"rejected","file":"/p/a.json","code":"not-elf","reason":"No."}"# + "\n")
            == [.answer(.rejected(code: "not-elf", reason: "No."))])
        #expect(events(scanned.replacingOccurrences(of: "/p/a.json", with: "/p/b.json") + "\n") == [.problem("a message about another file")])
        #expect(events(#"{"type":"scanned"}"# + "\n") == [.problem("a message about another file")])
        #expect(events(#"{"type":"other","file":"/p/a.json"}"# + "\n") == [.problem("a message of unknown type")])
        for line in ["not json", scanned + " x", "[1]", #"{"file":"/p/a.json"}"#, #"{"type":7}"#, #"{"type":"done","type":"done"}"#] {
            #expect(events(line + "\n") == [.problem("a line that is not a message")], "\(line)")
        }
    }
}
