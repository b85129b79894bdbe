import Foundation
import Glibc
import Synchronization
import Testing

@testable import Curfew
@testable import CurfewCLI
@testable import CurfewHost

/// `serve --metrics`: the exposition, the addresses it takes, and the HTTP
/// server facing whatever connects.
@Suite struct MetricsFormatTests {
    @Test func addressesAreLoopbackUnlessSaidOtherwise() {
        #expect(MetricsAddress("9464") == .tcp(host: "127.0.0.1", port: 9464))
        #expect(MetricsAddress("127.0.0.1:9464") == .tcp(host: "127.0.0.1", port: 9464))
        #expect(MetricsAddress("[::1]:0") == .tcp(host: "::1", port: 0))
        #expect(MetricsAddress("/run/curfew/metrics.sock") == .local(path: "/run/curfew/metrics.sock"))
        #expect(MetricsAddress("0.0.0.0:9464")?.isExposed == true)
        #expect(MetricsAddress("127.0.0.1:9464")?.isExposed == false)
        for bad in ["", ":", "host:", "::1:9464", "127.0.0.1:65536", "127.0.0.1:-1", "[::1]9464", "relative/path", "9464x"] {
            #expect(MetricsAddress(bad) == nil, "\(bad)")
        }
    }

    @Test func labelValuesAreEscapedAndNumbersPlain() {
        var out = Exposition()
        out.family("x_total", .counter, "X.")
        out.sample("x_total", [("job", "a\"b\\c\nd")], UInt64(3))
        out.sample("x_total", [("le", "+Inf")], 0.25)
        #expect(out.text == "# HELP x_total X.\n# TYPE x_total counter\nx_total{job=\"a\\\"b\\\\c\\nd\"} 3\nx_total{le=\"+Inf\"} 0.25\n")
        #expect(Exposition.number(.infinity) == "+Inf" && Exposition.number(.nan) == "NaN" && Exposition.number(1e20) == "1e+20")
    }

    /// OpenMetrics where the client prefers it (Prometheus names it first),
    /// Prometheus' text format otherwise.
    @Test(arguments: [
        ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1", true),
        ("application/openmetrics-text", true), (" Application/OpenMetrics-Text ; q=0.9 , text/plain;q=0.5", true),
        ("text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5", false), ("application/openmetrics-text;q=0", false),
        ("application/openmetrics-text;version=0.0.1", false), ("application/openmetrics-text;q=nonsense", false), ("application/openmetrics-text;q=0.0001,text/plain;q=0.5", false), ("*/*", false), ("", false),
        (",;=;,", false),
    ])
    func theFormatIsWhatTheClientPrefers(_ accept: String, _ openMetrics: Bool) {
        #expect(Exposition.Format(accept: accept) == (openMetrics ? .openMetrics : .prometheus))
        #expect(Exposition.Format(accept: nil) == .prometheus)
    }

    /// The same families in both formats: OpenMetrics names a counter's
    /// family without `_total`, has an info type, escapes quotes in help
    /// and ends with `# EOF`.
    @Test func openMetricsNamesFamiliesAndEnds() {
        func write(_ format: Exposition.Format) -> String {
            var out = Exposition(format)
            out.family("x_build_info", .info, "Say \"x\".")
            out.sample("x_build_info", [("version", "1")], 1.0)
            out.family("x_runs_total", .counter, "Runs.")
            out.sample("x_runs_total", [], UInt64(2))
            return out.text
        }
        #expect(write(.prometheus) == "# HELP x_build_info Say \"x\".\n# TYPE x_build_info gauge\nx_build_info{version=\"1\"} 1\n# HELP x_runs_total Runs.\n# TYPE x_runs_total counter\nx_runs_total 2\n")
        #expect(write(.openMetrics) == "# HELP x_build Say \\\"x\\\".\n# TYPE x_build info\nx_build_info{version=\"1\"} 1\n# HELP x_runs Runs.\n# TYPE x_runs counter\nx_runs_total 2\n# EOF\n")
    }

