import Foundation
import Synchronization
import Testing

@testable import Curfew

/// Plugins load from private snapshots: the user's file may be rewritten in
/// place, truncated or deleted while its code runs.
@Suite struct SnapshotTests {
    func snapshots() throws -> PluginSnapshots {
        try PluginSnapshots(folder: Fixtures.temporaryFolder("snapshots") + "/s")
    }

    /// Builds `source` (C) with `cc` and `arguments`; its exit status.
    func cc(_ arguments: [String], source: String) throws -> Int32 {
        let file = Fixtures.temporaryFolder("source") + "/source.c"
        try source.write(toFile: file, atomically: true, encoding: .utf8)
        return try Fixtures.runBlocking("/usr/bin/env", ["cc", file] + arguments, in: nil, timeout: nil, environment: [:]).status
    }

    func key(_ path: String) throws -> ScanCache.Key {
        try #require(ScanCache.key(for: path))
    }

    @Test func aVersionIsCopiedOnceAndANewVersionGetsACopyOfItsOwn() throws {
        let snapshots = try snapshots()
        let file = Fixtures.temporaryFolder("plugin") + "/p.so"
        try Data("first".utf8).write(to: URL(fileURLWithPath: file))
        let first = try snapshots.take(try key(file))
        #expect(first.path.hasPrefix(snapshots.folder + "/") && first.path.hasSuffix("-p.so"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: first.path)) == Data("first".utf8))
        let inode = try Syscalls.fileStatus(first.path).inode
        #expect(try snapshots.take(try key(file)) == first)
        #expect(try Syscalls.fileStatus(first.path).inode == inode, "an unchanged file is not copied again")
        let mode = try Syscalls.fileStatus(first.path).mode
        #expect(mode & 0o222 == 0, "a snapshot is read-only (mode \(String(mode, radix: 8)))")

        // Rewritten in place, as `cp` does: a new version; the old copy is untouched.
        let handle = try #require(FileHandle(forWritingAtPath: file))
        try handle.truncate(atOffset: 0)
        try handle.write(contentsOf: Data("second!".utf8))
        try handle.close()
        let second = try snapshots.take(try key(file))
        #expect(second.path != first.path)
        #expect(try Data(contentsOf: URL(fileURLWithPath: second.path)) == Data("second!".utf8))
        #expect(try Data(contentsOf: URL(fileURLWithPath: first.path)) == Data("first".utf8), "a job may still run the old version")
    }

    @Test func aKeyTheFileNoLongerHasIsTakenAsTheFileIsNow() throws {
        let snapshots = try snapshots()
        let file = Fixtures.temporaryFolder("plugin") + "/p.so"
        try Data("old".utf8).write(to: URL(fileURLWithPath: file))
        let listed = try key(file)
        try Data("newer".utf8).write(to: URL(fileURLWithPath: file))
        let taken = try snapshots.take(listed)
        #expect(taken.key == (try key(file)), "the key says which bytes were copied, and so which verdict is theirs")
        #expect(try Data(contentsOf: URL(fileURLWithPath: taken.path)) == Data("newer".utf8))
    }

    @Test func librariesFoundThroughOriginAreCopiedBesideThePlugin() throws {
        let folder = Fixtures.temporaryFolder("origin")
        let library = folder + "/libhelper.so"
        #expect(try cc(["-shared", "-fPIC", "-o", library], source: "int helper(void) { return 7; }\n") == 0)
        let plugin = folder + "/plugin.so"
        let source = "int helper(void);\nint use(void) { return helper(); }\n"
        #expect(try cc(["-shared", "-fPIC", "-o", plugin, "-L", folder, "-lhelper", "-Wl,-rpath,$ORIGIN"], source: source) == 0)
        let taken = try snapshots().take(try key(plugin))
        let copied = URL(fileURLWithPath: taken.path).deletingLastPathComponent().appendingPathComponent("libhelper.so").path
        #expect(FileManager.default.fileExists(atPath: copied))
        let handle = dlopen(taken.path, RTLD_NOW | RTLD_LOCAL)
        #expect(handle != nil, "\(String(cString: dlerror()))")
        // Its helper is the copy, not the original beside the user's file.
        #expect(dlopen(copied, RTLD_NOW | RTLD_NOLOAD) != nil, "the copy is loaded")
        #expect(dlopen(folder + "/libhelper.so", RTLD_NOW | RTLD_NOLOAD) == nil, "the original is not")
    }

