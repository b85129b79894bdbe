import Foundation
import Synchronization
import Testing

@testable import Curfew
@testable import CurfewHost
@testable import CurfewCLI

/// What systemd gives a service in its environment, checked as untrusted text.
@Suite struct ServiceEnvironmentTests {
    @Test func aNotifySocketIsAPathOrAnAbstractNameThatFitsAnAddress() {
        let path = ServiceNotifier.address("/run/systemd/notify")
        #expect(path.map { Array($0.dropFirst(2)) } == Array("/run/systemd/notify".utf8) + [0])
        let abstract = ServiceNotifier.address("@curfew/notify")
        #expect(abstract.map { Array($0.dropFirst(2)) } == [0] + Array("curfew/notify".utf8), "no terminator in the abstract namespace")
        #expect(ServiceNotifier.address("relative/notify") == nil)
        #expect(ServiceNotifier.address("") == nil)
        #expect(ServiceNotifier.address("/" + String(repeating: "x", count: 200)) == nil)
        #expect(ServiceNotifier(environment: [:]) == nil)
        #expect(ServiceNotifier(environment: ["NOTIFY_SOCKET": "notify"]) == nil)
    }

    @Test func theWatchdogTimeoutIsAWholeNumberOfMicrosecondsForThisProcess() {
        #expect(ServiceNotifier.watchdogTimeout(environment: ["WATCHDOG_USEC": "30000000"]) == .seconds(30))
        #expect(ServiceNotifier.watchdogTimeout(environment: ["WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "77"], pid: 77) == .seconds(30))
        #expect(ServiceNotifier.watchdogTimeout(environment: ["WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "78"], pid: 77) == nil, "another process's")
        for bad in ["", "-5", "1e6", " 100000", "999", "99999999999999999999", "100000000000", "0x10000"] {
            #expect(ServiceNotifier.watchdogTimeout(environment: ["WATCHDOG_USEC": bad]) == nil, "\(bad)")
        }
        #expect(ServiceNotifier.watchdogTimeout(environment: [:]) == nil)
    }

    @Test func theJournalStreamIsTheDescriptorWhoseDeviceAndInodeItNames() throws {
        let ends = try Syscalls.pipe()  // close-on-exec: process tests spawn beside this one
        defer { ends.forEach { close($0) } }
        var status = stat()
        #expect(fstat(ends[1], &status) == 0)
        let named = "\(status.st_dev):\(status.st_ino)"
        #expect(ServiceNotifier.isJournal(ends[1], environment: ["JOURNAL_STREAM": named]))
        #expect(!ServiceNotifier.isJournal(ends[1], environment: ["JOURNAL_STREAM": "\(status.st_dev):\(status.st_ino + 1)"]))
        for bad in ["", ":", "1", "a:b", "1:2:3", "-1:5"] {
            #expect(!ServiceNotifier.isJournal(ends[1], environment: ["JOURNAL_STREAM": bad]), "\(bad)")
        }
    }

    @Test func theScanCacheGoesInTheCacheFolderSystemdGives() {
        let systemd: [String: String] = ["CACHE_DIRECTORY": "/var/cache/curfew:/var/cache/other", "HOME": "/home/u"]
        #expect(SafeScanner.defaultCacheFolder { systemd[$0] } == "/var/cache/curfew/scan-v2")
        #expect(SafeScanner.defaultCacheFolder { ["CACHE_DIRECTORY": "relative", "HOME": "/home/u"][$0] } == "/home/u/.cache/curfew/scan-v2")
        #expect(SafeScanner.defaultCacheFolder { ["XDG_CACHE_HOME": "/x"][$0] } == "/x/curfew/scan-v2")
    }

