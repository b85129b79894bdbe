import Foundation
import Glibc
import Testing
import _CurfewShims

@testable import Curfew
@testable import CurfewHost

extension ProcessTests.First {
    /// A plugin nobody here wrote tries, from its chunk, what a sandbox must
    /// refuse (`sandbox_probe.c`): each is refused, as an error the job sees
    /// and logs, never a crash, while the same run without the sandbox does
    /// each, so the sandbox is what stopped it.
    @Suite(.timeLimit(.minutes(2))) struct SandboxTests {
        /// What the probes reach: a canary to read, a folder outside to
        /// write in, one the policy may grant and a TCP listener on
        /// loopback. The process they signal, trace and read the memory of
        /// is the worker's parent: the host, or its fork server.
        final class Targets {
            let canary: String
            let outside: String
            let allowed: String
            let listener: Int32
            let port: Int
            let unixPath: String
            let unixListener: Int32

            init() throws {
                canary = Fixtures.temporaryFolder("canary") + "/secret"
                try "secret\n".write(toFile: canary, atomically: true, encoding: .utf8)
                outside = Fixtures.temporaryFolder("outside")
                allowed = Fixtures.temporaryFolder("allowed")
                let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
                var address = sockaddr_in()
                address.sin_family = sa_family_t(AF_INET)
                address.sin_addr.s_addr = in_addr_t(0x7f00_0001).bigEndian
                var length = socklen_t(MemoryLayout<sockaddr_in>.size)
                let bound = withUnsafeMutablePointer(to: &address) { pointer in
                    pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        bind(fd, $0, length) == 0 && listen(fd, 16) == 0 && getsockname(fd, $0, &length) == 0
                    }
                }
                guard bound else { throw POSIXError(.EADDRNOTAVAIL) }
                listener = fd
                port = Int(UInt16(bigEndian: address.sin_port))
                let path = Fixtures.temporaryFolder("unix") + "/s.sock"
                unixPath = path
                let local = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
                var unixAddress = sockaddr_un()
                unixAddress.sun_family = sa_family_t(AF_UNIX)
                withUnsafeMutableBytes(of: &unixAddress.sun_path) { bytes in
                    for (index, byte) in path.utf8.enumerated() where index < bytes.count - 1 { bytes[index] = byte }
                }
                let listening = withUnsafePointer(to: &unixAddress) { pointer in
                    pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        bind(local, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0 && listen(local, 16) == 0
                    }
                }
                guard listening else { throw POSIXError(.EADDRNOTAVAIL) }
                unixListener = local
            }

            var parameters: [String] {
                ["canary=\(canary)", "outside=\(outside)", "allowed=\(allowed)", "port=\(port)", "unix=\(unixPath)"]
                    .flatMap { ["--param", $0] }
            }

            deinit {
                close(listener)
                close(unixListener)
            }
        }