    @Test func aPluginWithoutOriginCopiesNothingElse() throws {
        let folder = Fixtures.temporaryFolder("plain")
        try Data("x".utf8).write(to: URL(fileURLWithPath: folder + "/libneighbour.so"))
        let copy = folder + "/plugin.so"
        try FileManager.default.copyItem(atPath: try Fixtures.compile("overwritten_job.c"), toPath: copy)
        let snapshots = try snapshots()
        let taken = try snapshots.take(try key(copy))
        #expect(try FileManager.default.contentsOfDirectory(atPath: snapshots.folder) == [URL(fileURLWithPath: taken.path).lastPathComponent])
    }

    @Test func aFolderOthersCanWriteIsRefused() throws {
        let folder = Fixtures.temporaryFolder("shared")
        chmod(folder, 0o777)
        #expect(throws: CurfewError.self) { try PluginSnapshots(folder: folder) }
    }

    @Test func aReplacedVersionIsKeptForTheGraceAfterItsReplacementHoweverOldItsCopy() throws {
        let snapshots = try snapshots()
        let folder = Fixtures.temporaryFolder("plugin")
        let (kept, gone) = (folder + "/kept.so", folder + "/gone.so")
        try Data("v1".utf8).write(to: URL(fileURLWithPath: kept))
        try Data("gone".utf8).write(to: URL(fileURLWithPath: gone))
        let first = try snapshots.take(try key(kept))
        let goneCopy = try snapshots.take(try key(gone))
        try Data("v2!".utf8).write(to: URL(fileURLWithPath: kept))
        let second = try snapshots.take(try key(kept))
        let later = Int64(time(nil)) + PluginSnapshots.keptAfterReplaced + 60

        // Copied long ago, replaced just now: a host that started with it may still start a worker on it.
        snapshots.sweep(current: [second.key], gone: [goneCopy.key.path], now: later)
        #expect(FileManager.default.fileExists(atPath: first.path))
        #expect(FileManager.default.fileExists(atPath: goneCopy.path))
        #expect(FileManager.default.isReadableFile(atPath: first.path), "marked, it still loads")
        // The grace after the replacement over: both go; the version in use stays, however old.
        snapshots.sweep(current: [second.key], gone: [goneCopy.key.path], now: later + PluginSnapshots.keptAfterReplaced + 60)
        #expect(!FileManager.default.fileExists(atPath: first.path))
        #expect(!FileManager.default.fileExists(atPath: goneCopy.path))
        #expect(FileManager.default.fileExists(atPath: second.path))
    }