    @Test func aLineToTheJournalStartsWithItsSyslogPriority() throws {
        let ends = try Syscalls.pipe()  // close-on-exec: process tests spawn beside this one
        defer { close(ends[0]) }
        var status = stat()
        #expect(fstat(ends[1], &status) == 0)
        let console = Console(json: false, output: ends[1], error: ends[1], environment: ["JOURNAL_STREAM": "\(status.st_dev):\(status.st_ino)"])
        console.error("Error: it broke")
        console.human("loaded", priority: .info)
        console.human("skipped", priority: .warning)
        close(ends[1])
        let text = String(decoding: FileHandle(fileDescriptor: ends[0]).readDataToEndOfFile(), as: UTF8.self)
        #expect(text == "<3>Error: it broke\n<6>loaded\n<4>skipped\n")
        #expect(Reporter.priority(of: .log(job: "j", level: .warning, message: "m")) == .warning)
    }
}

extension ProcessTests.Second {
    /// `curfew serve` under systemd's notify protocol, against a socket the test binds.
    @Suite(.timeLimit(.minutes(2))) struct ServiceNotifyTests {
        /// A datagram socket bound at `path` (or an abstract name for `@…`),
        /// whose messages a thread collects with the time each came.
        final class NotifyListener: @unchecked Sendable {
            // Safe because `messages` is behind its lock; the descriptor is written once.
            let descriptor: Int32
            final class Inbox: Sendable {
                let messages = Mutex<[(time: ContinuousClock.Instant, fields: [String])]>([])
            }
            let inbox = Inbox()

            init(_ name: String) throws {
                descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
                let address = try #require(ServiceNotifier.address(name))
                let bound = address.withUnsafeBytes {
                    bind(descriptor, $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(address.count))
                }
                #expect(bound == 0, "bind: \(errno)")
                let fd = descriptor
                let inbox = inbox
                Thread.detachNewThread {
                    var buffer = [UInt8](repeating: 0, count: 4096)
                    while true {
                        let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                        if count <= 0 { return }
                        let fields = String(decoding: buffer[..<count], as: UTF8.self).split(separator: "\n").map(String.init)
                        inbox.messages.withLock { $0.append((ContinuousClock.now, fields)) }
                    }
                }
            }

            /// The first message with a field that starts with `prefix`, waited for.
            func wait(for prefix: String, count: Int = 1) async throws {
                let give = ContinuousClock.now + .seconds(30)
                while inbox.messages.withLock({ $0.filter { $0.fields.contains { $0.hasPrefix(prefix) } }.count }) < count {
                    guard ContinuousClock.now < give else { throw CancellationError() }
                    try await Task.sleep(for: .milliseconds(5))
                }
            }

            func times(of field: String) -> [ContinuousClock.Instant] {
                inbox.messages.withLock { $0.filter { $0.fields.contains { $0.hasPrefix(field) } }.map(\.time) }
            }

            func close() { shutdown(descriptor, Int32(SHUT_RDWR)); Glibc.close(descriptor) }
        }

        @Test func serveSaysReadyFeedsTheWatchdogInTimeAndSaysStoppingThenExtendsForCleanups() async throws {
            let socketPath = Fixtures.temporaryFolder("notify") + "/notify.sock"
            let listener = try NotifyListener(socketPath)
            defer { listener.close() }
            let folder = Fixtures.temporaryFolder("served")
            #expect(link(try Fixtures.compile("lifecycle_jobs.c"), folder + "/jobs.so") == 0)
            let config = Fixtures.temporaryFolder("config") + "/serve.json"
            try #"{"jobs": {"listener": {"enabled": false}, "ender": {"enabled": false}}}"#.write(toFile: config, atomically: true, encoding: .utf8)
            // A watchdog of 400 ms: fed every 200 ms, from the server's queue.
            let serve = try ServeProcess(
                folder: folder, state: Fixtures.temporaryFolder("state"), extra: ["--config", config, "--budget", "60s", "--grace", "1s"],
                environment: ["NOTIFY_SOCKET": socketPath, "WATCHDOG_USEC": "400000"])
            try await listener.wait(for: "READY=1")
            // The spinner spins in its chunk, in its worker, until its deadline.
            await serve.wait(for: "\"message\":\"spinning\"")
            try await listener.wait(for: "WATCHDOG=1", count: 4)
            let running = listener.inbox.messages.withLock { $0.last?.fields.first { $0.hasPrefix("STATUS=") } } ?? ""
            #expect(running.hasPrefix("STATUS=1 running: spinner ("), "\(running)")
            // The spinner never leaves its chunk, so its cleanup never runs: terminated, exit 2.
            #expect(await serve.stop() == 2)
            listener.close()

            let messages = listener.inbox.messages.withLock { $0 }
            let ready = try #require(listener.times(of: "READY=1").first)
            let watchdogs = listener.times(of: "WATCHDOG=1")
            let stopping = try #require(listener.times(of: "STOPPING=1").first)
            #expect(messages.first?.fields.first == "READY=1", "READY first: \(messages.map(\.fields))")
            #expect(messages.first?.fields.contains { $0.hasPrefix("STATUS=") } == true)
            #expect(watchdogs.first.map { $0 > ready && $0 - ready < .milliseconds(400) } == true, "the first feed comes within the timeout")
            let beforeStop = watchdogs.filter { $0 < stopping }
            let gaps = zip(beforeStop.dropFirst(), beforeStop).map { $0 - $1 }
            #expect(gaps.allSatisfy { $0 < .milliseconds(400) && $0 > .milliseconds(100) }, "fed at half the timeout: \(gaps)")
            // Stopping: the spinner has its 1 s lead to clean up; systemd is asked to wait for it.
            let extended = messages.filter { $0.time > stopping }.flatMap(\.fields).filter { $0.hasPrefix("EXTEND_TIMEOUT_USEC=") }
            #expect(!extended.isEmpty, "\(messages.map(\.fields))")
            let microseconds = extended.compactMap { Int64($0.dropFirst("EXTEND_TIMEOUT_USEC=".count)) }
            // A tick at the spinner's deadline, before it is reaped, has no lead left: a second.
            #expect(microseconds.allSatisfy { $0 >= 1_000_000 && $0 <= 2_000_000 }, "the lead left and a second: \(microseconds)")
        }

        @Test func anAbstractNotifySocketHearsReadyToo() async throws {
            let name = "@curfew-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            let listener = try NotifyListener(name)
            defer { listener.close() }
            let serve = try ServeProcess(
                folder: Fixtures.temporaryFolder("served"), state: Fixtures.temporaryFolder("state"), environment: ["NOTIFY_SOCKET": name])
            try await listener.wait(for: "READY=1")
            #expect(listener.inbox.messages.withLock { $0.first?.fields } == ["READY=1", "STATUS=idle; 0 jobs"])
            #expect(await serve.stop() == 0)
            #expect(listener.times(of: "STOPPING=1").count == 1)
            #expect(listener.times(of: "WATCHDOG=1").isEmpty, "no watchdog asked for, none fed")
        }
    }
}

