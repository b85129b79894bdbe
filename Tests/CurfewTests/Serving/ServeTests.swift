import Foundation
import Synchronization
import Testing

@testable import Curfew
@testable import CurfewHost
import _CurfewShims

/// A `curfew serve` the test talks to while it runs: its JSON Lines read as
/// they come, waits that end on what it says (never on a sleep), a kill
/// after 150 s so a test that waits for what never comes cannot hang. (At
/// 60 s, a thousand runs on a busy machine were seen to outlast it: the
/// server "vanished" under a test that was only slow.)
final class ServeProcess: @unchecked Sendable {
    // Safe because `text` is used by the one test that owns the process.
    let process: Process
    let output: Pipe
    let folder: String
    let state: String
    let socket: String
    var text = ""

    init(folder: String, state: String, extra: [String] = [], environment: [String: String] = [:], socket: String? = nil) throws {
        self.folder = folder
        self.state = state
        self.socket = socket ?? Fixtures.temporaryFolder("sock") + "/s.sock"
        let arguments = ["serve", folder, "--json", "--state", state, "--socket", self.socket, "--budget", "300ms"] + extra
        (process, output) = try Fixtures.startCurfew(arguments, environment: environment)
        let pid = process.processIdentifier
        let process = self.process
        // Not once it has exited: its pid may be another test's process by then.
        DispatchQueue.global().asyncAfter(deadline: .now() + 150) { if process.isRunning { kill(pid, SIGKILL) } }
    }

    /// Reads until `done` holds of everything said so far (or the output ends).
    @discardableResult
    func wait(until done: @escaping @Sendable (String) -> Bool) async -> String {
        text = await Fixtures.read(output.fileHandleForReading, startingWith: text, until: done)
        return text
    }

    /// Reads until the server has said `fragment` `count` times. Each place
    /// in the text is tried once: the text of a long serve is megabytes, and a reader
    /// that scans it all on every read blocks the server on a full pipe.
    @discardableResult
    func wait(for fragment: String, count: Int = 1) async -> String {
        let counter = Mutex(FragmentCount(fragment))
        return await wait { text in counter.withLock { $0.update(with: text) >= count } }
    }

    func events() throws -> [OutputEvent] {
        // Only whole lines: the last one may still be coming.
        let lines = text.split(separator: "\n", omittingEmptySubsequences: true).dropLast(text.hasSuffix("\n") ? 0 : 1)
        return try lines.map { try JSONDecoder().decode(OutputEvent.self, from: Data($0.utf8)) }
    }

    func logs(_ job: String) throws -> [String] {
        try events().filter { $0.event == "log" && $0.job == job }.compactMap(\.message)
    }

    /// `curfew ctl`/`status` against this server.
    func control(_ arguments: [String]) async throws -> (status: Int32, out: String) {
        let result = try await Fixtures.run(Fixtures.curfewExecutable, arguments + ["--socket", socket])
        return (result.status, result.stdout + result.stderr)
    }

    /// SIGTERM, then the exit status once it is gone.
    func stop() async -> Int32 {
        kill(process.processIdentifier, SIGTERM)
        await wait { _ in false }
        await Fixtures.wait(for: process)
        return process.terminationStatus
    }
}

