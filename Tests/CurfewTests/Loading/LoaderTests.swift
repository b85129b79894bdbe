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
        #expect(error.description == "ABI version 7, this host speaks 1; rebuild the plugin against this host's curfew.h.")
    }

    @Test func descriptorTooSmall() throws {
        let error = try rejection(.structTooSmall)
        #expect(error.code == .structTooSmall)
        #expect(error.description == "Plugin descriptor struct_size is 8 bytes, at least 24 expected for ABI version 1.")
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