/// The watchdog hears a server that makes progress, and only such a one.
@Suite struct WatchdogTests {
    /// A datagram socket standing in for systemd's notify socket.
    struct FakeNotifySocket {
        let path: String
        let fd: Int32

        init() {
            path = Fixtures.temporaryFolder("notify") + "/notify.sock"
            fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
            }
            _ = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
        }

        /// The next message, waiting up to `milliseconds` for it (0: only one already sent).
        func receive(waiting milliseconds: Int32) -> String? {
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, milliseconds) == 1 else { return nil }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            return count > 0 ? String(decoding: buffer[..<count], as: UTF8.self) : nil
        }
    }

    /// Before: a probe was queued at every tick whether or not the last had
    /// been answered, so a server stalled behind a backlog answered them in
    /// late bursts, and each burst fed the watchdog.
    @Test func aServerThatMakesNoProgressStopsFeedingTheWatchdog() async throws {
        let notify = FakeNotifySocket()
        defer { close(notify.fd) }
        var options = Server.Options(folders: [Fixtures.temporaryFolder("served")])
        options.run.workerExecutable = Fixtures.curfewExecutable
        let server = try Server(options: options, onEvent: { _, _ in }) { _ in }
        try server.start()
        let link = ServiceLink(environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "\(getpid())"])
        let release = DispatchSemaphore(value: 0)
        server.holdQueue(until: release)
        for _ in 0..<5 { link.tick(server) }
        #expect(notify.receive(waiting: 0) == nil, "a stuck server feeds nothing")
        release.signal()
        #expect(notify.receive(waiting: 10_000)?.contains("WATCHDOG=1") == true, "once it moves, it is heard")
        _ = server.states()  // every probe queued before this has been answered
        #expect(notify.receive(waiting: 0) == nil, "one probe at a time: no burst of late answers")
        link.tick(server)
        #expect(notify.receive(waiting: 10_000)?.contains("WATCHDOG=1") == true)
        await withCheckedContinuation { done in server.stop { done.resume() } }
    }
}