extension ProcessTests.First {
    @Suite(.timeLimit(.minutes(3))) struct ServeTests {
        /// The serve fixture, built as version `version`.
        func plugin(version: Int = 1) throws -> String {
            try Fixtures.compile("serve_jobs.c", defines: ["VERSION=\(version)"])
        }

        func config(_ text: String) throws -> String {
            let path = Fixtures.temporaryFolder("config") + "/curfew.json"
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            return path
        }

        /// Drops `source` into the folder as `name` the way a deploy should:
        /// written beside it under a dotfile name, then renamed in.
        func drop(_ source: String, into folder: String, as name: String = "jobs.so") throws {
            let hidden = folder + "/.\(name).part"
            try? FileManager.default.removeItem(atPath: hidden)
            try FileManager.default.copyItem(atPath: source, toPath: hidden)
            #expect(rename(hidden, folder + "/" + name) == 0)
        }

        @Test func aDroppedPluginRunsOnItsScheduleAndResumesAfterARestart() async throws {
            let folder = Fixtures.temporaryFolder("served")
            let state = Fixtures.temporaryFolder("state")
            // A budget with room for a loaded machine: each launch starts its
            // worker's fork server within it, and `expire` waits for its save.
            let config = try config(#"{"jobs": {"tally": {"every": "500ms", "budget": "400ms"}, "asks": {"enabled": false}, "flaky": {"enabled": false}}}"#)
            let serve = try ServeProcess(folder: folder, state: state, extra: ["--config", config])
            await serve.wait(for: "control socket")
            #expect(try serve.events().filter { $0.event == "started" }.isEmpty, "an empty folder runs nothing")
            try drop(try plugin(), into: folder)
            await serve.wait(for: "\"message\":\"v1 run 3\"")
            #expect(try serve.logs("tally").filter { $0.hasPrefix("v1 run") } == ["v1 run 1", "v1 run 2", "v1 run 3"], "each run goes on from the last one's checkpoint")
            await serve.wait(for: "\"event\":\"finished\"", count: 3)
            #expect(await serve.stop() == 0)
            let finished = try serve.events().filter { $0.event == "finished" && $0.job == "tally" }
            // Each run expires; one whose slot met the stop may be refused instead.
            let outcomes = finished.map { $0.outcome ?? "" }
            let reasons = finished.map { "\($0.outcome ?? ""): \($0.reason ?? "")" }
            #expect(finished.count >= 3 && outcomes.dropLast().allSatisfy { $0 == "expired" }, "\(reasons)")
            #expect(["expired", "refused"].contains(outcomes.last ?? ""), "\(reasons)")
            let history = try StateStore(folder: state).history(job: "tally")
            #expect(history.count == finished.count, "history shows every run")

            // A restart goes on with the schedule and the checkpoint.
            let again = try ServeProcess(folder: folder, state: state, extra: ["--config", config])
            await again.wait(for: "\"message\":\"v1 run \(finished.count + 1)\"")
            #expect(await again.stop() == 0)
        }

        @Test func aReplacedPluginRunsItsNewCodeFromItsNextRunWithNoWorkLost() async throws {
            let folder = Fixtures.temporaryFolder("served")
            // Both versions built first, and a grant that expires 1.5 s in: the
            // server must see the replacement while the first run goes on,
            // which a loaded machine may take a second to build and notice.
            let (v1, v2) = (try plugin(version: 1), try plugin(version: 2))
            let config = try config(#"{"jobs": {"tally": {"every": "100ms", "budget": "2s"}, "asks": {"enabled": false}, "flaky": {"enabled": false}}}"#)
            let serve = try ServeProcess(folder: folder, state: Fixtures.temporaryFolder("state"), extra: ["--config", config])
            await serve.wait(for: "control socket")
            try drop(v1, into: folder)
            await serve.wait(for: "\"message\":\"v1 run 1\"")
            // Replaced while its first run goes on: that run finishes its grant on the old code.
            try drop(v2, into: folder)
            await serve.wait(for: "\"message\":\"v2 run 2\"")
            let logs = try serve.logs("tally")
            #expect(logs.prefix(3) == ["v1 run 1", "expired by reason 1", "v2 run 2"], "\(logs)")
            #expect(try serve.events().contains { $0.event == "serve" && ($0.message ?? "").contains("'tally' was replaced") })
            #expect(await serve.stop() == 0)
        }

        @Test func aRemovedPluginsRunningJobIsCancelledAndRunsNoMore() async throws {
            let folder = Fixtures.temporaryFolder("served")
            let config = try config(#"{"jobs": {"tally": {"every": "100ms", "budget": "10s"}, "asks": {"enabled": false}, "flaky": {"enabled": false}}}"#)
            let serve = try ServeProcess(folder: folder, state: Fixtures.temporaryFolder("state"), extra: ["--config", config])
            await serve.wait(for: "control socket")
            try drop(try plugin(), into: folder)
            await serve.wait(for: "\"message\":\"v1 run 1\"")
            try FileManager.default.removeItem(atPath: folder + "/jobs.so")
            await serve.wait(for: "\"event\":\"finished\"")
            let finished = try #require(try serve.events().first { $0.event == "finished" })
            #expect(finished.outcome == "expired" && (finished.reason ?? "").contains("cancel"), "\(finished.reason ?? "")")
            #expect(try serve.logs("tally").contains("expired by reason 3"), "the cleanup hears the cancelled reason")
            #expect(try serve.events().contains { ($0.message ?? "").contains("'tally' is gone") })
            let status = try await serve.control(["status"])
            #expect(status.out.contains("No job is served"), "\(status.out)")
            #expect(await serve.stop() == 0)
            #expect(try serve.events().filter { $0.event == "started" }.count == 1)
        }

        @Test func halfWrittenFilesAndDotfilesNeverLoad() async throws {
            let folder = Fixtures.temporaryFolder("served")
            let serve = try ServeProcess(folder: folder, state: Fixtures.temporaryFolder("state"))
            await serve.wait(for: "control socket")
            let bytes = try Data(contentsOf: URL(fileURLWithPath: try plugin()))
            // Half a plugin, still open for writing, and a whole one under a dotfile name.
            #expect(FileManager.default.createFile(atPath: folder + "/partial.so", contents: nil))
            let partial = try #require(FileHandle(forWritingAtPath: folder + "/partial.so"))
            partial.write(bytes.prefix(bytes.count / 2))
            try bytes.write(to: URL(fileURLWithPath: folder + "/.hidden.so"))
            // Something loadable, to see a rescan happen after both.
            let other = try Fixtures.compile("sibling_job.c", defines: ["JOB_NAME=\"other\""])
            try drop(other, into: folder, as: "other.so")
            await serve.wait(for: "serving 'other'")
            var said = try serve.events().compactMap(\.message)
            #expect(!said.contains { $0.contains("partial.so") || $0.contains("hidden") || $0.contains("'tally'") }, "\(said)")
            // Its writer closes it whole: now it loads.
            partial.write(bytes.suffix(from: bytes.count / 2))
            try partial.close()
            await serve.wait(for: "serving 'tally'")
            said = try serve.events().compactMap(\.message)
            #expect(said.contains { $0.contains("serving 'tally' from \(folder)/partial.so") })
            #expect(!said.contains { $0.contains("rejected") }, "\(said)")
            #expect(await serve.stop() == 0)
        }

        /// Before: a next run or a time left at the edge of what JSON holds
        /// trapped `curfew status` (an Int64 subtraction, a Double to Int64).
        @Test func statusSurvivesAnAnswerAtTheEdgesOfItsNumbers() async throws {
            let path = Fixtures.temporaryFolder("sock") + "/s.sock"
            let socket = try ControlSocket(path: path, refusesJobs: false) { _ in
                #"{"ok":true,"app_state":"background","jobs":[{"job":"a","state":"running","remaining":1e300,"next_run":-9223372036854775808},"#
                    + #"{"job":"b","state":"idle","next_run":9223372036854775807},{"job":"c","state":"running","remaining":-1e300}]}"#
            }
            defer { socket.close() }
            let status = try await Fixtures.run(Fixtures.curfewExecutable, ["status", "--socket", path])
            #expect(status.status == 0, "\(status.stdout)\(status.stderr)")
            #expect(status.stdout.contains("a  running") && status.stdout.contains("b  idle") && status.stdout.contains("c  running"), "\(status.stdout)")
        }

        @Test func theControlSocketRunsCancelsPausesAndReports() async throws {
            let folder = Fixtures.temporaryFolder("served")
            try drop(try plugin(), into: folder)
            let config = try config(#"{"jobs": {"tally": {"enabled": true, "budget": "20s"}, "asks": {"params": {"next": "3600"}}, "flaky": {"retry": {"attempts": 0}}}}"#)
            let serve = try ServeProcess(folder: folder, state: Fixtures.temporaryFolder("state"), extra: ["--config", config])
            // Every job runs once at start; asks then asks for an hour's wait.
            await serve.wait(for: "\"message\":\"v1 run 1\"")
            await serve.wait(for: "\"event\":\"next-run\"")
            var status = try await serve.control(["status", "--json"])
            #expect(status.status == 0, "\(status.out)")
            let lines = status.out.split(separator: "\n").map(String.init)
            #expect(lines.first == #"{"app_state":"background","store_failures":0,"jobs":3}"#, "the host's line first")
            let jobs = Array(lines.dropFirst())
            #expect(jobs.count == 3)
            #expect(jobs.contains { $0.contains("\"job\":\"tally\"") && $0.contains("\"state\":\"running\"") }, "\(jobs)")
            #expect(try await serve.control(["ctl", "run", "tally"]).out.contains("running already"))
            let cancel = try await serve.control(["ctl", "cancel", "tally"])
            #expect(cancel.status == 0, "\(cancel.out)")
            await serve.wait { $0.contains("\"message\":\"expired by reason 3\"") }
            #expect(try await serve.control(["ctl", "pause", "asks"]).status == 0)
            status = try await serve.control(["status"])
            #expect(status.out.contains("asks  paused"), "\(status.out)")
            #expect(try await serve.control(["ctl", "resume", "asks"]).status == 0)
            #expect(try await serve.control(["ctl", "run", "asks"]).status == 0)
            await serve.wait(for: "\"message\":\"request answered 0\"", count: 2)
            let unknown = try await serve.control(["ctl", "run", "nobody"])
            #expect(unknown.status == 1 && unknown.out.contains("no job is named 'nobody'"), "\(unknown.out)")
            #expect(try await serve.control(["ctl", "reload"]).status == 0)
            #expect(await serve.stop() == 0)
            // Gone with the host: the socket, and its answers.
            #expect(!FileManager.default.fileExists(atPath: serve.socket))
            let gone = try await serve.control(["status"])
            #expect(gone.status == 1 && gone.out.contains("no curfew serve is running there"), "\(gone.out)")
        }

        /// A job, and a process it detached, cannot steer the host: before,
        /// a job that said `foreground` ran with no budget, and one could
        /// cancel or pause others'.
        @Test func aJobAndAProcessItDetachedAreRefusedByTheControlSocket() async throws {
            let folder = Fixtures.temporaryFolder("served")
            let socket = Fixtures.temporaryFolder("sock") + "/s.sock"
            let saidFolder = Fixtures.temporaryFolder("said")
            let said = saidFolder + "/answer"
            // Its sandbox lets it try: a Unix socket needs the network on.
            let config = try config(#"""
                {"jobs": {"steer": {"every": "1h", "budget": "30s", "params": {"socket": "\#(socket)", "out": "\#(said)"},
                 "sandbox": {"network": "on", "write": ["\#(saidFolder)"]}}}}
                """#)
            let serve = try ServeProcess(folder: folder, state: Fixtures.temporaryFolder("state"), extra: ["--config", config], socket: socket)
            await serve.wait(for: "control socket")
            try drop(try Fixtures.compile("steering_job.c"), into: folder)
            await serve.wait(for: "\"event\":\"finished\"")
            let answer = try serve.logs("steer").first { $0.hasPrefix("answer: ") } ?? ""
            #expect(answer.contains("refused") && answer.contains("one of this host's jobs"), "\(answer)")
            let detached = try String(contentsOfFile: said, encoding: .utf8)
            #expect(detached.contains("refused"), "\(detached)")
            let status = try await serve.control(["status", "--json"])
            #expect(status.out.hasPrefix(#"{"app_state":"background""#), "\(status.out)")
            #expect(!status.out.contains("paused"), "\(status.out)")
            #expect(try serve.events().contains { $0.event == "serve" && ($0.message ?? "").contains("control socket: refused pid") })
            #expect(await serve.stop() == 0)
        }

        /// A peer of another user is refused by its credentials, even where the
        /// socket's mode would let it connect. Needs root (to be another user).
        @Test(.enabled(if: geteuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")))
        func aPeerOfAnotherUserIsRefused() async throws {
            let folder = Fixtures.temporaryFolder("served")
            let serve = try ServeProcess(folder: folder, state: Fixtures.temporaryFolder("state"))
            await serve.wait(for: "control socket")
            // Opened up by hand, as a careless operator might.
            chmod((serve.socket as NSString).deletingLastPathComponent, 0o755)
            chmod(serve.socket, 0o666)
            chmod(Fixtures.curfewExecutable, 0o755)
            let result = try await Fixtures.run(
                "/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", Fixtures.curfewExecutable, "status", "--socket", serve.socket])
            #expect(result.status == 1)
            #expect(result.stderr.contains("refused: uid 65534 is neither this host's user"), "\(result.stdout) \(result.stderr)")
            #expect(await serve.stop() == 0)
        }

        /// What a long life costs: 1,000 runs of no-op jobs that ask to run
        /// again at once (eight of them, each held to the 100 ms least gap
        /// between its runs), each in a sandboxed worker. Read while the jobs
        /// are paused and idle, the host's descriptors and threads are as they
        /// were after 100 runs, and its memory within 10 %: a leak of one a
        /// run shows 900 times. (Not under a sanitizer, which keeps freed
        /// memory. A budget of 30 s: a run that expires asks for no next one,
        /// and on a busy machine serve's 300 ms ended them one by one.)
        @Test(.enabled(if: !Fixtures.sanitized)) func aThousandRunsLeaveDescriptorsThreadsAndMemoryFlat() async throws {
            let folder = Fixtures.temporaryFolder("served")
            let copies = 8
            var jobs: [String] = []
            for copy in 0..<copies {
                try drop(try Fixtures.compile("serve_jobs.c", defines: ["SUFFIX=\"-\(copy)\""]), into: folder, as: "jobs-\(copy).so")
                jobs.append(#""asks-\#(copy)": {"budget": "30s", "params": {"next": "0"}}, "tally-\#(copy)": {"enabled": false}, "flaky-\#(copy)": {"enabled": false}"#)
            }
            let config = try config(#"{"jobs": {\#(jobs.joined(separator: ", "))}}"#)
            let serve = try ServeProcess(folder: folder, state: Fixtures.temporaryFolder("state"), extra: ["--config", config])
            let pid = serve.process.processIdentifier

            func quietReading(after runs: Int) async throws -> (fds: Int, threads: Int, rss: Int) {
                await serve.wait(for: "\"event\":\"finished\"", count: runs)
                for copy in 0..<copies { #expect(try await serve.control(["ctl", "pause", "asks-\(copy)"]).status == 0) }
                // Handshake: the last run has ended when status no longer says running.
                while try await serve.control(["status", "--json"]).out.contains("\"state\":\"running\"") {}
                let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
                func field(_ name: String) -> Int {
                    let line = status.split(separator: "\n").first { $0.hasPrefix(name + ":") } ?? ""
                    return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? -1
                }
                let fds = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count
                for copy in 0..<copies { #expect(try await serve.control(["ctl", "resume", "asks-\(copy)"]).status == 0) }
                return (fds, field("Threads"), field("VmRSS"))
            }

            let early = try await quietReading(after: 100)
            let late = try await quietReading(after: 1000)
            #expect(late.fds == early.fds, "descriptors: \(early.fds) after 100 runs, \(late.fds) after 1,000")
            #expect(late.threads <= early.threads, "threads: \(early.threads) after 100 runs, \(late.threads) after 1,000")
            #expect(Double(late.rss) <= Double(early.rss) * 1.1, "RSS: \(early.rss) KiB after 100 runs, \(late.rss) KiB after 1,000")
            #expect(await serve.stop() == 0)
        }

        /// A failing job is tried again with backoff, as often as its policy
        /// says, then waits for its schedule (it has none: it runs no more).
        @Test func theHostStartsInTheBackgroundAndCtlMovesItsJobsBetweenForegroundAndBackground() async throws {
            let folder = Fixtures.temporaryFolder("served")
            // Its 2 s budget outlasts the `ctl foreground` the test sends once it
            // launched (at 300 ms a busy CI machine let it expire first).
            let config = try config(#"{"jobs": {"listener": {"budget": "2s"}, "spinner": {"enabled": false}, "ender": {"enabled": false}}}"#)
            let serve = try ServeProcess(folder: folder, state: Fixtures.temporaryFolder("state"), extra: ["--config", config])
            await serve.wait(for: "control socket")
            try drop(try Fixtures.compile("lifecycle_jobs.c"), into: folder)
            await serve.wait(for: "\"message\":\"launch in background, limited\"")

            let foreground = try await serve.control(["ctl", "foreground"])
            #expect(foreground.status == 0 && foreground.out.contains("will-enter-foreground, did-become-active"), "\(foreground.out)")
            await serve.wait(for: "\"message\":\"did-become-active in active, unlimited\"")
            var status = try await serve.control(["status", "--json"])
            let lines = status.out.split(separator: "\n").map(String.init)
            #expect(lines.first == #"{"app_state":"active","store_failures":0,"jobs":3}"#, "\(status.out)")
            let listener = lines.first { $0.contains("\"job\":\"listener\"") } ?? ""
            #expect(listener.contains("\"state\":\"running\"") && listener.contains("\"remaining\":null"), "\(status.out)")
            status = try await serve.control(["status"])
            #expect(status.out.hasPrefix("App state: active (foreground: grants do not run down)\n"), "\(status.out)")
            #expect(try await serve.control(["ctl", "foreground"]).out.contains("already"))

            // Back in the background, the 2 s budget runs from now.
            #expect(try await serve.control(["ctl", "background"]).status == 0)
            await serve.wait(for: "\"message\":\"expire timeout\"")
            // (What a hook reads of the state depends on how far the host has moved by then.)
            let heard = try serve.logs("listener")
            #expect(heard.map { $0.split(separator: " ")[0] } == [
                "launch", "will-enter-foreground", "did-become-active", "will-resign-active", "did-enter-background", "expire",
            ], "\(heard)")

            // A run in the foreground has no deadline; SIGTERM says will-terminate, then expires it.
            #expect(try await serve.control(["ctl", "foreground"]).status == 0)
            #expect(try await serve.control(["ctl", "run", "listener"]).status == 0)
            await serve.wait(for: "\"message\":\"launch in active, unlimited\"")
            #expect(await serve.stop() == 0)
            // (By the time the hook runs, the shutdown may have given the grant its deadline.)
            let last = Array(try serve.logs("listener").suffix(3)).map { $0.replacingOccurrences(of: "active, limited", with: "active, unlimited") }
            #expect(last == ["launch in active, unlimited", "will-terminate in active, unlimited", "expire shutdown"])
        }

        /// Before: a link made in the folder (`ln`, `ln -s`) raises only
        /// IN_CREATE, which serve did not watch: the plugin was never served.
        @Test func aPluginLinkedIntoTheFolderIsServed() async throws {
            let folder = Fixtures.temporaryFolder("served")
            let config = try config(#"{"defaults": {"enabled": false}}"#)
            let serve = try ServeProcess(folder: folder, state: Fixtures.temporaryFolder("state"), extra: ["--config", config])
            await serve.wait(for: "control socket")
            let built = try plugin()
            #expect(link(built, folder + "/hard.so") == 0)
            await serve.wait(for: "serving 'tally' from \(folder)/hard.so")
            #expect(unlink(folder + "/hard.so") == 0)
            await serve.wait(for: "'tally' is gone from the folders")
            #expect(symlink(built, folder + "/soft.so") == 0)
            await serve.wait(for: "serving 'tally' from \(folder)/soft.so")
            #expect(await serve.stop() == 0)
        }

        /// An overflow means events were lost: the server forgets the files
        /// it thought were being written and rescans every folder.
        @Test func anInotifyOverflowRescansEveryFolder() async throws {
            let folder = Fixtures.temporaryFolder("served")
            var options = Server.Options(folders: [folder])
            options.run.workerExecutable = Fixtures.curfewExecutable
            options.config = try ServeConfig.parse(Array(#"{"defaults": {"enabled": false}}"#.utf8), file: "test.json")
            let notices = Mutex<[String]>([])
            let server = try Server(options: options, onEvent: { _, _ in }) { notice in
                switch notice {
                case .info(let text), .warning(let text), .error(let text): notices.withLock { $0.append(text) }
                }
            }
            try server.start()
            // Written whole but still open: never loaded while inotify says it is being written.
            let bytes = try Data(contentsOf: URL(fileURLWithPath: try plugin()))
            #expect(FileManager.default.createFile(atPath: folder + "/jobs.so", contents: nil))
            let open = try #require(FileHandle(forWritingAtPath: folder + "/jobs.so"))
            open.write(bytes)
            server.receive([.writing(folder + "/jobs.so")])
            server.reload()  // a rescan that keeps what inotify said
            #expect(server.states().isEmpty, "a file being written is not loaded")
            server.receive([.overflow])
            // Generous: twice in the suite, on a busy machine, 20 s went by
            // without the jobs (the scans' count and the notices say more).
            let give = ContinuousClock.now + .seconds(60)
            while server.states().isEmpty && ContinuousClock.now < give { try await Task.sleep(for: .milliseconds(5)) }
            #expect(server.states().map(\.job) == ["asks", "flaky", "tally"], "scans \(server.scans()), said \(notices.withLock { $0 })")
            try open.close()
            await withCheckedContinuation { done in server.stop { done.resume() } }
        }

        /// Before, a folder deleted and made again was never watched again,
        /// even after a reload, until a restart.
        @Test func aFolderDeletedAndMadeAgainIsWatchedAgain() async throws {
            let folder = Fixtures.temporaryFolder("served")
            try drop(try plugin(), into: folder)
            var options = Server.Options(folders: [folder])
            options.run.workerExecutable = Fixtures.curfewExecutable
            options.config = try ServeConfig.parse(Array(#"{"defaults": {"enabled": false}}"#.utf8), file: "test.json")
            let notices = Mutex<[String]>([])
            let server = try Server(options: options, onEvent: { _, _ in }) { notice in
                switch notice {
                case .info(let text), .warning(let text), .error(let text): notices.withLock { $0.append(text) }
                }
            }
            try server.start()
            func said(_ fragment: String, count: Int = 1) async throws {
                let give = ContinuousClock.now + .seconds(20)
                while notices.withLock({ $0.filter { $0.contains(fragment) }.count }) < count && ContinuousClock.now < give {
                    try await Task.sleep(for: .milliseconds(5))
                }
                #expect(notices.withLock { $0.filter { $0.contains(fragment) }.count } >= count, "\(notices.withLock { $0 })")
            }
            try FileManager.default.removeItem(atPath: folder)
            try await said("'tally' is gone from the folders")
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
            try await said("is back; watching it again")
            try drop(try plugin(), into: folder)
            try await said("serving 'tally' from \(folder)/jobs.so", count: 2)
            await withCheckedContinuation { done in server.stop { done.resume() } }
        }

        /// Before: a rescan ran on the server's queue, so status, schedules
        /// and the watchdog waited for it, and each reload queued one more
        /// (15 reloads over 5,000 plugins held the server 29.6 s).
        @Test func reloadsDuringAScanBecomeOneMoreAndTheServerAnswersMeanwhile() async throws {
            let folder = Fixtures.temporaryFolder("served")
            let gate = Fixtures.temporaryFolder("gate") + "/open"
            let plugin = try Fixtures.compile("gated_load.c", defines: ["GATE=\"\(gate)\""])
            var options = Server.Options(folders: [folder])
            options.run.workerExecutable = Fixtures.curfewExecutable
            options.config = try ServeConfig.parse(Array(#"{"defaults": {"enabled": false}}"#.utf8), file: "test.json")
            let server = try Server(options: options, onEvent: { _, _ in }) { _ in }
            try server.start()
            func loads() -> Int { ((try? String(contentsOfFile: gate + ".log", encoding: .utf8)) ?? "").split(separator: "\n").count }
            func until(_ done: () -> Bool) async throws {
                let give = ContinuousClock.now + .seconds(30)
                while !done() && ContinuousClock.now < give { try await Task.sleep(for: .milliseconds(5)) }
            }
            try drop(plugin, into: folder)
            try await until { loads() == 1 }  // its scanner waits at the gate
            let asked = ContinuousClock.now
            #expect(server.states().isEmpty)
            #expect(ContinuousClock.now - asked < .seconds(1), "the server answers while a scan waits")
            for _ in 0..<15 { server.reload() }
            #expect(FileManager.default.createFile(atPath: gate, contents: nil))
            try await until { server.scans() == (started: 3, running: false) }
            #expect(server.scans() == (started: 3, running: false), "the first, the drop's, and one for the 15 reloads")
            #expect(server.states().map(\.job) == ["gated"])
            await withCheckedContinuation { done in server.stop { done.resume() } }
        }

        /// Before, an hour back on the wall clock stopped a 200 ms job for the
        /// hour, and status showed its next run an hour off.
        @Test func aWallClockJumpMovesNoEverySchedule() async throws {
            let folder = Fixtures.temporaryFolder("served")
            try drop(try plugin(), into: folder)
            var options = Server.Options(folders: [folder])
            options.run.workerExecutable = Fixtures.curfewExecutable
            options.config = try ServeConfig.parse(
                Array(#"{"defaults": {"enabled": false}, "jobs": {"tally": {"enabled": true, "every": "200ms", "budget": "100ms"}}}"#.utf8), file: "test.json")
            let shift = Mutex<Int64>(0)
            options.wallClock = { WallTime.now().later(by: .milliseconds(shift.withLock { $0 })) }
            let runs = Atomic<Int>(0)
            let notices = Mutex<[String]>([])
            let server = try Server(options: options, onEvent: { event, _ in
                if case .finished = event { runs.add(1, ordering: .relaxed) }
            }) { notice in
                if case .info(let text) = notice { notices.withLock { $0.append(text) } }
            }
            try server.start()
            func waitForRuns(_ count: Int) async throws {
                let target = runs.load(ordering: .relaxed) + count
                let give = ContinuousClock.now + .seconds(30)
                while runs.load(ordering: .relaxed) < target && ContinuousClock.now < give { try await Task.sleep(for: .milliseconds(5)) }
                #expect(runs.load(ordering: .relaxed) >= target, "\(notices.withLock { $0 })")
            }
            try await waitForRuns(2)
            for jump: Int64 in [-3_600_000, 3_600_000] {
                shift.withLock { $0 += jump }
                try await waitForRuns(3)
                let next = try #require(server.states().first { $0.job == "tally" }?.entry.nextRun)
                let wall = options.wallClock()
                #expect(abs(next.milliseconds - wall.milliseconds) < 5_000, "shown on the wall clock")
            }
            #expect(notices.withLock { $0 }.contains("The wall clock jumped back by 3600 s; schedules keep their periods, calendars follow it."))
            #expect(notices.withLock { $0 }.contains("The wall clock jumped forward by 3600 s; schedules keep their periods, calendars follow it."))
            await withCheckedContinuation { done in server.stop { done.resume() } }
        }

        /// Before, a next run the store held for the year 3000 was obeyed.
        @Test func aStoredNextRunBeyondAnyScheduleIsSaidAndNotObeyed() async throws {
            let folder = Fixtures.temporaryFolder("served")
            try drop(try plugin(), into: folder)
            let state = Fixtures.temporaryFolder("state")
            let year3000 = WallTime(milliseconds: 32_503_680_000_000)
            try StateStore(folder: state, writer: .current()).saveSchedule(ScheduleRecord(job: "tally", nextRun: year3000, failures: 0, skipped: 0))
            var options = Server.Options(folders: [folder])
            options.run.workerExecutable = Fixtures.curfewExecutable
            options.run.state = try StateStore(folder: state, writer: .current())
            options.config = try ServeConfig.parse(
                Array(#"{"defaults": {"enabled": false}, "jobs": {"tally": {"enabled": true, "budget": "100ms"}}}"#.utf8), file: "test.json")
            let ran = Atomic<Bool>(false)
            let warnings = Mutex<[String]>([])
            let server = try Server(options: options, onEvent: { event, _ in
                if case .finished = event { ran.store(true, ordering: .relaxed) }
            }) { notice in
                if case .warning(let text) = notice { warnings.withLock { $0.append(text) } }
            }
            try server.start()
            #expect(warnings.withLock { $0 } == [
                "the store's next run of 'tally' (in the year 3000) is further ahead than any schedule sets; ignored as corrupt"
            ])
            let give = ContinuousClock.now + .seconds(30)
            while !ran.load(ordering: .relaxed) && ContinuousClock.now < give { try await Task.sleep(for: .milliseconds(5)) }
            let didRun = ran.load(ordering: .relaxed)
            #expect(didRun, "it runs as a new job does")
            await withCheckedContinuation { done in server.stop { done.resume() } }
        }

        /// Before, serve exited 0 though a job's cleanup overran at the stop:
        /// a service manager saw a clean stop where work went unsaved.
        @Test func aCleanupThatOverrunsTheStopMakesTheExitStatus2() async throws {
            let folder = Fixtures.temporaryFolder("served")
            try drop(try Fixtures.compile("crashing_jobs.c"), into: folder)
            let config = try config(#"{"defaults": {"enabled": false}, "jobs": {"hangs-at-31": {"enabled": true, "budget": "1h", "grace": "200ms"}}}"#)
            let serve = try ServeProcess(folder: folder, state: Fixtures.temporaryFolder("state"), extra: ["--config", config])
            await serve.wait(for: "\"message\":\"hangs\"")  // in chunk 31, which never returns
            #expect(await serve.stop() == 2, "\(serve.text)")
            #expect(try serve.events().contains { $0.event == "finished" && $0.outcome == "terminated" }, "\(serve.text)")
        }

        /// Before, a history row the store refused (a full disk) was lost in
        /// silence: now each is said as an error and `status` counts them.
        @Test func aWriteTheStoreRefusesIsSaidAndCounted() async throws {
            let folder = Fixtures.temporaryFolder("served")
            try drop(try plugin(), into: folder)
            let state = Fixtures.temporaryFolder("state")
            let store = try StateStore(folder: state, writer: .current())
            // As a full disk would: every new history row fails.
            try SQLiteConnection(path: store.path).execute(
                "CREATE TRIGGER full BEFORE INSERT ON job_runs BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
            var options = Server.Options(folders: [folder])
            options.run.workerExecutable = Fixtures.curfewExecutable
            options.run.state = store
            options.config = try ServeConfig.parse(
                Array(#"{"defaults": {"enabled": false}, "jobs": {"tally": {"enabled": true, "budget": "100ms"}}}"#.utf8), file: "test.json")
            let errors = Mutex<[String]>([])
            let server = try Server(options: options, onEvent: { _, _ in }) { notice in
                if case .error(let text) = notice { errors.withLock { $0.append(text) } }
            }
            try server.start()
            let give = ContinuousClock.now + .seconds(30)
            while server.storeFailureCount() < 2 && ContinuousClock.now < give { try await Task.sleep(for: .milliseconds(5)) }
            let said = errors.withLock { $0 }
            #expect(said.contains { $0.hasPrefix("the start of job 'tally' was not recorded") && $0.contains("database or disk is full") }, "\(said)")
            #expect(said.contains { $0.hasPrefix("the end of job 'tally' was not recorded") }, "\(said)")
            #expect(server.answer(Array(#"{"command":"status"}"#.utf8)).contains(#""store_failures":2"#))
            await withCheckedContinuation { done in server.stop { done.resume() } }
        }

        @Test func aFailingJobIsRetriedAsItsPolicySaysThenStops() async throws {
            let folder = Fixtures.temporaryFolder("served")
            try drop(try plugin(), into: folder)
            let config = try config(
                #"{"jobs": {"flaky": {"retry": {"attempts": 2, "delay": "50ms", "max_delay": "100ms"}}, "asks": {"enabled": false}, "tally": {"enabled": false}}}"#)
            let serve = try ServeProcess(folder: folder, state: Fixtures.temporaryFolder("state"), extra: ["--config", config])
            await serve.wait(for: "\"message\":\"flaky failed\"", count: 3)
            // Said only once the outcome is in the schedule: status shows it.
            await serve.wait(for: "\"event\":\"finished\"", count: 3)
            let status = try await serve.control(["status", "--json"])
            let line = try #require(status.out.split(separator: "\n").first { $0.contains("\"job\":\"flaky\"") })
            #expect(line.contains("\"next_run\":null") && line.contains("\"last_outcome\":\"failed\""), "\(line)")
            #expect(line.contains("\"failures\":0"), "attempts spent: back on its (empty) schedule")
            #expect(await serve.stop() == 0)
            #expect(try serve.events().filter { $0.event == "started" }.count == 3, "the first run and two retries")
        }

        /// SIGHUP reads the config again and rescans: a job enabled there runs;
        /// a config that no longer parses is said, and the last good one stays.
        @Test func sighupReadsTheConfigAgain() async throws {
            let folder = Fixtures.temporaryFolder("served")
            try drop(try plugin(), into: folder)
            let config = try config(#"{"jobs": {"asks": {"enabled": false}, "tally": {"enabled": false}, "flaky": {"enabled": false}}}"#)
            let serve = try ServeProcess(folder: folder, state: Fixtures.temporaryFolder("state"), extra: ["--config", config])
            await serve.wait(for: "control socket")
            try #"{"jobs": {"asks": {"evry": "1s"}}}"#.write(toFile: config, atomically: true, encoding: .utf8)
            kill(serve.process.processIdentifier, SIGHUP)
            await serve.wait(for: "the config in use stays")
            try #"{"jobs": {"tally": {"enabled": false}, "flaky": {"enabled": false}}}"#.write(toFile: config, atomically: true, encoding: .utf8)
            kill(serve.process.processIdentifier, SIGHUP)
            await serve.wait(for: "\"message\":\"request answered 0\"")
            #expect(try serve.events().contains { ($0.message ?? "").hasPrefix("Read \(config) again") })
            #expect(try serve.events().filter { $0.event == "started" }.map(\.job) == ["asks"], "only the job the new config enables")
            #expect(await serve.stop() == 0)
        }

        @Test func aBadConfigIsRefusedWithTheFileTheJobAndTheKey() async throws {
            let config = try config(#"{"jobs": {"tally": {"evry": "5s"}}}"#)
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable, ["serve", Fixtures.temporaryFolder("served"), "--config", config, "--no-state"])
            #expect(result.status == 1)
            #expect(result.stderr.contains("\(config): job 'tally': \"evry\": unknown key"), "\(result.stderr)")
        }

        /// A job's isolate "none" in the config is refused as --isolate none is
        /// (the check once compared against Optional.none and let it through).
        @Test func aConfigThatRunsAJobInProcessIsRefused() async throws {
            let config = try config(#"{"jobs": {"tally": {"isolate": "none"}}}"#)
            let result = try await Fixtures.run(
                Fixtures.curfewExecutable, ["serve", Fixtures.temporaryFolder("served"), "--config", config, "--no-state"])
            #expect(result.status == 1)
            #expect(result.stderr.contains("job 'tally': \"isolate\": serve runs every job in a worker"), "\(result.stderr)")
        }

        /// A continuous job whose modes are not allowed is said once and not
        /// scheduled: a rescan does not say it again, nor start it.
        /// Before: after a restart `status` showed no last outcome until the
        /// job ran again, and what `ctl` asked was not in the server's log.
        @Test func aRestartedServerKnowsEachJobsLastOutcomeAndLogsWhatCtlAsks() async throws {
            let folder = Fixtures.temporaryFolder("served")
            let state = Fixtures.temporaryFolder("state")
            try drop(try plugin(), into: folder)
            let config = try config(#"{"jobs": {"tally": {"every": "1h", "budget": "150ms"}, "asks": {"enabled": false}, "flaky": {"enabled": false}}}"#)
            let first = try ServeProcess(folder: folder, state: state, extra: ["--config", config])
            await first.wait(for: "\"event\":\"finished\"")
            #expect(await first.stop() == 0)
            // Expired, or on a busy machine terminated: the next server says which.
            let outcome = try #require(try first.events().first { $0.event == "finished" }?.outcome)
            #expect(["expired", "terminated"].contains(outcome))

            let again = try ServeProcess(folder: folder, state: state, extra: ["--config", config])
            await again.wait(for: "control socket")
            let status = try await again.control(["status"])
            #expect(status.out.contains("last \(outcome)"), "\(status.out)")
            #expect(try await again.control(["ctl", "pause", "tally"]).status == 0)
            await again.wait(for: "control socket: Paused 'tally'")
            #expect(await again.stop() == 0)
            #expect(try again.events().filter { $0.event == "started" }.isEmpty, "its next run is an hour away")
        }

        /// Before, `kill -9` of the host left no row of the run it had in hand,
        /// and a pause was forgotten at the restart.
        @Test func afterKill9TheNextServerShowsTheInterruptedRunAndKeepsThePause() async throws {
            let folder = Fixtures.temporaryFolder("served")
            let state = Fixtures.temporaryFolder("state")
            try drop(try plugin(), into: folder)
            let config = try config(#"{"jobs": {"tally": {"budget": "1h"}, "asks": {"enabled": false}, "flaky": {"every": "1h"}}}"#)
            let first = try ServeProcess(folder: folder, state: state, extra: ["--config", config])
            await first.wait(for: "v1 run 1")
            let history = try await Fixtures.run(Fixtures.curfewExecutable, ["history", "--state", state, "--job", "tally", "--json"])
            #expect(history.stdout.contains(#""outcome":"running""#), "\(history.stdout)\(history.stderr)")
            #expect(try await first.control(["ctl", "pause", "flaky"]).status == 0)
            kill(first.process.processIdentifier, SIGKILL)
            await Fixtures.wait(for: first.process)

            let again = try ServeProcess(folder: folder, state: state, extra: ["--config", config])
            await again.wait(for: "control socket")
            let after = try await Fixtures.run(Fixtures.curfewExecutable, ["history", "--state", state, "--job", "tally", "--json"])
            #expect(after.stdout.contains(#""outcome":"interrupted""#), "\(after.stdout)")
            let status = try await again.control(["status", "--json"])
            let flaky = try #require(status.out.split(separator: "\n").first { $0.contains("\"job\":\"flaky\"") })
            #expect(flaky.contains("\"state\":\"paused\""), "\(flaky)")
            #expect(await again.stop() == 0)
        }

        /// Before, a process a job detached (setsid) outlived `kill -9` of
        /// serve, and each restart started one more. The next server on the
        /// store ends it before it starts anything.
        @Test func whatAKilledServerLeftIsEndedByTheNext() async throws {
            let folder = Fixtures.temporaryFolder("served")
            let state = Fixtures.temporaryFolder("state")
            try drop(try Fixtures.compile("hostile_jobs.c"), into: folder)
            let pidsFolder = Fixtures.temporaryFolder("pids")
            let pids = pidsFolder + "/forks"
            let config = try config(#"""
                {"defaults": {"enabled": false}, "jobs": {"forks": {"enabled": true, "budget": "1h",
                 "params": {"children": "1", "setsid": "1", "stay": "1", "pidfile": "\#(pids)"}, "sandbox": {"write": ["\#(pidsFolder)"]}}}}
                """#)
            let first = try ServeProcess(folder: folder, state: state, extra: ["--config", config])
            await first.wait(for: "\"event\":\"started\"")
            func strayPid() async throws -> pid_t? {
                let give = ContinuousClock.now + .seconds(20)
                while ContinuousClock.now < give {
                    if let text = try? String(contentsOfFile: pids, encoding: .utf8), text.hasSuffix("\n") { return pid_t(text.dropLast()) }
                    try await Task.sleep(for: .milliseconds(5))
                }
                return nil
            }
            let stray = try #require(try await strayPid())
            let held = curfew_shim_pidfd_open(stray)
            #expect(held >= 0)
            defer { close(held) }
            // The host and its worker killed at once, as the OOM killer or a
            // kill of the tree would (a worker that sees its host go first
            // ends what its job left). The host is stopped first so that it
            // cannot answer its worker's death; a stopped worker would not
            // do: once its parents die its process group is orphaned, and the
            // kernel sends it SIGHUP and SIGCONT.
            let fields = try String(contentsOfFile: "/proc/\(stray)/stat", encoding: .utf8).split(separator: ")").last?.split(separator: " ")
            let worker = try #require(fields.flatMap { $0.count > 1 ? pid_t($0[1]) : nil })
            let host = first.process.processIdentifier
            // The worker's fork server, when it has one, is stopped too: it
            // ends a dead worker's processes itself, and on a busy machine it
            // could do so before the host's death reached it.
            let parentFields = try String(contentsOfFile: "/proc/\(worker)/stat", encoding: .utf8).split(separator: ")").last?.split(separator: " ")
            let server = try #require(parentFields.flatMap { $0.count > 1 ? pid_t($0[1]) : nil })
            let frozen = server == host ? [host] : [host, server]
            for pid in frozen { #expect(kill(pid, SIGSTOP) == 0) }
            let stopping = ContinuousClock.now + .seconds(20)
            func stopped() -> Bool {
                frozen.allSatisfy { pid in
                    let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
                    return !threads.isEmpty && threads.allSatisfy { thread in
                        let stat = (try? String(contentsOfFile: "/proc/\(pid)/task/\(thread)/stat", encoding: .utf8)) ?? ""
                        return stat.split(separator: ")").last?.hasPrefix(" T") ?? false
                    }
                }
            }
            while !stopped() && ContinuousClock.now < stopping { try await Task.sleep(for: .milliseconds(1)) }
            #expect(stopped())
            #expect(kill(worker, SIGKILL) == 0)
            kill(host, SIGKILL)
            await Fixtures.wait(for: first.process)
            let outlived = curfew_shim_pidfd_send_signal(held, 0)
            #expect(outlived == 0, "the stray outlived its host: errno \(errno), \((try? String(contentsOfFile: "/proc/\(stray)/stat", encoding: .utf8)) ?? "gone")")

            try FileManager.default.removeItem(atPath: pids)
            let again = try ServeProcess(folder: folder, state: state, extra: ["--config", config])
            await again.wait(for: "control socket")
            // Gone, or a zombie its new parent has not reaped yet.
            let give = ContinuousClock.now + .seconds(10)
            func alive() -> Bool {
                guard curfew_shim_pidfd_send_signal(held, 0) == 0 else { return false }
                let stat = (try? String(contentsOfFile: "/proc/\(stray)/stat", encoding: .utf8)) ?? ""
                return !(stat.split(separator: ")").last?.hasPrefix(" Z") ?? true)
            }
            while alive() && ContinuousClock.now < give { try await Task.sleep(for: .milliseconds(5)) }
            #expect(!alive(), "ended by the next server")
            #expect(await again.stop() == 0)
        }

        /// A misspelled job in the config ran the real job on the defaults,
        /// in silence: each is said at load and on every reload, and a job a
        /// folder change leaves without a plugin is said once.
        @Test func aConfiguredJobNoPluginDeclaresIsSaidAtLoadOnReloadAndWhenItsPluginGoes() async throws {
            let folder = Fixtures.temporaryFolder("served")
            try drop(try plugin(), into: folder)
            let config = try config(#"{"jobs": {"talley": {"every": "1h"}, "tally": {"enabled": false}, "asks": {"enabled": false}, "flaky": {"enabled": false}}}"#)
            let serve = try ServeProcess(folder: folder, state: Fixtures.temporaryFolder("state"), extra: ["--config", config])
            await serve.wait(for: "control socket")
            let typo = "\(config): job 'talley' matches no loaded job; known: 'asks', 'flaky', 'tally'"
            #expect(try serve.events().compactMap(\.message).filter { $0 == typo }.count == 1, "\(serve.text)")
            #expect(try await serve.control(["ctl", "reload"]).status == 0)
            _ = try await serve.control(["status"])
            await serve.wait(for: "matches no loaded job", count: 2)
            try FileManager.default.removeItem(atPath: folder + "/jobs.so")
            await serve.wait(for: "job 'tally' matches no loaded job; known: none")
            #expect(await serve.stop() == 0)
            let said = try serve.events().compactMap(\.message).filter { $0.contains("matches no loaded job") }
            #expect(said.filter { $0 == typo }.count == 2, "said again on reload: \(said)")
            #expect(said.filter { $0.contains("job 'tally'") }.count == 1, "\(said)")
        }

        @Test func aContinuousJobNotAllowedIsSaidOnceAndNotRun() async throws {
            let folder = Fixtures.temporaryFolder("served")
            try drop(try Fixtures.compile("modes_jobs.c"), into: folder)
            let serve = try ServeProcess(folder: folder, state: Fixtures.temporaryFolder("state"))
            await serve.wait(for: "control socket")
            #expect(try await serve.control(["ctl", "reload"]).status == 0)
            // The reload's rescan is done when a status answers after it (one queue).
            let status = try await serve.control(["status"])
            #expect(status.out.contains("No job is served"), "\(status.out)")
            #expect(await serve.stop() == 0)
            let said = try serve.events().compactMap(\.message).filter { $0.contains("allow them with --allow-mode audio --allow-mode location") }
            #expect(said.count == 1, "\(said)")
            #expect(try serve.events().filter { $0.event == "started" }.isEmpty)
        }
    }
}

/// The parts of serve a test can reach without a process.
@Suite struct ServePartsTests {
    @Test func aClientFindsTheSystemServiceWhenThisUserServesNothing() {
        let environment: (String) -> String? = { $0 == "XDG_RUNTIME_DIR" ? "/run/user/1000" : nil }
        #expect(ControlSocket.clientPath(environment: environment) { $0 == "/run/curfew/serve.sock" } == "/run/curfew/serve.sock")
        #expect(ControlSocket.clientPath(environment: environment) { _ in true } == "/run/user/1000/curfew/serve.sock", "this user's own first")
        #expect(ControlSocket.clientPath(environment: environment) { _ in false } == "/run/user/1000/curfew/serve.sock")
    }

    @Test func onlyThisUserAndRootAreAdmitted() {
        #expect(ControlSocket.admits(uid: 1000, owner: 1000))
        #expect(ControlSocket.admits(uid: 0, owner: 1000))
        #expect(!ControlSocket.admits(uid: 1001, owner: 1000))
    }

    @Test func theSocketGoesInTheRuntimeFolderSystemdOrTheSessionGives() {
        #expect(ControlSocket.defaultPath { ["RUNTIME_DIRECTORY": "/run/curfew:/run/other"][$0] } == "/run/curfew/serve.sock")
        #expect(ControlSocket.defaultPath { ["XDG_RUNTIME_DIR": "/run/user/1000"][$0] } == "/run/user/1000/curfew/serve.sock")
        #expect(ControlSocket.defaultPath { ["HOME": "/home/u"][$0] } == "/home/u/.cache/curfew/serve.sock")
        #expect(ControlSocket.defaultPath { _ in nil } == "/tmp/curfew-\(geteuid())/serve.sock")
    }

    /// A connection to the socket at `path` that says nothing yet.
    func connectSilently(_ path: String) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        return connected == 0 ? fd : -1
    }

    /// Before: one accept thread read each client in turn, a second each,
    /// so fifty idle clients held `status` for fifty seconds, and a client
    /// sending a byte every 0.9 s held it for as long as it liked.
    @Test func aSlowClientAndFiftyIdleOnesDoNotHoldUpAnother() throws {
        let path = Fixtures.temporaryFolder("sock") + "/s.sock"
        let socket = try ControlSocket(path: path, refusesJobs: false) { _ in #"{"ok":true,"message":"here"}"# }
        defer { socket.close() }
        let idle = (0..<50).map { _ in connectSilently(path) }
        defer { idle.forEach { close($0) } }
        #expect(idle.allSatisfy { $0 >= 0 })
        let slow = connectSilently(path)
        defer { close(slow) }
        #expect(send(slow, "{", 1, Int32(MSG_NOSIGNAL)) == 1, "a byte of a request that never ends")
        let start = ContinuousClock.now
        let answer = try ControlSocket.ask(path: path, request: #"{"command":"status"}"#)
        let waited = ContinuousClock.now - start
        #expect(String(decoding: answer, as: UTF8.self) == #"{"ok":true,"message":"here"}"#)
        #expect(waited < .milliseconds(500), "waited \(waited)")
    }

    /// Before: another user who made `/tmp/curfew-UID` first answered this
    /// user's `status` and `ctl` with whatever it liked.
    @Test func aClientDoesNotTrustASocketAnotherUserCouldHavePlaced() throws {
        let shared = Fixtures.temporaryFolder("shared")
        chmod(shared, 0o1777)
        let open = shared + "/open"
        mkdir(open, 0o777)
        chmod(open, 0o777)
        #expect(ControlSocket.distrust(open + "/serve.sock")?.contains("others can write its folder") == true)
        let link = shared + "/link"
        symlink(open, link)
        #expect(ControlSocket.distrust(link + "/serve.sock")?.contains("symlink") == true)
        let own = shared + "/own"
        mkdir(own, 0o700)
        #expect(ControlSocket.distrust(own + "/serve.sock") == nil)
        // Another user's folder in a folder anyone can write is distrusted
        // (made another's only where this test may: as root).
        let other = geteuid() == 0 ? uid_t(54_321) : nil
        if let other, chown(own, other, other) == 0 {
            #expect(ControlSocket.distrust(own + "/serve.sock")?.contains("where anyone could have made it first") == true)
            // A service's folder in one only its owner can write (/run/curfew in /run) is trusted.
            chmod(shared, 0o755)
            #expect(ControlSocket.distrust(own + "/serve.sock") == nil)
            chown(own, geteuid(), getegid())
        }
        // A file that is not a socket is not asked.
        #expect(FileManager.default.createFile(atPath: own + "/serve.sock", contents: nil))
        #expect {
            try ControlSocket.ask(path: own + "/serve.sock", request: "{}")
        } throws: { ($0 as? CurfewError)?.description.contains("is not a socket") == true }
    }

    /// inotify records, as the kernel lays them out.
    func record(_ watch: Int32, _ mask: Int32, _ name: String) -> [UInt8] {
        var bytes: [UInt8] = []
        func put(_ value: UInt32) { bytes += withUnsafeBytes(of: value.littleEndian, Array.init) }
        let padded = name.isEmpty ? 0 : (name.utf8.count / 16 + 1) * 16
        put(UInt32(bitPattern: watch))
        put(UInt32(bitPattern: mask))
        put(0)
        put(UInt32(padded))
        bytes += Array(name.utf8) + [UInt8](repeating: 0, count: padded - name.utf8.count)
        return bytes
    }

    @Test func watcherEventsBecomeChangesAndAnOverflowAsksForARescan() {
        let folders: [Int32: String] = [1: "/p"]
        let bytes =
            record(1, Int32(IN_MODIFY), "a.so") + record(1, Int32(IN_CLOSE_WRITE), "a.so") + record(1, Int32(IN_MOVED_TO), ".b.so")
            + record(1, Int32(IN_DELETE), "c.so") + record(-1, Int32(IN_Q_OVERFLOW), "") + record(1, Int32(IN_DELETE_SELF), "")
            + record(1, Int32(IN_CLOSE_WRITE) | Int32(IN_ISDIR), "dir") + record(1, Int32(IN_CREATE), "d.so")
            + record(1, Int32(IN_CREATE), ".d.so")
        #expect(FolderWatcher.parse(bytes[...], folders: folders) == [
            .writing("/p/a.so"), .written("/p/a.so"), .removed("/p/c.so"), .overflow, .folderGone("/p"), .created("/p/d.so"),
        ])
    }

    @Test func aTruncatedOrLyingRecordEndsTheParseWithoutATrap() {
        var bytes = record(1, Int32(IN_CLOSE_WRITE), "a.so")
        bytes[12] = 0xFF  // a name length past the end
        #expect(FolderWatcher.parse(bytes[...], folders: [1: "/p"]).isEmpty)
        #expect(FolderWatcher.parse(bytes.prefix(10), folders: [1: "/p"]).isEmpty)
    }
}

extension ProcessTests.First {
    /// Background modes: a continuous job declares them, the operator allows them by name.
    @Suite(.timeLimit(.minutes(2))) struct BackgroundModeTests {
        func run(_ plugin: String, _ extra: [String]) async throws -> (status: Int32, text: String) {
            let result = try await Fixtures.run(Fixtures.curfewExecutable, ["run", plugin, "--no-state"] + extra)
            return (result.status, result.stdout + result.stderr)
        }

        @Test func aContinuousJobRunsWhenEveryModeItDeclaresIsAllowed() async throws {
            let plugin = try Fixtures.compile("modes_jobs.c")
            let listed = try await Fixtures.run(Fixtures.curfewExecutable, ["list", plugin])
            #expect(listed.stdout.contains("[continuous: audio, location]"), "\(listed.stdout)")
            let none = try await run(plugin, [])
            #expect(none.status == 2)
            #expect(none.text.contains("is continuous in background modes audio, location; allow them with --allow-mode audio --allow-mode location"), "\(none.text)")
            let half = try await run(plugin, ["--allow-mode", "audio", "--isolate", "job"])
            #expect(half.status == 2)
            #expect(half.text.contains("allow it with --allow-mode location"), "\(half.text)")
            for allowed in [["--allow-mode", "location", "--allow-mode", "audio"], ["--allow-continuous"]] {
                let result = try await run(plugin, allowed)
                #expect(result.status == 0, "\(allowed): \(result.text)")
                #expect(result.text.contains("player: completed"), "\(result.text)")
            }
        }

        @Test(arguments: [
            ("\"audio,,location\"", "background mode \"\" is none of"),
            ("\"teleport\"", "background mode \"teleport\" is none of"),
            ("\"audio,audio\"", "background mode 'audio' is given twice"),
            ("\"x-\"", "background mode \"x-\" is none of"),
            ("\"X-Feed\"", "background mode \"X-Feed\" is none of"),
        ])
        func aBadModeListRejectsThePlugin(modes: String, reason: String) async throws {
            let plugin = try Fixtures.compile("modes_jobs.c", defines: ["MODES=\(modes)"])
            let listed = try await Fixtures.run(Fixtures.curfewExecutable, ["list", plugin])
            #expect(listed.status == 3)
            #expect(listed.stdout.contains(reason), "\(listed.stdout)")
        }

        @Test func modesOnAJobThatIsNotContinuousRejectThePlugin() async throws {
            let plugin = try Fixtures.compile("modes_jobs.c", defines: ["NOT_CONTINUOUS"])
            let listed = try await Fixtures.run(Fixtures.curfewExecutable, ["list", plugin])
            #expect(listed.status == 3)
            #expect(listed.stdout.contains("declares background modes but is not continuous"), "\(listed.stdout)")
        }

        @Test func aModeOfItsOwnIsAllowedByName() async throws {
            let plugin = try Fixtures.compile("modes_jobs.c", defines: ["MODES=\"x-sensor-feed,voip\""])
            let result = try await run(plugin, ["--allow-mode", "x-sensor-feed", "--allow-mode", "voip"])
            #expect(result.status == 0, "\(result.text)")
        }
    }
}

/// The non-overlapping occurrences of a fragment in a text that only grows,
/// each position tried once over all updates.
struct FragmentCount {
    let fragment: [UInt8]
    private(set) var count = 0
    /// Where the next occurrence may begin.
    private var next = 0

    init(_ fragment: String) { self.fragment = Array(fragment.utf8) }

    mutating func update(with text: String) -> Int {
        var text = text
        text.withUTF8 { bytes in
            guard !fragment.isEmpty else { return }
            while next + fragment.count <= bytes.count {
                if bytes[next] == fragment[0] && bytes[next..<next + fragment.count].elementsEqual(fragment) {
                    count += 1
                    next += fragment.count
                } else {
                    next += 1
                }
            }
        }
        return count
    }
}

@Suite struct FragmentCountTests {
    /// A fragment split across two reads counts once, when its end comes.
    @Test func aFragmentSplitAcrossReadsCountsOnceWhole() {
        var counter = FragmentCount("\"event\":\"finished\"")
        let text = #"{"event":"finished"}{"event":"started"}{"event":"finished"}"#
        let cut = text.index(text.startIndex, offsetBy: 45)
        #expect(counter.update(with: String(text[..<cut])) == 1)
        #expect(counter.update(with: text) == 2)
        #expect(counter.update(with: text) == 2)
        var overlapping = FragmentCount("aa")
        #expect(overlapping.update(with: "aaaaa") == 2, "non-overlapping, as components(separatedBy:)")
    }
}