        /// Each probe's word ("ok", or "refused: WHY"), every line the job
        /// logged, and the host's stderr.
        func probe(_ arguments: [String], targets: Targets, environment: [String: String] = [:]) async throws
            -> (said: [String: String], logs: [String], stderr: String)
        {
            let plugin = try Fixtures.compile("sandbox_probe.c")
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable, ["run", plugin, "--json", "--no-state", "--budget", "20s"] + targets.parameters + arguments,
                timeout: .seconds(60), environment: environment)
            let events = try OutputEvent.all(in: result.stdout)
            let end = events.first { $0.event == "finished" }
            #expect(end?.outcome == "completed", "\(end?.reason ?? "no end") \(result.stderr)")
            let logs = events.filter { $0.event == "log" }.compactMap { $0.message }
            return (Self.said(in: logs), logs, result.stderr)
        }

        /// Each probe's word in the job's log lines.
        static func said(in logs: [String]) -> [String: String] {
            var said: [String: String] = [:]
            for line in logs where line.hasPrefix("probe ") {
                let text = line.dropFirst("probe ".count)
                guard let colon = text.firstIndex(of: ":") else { continue }
                said[String(text[..<colon])] = String(text[text.index(colon, offsetBy: 2)...])
            }
            return said
        }

        static let refusedInASandbox = [
            "read-canary", "write-outside", "connect-tcp", "send-udp", "unix-socket", "chmod-canary", "ptrace", "signal", "proc-mem",
            "exec", "spawn", "unshare", "unshare-namespaces", "mount", "sysv-ipc", "mqueue",
        ]

        @Test(arguments: ["job", "plugin"]) func eachProbeIsRefusedInASandboxAndDoneWithout(isolation: String) async throws {
            let targets = try Targets()
            // On by default: no --sandbox.
            let confined = try await probe(["--isolate", isolation, "--allow-write", targets.allowed], targets: targets)
            for name in Self.refusedInASandbox {
                #expect(confined.said[name]?.hasPrefix("refused") == true, "\(name): \(confined.said[name] ?? "not said")")
            }
            #expect(confined.said["capabilities"]?.hasPrefix("refused") == true, "no capability is left, nor (as root) one an exec could regain")
            #expect(confined.said["write-allowed"] == "ok", "a path the policy grants is written")
            #expect(confined.said["write-scratch"] == "ok", "the scratch folder is the job's")
            // What the call filter denied is named in the job's log.
            #expect(confined.logs.contains("denied: socket (network is off for this job)"), "\(confined.logs)")
            #expect(confined.logs.contains("denied: ptrace (a job may not reach into other processes)"), "\(confined.logs)")
            #expect(
                confined.logs.contains("denied: chmod (a job may not change files' modes, owners, times or attributes)"), "\(confined.logs)")
            #expect(confined.logs.contains("denied: shmget (a job may not use System V IPC or POSIX message queues)"), "\(confined.logs)")
            #expect(confined.logs.contains("denied: mq_open (a job may not use System V IPC or POSIX message queues)"), "\(confined.logs)")
            #expect(!FileManager.default.fileExists(atPath: targets.outside + "/escaped"))
            #expect(try String(contentsOfFile: targets.allowed + "/granted", encoding: .utf8) == "written\n")

            let free = try await probe(["--isolate", isolation, "--no-sandbox"], targets: targets)
            for name in Self.refusedInASandbox + ["write-allowed"] {
                #expect(free.said[name] == "ok", "\(name) without a sandbox: \(free.said[name] ?? "not said")")
            }
            #expect(free.said["write-scratch"]?.hasPrefix("refused") == true, "no scratch folder without a sandbox")
            if getuid() == 0 { #expect(free.said["capabilities"] == "ok", "root keeps its capabilities without a sandbox") }
            #expect(FileManager.default.fileExists(atPath: targets.outside + "/escaped"))
        }

        /// `--network loopback`: TCP reaches this machine's 127.0.0.1 and
        /// nothing else, not even its own other addresses, which the same
        /// connect with the network on reaches; UDP, which can choose its
        /// own way out, and a Unix socket stay refused, and the rest of the
        /// sandbox holds.
        @Test(arguments: ["job", "plugin"]) func theLoopbackNetworkReachesLoopbackAndNothingElse(isolation: String) async throws {
            let targets = try Targets()
            let away = AwayListener.make()
            defer { if let away { close(away.fd) } }
            let toAway = away.map { ["--param", "away=\($0.address)", "--param", "away-port=\($0.port)"] } ?? []
            let run = try await probe(["--isolate", isolation, "--network", "loopback"] + toAway, targets: targets)
            #expect(run.said["connect-tcp"] == "ok", "\(run.logs) \(run.stderr)")
            #expect(run.said["send-udp"] == "refused: Permission denied", "\(run.logs)")
            #expect(run.said["unix-socket"]?.hasPrefix("refused") == true)
            #expect(run.said["read-canary"]?.hasPrefix("refused") == true)
            #expect(!run.stderr.contains("the loopback network"), "\(run.stderr)")
            // A machine with no address but loopback has nothing else to try.
            guard let away else { return }
            #expect(run.said["connect-away"]?.hasPrefix("refused") == true, "\(away.address): \(run.said["connect-away"] ?? "not said")")
            let open = try await probe(["--isolate", isolation, "--network", "on", "--param", "probe=connect-away"] + toAway, targets: targets)
            #expect(open.said["connect-away"] == "ok", "with the network on: \(open.said["connect-away"] ?? "not said")")
        }

        /// A TCP listener on this machine's first IPv4 address but loopback.
        enum AwayListener {
            static func make() -> (address: String, port: Int, fd: Int32)? {
                var list: UnsafeMutablePointer<ifaddrs>?
                guard getifaddrs(&list) == 0 else { return nil }
                defer { freeifaddrs(list) }
                var found: sockaddr_in?
                var item = list
                while let entry = item?.pointee {
                    item = entry.ifa_next
                    guard let address = entry.ifa_addr, address.pointee.sa_family == sa_family_t(AF_INET) else { continue }
                    let inet = UnsafeRawPointer(address).load(as: sockaddr_in.self)
                    if UInt32(bigEndian: inet.sin_addr.s_addr) >> 24 != 127 {
                        found = inet
                        break
                    }
                }
                guard var address = found else { return nil }
                address.sin_port = 0
                let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
                var length = socklen_t(MemoryLayout<sockaddr_in>.size)
                let bound = withUnsafeMutablePointer(to: &address) { pointer in
                    pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        bind(fd, $0, length) == 0 && listen(fd, 16) == 0 && getsockname(fd, $0, &length) == 0
                    }
                }
                // An address that cannot be bound (its interface down) is none to try.
                guard bound else {
                    close(fd)
                    return nil
                }
                let host = UInt32(bigEndian: address.sin_addr.s_addr)
                let text = [24, 16, 8, 0].map { String((host >> $0) & 0xFF) }.joined(separator: ".")
                return (text, Int(UInt16(bigEndian: address.sin_port)), fd)
            }
        }

        /// What the examples need a sandbox grants without a word: the five
        /// examples, Swift's Foundation (loaded from the toolchain), libffi
        /// manifests (one reads a file given to it), Dispatch's own reads.
        @Test func theExamplesRunSandboxedUnchanged() async throws {
            let plugins = ["ExampleEarlyFinish", "ExampleSwiftJob", "ExampleSwiftTasks", "ExampleTaskDriven", "ExampleTimerCounter", "FixtureFoundationJob"]
                .map { Fixtures.buildFolder + "/lib\($0).so" }
            let root = Fixtures.packageRoot.path
            let readme = root + "/README.md"
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable,
                ["run"] + plugins + [root + "/Plugins/Manifests", "--isolate", "job", "--sandbox", "--allow-read", readme, "--param", "file=\(readme)",
                    "--budget", "1500ms", "--jobs", "9", "--json", "--no-state"],
                timeout: .seconds(60))
            let events = try OutputEvent.all(in: result.stdout)
            let ends = events.filter { $0.event == "finished" }
            #expect(ends.count == 9, "\(result.stderr)")
            for end in ends {
                #expect(end.outcome == "completed" || end.outcome == "expired", "\(end.job ?? ""): \(end.outcome ?? "") \(end.reason ?? "")")
            }
            let denied = events.filter { $0.event == "log" && ($0.message ?? "").hasPrefix("denied:") }.compactMap { $0.message }
            #expect(denied.isEmpty, "\(denied)")
        }

        /// The scratch folder is the worker's alone and goes with it, with
        /// what the job left in it.
        @Test func theScratchFolderIsRemovedWithItsWorker() async throws {
            let targets = try Targets()
            let run = try await probe(["--isolate", "job", "--sandbox", "--param", "probe=write-scratch"], targets: targets)
            #expect(run.said["write-scratch"] == "ok")
            let folder = try #require(run.logs.first { $0.hasPrefix("scratch at ") }).dropFirst("scratch at ".count)
            #expect(folder.hasPrefix("/") && folder.contains("/curfew-scratch-"), "\(folder)")
            #expect(!FileManager.default.fileExists(atPath: String(folder)), "left behind: \(folder)")
        }

        /// A run's scratch folders go from one job's worker to the next only
        /// once its cgroup is gone, and only emptied: each job finds its
        /// folder empty, mode 0700 and without an attribute a job set,
        /// whatever the one before left; a folder that keeps an attribute
        /// is not used again; none is left after the run. No job holds the
        /// descriptors its fork server opened for the sandbox's rules.
        @Test(arguments: [false, true])
        func eachJobFindsItsScratchFolderAsIfNew(settingAnAttribute: Bool) async throws {
            let jobs = try PluginLoader().load(try Fixtures.compile("scratch_jobs.c")).jobs
            var configuration = RunConfiguration(policy: try GrantPolicy(budget: .seconds(20)), maxConcurrentJobs: 1)
            configuration.isolation = .job
            configuration.workerExecutable = Fixtures.curfewExecutable
            configuration.sandbox = SandboxPolicy()
            if settingAnAttribute { configuration.parameters = ["xattr": "secret"] }
            let events = EventLog()
            let results = await Runner(jobs: jobs, configuration: configuration) { events.record($0) }.run()
            #expect(results.count == 6 && results.allSatisfy { $0.outcome == .completed }, "\(results.map(\.reason))")
            var folders: [String] = []
            var attributesSet = settingAnAttribute
            for job in jobs {
                let logs = events.logs(of: job.name)
                if logs.contains(where: { $0.hasPrefix("setxattr: ") }) { attributesSet = false }
                let said = try #require(logs.first { $0.hasPrefix("scratch ") }, "\(logs)").split(separator: " ")
                try #require(said.count == 10)
                folders.append(String(said[1]))
                #expect(said[3] == "0" && said[5] == "700" && said[7] == "0", "\(job.name) found \(said.joined(separator: " "))")
                #expect(said[9] == "0", "\(job.name) holds the paths its fork server opened for its sandbox")
            }
            if SandboxPolicy.summary(nil, isolation: .job).contains("cgroup") {
                if attributesSet {
                    #expect(Set(folders).count == jobs.count, "a folder with an attribute a job set is not used again")
                } else if !settingAnAttribute {
                    #expect(Set(folders).count < jobs.count, "emptied folders are used again")
                }
            }
            for folder in Set(folders) { #expect(!FileManager.default.fileExists(atPath: folder), "left behind: \(folder)") }
        }

        /// On a kernel without Landlock the run says once what is not
        /// confined and goes on, with every other layer in place.
        @Test func withoutLandlockTheRunWarnsOnceAndGoesOn() async throws {
            let targets = try Targets()
            let run = try await probe(
                ["--isolate", "job", "--sandbox"], targets: targets, environment: [WorkerSandbox.refuseLandlockVariable: "1"])
            let warnings = run.stderr.components(separatedBy: "\n").filter { $0.contains("the sandbox does not confine") }
            #expect(warnings.count == 1, "\(run.stderr)")
            #expect(warnings.first?.contains("this kernel has no Landlock") == true)
            #expect(run.said["read-canary"] == "ok", "files are not confined without Landlock")
            #expect(run.said["connect-tcp"]?.hasPrefix("refused") == true, "the network still is")
            #expect(run.said["ptrace"]?.hasPrefix("refused") == true, "and the call filter")
            #expect(run.said["sysv-ipc"]?.hasPrefix("refused") == true, "which refuses System V IPC with or without namespaces")
            #expect(run.said["unshare-namespaces"]?.hasPrefix("refused") == true, "the namespaces a worker made are sealed")
            // A namespace of its own (or, as root, no capability) keeps the host's memory closed.
            if curfew_sandbox_probe_namespaces() == 1 || getuid() == 0 {
                #expect(run.said["proc-mem"]?.hasPrefix("refused") == true, "the host's memory stays closed without Landlock")
            }
        }

        /// Under serve, a job's policy in the config sandboxes it, with the
        /// paths it names.
        @Test func underServeAJobsPolicySandboxesIt() async throws {
            let targets = try Targets()
            let serving = ProcessTests.First.ServeTests()
            let folder = Fixtures.temporaryFolder("served")
            let params = ["canary=\(targets.canary)", "outside=\(targets.outside)", "allowed=\(targets.allowed)", "port=\(targets.port)", "unix=\(targets.unixPath)"]
                .map { pair in pair.split(separator: "=", maxSplits: 1).map { "\"\($0)\"" }.joined(separator: ": ") }.joined(separator: ", ")
            let config = try serving.config(
                #"{"jobs": {"probe": {"every": "1h", "budget": "20s", "params": {\#(params)}, "sandbox": {"write": ["\#(targets.allowed)"]}}}}"#)
            let serve = try ServeProcess(folder: folder, state: Fixtures.temporaryFolder("state"), extra: ["--config", config])
            await serve.wait(for: "control socket")
            try serving.drop(try Fixtures.compile("sandbox_probe.c"), into: folder)
            await serve.wait(for: "\"event\":\"finished\"")
            let logs = try serve.logs("probe")
            let said = Self.said(in: logs)
            for name in Self.refusedInASandbox {
                #expect(said[name]?.hasPrefix("refused") == true, "\(name): \(said[name] ?? "not said")")
            }
            #expect(said["write-allowed"] == "ok" && said["write-scratch"] == "ok", "\(said)")
            #expect(logs.contains("denied: ptrace (a job may not reach into other processes)"), "\(logs)")
            let status = try await serve.control(["status", "--json"])
            let line = try #require(status.out.split(separator: "\n").first { $0.contains(#""job":"probe""#) })
            let shown = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            #expect(shown["sandbox"] as? String == "on; write \(try #require(SandboxPolicy.resolve(targets.allowed)))", "\(line)")
            #expect(await serve.stop() == 0)
        }

        /// The history keeps the sandbox each run had: by default, with
        /// grants, turned off, and none in process.
        @Test func theHistorySaysWhichSandboxEachRunHad() async throws {
            let plugin = try Fixtures.compile("sandbox_probe.c")
            let state = Fixtures.temporaryFolder("sandbox-history")
            let granted = try #require(SandboxPolicy.resolve(Fixtures.temporaryFolder("granted")))
            let runs = [["--isolate", "job"], ["--isolate", "plugin", "--network", "on", "--allow-write", granted], ["--isolate", "job", "--no-sandbox"], []]
            for arguments in runs {
                let run = try await Fixtures.run(
                    Fixtures.curfewExecutable, ["run", plugin, "--state", state, "--param", "probe=write-scratch", "--budget", "20s"] + arguments,
                    timeout: .seconds(60))
                #expect(run.status == 0, "\(arguments): \(run.stderr)")
            }
            let history = try await Fixtures.run(Fixtures.curfewExecutable, ["history", "--state", state, "--json"], timeout: .seconds(30))
            let sandboxes = try history.stdout.split(separator: "\n").map { line in
                try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])["sandbox"] as? String
            }
            // Newest first.
            #expect(sandboxes == ["none", "none", "on; network on; write \(granted)", "on"], "\(history.stdout)")
        }

        /// A scanner runs the file's constructor before the host trusts the
        /// file: where the workers are confined, and always for `list`, it
        /// is confined too, and what it tried fails. So is the scanner of a
        /// manifest, which loads its library.
        @Test func aScannerIsConfinedWhereTheWorkersAre() async throws {
            let plugins = Fixtures.temporaryFolder("scanned")
            // A plugin for the C scanner, and the same file as a manifest's library for the manifest's.
            let probe = try Fixtures.compile("sandbox_probe.c")
            try FileManager.default.copyItem(atPath: probe, toPath: plugins + "/plugin.so")
            try FileManager.default.copyItem(atPath: probe, toPath: plugins + "/probe.so")
            try #"""
                {"library": "probe.so", "jobs": [{"name": "by-manifest", "summary": "Loads the probe.",
                 "chunk": {"symbol": "sandbox_probe_nothing", "returns": "int32", "result": "negative-done", "args": []}}]}
                """#.write(toFile: plugins + "/m.curfew.json", atomically: true, encoding: .utf8)
            let loads = Fixtures.temporaryFolder("loads")
            func loaded(_ arguments: [String]) async throws -> Int {
                let result = try await Fixtures.run(
                    Fixtures.curfewExecutable, arguments + [plugins, "--rescan"], timeout: .seconds(30), environment: ["SANDBOX_PROBE_LOADS": loads])
                if arguments == ["list"] {
                    #expect(result.stdout.contains("by-manifest  Loads the probe.") && result.stdout.contains("probe  Tries"), "listed: \(result.stdout) \(result.stderr)")
                }
                defer { for name in (try? FileManager.default.contentsOfDirectory(atPath: loads)) ?? [] { unlink(loads + "/" + name) } }
                return try FileManager.default.contentsOfDirectory(atPath: loads).count
            }
            // `--only` a job no plugin has: the scan is all that loads the file.
            #expect(try await loaded(["list"]) == 0)
            #expect(try await loaded(["run", "--no-state", "--isolate", "job", "--only", "absent"]) == 0)
            #expect(try await loaded(["run", "--no-state", "--isolate", "job", "--no-sandbox", "--only", "absent"]) == 2)
        }

        @Test func aServeConfigsSandboxIsChecked() throws {
            func problem(_ sandbox: String) -> String {
                do {
                    _ = try ServeConfig.parse(Array(#"{"jobs": {"j": {"sandbox": \#(sandbox)}}}"#.utf8), file: "c.json")
                    return "accepted"
                } catch {
                    return error.description
                }
            }
            #expect(problem(#"{"network": "wifi"}"#) == #"c.json: job 'j': "sandbox.network": must be "off", "loopback" or "on""#)
            #expect(problem(#"{"write": ["relative"]}"#) == #"c.json: job 'j': "sandbox.write": "relative" is not an absolute path"#)
            #expect(problem(#"{"read": ["/nonexistent/x"]}"#) == #"c.json: job 'j': "sandbox.read": "/nonexistent/x" names no file or folder"#)
            #expect(problem(#"{"sockets": true}"#).contains("unknown key"))
            #expect(problem("3") == #"c.json: job 'j': "sandbox": must be true, false or an object, not a number"#)
            #expect(problem("false") == "accepted")
            #expect(problem(#"{"network": "loopback"}"#) == "accepted")
            #expect(problem(#"{"network": "on", "exec": true}"#) == "accepted")
        }

        @Test func aSandboxNeedsAWorker() async throws {
            let result = try await Fixtures.run(Fixtures.curfewExecutable, ["run", "--sandbox", "/nonexistent"], timeout: .seconds(30))
            #expect(result.status == 64)
            #expect(result.stderr.contains("--sandbox and its grants need --isolate job or plugin"), "\(result.stderr)")
            let grant = try await Fixtures.run(Fixtures.curfewExecutable, ["run", "--allow-exec", "/nonexistent"], timeout: .seconds(30))
            #expect(grant.status == 64, "a grant asks for a sandbox too: \(grant.stderr)")
            let contradiction = try await Fixtures.run(
                Fixtures.curfewExecutable, ["run", "--isolate", "job", "--no-sandbox", "--network", "on", "/nonexistent"], timeout: .seconds(30))
            #expect(contradiction.status == 64)
            #expect(contradiction.stderr.contains("contradict --no-sandbox"), "\(contradiction.stderr)")
        }
    }
}