extension ProcessTests.Second {
    /// The shipped Kubernetes manifests, run here as their pods would be: as
    /// uid 10001 with fsGroup 10001, each claim's root root-owned mode 2775
    /// and each emptyDir 0777 (as the kubelet makes them), the manifest's own
    /// environment, arguments and config with its paths under a folder of
    /// the test's. Before, curfew refused `/state` (another user's) and
    /// `/run/curfew` (others can write) and exited 1. Needs root, to be uid
    /// 10001 and to give folders to root: skipped otherwise.
    @Suite(.timeLimit(.minutes(2)), .enabled(if: geteuid() == 0)) struct ManifestModeTests {
        struct Manifest {
            var environment: [String: String] = [:]
            var arguments: [String] = []
            /// Mount path → volume kind ("persistentVolumeClaim", "emptyDir", "configMap").
            var mounts: [String: String] = [:]
            var config: String?

            /// Reads the few shapes the manifests use: flow mappings on one line.
            init(_ name: String) throws {
                let text = try String(contentsOf: Fixtures.packageRoot.appendingPathComponent("deploy/kubernetes/" + name), encoding: .utf8)
                let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
                var paths: [String: String] = [:]
                var kinds: [String: String] = [:]
                for (index, line) in lines.enumerated() {
                    let trimmed = line.trimmingCharacters(in: .whitespaces)
                    if let match = trimmed.firstMatch(of: /^- \{name: ([A-Z_]+), value: (\S+)\}$/) {
                        environment[String(match.1)] = String(match.2)
                    } else if let match = trimmed.firstMatch(of: /^- \{name: ([a-z]+), mountPath: ([^,}]+)/) {
                        paths[String(match.1)] = String(match.2)
                    } else if let match = trimmed.firstMatch(of: /^- name: ([a-z]+)$/), index + 1 < lines.count {
                        let next = lines[index + 1].trimmingCharacters(in: .whitespaces)
                        kinds[String(match.1)] = String(next.prefix { $0 != ":" })
                    } else if trimmed.hasPrefix("args: ") {
                        arguments = try JSONDecoder().decode([String].self, from: Data(trimmed.dropFirst(6).utf8))
                    } else if trimmed == "serve.json: |" {
                        config = lines[(index + 1)...].prefix { $0.hasPrefix("    ") }.joined(separator: "\n")
                    }
                }
                // A claim template's volume is a claim.
                for (volume, path) in paths { mounts[path] = kinds[volume] ?? "persistentVolumeClaim" }
            }
        }

        /// Makes the pod's volumes under `root` as the kubelet would, and
        /// returns `text` with each of their paths moved under `root`.
        func lay(_ manifest: Manifest, under root: String) throws -> (String) -> String {
            func moved(_ text: String) -> String {
                manifest.mounts.keys.contains { text == $0 || text.hasPrefix($0 + "/") } ? root + text : text
            }
            for (path, kind) in manifest.mounts {
                let folder = root + path
                try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
                switch kind {
                case "emptyDir":
                    #expect(chown(folder, 0, 0) == 0 && chmod(folder, 0o777) == 0)
                case "configMap":
                    try manifest.config?.write(toFile: folder + "/serve.json", atomically: true, encoding: .utf8)
                    #expect(chmod(folder, 0o755) == 0)
                default:
                    // fsGroup: root-owned, the group's, set-group-id and group-writable.
                    #expect(chown(folder, 0, 10001) == 0 && chmod(folder, 0o2775) == 0)
                }
            }
            try FileManager.default.copyItem(atPath: Fixtures.examplePlugins[1], toPath: root + "/plugins/sum-squares.so")
            #expect(chmod(root + "/plugins", 0o755) == 0)
            return moved
        }

        /// A process as the pod's user, its stdout and stderr read together.
        func start(_ arguments: [String], environment: [String: String]) throws -> (Process, Pipe) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            process.arguments = ["--reuid=10001", "--regid=10001", "--groups=10001", "--", Fixtures.curfewExecutable] + arguments
            process.environment = environment.merging(["PATH": "/usr/bin:/bin", "HOME": "/nonexistent"]) { own, _ in own }
            let output = Pipe()
            process.standardOutput = output
            process.standardError = output
            try process.run()
            return (process, output)
        }

