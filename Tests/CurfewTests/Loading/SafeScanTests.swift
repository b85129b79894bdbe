import Foundation
import Glibc
import Testing
import _CurfewShims

@testable import Curfew

extension ProcessTests.Second {
    /// Scanning in a scanner worker: plugins that crash or hang while loading
    /// are rejected, not fatal; results are cached until a file changes.
    @Suite(.timeLimit(.minutes(1))) struct SafeScanTests {
        let folder = Fixtures.temporaryFolder("safe-scan")
        /// The cache folder.
        var cacheFolder: String { folder + "/cache" }
        /// The cache's file for the plugins of `plugins(_:)`.
        var cache: String { cacheFolder + "/" + ScanCache.shardName(for: folder + "/plugins/b-good.so") }

        /// Scans `paths` with `scanner`, off the pool (the scan waits for its worker).
        func scan(_ paths: [String], with scanner: SafeScanner? = nil) async throws -> SafeScanner.Report {
            let scanner = scanner ?? self.scanner()
            return try await Fixtures.offPool { scanner.scan(paths) }
        }

        func scanner() -> SafeScanner {
            SafeScanner(workerExecutable: Fixtures.curfewExecutable, cacheFolder: cacheFolder, timeoutPerFile: .seconds(1))
        }

        /// A folder with a good plugin and a bad one of `variant`.
        func plugins(_ variant: Int) throws -> String {
            let plugins = folder + "/plugins"
            try FileManager.default.createDirectory(atPath: plugins, withIntermediateDirectories: true)
            // A parent the plugin spares (variant 6): this process, should it be one.
            let defines = ["VARIANT=\(variant)", "SPARE=\(getpid())"]
            try FileManager.default.copyItem(atPath: try Fixtures.compile("bad_loader.c", defines: defines), toPath: plugins + "/a-bad.so")
            try FileManager.default.copyItem(atPath: Fixtures.examplePlugins[1], toPath: plugins + "/b-good.so")
            return plugins
        }

        @Test func anEntryThatSegfaultsIsRejectedAndTheRestLoads() async throws {
            let plugins = try plugins(1)
            let report = try await scan([plugins])
            #expect(report.scan.plugins.map(\.path) == [plugins + "/b-good.so"])
            #expect(report.scan.jobs.map(\.name) == ["sum-squares"])
            #expect(report.scan.rejected.map(\.path) == [plugins + "/a-bad.so"])
            #expect(report.scan.rejected.first?.error.description
                == "Crashed while loading: the scanner worker died of SIGSEGV in its constructor or entry function.")
            #expect(report.workersStarted == 2, "a scanner per file")
        }