    @Test func theCommandLineTakesMetrics() throws {
        guard case .serve(let options) = try Invocation(parsing: ["serve", "f", "--metrics", "9464"]) else {
            Issue.record("not serve")
            return
        }
        #expect(options.metrics == .tcp(host: "127.0.0.1", port: 9464))
        #expect(throws: UsageError.self) { try Invocation(parsing: ["serve", "f", "--metrics", "localhost:9464"]) }
        guard case .control(let control) = try Invocation(parsing: ["metrics"]) else {
            Issue.record("not control")
            return
        }
        #expect(control.metrics && control.action == nil)
    }
}

extension ProcessTests.First {
    @Suite(.timeLimit(.minutes(2))) struct MetricsServeTests {
        /// One HTTP/1.0 exchange on loopback: what came back, whole.
        static func fetch(_ port: UInt16, _ request: String) throws -> String {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var timeout = timeval(tv_sec: 10, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
            _ = request.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
            var answer: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = recv(fd, &buffer, buffer.count, 0)
                if count <= 0 { break }
                answer += buffer[..<count]
            }
            return String(decoding: answer, as: UTF8.self)
        }

        /// A connection that says nothing, held open (connected without
        /// waiting: a full listen queue must not hang the test).
        static func idle(_ port: UInt16) -> Int32 {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            _ = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            return fd
        }

        final class Count: Sendable {
            let value = Atomic<Int>(0)
            func load(ordering _: AtomicLoadOrdering) -> Int { value.load(ordering: .relaxed) }
        }

        /// A started host serving `fixture`'s jobs with `config`, and how many runs have finished.
        func serving(
            _ fixture: String = "condition_jobs.c",
            config: String = #"{"defaults": {"enabled": false}, "jobs": {"once": {"enabled": true, "every": "200ms", "budget": "2s"}}}"#,
            keepsState: Bool = false
        ) throws -> (Server, Count) {
            let folder = Fixtures.temporaryFolder("served")
            try FileManager.default.copyItem(atPath: try Fixtures.compile(fixture), toPath: folder + "/jobs.so")
            var options = Server.Options(folders: [folder])
            options.run.workerExecutable = Fixtures.curfewExecutable
            if keepsState { options.run.state = try StateStore(folder: Fixtures.temporaryFolder("state"), writer: .current()) }
            options.config = try ServeConfig.parse(Array(config.utf8), file: "test.json")
            let finished = Count()
            let server = try Server(options: options, onEvent: { event, _ in
                if case .finished = event { finished.value.add(1, ordering: .relaxed) }
            }, onNotice: { _ in })
            try server.start()
            return (server, finished)
        }

        func served() async throws -> (Server, MetricsServer, Count) {
            let (server, finished) = try serving()
            let metrics = try MetricsServer(address: .tcp(host: "127.0.0.1", port: 0)) { MetricsServer.page($0, of: server) }
            return (server, metrics, finished)
        }

        func until(_ done: () -> Bool) async throws {
            let give = ContinuousClock.now + .seconds(30)
            while !done() && ContinuousClock.now < give { try await Task.sleep(for: .milliseconds(5)) }
        }

        /// A scrape taken while a job runs every 200 ms counts its runs, and
        /// promtool (Prometheus' own checker) finds nothing wrong with it.
        @Test func aScrapeCountsRunsAndPassesPromtool() async throws {
            let (server, metrics, finished) = try await served()
            try await until { finished.load(ordering: .relaxed) >= 2 }
            let port = try #require(metrics.port)
            let answer = try Self.fetch(port, "GET /metrics HTTP/1.0\r\n\r\n")
            #expect(answer.hasPrefix("HTTP/1.1 200 OK"), "\(answer.prefix(200))")
            #expect(answer.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"))
            let body = String(answer[try #require(answer.range(of: "\r\n\r\n")).upperBound...])
            #expect(body.contains("curfew_runs_total{curfew_job=\"once\",outcome=\"completed\"} "), "\(body)")
            #expect(body.contains("curfew_run_duration_seconds_count{curfew_job=\"once\"} "))
            #expect(body.contains("curfew_job_consecutive_failures{curfew_job=\"once\"} 0"))
            #expect(body.contains("curfew_job_period_seconds{curfew_job=\"once\"} 0.2"))
            #expect(body.contains("curfew_jobs{state=\"idle\"} "))
            let open = try Self.fetch(port, "GET /metrics HTTP/1.0\r\nAccept: application/openmetrics-text; version=1.0.0\r\n\r\n")
            #expect(open.contains("Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8"))
            #expect(open.contains("\n# TYPE curfew_runs counter\ncurfew_runs_total{curfew_job=\"once\",outcome=\"completed\"} "), "\(open)")
            #expect(open.hasSuffix("\n# EOF\n"))
            if let promtool = Self.tool("promtool") {
                let process = Process()
                process.executableURL = URL(fileURLWithPath: promtool)
                process.arguments = ["check", "metrics"]
                let input = Pipe()
                let output = Pipe()
                process.standardInput = input
                process.standardOutput = output
                process.standardError = output
                try process.run()
                input.fileHandleForWriting.write(Data(body.utf8))
                try input.fileHandleForWriting.close()
                let said = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                process.waitUntilExit()
                #expect(process.terminationStatus == 0, "promtool: \(said)")
            }
            metrics.stop()
            await withCheckedContinuation { done in server.stop { done.resume() } }
        }

        /// Chunk times, the expire hook's lateness and checkpoint saves
        /// reach the metrics from a job's own worker and from its plugin's:
        /// a job of three 1 ms chunks that saves after each, and one of 5 ms
        /// chunks that runs out of its 150 ms.
        @Test(arguments: ["job", "plugin"])
        func chunkTimesLatenessAndSavesAreMeasured(isolation: String) async throws {
            let (server, finished) = try serving(
                "checkpoint_jobs.c",
                config: #"""
                    {"defaults": {"enabled": false, "isolate": "\#(isolation)"}, "jobs": {
                      "resume": {"enabled": true, "every": "10s", "budget": "5s", "params": {"count": "3", "chunk-ms": "1"}},
                      "paced": {"enabled": true, "every": "10s", "budget": "150ms", "params": {"chunk-ms": "5"}}}}
                    """#, keepsState: true)
            try await until { finished.load(ordering: .relaxed) >= 2 }
            var text = ""
            try await until {
                text = server.metricsText()
                return text.contains("curfew_runs_total{curfew_job=\"resume\"") && text.contains("curfew_runs_total{curfew_job=\"paced\"")
            }
            await withCheckedContinuation { done in server.stop { done.resume() } }
            func value(_ sample: String) -> Double? {
                guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(sample + " ") }) else { return nil }
                return Double(line.dropFirst(sample.count + 1))
            }
            #expect(value("curfew_runs_total{curfew_job=\"resume\",outcome=\"completed\"}") == 1, "\(text)")
            #expect(value("curfew_runs_total{curfew_job=\"paced\",outcome=\"expired\"}") == 1)
            // Three chunks of at least 1 ms: none in the buckets up to 100 µs.
            #expect(value("curfew_chunk_duration_seconds_count{curfew_job=\"resume\"}") == 3)
            #expect(value("curfew_chunk_duration_seconds_bucket{curfew_job=\"resume\",le=\"0.0001\"}") == 0)
            #expect((value("curfew_chunk_duration_seconds_sum{curfew_job=\"resume\"}") ?? 0) >= 0.003)
            #expect((value("curfew_chunk_duration_seconds_count{curfew_job=\"paced\"}") ?? 0) >= 1)
            #expect(value("curfew_expire_lateness_seconds_count{curfew_job=\"paced\"}") == 1)
            #expect(value("curfew_expire_lateness_seconds_count{curfew_job=\"resume\"}") == nil, "it did not time out")
            #expect(value("curfew_checkpoint_save_seconds_count{curfew_job=\"resume\"}") == 3)
            #expect(value("curfew_checkpoint_size_bytes_bucket{curfew_job=\"resume\",le=\"256\"}") == 3)
            #expect(value("curfew_checkpoint_size_bytes_sum{curfew_job=\"resume\"}") == 24)
            #expect((value("curfew_scan_cache_hits_total") ?? 0) + (value("curfew_scan_files_loaded_total") ?? 0) >= 1)
            #expect(value("curfew_worker_spare_hits_total") != nil)
        }

        /// A serving host forks every run's worker from one fork server,
        /// started once, not one started inside each run's grant (before,
        /// each run paid an `exec` of `curfew` and its warm-up); the server
        /// ends as the host stops.
        @Test func runsShareOneForkServerThatEndsWithTheHost() async throws {
            let (server, finished) = try serving(config: #"{"defaults": {"enabled": false}, "jobs": {"once": {"enabled": true, "every": "100ms", "budget": "2s"}}}"#)
            try await until { finished.load(ordering: .relaxed) >= 3 }
            let kept = try #require(server.options.run.forkServers)
            let pids = kept.pids
            await withCheckedContinuation { done in server.stop { done.resume() } }
            let runs = finished.load(ordering: .relaxed)
            #expect(runs >= 3)
            #expect(kept.started == 1, "one fork server for \(runs) runs")
            // Every run's worker was forked (a refused run at the stop has none).
            let text = server.metricsText()
            let forked = text.split(separator: "\n").first { $0.hasPrefix("curfew_worker_starts_total{how=\"forked\"} ") }
            #expect(forked.flatMap { Int($0.split(separator: " ")[1]) }.map { $0 >= 3 } == true, "\(text)")
            #expect(text.contains("curfew_worker_starts_total{how=\"spawned\"} 0\n"))
            #expect(pids.count == 1)
            for pid in pids { #expect(kill(pid, 0) == -1 && errno == ESRCH, "the fork server \(pid) ended with the host") }
        }

        /// The programs a test needs that CI installs: a missing one fails
        /// there, and skips the check elsewhere.
        static func tool(_ name: String) -> String? {
            let found = ["/usr/bin/", "/usr/local/bin/"].map { $0 + name }.first { FileManager.default.isExecutableFile(atPath: $0) }
            if found == nil { #expect(ProcessInfo.processInfo.environment["CI"] == nil, "\(name) is not installed") }
            return found
        }

        /// A TCP port no one listens on now.
        static func freePort() throws -> UInt16 {
            let fd = try Syscalls.listenTCP(host: "127.0.0.1", port: 0, backlog: 1)
            defer { close(fd) }
            return try #require(Syscalls.localPort(fd))
        }

        /// Headless Chromium loads the status page: a row per job and a
        /// mark per run in its DOM, and a screenshot of it.
        @Test func chromiumShowsTheJobsAndTheTimeline() async throws {
            let (server, metrics, finished) = try await served()
            defer { metrics.stop() }
            try await until { finished.load(ordering: .relaxed) >= 2 }
            let port = try #require(metrics.port)
            let page = try Self.fetch(port, "GET / HTTP/1.0\r\n\r\n")
            #expect(page.contains("<tr data-job=\"once\">") && page.contains("<rect class=\"run\" data-job=\"once\""), "\(page.prefix(300))")
            #expect(page.contains("Content-Security-Policy: default-src 'none'"))
            if let chromium = Self.tool("chromium") {
                let profile = Fixtures.temporaryFolder("chromium")
                let flags = ["--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=\(profile)", "--no-first-run"]
                let dom = try Fixtures.runBlocking(chromium, flags + ["--dump-dom", "http://127.0.0.1:\(port)/"], in: nil, timeout: .seconds(60), environment: [:])
                #expect(dom.status == 0)
                #expect(dom.stdout.contains("<tr data-job=\"once\">"), "\(dom.stdout.prefix(300))")
                let marks = dom.stdout.components(separatedBy: "<rect class=\"run\" data-job=\"once\"").count - 1
                #expect(marks >= 2, "a mark per run: \(marks)")
                let shot = profile + "/status.png"
                let taken = try Fixtures.runBlocking(chromium, flags + ["--screenshot=\(shot)", "--window-size=1200,400", "http://127.0.0.1:\(port)/"], in: nil, timeout: .seconds(60), environment: [:])
                #expect(taken.status == 0)
                let png = try Data(contentsOf: URL(fileURLWithPath: shot))
                #expect(png.count > 1000 && png.prefix(4) == Data([0x89, 0x50, 0x4E, 0x47]), "a PNG")
            }
            await withCheckedContinuation { done in server.stop { done.resume() } }
        }

        /// A real Prometheus scrapes the host on loopback; its query API
        /// then has curfew_runs_total for the job that ran.
        @Test func prometheusScrapesTheHost() async throws {
            guard let prometheus = Self.tool("prometheus") else { return }
            let (server, metrics, finished) = try await served()
            defer { metrics.stop() }
            try await until { finished.load(ordering: .relaxed) >= 1 }
            let port = try #require(metrics.port)
            let folder = Fixtures.temporaryFolder("prometheus")
            let web = try Self.freePort()
            try """
                global: {scrape_interval: 1s}
                scrape_configs:
                  - job_name: curfew
                    static_configs: [{targets: ["127.0.0.1:\(port)"]}]
                """.write(toFile: folder + "/prometheus.yml", atomically: true, encoding: .utf8)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: prometheus)
            process.arguments = [
                "--config.file=\(folder)/prometheus.yml", "--storage.tsdb.path=\(folder)/data", "--web.listen-address=127.0.0.1:\(web)",
            ]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            defer {
                process.terminate()
                process.waitUntilExit()
            }
            var answer = ""
            let give = ContinuousClock.now + .seconds(60)
            while !answer.contains("\"curfew_job\":\"once\"") && ContinuousClock.now < give {
                try await Task.sleep(for: .milliseconds(250))
                answer = (try? Self.fetch(web, "GET /api/v1/query?query=curfew_runs_total HTTP/1.0\r\n\r\n")) ?? ""
            }
            #expect(answer.contains("\"__name__\":\"curfew_runs_total\""), "\(answer.suffix(300))")
            #expect(answer.contains("\"curfew_job\":\"once\""))
            await withCheckedContinuation { done in server.stop { done.resume() } }
        }

        /// A Unix socket's path: one a live server answers on, or a file
        /// that is not a socket, is not taken; the socket goes with the stop.
        @Test func aUnixSocketPathIsCheckedAndRemoved() throws {
            let path = Fixtures.temporaryFolder("metrics") + "/metrics.sock"
            let page: @Sendable (MetricsServer.Request) -> MetricsServer.Page = { _ in MetricsServer.Page(status: 200, contentType: "text/plain", body: "x") }
            let first = try MetricsServer(address: .local(path: path), page: page)
            #expect(throws: CurfewError.self) { try MetricsServer(address: .local(path: path), page: page) }
            first.stop()
            #expect(!FileManager.default.fileExists(atPath: path))
            try "not a socket".write(toFile: path, atomically: true, encoding: .utf8)
            do {
                _ = try MetricsServer(address: .local(path: path), page: page)
                Issue.record("took a file that is not a socket")
            } catch {
                #expect(error.description.contains("exists and is not a socket"))
            }
            #expect(FileManager.default.fileExists(atPath: path), "left as it was")
        }

        /// Whatever connects: no method but GET and HEAD, no body, no
        /// request line or headers past 16 KiB, 1,000 idle connections and a
        /// client that dribbles; the host runs on and answers each time.
        @Test func hostileClientsNeitherCrashNorStallTheHost() async throws {
            let (server, metrics, finished) = try await served()
            let port = try #require(metrics.port)
            #expect(try Self.fetch(port, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello").hasPrefix("HTTP/1.1 405"))
            #expect(try Self.fetch(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello").hasPrefix("HTTP/1.1 413"))
            let huge = try Self.fetch(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + String(repeating: "a", count: 64 << 10) + "\r\n\r\n")
            #expect(huge.isEmpty || huge.hasPrefix("HTTP/1.1 4"), "\(huge.prefix(100))")
            let garbage = try Self.fetch(port, "\u{1}\u{2}not http at all\r\n\r\n")
            #expect(garbage.isEmpty || garbage.hasPrefix("HTTP/1.1 400"), "\(garbage.prefix(100))")
            #expect(try Self.fetch(port, "GET /nothing HTTP/1.0\r\n\r\n").hasPrefix("HTTP/1.1 404"))
            // 1,000 connections that say nothing, and one that sends a byte now and then.
            let idle = (0..<1000).map { _ in Self.idle(port) }
            defer { idle.forEach { close($0) } }
            let slow = Self.idle(port)
            defer { close(slow) }
            for byte in "GET /met".utf8 {
                var one = byte
                _ = send(slow, &one, 1, Int32(MSG_NOSIGNAL))
                try await Task.sleep(for: .milliseconds(20))
            }
            // The host runs on: more runs end, and its control socket answers.
            let before = finished.load(ordering: .relaxed)
            try await until { finished.load(ordering: .relaxed) >= before + 2 }
            #expect(finished.load(ordering: .relaxed) >= before + 2)
            #expect(server.answer(Array(#"{"command": "metrics"}"#.utf8)).contains("curfew_runs_total"))
            // Once they go, the page answers again.
            idle.forEach { shutdown($0, Int32(SHUT_RDWR)) }
            var answered = false
            let give = ContinuousClock.now + .seconds(20)
            while !answered && ContinuousClock.now < give {
                answered = (try? Self.fetch(port, "GET /metrics HTTP/1.0\r\n\r\n"))?.hasPrefix("HTTP/1.1 200") == true
                if !answered { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(answered)
            metrics.stop()
            await withCheckedContinuation { done in server.stop { done.resume() } }
        }
    }
}

/// The status page: every job's row and a mark per run, escaped, with
/// nothing to load or run.
@Suite struct StatusPageTests {
    @Test func thePageHasARowPerJobAndAMarkPerRun() {
        let now = WallTime(milliseconds: 1_800_000_000_000)
        func at(_ seconds: Int64) -> WallTime { WallTime(milliseconds: now.milliseconds - seconds * 1000) }
        let runs = [
            StatusPage.Run(job: "tally", started: at(600), ended: at(590), outcome: "completed"),
            StatusPage.Run(job: "tally", started: at(300), ended: at(299), outcome: "failed"),
            StatusPage.Run(job: "report", started: at(100), ended: at(40), outcome: "expired"),
            // Older than the window: not shown.
            StatusPage.Run(job: "tally", started: at(8 * 3600), ended: at(8 * 3600 - 5), outcome: "completed"),
        ]
        let svg = StatusPage.timeline(jobs: ["tally", "report"], runs: runs.filter { $0.ended.milliseconds >= at(6 * 3600).milliseconds }, from: at(6 * 3600), to: now)
        #expect(svg.components(separatedBy: "<rect class=\"run\"").count - 1 == 3)
        #expect(svg.contains("data-job=\"report\" data-outcome=\"expired\""))
        #expect(StatusPage.escaped("<a href=\"x\">&'") == "&lt;a href=&quot;x&quot;&gt;&amp;&#39;")
        #expect(StatusPage.format(12.345) == "12.3" && StatusPage.format(7) == "7")
    }
}