    @Test func hostsTakingOneVersionAtOnceShareOneWholeCopy() throws {
        let snapshots = try snapshots()
        let file = Fixtures.temporaryFolder("plugin") + "/p.so"
        let bytes = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try bytes.write(to: URL(fileURLWithPath: file))
        let key = try key(file)
        let taken = Mutex<[PluginSnapshots.Taken]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            if let one = try? snapshots.take(key) { taken.withLock { $0.append(one) } }
        }
        let all = taken.withLock { $0 }
        #expect(all.count == 8 && Set(all.map(\.path)).count == 1)
        #expect(try Data(contentsOf: URL(fileURLWithPath: all[0].path)) == bytes)
        #expect(try FileManager.default.contentsOfDirectory(atPath: snapshots.folder).count == 1, "no staging left behind")
    }

    @Test func aPluginReachingOutOfItsFolderThroughOriginLoadsInPlaceAndSaysWhy() throws {
        let folder = Fixtures.temporaryFolder("beyond")
        let plugin = folder + "/plugin.so"
        #expect(try cc(["-shared", "-fPIC", "-o", plugin, "-Wl,-rpath,$ORIGIN/../lib"], source: "int use(void) { return 1; }\n") == 0)
        let taken = try snapshots().take(try key(plugin))
        let real = try key(plugin).path
        #expect(taken.path == real)
        #expect(taken.inPlace?.contains("$ORIGIN") == true)
    }

    @Test func aLibraryBesideThePluginThatChangedIsCopiedAgain() throws {
        let folder = Fixtures.temporaryFolder("origin")
        let library = folder + "/libhelper.so"
        #expect(try cc(["-shared", "-fPIC", "-o", library], source: "int helper(void) { return 7; }\n") == 0)
        let plugin = folder + "/plugin.so"
        #expect(try cc(["-shared", "-fPIC", "-o", plugin, "-L", folder, "-lhelper", "-Wl,-rpath,$ORIGIN"], source: "int helper(void);\nint use(void) { return helper(); }\n") == 0)
        let snapshots = try snapshots()
        let first = try snapshots.take(try key(plugin))
        let copied = URL(fileURLWithPath: first.path).deletingLastPathComponent().appendingPathComponent("libhelper.so").path
        let before = try Data(contentsOf: URL(fileURLWithPath: copied))
        // A fix to the library alone, rebuilt beside the unchanged plugin.
        #expect(try cc(["-shared", "-fPIC", "-o", library], source: "int helper(void) { return 8; }\nint more(void) { return 9; }\n") == 0)
        let second = try snapshots.take(try key(plugin))
        #expect(second.path == first.path)
        let after = try Data(contentsOf: URL(fileURLWithPath: copied))
        let rebuilt = try Data(contentsOf: URL(fileURLWithPath: library))
        #expect(after != before && after == rebuilt)
    }

    /// Before: the history's hash read a plugin replaced by a link to
    /// `/dev/zero` for ever (the host at 100 % CPU, deaf to SIGTERM).
    @Test(.timeLimit(.minutes(1))) func aFileThatIsNotRegularIsNeitherCopiedNorHashed() throws {
        let folder = Fixtures.temporaryFolder("zero")
        #expect(symlink("/dev/zero", folder + "/zero.so") == 0)
        #expect(PluginFingerprint.contentHash(of: folder + "/zero.so") == nil)
        #expect(throws: CurfewError.self) { try snapshots().take(try key(folder + "/zero.so")) }
    }

    /// A plugin's history hash is FNV-1a of its bytes, whatever the reads
    /// that take them: the published vectors, and a file of several reads.
    @Test func aPluginsHashIsFNV1aOfItsBytes() throws {
        func reference(_ bytes: [UInt8]) -> String {
            var value: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in bytes { value = (value ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
            let digits = String(value, radix: 16)
            return "fnv1a64:" + String(repeating: "0", count: 16 - digits.count) + digits
        }
        let folder = Fixtures.temporaryFolder("hash")
        let known: [(String, String)] = [("", "cbf29ce484222325"), ("a", "af63dc4c8601ec8c"), ("foobar", "85944171f73967e8")]
        for (text, hash) in known {
            try Data(text.utf8).write(to: URL(fileURLWithPath: folder + "/known.so"))
            #expect(PluginFingerprint.contentHash(of: folder + "/known.so") == "fnv1a64:" + hash, "\(text)")
        }
        let large = (0..<(200 * 1024 + 7)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) }
        try Data(large).write(to: URL(fileURLWithPath: folder + "/large.so"))
        #expect(PluginFingerprint.contentHash(of: folder + "/large.so") == reference(large))
    }

    @Test func aScannersReasonNamesTheUsersFileNotTheCopy() {
        let verdict = FileResult.rejected(code: "load-failed", reason: "Cannot be loaded: /cache/s/ab-cd-x.so: undefined symbol: f")
        #expect(verdict.naming("/plugins/x.so", for: "/cache/s/ab-cd-x.so")
            == .rejected(code: "load-failed", reason: "Cannot be loaded: /plugins/x.so: undefined symbol: f"))
    }
}