        /// Before: the liar's constructor vouched for the crashing file, the
        /// cache recorded it, and every run in process after that crashed.
        @Test func aPluginCannotVouchForAnotherFile() async throws {
            let plugins = try plugins(1)
            try FileManager.default.copyItem(
                atPath: try Fixtures.compile("bad_loader.c", defines: ["VARIANT=5", "VICTIM=\"\(plugins)/a-bad.so\""]), toPath: plugins + "/0-liar.so")
            let report = try await scan([plugins])
            #expect(report.scan.jobs.map(\.name) == ["sum-squares"])
            let reasons = Dictionary(uniqueKeysWithValues: report.scan.rejected.map { ($0.path, $0.error.description) })
            #expect(reasons == [
                plugins + "/0-liar.so": "Its scanner worker sent bytes that are not a message, so plugin code wrote on its channel while it loaded.",
                plugins + "/a-bad.so": "Crashed while loading: the scanner worker died of SIGSEGV in its constructor or entry function.",
            ])
        }

        /// A scanner worker is forked by the scan's fork server. One that
        /// kills the server cannot leave the scan waiting, and as this test
        /// process is no subreaper (the worker ends itself on its parent's
        /// death, maybe before it answers), how it ended is unknown: a whole
        /// answer stands, else the verdict is "unknown"; neither is cached
        /// (and the file is never scanned again with this process its parent).
        @Test func aPluginThatKillsTheForkServerIsNeverCached() async throws {
            let plugins = try plugins(6)
            let unknown = "Crashed while loading: the scanner worker's fork server died before the worker's end was known (plugin code may have killed it)."
            for _ in 0..<2 {
                let report = try await scan([plugins])
                let reasons = Dictionary(uniqueKeysWithValues: report.scan.rejected.map { ($0.path, $0.error.description) })
                let bad = reasons[plugins + "/a-bad.so"]
                #expect(bad == unknown || bad == "The plugin declined to load (its entry returned NULL).", "\(reasons)")
                // Scanned beside it, the good file may have lost its server too.
                #expect(report.scan.jobs.map(\.name) == ["sum-squares"] || reasons[plugins + "/b-good.so"] == unknown)
                #expect(report.fromCache <= 1, "the good file only")
            }
        }

        /// Through the CLI, a subreaper: the scanner workers the dead server
        /// leaves come to the host, which sees them through, so every file
        /// gets its own verdict.
        @Test func listSeesEveryFileThroughWhenAPluginKillsTheForkServer() async throws {
            let plugins = try plugins(6)
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable, ["list", "--json", plugins],
                environment: ["XDG_CACHE_HOME": folder + "/cache"])
            #expect(result.stdout.contains(#""job":"sum-squares""#), "\(result.stdout)\(result.stderr)")
            #expect(result.stdout.contains(#"a-bad.so","code":"entry-declined""#), "\(result.stdout)")
        }


        /// The C scanner copies what a descriptor points at without reading
        /// memory that is not there. Before (a Swift scanner that read the
        /// descriptor where it lay) each of these crashed its scanner.
        @Test func aDescriptorInMemoryThatCannotBeReadIsInvalidNotACrash() async throws {
            let unreadable = "The descriptor, or something it points at, lies in memory that cannot be read"
            for variant in [7, 9] {
                let plugin = try Fixtures.compile("bad_loader.c", defines: ["VARIANT=\(variant)"])
                let report = try await scan([plugin], with: SafeScanner(workerExecutable: Fixtures.curfewExecutable, cacheFolder: nil))
                let error = try #require(report.scan.rejected.first?.error, "variant \(variant)")
                #expect(error.code == .invalidDescriptor, "variant \(variant)")
                #expect(error.description.hasPrefix(unreadable), "variant \(variant): \(error.description)")
            }
            // A name whose NUL is the last readable byte reads whole.
            let edge = try Fixtures.compile("bad_loader.c", defines: ["VARIANT=8"])
            let report = try await scan([edge], with: SafeScanner(workerExecutable: Fixtures.curfewExecutable, cacheFolder: nil))
            #expect(report.scan.jobs.map(\.name) == ["edge-job"], "\(report.scan.rejected.map(\.error.description))")
        }

        /// A plugin may call the host's services as it loads; the scanner's
        /// table has each. Before, its `require_conditions` was NULL and the
        /// scanner died of SIGSEGV.
        @Test func anEntryThatCallsEveryHostServiceLoads() async throws {
            let plugin = try Fixtures.compile("bad_loader.c", defines: ["VARIANT=11"])
            let report = try await scan([plugin], with: SafeScanner(workerExecutable: Fixtures.curfewExecutable, cacheFolder: nil))
            #expect(report.scan.jobs.map(\.name) == ["calls-at-entry"], "\(report.scan.rejected.map(\.error.description))")
        }

        /// A scan stopped while scanners hang ends its batch server at once:
        /// the server kills them and leaves by itself. Before, it took the
        /// stop for the end of the requests, started the rest and was killed
        /// two seconds later, with what the plugins had left still running.
        @Test func aStoppedScanEndsItsServerCleanly() async throws {
            let plugin = try Fixtures.compile("bad_loader.c", defines: ["VARIANT=3"])
            let scanner = SafeScanner(workerExecutable: Fixtures.curfewExecutable, cacheFolder: nil, timeoutPerFile: .seconds(30))
            let scans = try await Fixtures.offPool { scanner.scanForked(Array(repeating: plugin, count: 8), environment: [], shouldStop: { true }) }
            #expect(scans.stopped)
            #expect(!scans.serverStatuses.isEmpty && scans.serverStatuses.allSatisfy { $0 == 0 }, "each exited by itself (a wait status of 9 is the host's SIGKILL)")
        }

        /// A batch server holds its reports to send several in one write,
        /// but never past the moment the host needs them: when no request
        /// waits to start (the host has more to send), and a few
        /// milliseconds after the oldest at the latest (here a good file's,
        /// while the next one hangs for 30 s with a third file waiting
        /// behind it). Both programs that run the batch.
        @Test(arguments: [true, false]) func aBatchServerHoldsNoReportTheHostWaitsFor(scannerProgram: Bool) async throws {
            let good = Fixtures.examplePlugins[1]
            let hangs = try Fixtures.compile("bad_loader.c", defines: ["VARIANT=3"])
            let executable = scannerProgram ? Fixtures.scannerExecutable ?? Fixtures.curfewExecutable : Fixtures.curfewExecutable
            let server = try #require(ForkServer.spawn(
                executable: executable, argument: CURFEW_SCAN_BATCH_ARGUMENT, environment: WorkerProtocol.helperEnvironment(), kind: .stream))
            defer {
                Glibc.close(server.control)
                Glibc.kill(server.pid, SIGKILL)
                var status: Int32 = 0
                waitpid(server.pid, &status, 0)
            }
            func send(_ bytes: [UInt8]) {
                #expect(bytes.withUnsafeBytes { Glibc.send(server.control, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == bytes.count)
            }
            func request(_ id: UInt32, _ path: String) throws -> [UInt8] {
                withUnsafeBytes(of: id) { Array($0) } + (try #require(ScannerFrames.request(path)))
            }
            /// The ids of the reports that come within two seconds, until `count` have.
            func reports(_ count: Int) -> [UInt32] {
                var pending: [UInt8] = []
                var ids: [UInt32] = []
                let end = ContinuousClock.now + .seconds(2)
                var buffer = [UInt8](repeating: 0, count: 65536)
                while ids.count < count, ContinuousClock.now < end {
                    var entry = pollfd(fd: server.control, events: Int16(POLLIN), revents: 0)
                    guard poll(&entry, 1, 100) > 0 else { continue }
                    let got = buffer.withUnsafeMutableBytes { recv(server.control, $0.baseAddress, $0.count, 0) }
                    guard got > 0 else { break }
                    pending += buffer[..<got]
                    while pending.count >= 16 {
                        let (id, length) = pending.withUnsafeBytes { ($0.loadUnaligned(as: UInt32.self), $0.loadUnaligned(fromByteOffset: 12, as: UInt32.self)) }
                        guard pending.count >= 16 + Int(length) else { break }
                        ids.append(id)
                        pending.removeFirst(16 + Int(length))
                    }
                }
                return ids
            }
            // A 30 s timeout, one scanner at once.
            send(withUnsafeBytes(of: (UInt32(30_000), UInt32(1))) { Array($0) })
            send(try request(1, good) + request(2, good))
            #expect(reports(2) == [1, 2], "no request waits: both sent, without the end of the requests")
            send(try request(3, good) + request(4, hangs) + request(5, good))
            #expect(reports(1) == [3], "sent while a scanner hangs and a request waits")
        }

        /// A plugin whose runtime handles its own faults keeps its handler
        /// while the scanner copies its descriptor: a fault of its own thread
        /// meanwhile goes to it. Before, the copy's handler took every fault
        /// and the scanner died of SIGSEGV.
        @Test func aPluginsOwnFaultHandlerStillHandlesItsFaultsDuringTheCopy() async throws {
            let record = folder + "/fault-record"
            let plugin = try Fixtures.compile("fault_runtime.c", defines: ["FAULTFILE=\"\(record)\""])
            // The thread sees the copy's handler unless the machine keeps it
            // off its core for the whole copy: tries enough for a loaded one
            // (with both cores kept busy, 5 tries missed once in 15 runs).
            var faulted = false
            for _ in 0..<20 where !faulted {
                let report = try await scan([plugin], with: SafeScanner(workerExecutable: Fixtures.curfewExecutable, cacheFolder: nil))
                #expect(report.scan.rejected.map(\.error.description) == [])
                #expect(report.scan.jobs.count == 256)
                faulted = (try? String(contentsOfFile: record, encoding: .utf8)) == "handled\n"
            }
            #expect(faulted, "the plugin's thread faulted while the scanner copied, and its handler took the fault")
        }

        /// A scanner's channel is read up to a cap: plugin code that writes
        /// past it gets its file rejected, and the scan's memory stays bounded.
        @Test func aFloodOnTheScannersChannelIsCutAtTheCap() async throws {
            let plugins = try plugins(1)
            try FileManager.default.copyItem(
                atPath: try Fixtures.compile("bad_loader.c", defines: ["VARIANT=10"]), toPath: plugins + "/c-flood.so")
            let report = try await scan([plugins])
            let reasons = Dictionary(uniqueKeysWithValues: report.scan.rejected.map { ($0.path, $0.error.description) })
            #expect(reasons[plugins + "/c-flood.so"]
                == "Its scanner worker sent a message of more than 4 MiB, so plugin code wrote on its channel while it loaded.")
            #expect(report.scan.jobs.map(\.name) == ["sum-squares"])

            // The same cap for a scanner of its own (no batch server). Before,
            // only each frame was capped there: the flood was read to its end.
            var alone = scanner()
            alone.usesForkServer = false
            alone.rescan = true
            let aloneReport = try await scan([plugins + "/c-flood.so"], with: alone)
            #expect(aloneReport.scan.rejected.first?.error.description
                == "Its scanner worker sent a message of more than 4 MiB, so plugin code wrote on its channel while it loaded.")
        }

        /// The batch role's name carries the scan protocol's version: a
        /// `curfew-scanner` of another build refuses this one's (exit 64,
        /// naming its own), and a host whose installed scanner refuses scans
        /// with its own image instead, with the same verdicts.
        @Test func aScannerOfAnotherBuildIsRefusedAndTheHostScansWithoutIt() async throws {
            // Not built under a sanitizer, whose hosts scan with their own image.
            if let installed = Fixtures.scannerExecutable {
                let role = CURFEW_SCAN_BATCH_ARGUMENT
                let older = role.prefix { $0 != "." } + ".2"
                let refused = try await Fixtures.run(installed, [String(older)], timeout: .seconds(30))
                #expect(refused.status == 64)
                #expect(refused.stderr.contains("no such role: \(older)") && refused.stderr.contains(role), "\(refused.stderr)")
            }
            // A scanner of another build, as this build's host sees it.
            let other = folder + "/other-build-scanner"
            try "#!/bin/sh\ntouch \"$0.ran\"\nexit 64\n".write(toFile: other, atomically: true, encoding: .utf8)
            #expect(chmod(other, 0o755) == 0)
            var scanner = SafeScanner(workerExecutable: Fixtures.curfewExecutable, cacheFolder: nil)
            scanner.batchExecutable = other
            let plugins = Fixtures.examplePlugins + [try Fixtures.compile("bad_plugin.c", defines: ["VARIANT=1"])]
            let scanned = try await scan(plugins, with: scanner).scan
            let loaded = PluginLoader().scan(plugins)
            #expect(FileManager.default.fileExists(atPath: other + ".ran"), "the host tried the other build's scanner")
            #expect(scanned.jobs.map(\.name).sorted() == loaded.jobs.map(\.name).sorted())
            #expect(scanned.rejected.map(\.error.description) == loaded.rejected.map(\.error.description))
        }

        /// The C scanner's verdict on each loader rule is the in-process
        /// loader's, word for word: one validator reads both.
        /// Both programs that can run the batch: `curfew-scanner`, and the
        /// host's own image (`curfew __scanbatch.N`, when the scanner is not installed).
        @Test(arguments: [true, false]) func theScannerJudgesEveryRuleAsTheLoaderDoes(scannerProgram: Bool) async throws {
            var plugins = try (1...19).map { try Fixtures.compile("bad_plugin.c", defines: ["VARIANT=\($0)"]) }
            plugins += [try Fixtures.compile("modes_jobs.c"), try Fixtures.compile("modes_jobs.c", defines: ["NOT_CONTINUOUS"])]
            plugins += Fixtures.examplePlugins
            // Files dlopen refuses, or that never reach it.
            let odd = folder + "/odd"
            try FileManager.default.createDirectory(atPath: odd, withIntermediateDirectories: true)
            for (name, text) in [("empty.so", ""), ("short.so", "ab"), ("text.so", "not a library, just text\n")] {
                try text.write(toFile: "\(odd)/\(name)", atomically: true, encoding: .utf8)
                plugins.append("\(odd)/\(name)")
            }
            try FileManager.default.copyItem(atPath: "/bin/true", toPath: odd + "/program.so")
            #expect(mkfifo(odd + "/fifo.so", 0o600) == 0)
            plugins += [odd + "/program.so", odd + "/fifo.so"]
            var scanner = SafeScanner(workerExecutable: Fixtures.curfewExecutable, cacheFolder: nil)
            #expect(scanner.batchExecutable == Fixtures.scannerExecutable, "the tests' curfew finds the scanner beside it")
            if !scannerProgram { scanner.batchExecutable = nil }
            for plugin in plugins {
                let loaded = PluginLoader().scan([plugin])
                let scanned = try await scan([plugin], with: scanner).scan
                #expect(scanned.rejected.map(\.error.description) == loaded.rejected.map(\.error.description), "\(plugin)")
                #expect(scanned.rejected.map(\.error.code) == loaded.rejected.map(\.error.code), "\(plugin)")
                func described(_ scan: PluginScan) -> [String] {
                    scan.jobs.map { "\($0.name) \($0.summary) \($0.isContinuous) \($0.isChunked) \($0.backgroundModes) \($0.index)" }
                }
                #expect(described(scanned) == described(loaded), "\(plugin)")
            }
        }

        /// A scan's files are shared by a batch server per core. Plugin code
        /// that kills one server leaves the others scanning, and what the
        /// dead one had in hand is scanned again one by one: every file gets
        /// a verdict, and each good file it did not share a server with
        /// loads.
        @Test func aServerKilledMidScanLosesNoFile() async throws {
            let plugins = try plugins(6)
            for index in 0..<40 {
                try FileManager.default.copyItem(atPath: Fixtures.examplePlugins[1], toPath: plugins + "/c-good-\(index).so")
            }
            var scanner = scanner()
            scanner.timeoutPerFile = .seconds(10)
            let report = try await scan([plugins], with: scanner)
            let files = try FileManager.default.contentsOfDirectory(atPath: plugins).map { plugins + "/" + $0 }
            let answered = report.scan.plugins.map(\.path) + report.scan.rejected.map(\.path)
            #expect(Set(answered) == Set(files) && answered.count == files.count, "one verdict per file")
            #expect(report.scan.rejected.map(\.path).contains(plugins + "/a-bad.so"))
            // The copies declare the same job: each loaded is "already declared" by the first.
            let loaded = report.scan.rejected.filter { $0.error.description.contains("is already declared by") }.count + report.scan.plugins.count
            #expect(loaded >= 30, "\(report.scan.rejected.map { ($0.path, $0.error.description) })")
        }

        /// A `curfew-scanner` of another build refuses the role it is asked
        /// for, and one that is not a scanner at all says nothing the host
        /// reads as a report: either way each file is scanned by the host's
        /// own image, with the verdicts it would have had.
        @Test(arguments: ["exit 64", "printf 'not a report, just bytes to fill a header' >&3"])
        func aScannerProgramFromAnotherBuildChangesNoVerdict(script: String) async throws {
            let plugins = try plugins(1)
            let impostor = folder + "/curfew-scanner"
            let ran = folder + "/impostor-ran"
            try "#!/bin/sh\n: > '\(ran)'\n\(script)\n".write(toFile: impostor, atomically: true, encoding: .utf8)
            #expect(chmod(impostor, 0o755) == 0)
            var scanner = scanner()
            scanner.batchExecutable = impostor
            let report = try await scan([plugins], with: scanner)
            #expect(report.scan.jobs.map(\.name) == ["sum-squares"])
            #expect(report.scan.rejected.map(\.error.description)
                == ["Crashed while loading: the scanner worker died of SIGSEGV in its constructor or entry function."])
            #expect(access(ran, F_OK) == 0, "the impostor was asked first")
        }

        /// The host looks for its scanner beside its own real path (a build
        /// folder), then in ../libexec/curfew/ (an installed tree); only an
        /// executable regular file counts.
        @Test func theScannerProgramIsFoundBesideTheHostOrInLibexec() throws {
            let tree = folder + "/tree"
            for path in ["bin", "libexec/curfew", "other"] {
                try FileManager.default.createDirectory(atPath: tree + "/" + path, withIntermediateDirectories: true)
            }
            try "".write(toFile: tree + "/bin/curfew", atomically: true, encoding: .utf8)
            #expect(symlink(tree + "/bin/curfew", tree + "/other/curfew") == 0)
            #expect(SafeScanner.scanner(beside: tree + "/bin/curfew") == nil)
            let installed = tree + "/libexec/curfew/curfew-scanner"
            try "".write(toFile: installed, atomically: true, encoding: .utf8)
            #expect(SafeScanner.scanner(beside: tree + "/bin/curfew") == nil, "not executable")
            #expect(chmod(installed, 0o755) == 0)
            #expect(SafeScanner.scanner(beside: tree + "/bin/curfew") == tree + "/bin/../libexec/curfew/curfew-scanner")
            #expect(SafeScanner.scanner(beside: tree + "/other/curfew") == tree + "/bin/../libexec/curfew/curfew-scanner", "by the real path")
            #expect(mkdir(tree + "/bin/curfew-scanner", 0o755) == 0)
            #expect(SafeScanner.scanner(beside: tree + "/bin/curfew") == tree + "/bin/../libexec/curfew/curfew-scanner", "a folder is no scanner")
            #expect(rmdir(tree + "/bin/curfew-scanner") == 0)
            try "".write(toFile: tree + "/bin/curfew-scanner", atomically: true, encoding: .utf8)
            #expect(chmod(tree + "/bin/curfew-scanner", 0o755) == 0)
            #expect(SafeScanner.scanner(beside: tree + "/bin/curfew") == tree + "/bin/curfew-scanner")
        }

        @Test func aConstructorThatAbortsIsRejected() async throws {
            let report = try await scan([try plugins(2)])
            #expect(report.scan.rejected.first?.error.description
                == "Crashed while loading: the scanner worker died of SIGABRT in its constructor or entry function.")
            #expect(report.scan.jobs.count == 1)
        }

        @Test func anEntryThatHangsIsRejected() async throws {
            let report = try await scan([try plugins(3)])
            #expect(report.scan.rejected.first?.error.description
                == "Hung while loading: no answer within 1 s (its constructor or entry function never returned).")
            #expect(report.scan.jobs.count == 1)
        }

        @Test func anUnchangedFolderIsAnsweredFromTheCacheUntilAFileChanges() async throws {
            let plugins = try plugins(1)
            let first = try await scan([plugins])
            #expect(first.fromCache == 0 && first.scannedInWorker == 2)

            let second = try await scan([plugins])
            #expect(second.fromCache == 2)
            #expect(second.scannedInWorker == 0 && second.workersStarted == 0, "nothing loaded, no worker started")
            #expect(second.scan.rejected.first?.error.description == first.scan.rejected.first?.error.description,
                    "a crasher stays rejected")
            #expect(second.scan.jobs.map(\.name) == ["sum-squares"])

            // A changed file is scanned again; the other still comes from the cache.
            var times = [timespec(tv_sec: 1_000_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000_000, tv_nsec: 0)]
            #expect(utimensat(AT_FDCWD, plugins + "/a-bad.so", &times, 0) == 0)
            let third = try await scan([plugins])
            #expect(third.fromCache == 1 && third.scannedInWorker == 1)
        }

        /// Before: one cache file for every folder, read whole by every scan
        /// and rewritten whole on every miss (a 1 MB cache made listing one
        /// plugin 13× slower). Now a folder's results are a file of their own.
        @Test func aScanTouchesOnlyItsOwnFoldersCacheFile() async throws {
            let plugins = try plugins(1)
            _ = try await scan([plugins])
            var before = stat()
            #expect(stat(cache, &before) == 0, "the folder's results were written")
            let other = folder + "/other"
            try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: Fixtures.examplePlugins[0], toPath: other + "/c.so")
            #expect(try await scan([other]).scannedInWorker == 1)
            var after = stat()
            #expect(stat(cache, &after) == 0)
            #expect(after.st_ino == before.st_ino && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec, "not rewritten")
            #expect(access(cacheFolder + "/" + ScanCache.shardName(for: other + "/c.so"), F_OK) == 0)
            #expect(try await scan([plugins, other]).fromCache == 3)
        }

        /// Before: the temporary file was opened with fopen("w") under a
        /// predictable name, so a symlink planted there made the host
        /// overwrite whatever it pointed at.
        @Test func theCacheIsNeverWrittenThroughALink() async throws {
            let plugins = try plugins(1)
            let victim = folder + "/victim"
            try "precious\n".write(toFile: victim, atomically: true, encoding: .utf8)
            try FileManager.default.createDirectory(atPath: folder + "/cache", withIntermediateDirectories: true)
            #expect(chmod(folder + "/cache", 0o700) == 0)
            #expect(symlink(victim, cache + ".\(getpid()).tmp") == 0)
            _ = try await scan([plugins])
            #expect(try String(contentsOfFile: victim, encoding: .utf8) == "precious\n")
            #expect((try? Syscalls.fileStatus(cache))?.isRegular == true, "the cache was written beside the link")
            #expect(try await scan([plugins]).fromCache == 2)
        }

        /// A cache folder others can write is no cache: it is neither read nor written.
        @Test func aCacheFolderOthersCanWriteIsNotUsed() async throws {
            let plugins = try plugins(1)
            try FileManager.default.createDirectory(atPath: folder + "/cache", withIntermediateDirectories: true)
            #expect(chmod(folder + "/cache", 0o777) == 0)
            _ = try await scan([plugins])
            #expect(access(cache, F_OK) != 0, "nothing written there")
            #expect(try await scan([plugins]).fromCache == 0)
            // Its own folder, mode 700: used.
            #expect(chmod(folder + "/cache", 0o700) == 0)
            _ = try await scan([plugins])
            #expect(try await scan([plugins]).fromCache == 2)
            // A cache file others can write is not read.
            #expect(chmod(cache, 0o666) == 0)
            #expect(try await scan([plugins]).fromCache == 0)
        }

        /// Before: `HOME=relhome` made the cache at `/relhome/.cache`.
        @Test func aRelativeHomeMeansNoCache() async throws {
            let plugin = try plugins(1) + "/b-good.so"
            let work = Fixtures.temporaryFolder("relative-home")
            let command = "cd \"$1\" && exec env -u XDG_CACHE_HOME HOME=relhome \"$0\" list \"$2\""
            let result = try await Fixtures.run("/bin/sh", ["-c", command, Fixtures.curfewExecutable, work, plugin])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(access("/relhome", F_OK) != 0 && access(work + "/relhome", F_OK) != 0)
            #expect(SafeScanner.defaultCacheFolder?.hasPrefix("/") != false)
        }

        @Test func aHangIsRememberedUntilTheFileChanges() async throws {
            let plugins = try plugins(3)
            let first = try await scan([plugins])
            let second = try await scan([plugins])
            #expect(second.fromCache == 2 && second.workersStarted == 0, "no second wait for the timeout")
            #expect(second.scan.rejected.first?.error.description == first.scan.rejected.first?.error.description)
        }

        @Test func aRescanLoadsEveryFileAgain() async throws {
            let plugins = try plugins(1)
            _ = try await scan([plugins])
            var again = scanner()
            again.rescan = true
            let report = try await scan([plugins], with: again)
            #expect(report.fromCache == 0 && report.scannedInWorker == 2)
        }

        /// `curfew ARGUMENTS` on a folder whose plugin hangs in its entry function
        /// after writing its scanner's pid; returns the host and that pid.
        func hostStuckInAScan(_ arguments: [String]) async throws -> (Process, pid_t) {
            let plugins = folder + "/stuck"
            try FileManager.default.createDirectory(atPath: plugins, withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: try Fixtures.compile("bad_loader.c", defines: ["VARIANT=4"]), toPath: plugins + "/stuck.so")
            let pidFile = folder + "/scanner.pid"
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Fixtures.curfewExecutable)
            process.arguments = arguments + [plugins]
            var environment = ProcessInfo.processInfo.environment
            environment["XDG_CACHE_HOME"] = folder + "/cache"
            environment["CURFEW_FIXTURE_PIDFILE"] = pidFile
            process.environment = environment
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            // Handshake: the scanner is inside the plugin's entry function.
            let deadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < deadline {
                if let text = try? String(contentsOfFile: pidFile, encoding: .utf8), let pid = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                    return (process, pid)
                }
                try await Task.sleep(for: .milliseconds(10))
            }
            process.terminate()
            throw FixtureError.missingSymbol("scanner pid file")
        }

        @Test func sigtermDuringAHungScanEndsTheScannerAndTheHostAtOnce() async throws {
            let (host, scanner) = try await hostStuckInAScan(["run"])
            let signalled = ContinuousClock.now
            kill(host.processIdentifier, SIGTERM)
            await Fixtures.wait(for: host)
            #expect(host.terminationReason == .exit)
            #expect(host.terminationStatus == 143)
            #expect(ContinuousClock.now - signalled < .seconds(3), "not after the scan's 10 s timeout")
            #expect(await Fixtures.isGone(scanner))
        }

        @Test func aScannerDiesWithItsHost() async throws {
            // `run` in process: its scanners may write the pid file (`list`'s are sandboxed).
            let (host, scanner) = try await hostStuckInAScan(["run"])
            kill(host.processIdentifier, SIGKILL)
            await Fixtures.wait(for: host)
            #expect(await Fixtures.isGone(scanner))
            kill(scanner, SIGKILL)  // tidy up should the test fail
        }

        @Test func runSurvivesAPluginThatCrashesWhileLoading() async throws {
            let plugins = try plugins(1)
            let result = try await Fixtures.run(Fixtures.curfewExecutable, ["run", plugins])
            #expect(result.status == 3, "\(result.stdout)\(result.stderr)")
            #expect(result.stdout.contains("rejected  \(plugins)/a-bad.so: Crashed while loading: the scanner worker died of SIGSEGV"))
            #expect(result.stdout.hasSuffix("1 job: 1 completed; 1 plugin file rejected\n"))
        }
    }
}
