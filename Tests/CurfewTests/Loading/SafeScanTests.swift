import Foundation
import Glibc
import Testing

@testable import Curfew

/// Scanning in a scanner worker: plugins that crash or hang while loading
/// are rejected, not fatal; results are cached until a file changes.
@Suite(.timeLimit(.minutes(1))) struct SafeScanTests {
    let folder = Fixtures.temporaryFolder("safe-scan")
    var cache: String { folder + "/cache/scan-v1.json" }

    func scanner() -> SafeScanner {
        SafeScanner(workerExecutable: Fixtures.curfewExecutable, cacheFile: cache, timeoutPerFile: .seconds(1))
    }

    /// A folder with a good plugin and a bad one of `variant`.
    func plugins(_ variant: Int) throws -> String {
        let plugins = folder + "/plugins"
        try FileManager.default.createDirectory(atPath: plugins, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: try Fixtures.compile("bad_loader.c", defines: ["VARIANT=\(variant)"]), toPath: plugins + "/a-bad.so")
        try FileManager.default.copyItem(atPath: Fixtures.examplePlugins[1], toPath: plugins + "/b-good.so")
        return plugins
    }

    @Test func anEntryThatSegfaultsIsRejectedAndTheRestLoads() throws {
        let plugins = try plugins(1)
        let report = scanner().scan([plugins])
        #expect(report.scan.plugins.map(\.path) == [plugins + "/b-good.so"])
        #expect(report.scan.jobs.map(\.name) == ["sum-squares"])
        #expect(report.scan.rejected.map(\.path) == [plugins + "/a-bad.so"])
        #expect(report.scan.rejected.first?.error.description
            == "Crashed while loading: the scanner worker died of SIGSEGV in its constructor or entry function.")
        #expect(report.workersStarted == 2, "a new scanner for the files after the crash")
    }

    @Test func aConstructorThatAbortsIsRejected() throws {
        let report = scanner().scan([try plugins(2)])
        #expect(report.scan.rejected.first?.error.description
            == "Crashed while loading: the scanner worker died of SIGABRT in its constructor or entry function.")
        #expect(report.scan.jobs.count == 1)
    }

    @Test func anEntryThatHangsIsRejected() throws {
        let report = scanner().scan([try plugins(3)])
        #expect(report.scan.rejected.first?.error.description
            == "Hung while loading: no answer within 1 s (its constructor or entry function never returned).")
        #expect(report.scan.jobs.count == 1)
    }

    @Test func anUnchangedFolderIsAnsweredFromTheCacheUntilAFileChanges() throws {
        let plugins = try plugins(1)
        let first = scanner().scan([plugins])
        #expect(first.fromCache == 0 && first.scannedInWorker == 2)

        let second = scanner().scan([plugins])
        #expect(second.fromCache == 2)
        #expect(second.scannedInWorker == 0 && second.workersStarted == 0, "nothing loaded, no worker started")
        #expect(second.scan.rejected.first?.error.description == first.scan.rejected.first?.error.description,
                "a crasher stays rejected")
        #expect(second.scan.jobs.map(\.name) == ["sum-squares"])

        // A changed file is scanned again; the other still comes from the cache.
        var times = [timespec(tv_sec: 1_000_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000_000, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, plugins + "/a-bad.so", &times, 0) == 0)
        let third = scanner().scan([plugins])
        #expect(third.fromCache == 1 && third.scannedInWorker == 1)
    }

    @Test func runSurvivesAPluginThatCrashesWhileLoading() throws {
        let plugins = try plugins(1)
        let result = try Fixtures.run(Fixtures.curfewExecutable, ["run", plugins])
        #expect(result.status == 3, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("rejected  \(plugins)/a-bad.so: Crashed while loading: the scanner worker died of SIGSEGV"))
        #expect(result.stdout.hasSuffix("1 job: 1 completed; 1 plugin file rejected\n"))
    }
}