        /// A folder every user can enter, for the pod's.
        func root() throws -> String {
            let root = Fixtures.temporaryFolder("pod")
            #expect(chmod(root, 0o755) == 0)
            var parent = Syscalls.folder(of: root)
            while parent != "/" && parent.hasPrefix("/tmp/") {
                #expect(chmod(parent, 0o755) == 0)
                parent = Syscalls.folder(of: parent)
            }
            return root
        }

        @Test func theStatefulSetsFoldersStartTheServerAndItsProbesAnswer() async throws {
            let manifest = try Manifest("curfew-serve.yaml")
            #expect(manifest.mounts["/state"] == "persistentVolumeClaim" && manifest.mounts["/run/curfew"] == "emptyDir")
            let root = try root()
            let moved = try lay(manifest, under: root)
            let environment = manifest.environment.mapValues(moved)
            let (server, output) = try start(manifest.arguments.map(moved) + ["--json"], environment: environment)
            defer { if server.isRunning { kill(server.processIdentifier, SIGKILL) } }
            let said = await Fixtures.read(output.fileHandleForReading) { $0.contains("control socket") || $0.contains("Error") }
            #expect(said.contains("control socket"), "\(said)")
            let probe = try start(["status", "--socket", moved("/run/curfew/socket/serve.sock")], environment: environment)
            let answer = await Fixtures.read(probe.1.fileHandleForReading) { _ in false }
            await Fixtures.wait(for: probe.0)
            #expect(probe.0.terminationStatus == 0, "the probe: \(answer)")
            kill(server.processIdentifier, SIGTERM)
            await Fixtures.wait(for: server)
            #expect(server.terminationStatus == 0)
        }

        @Test(arguments: ["curfew-job.yaml", "curfew-cronjob.yaml"])
        func aJobsFoldersLetItsRunKeepHistory(file: String) async throws {
            let manifest = try Manifest(file)
            let root = try root()
            let moved = try lay(manifest, under: root)
            let environment = manifest.environment.mapValues(moved)
            // Short, with room for a loaded machine: the job may expire, and its
            // expire hook waits for its checkpoint's save (in a clean-clone CI
            // with 100 ms of grace, it was still waiting at the hard deadline).
            let (run, output) = try start(manifest.arguments.map(moved).map { ["30s": "800ms", "5s": "400ms"][$0] ?? $0 } + ["--json"], environment: environment)
            let said = await Fixtures.read(output.fileHandleForReading) { _ in false }
            await Fixtures.wait(for: run)
            #expect(run.terminationStatus == 0, "\(said)")
            #expect(said.contains(#""event":"finished""#), "\(said)")
            #expect(FileManager.default.fileExists(atPath: moved("/state/curfew") + "/state.db"))
        }
    }
}