extension ProcessTests.First {
    /// A plugin rewritten in place mid-grant: the grant finishes on the code
    /// that was scanned, the next run runs the new, nothing crashes.
    @Suite(.timeLimit(.minutes(2))) struct OverwrittenPluginTests {
        /// Writes `source`'s bytes over `path` in place, as `cp` does: the
        /// same file, truncated and written again.
        func overwrite(_ path: String, with source: String) throws {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: source))
            let handle = try #require(FileHandle(forWritingAtPath: path))
            try handle.truncate(atOffset: 0)
            try handle.write(contentsOf: bytes)
            try handle.close()
        }

        @Test func inProcessTheRunningJobFinishesOnTheCodeThatWasScanned() async throws {
            let folder = Fixtures.temporaryFolder("plugins")
            try FileManager.default.copyItem(
                atPath: try Fixtures.compile("overwritten_job.c", defines: ["VERSION=1"]), toPath: folder + "/swap.so")
            let newer = try Fixtures.compile("overwritten_job.c", defines: ["VERSION=2"])
            let gate = Fixtures.temporaryFolder("gate") + "/open"
            let (process, output) = try Fixtures.startCurfew(["run", folder, "--json", "--budget", "60s", "--param", "gate=" + gate])
            var text = await Fixtures.read(output.fileHandleForReading, startingWith: "") { $0.contains("v1 waiting") }
            try overwrite(folder + "/swap.so", with: newer)
            #expect(FileManager.default.createFile(atPath: gate, contents: nil))
            text = await Fixtures.read(output.fileHandleForReading, startingWith: text) { _ in false }
            await Fixtures.wait(for: process)
            #expect(process.terminationStatus == 0, "\(text)")
            let events = try OutputEvent.all(in: text)
            #expect(events.filter { $0.event == "log" }.compactMap(\.message) == ["v1 waiting", "v1 done"])
            #expect(events.first { $0.event == "finished" }?.outcome == "completed")
        }

        @Test func servedTheGrantFinishesOnTheOldCodeAndTheNextRunsTheNew() async throws {
            let folder = Fixtures.temporaryFolder("served")
            let gate = Fixtures.temporaryFolder("gate") + "/open"
            let config = Fixtures.temporaryFolder("config") + "/curfew.json"
            try #"{"jobs": {"swap": {"every": "100ms", "budget": "60s", "params": {"gate": "\#(gate)"}}}}"#
                .write(toFile: config, atomically: true, encoding: .utf8)
            let state = Fixtures.temporaryFolder("state")
            let serve = try ServeProcess(folder: folder, state: state, extra: ["--config", config])
            await serve.wait(for: "control socket")
            let hidden = folder + "/.swap.so.part"
            let older = try Fixtures.compile("overwritten_job.c", defines: ["VERSION=1"])
            try FileManager.default.copyItem(atPath: older, toPath: hidden)
            #expect(rename(hidden, folder + "/swap.so") == 0)
            let newer = try Fixtures.compile("overwritten_job.c", defines: ["VERSION=2"])
            await serve.wait(for: "\"message\":\"v1 waiting\"")
            try overwrite(folder + "/swap.so", with: newer)
            // The server has seen the new build before the old run ends: its next run is the new one.
            await serve.wait(for: "'swap' was replaced")
            #expect(FileManager.default.createFile(atPath: gate, contents: nil))
            await serve.wait(for: "\"message\":\"v2 done\"")
            await serve.wait(for: "\"event\":\"finished\"", count: 2)
            let logs = try serve.logs("swap")
            #expect(logs.prefix(4) == ["v1 waiting", "v1 done", "v2 waiting", "v2 done"], "\(logs)")
            let outcomes = try serve.events().filter { $0.event == "finished" && $0.job == "swap" }.compactMap(\.outcome)
            #expect(outcomes.prefix(2) == ["completed", "completed"], "\(outcomes)")
            #expect(await serve.stop() == 0)
            // History names the build each run loaded, not the file's bytes when it ended.
            let hashes = try StateStore(folder: state).history(job: "swap").reversed().map(\.pluginHash)
            #expect(Array(hashes.prefix(2)) == [PluginFingerprint.contentHash(of: older), PluginFingerprint.contentHash(of: newer)])
        }
    }
}
