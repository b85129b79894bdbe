import Foundation
import Testing

@testable import Curfew

extension ProcessTests.First {
    /// Checkpoints and history through `curfew` as a user runs it, with the
    /// jobs of `checkpoint_jobs.c` and a state folder of each test's own.
    @Suite(.timeLimit(.minutes(3))) struct CheckpointTests {
        func curfew(_ arguments: [String]) async throws -> (status: Int32, events: [OutputEvent], stdout: String) {
            let result = try await Fixtures.run(Fixtures.curfewExecutable, arguments)
            let events = arguments.contains("--json") ? try OutputEvent.all(in: result.stdout) : []
            return (result.status, events, result.stdout + result.stderr)
        }

        func logs(_ events: [OutputEvent], _ job: String) -> [String] {
            events.filter { $0.event == "log" && $0.job == job }.compactMap(\.message)
        }

        /// The job counts to 30 in chunks of 20 ms under 500 ms grants that
        /// expire at 200 ms: each run expires, and the next one goes on from the
        /// number its checkpoint holds. (A 300 ms lead: with 75 ms, a chunk
        /// preempted on a busy machine was still running at the deadline. Up
        /// to 40 runs: on a busy machine a run's first chunk starts late, and
        /// a preempted chunk teaches the store's estimate a longer one, so
        /// fewer chunks fit before each expiration.)
        @Test(arguments: ["none", "plugin", "job"])
        func aJobResumesAfterExpiryFromItsCheckpoint(isolation: String) async throws {
            let plugin = try Fixtures.compile("checkpoint_jobs.c")
            let state = Fixtures.temporaryFolder("state")
            var done = 0
            var runs = 0
            var outcomes: [String] = []
            while runs < 40 {
                runs += 1
                let (_, events, _) = try await curfew(
                    ["run", plugin, "--only", "resume", "--isolate", isolation, "--budget", "500ms", "--grace", "300ms", "--state", state, "--json"])
                let finished = try #require(events.first { $0.event == "finished" })
                #expect(logs(events, "resume").first == "resumed at \(done)", "run \(runs) goes on where the last one stopped")
                done += finished.chunks ?? 0
                outcomes.append(finished.outcome ?? "")
                if finished.outcome == "completed" { break }
                #expect(finished.outcome == "expired", "\(finished.reason ?? "")")
            }
            #expect(outcomes.last == "completed")
            #expect(outcomes.count >= 2, "the first run expired")
            #expect(done == 30, "every number counted once")
            // Completed: its checkpoint is cleared, and its next run starts afresh.
            let store = try StateStore(folder: state)
            #expect(try store.checkpoint(job: "resume") == nil)
            let history = try store.history(job: "resume")
            #expect(history.map(\.outcome.rawValue) == outcomes.reversed())
            #expect(history.allSatisfy { $0.isolation.rawValue == isolation && $0.pluginHash.hasPrefix("fnv1a64:") })
        }

        /// A checkpoint is the job's in its plugin: a copy of the plugin at
        /// another path (another checkout's, another folder's) starts afresh
        /// and keeps its own, in every mode.
        @Test(arguments: ["none", "job"])
        func twoPluginsWithOneJobNameKeepTwoCheckpoints(isolation: String) async throws {
            let built = try Fixtures.compile("checkpoint_jobs.c")
            let (a, b) = (Fixtures.temporaryFolder("a") + "/jobs.so", Fixtures.temporaryFolder("b") + "/jobs.so")
            try FileManager.default.copyItem(atPath: built, toPath: a)
            try FileManager.default.copyItem(atPath: built, toPath: b)
            let state = Fixtures.temporaryFolder("state")
            func run(_ plugin: String) async throws -> [String] {
                let (_, events, output) = try await curfew(
                    ["run", plugin, "--only", "resume", "--isolate", isolation, "--budget", "1s", "--grace", "800ms", "--state", state, "--json",
                     "--param", "count=1000"])
                #expect(events.contains { $0.event == "finished" && $0.outcome == "expired" }, "\(output)")
                return logs(events, "resume")
            }
            #expect(try await run(a).first == "resumed at 0")
            #expect(try await run(b).first == "resumed at 0", "another plugin's job of that name starts afresh")
            let kept = try StateStore(folder: state).checkpoints().filter { $0.job == "resume" }
            #expect(kept.map(\.plugin) == [a, b])
            #expect(try await run(a).first != "resumed at 0", "each goes on from its own")
        }

        /// A manifest job's chunk index goes on across runs in every mode: the
        /// host saves it when the grant expires, and the worker's run starts there.
        /// (800 ms grants with a 500 ms lead for the save, which 75 ms, and
        /// once 200 ms, was not on a busy machine.)
        @Test(arguments: ["none", "plugin", "job"])
        func aForeignJobsChunkIndexGoesOnAcrossRuns(isolation: String) async throws {
            let folder = Fixtures.temporaryFolder("foreign-resume")
            try FileManager.default.copyItem(
                atPath: try Fixtures.compile("foreign_lib.c", extraFlags: ["-fvisibility=default"]), toPath: folder + "/steps.so")
            try ("{\"jobs\": [" + ForeignJobTests.steadyJob() + "]}").write(toFile: folder + "/steps.curfew.json", atomically: true, encoding: .utf8)
            let state = Fixtures.temporaryFolder("state")
            var reached = 0
            for run in 1...2 {
                let (_, events, output) = try await curfew(
                    ["run", folder, "--isolate", isolation, "--budget", "800ms", "--grace", "500ms", "--state", state, "--json"])
                let finished = try #require(events.first { $0.event == "finished" }, "\(output)")
                #expect(finished.outcome == "expired", "run \(run): \(finished.reason ?? "")")
                reached += finished.chunks ?? 0
                let saved = try StateStore(folder: state).checkpoint(job: "steady")
                #expect(saved == Array("chunk-index \(reached)".utf8), "run \(run) saved where its grant expired")
                let resumed = logs(events, "steady").filter { $0.hasPrefix("resumed at chunk") }
                #expect(resumed == (run == 1 ? [] : ["resumed at chunk \(reached - (finished.chunks ?? 0)) from its checkpoint"]), "\(resumed)")
            }
            // Without a state folder there is nothing to resume from, and nothing to warn about.
            let (_, events, _) = try await curfew(["run", folder, "--isolate", isolation, "--budget", "800ms", "--grace", "500ms", "--no-state", "--json"])
            #expect(events.first { $0.event == "finished" }?.outcome == "expired")
            #expect(logs(events, "steady").isEmpty)
        }

        /// A checkpoint the store refuses to read (over the limit: written by
        /// something else) is never "none": the job is refused, in every
        /// mode, naming the store, and the checkpoint stays until cleared.
        /// Before, the job started afresh and its first save overwrote it.
        @Test(arguments: ["none", "job"])
        func aStoredCheckpointThatCannotBeReadKeepsTheJobFromRunning(isolation: String) async throws {
            let plugin = try Fixtures.compile("checkpoint_jobs.c")
            let state = Fixtures.temporaryFolder("state")
            let store = try StateStore(folder: state)
            try SQLiteConnection(path: store.path).query(
                "INSERT INTO checkpoints (plugin_path, job, data, saved_at) VALUES (?, 'resume', zeroblob(?), 0)",
                [.text(plugin), .integer(Int64(StateStore.maximumCheckpointBytes) + 1)])
            let run = ["run", plugin, "--only", "resume", "--isolate", isolation, "--budget", "200ms", "--state", state, "--json"]
            let (status, events, _) = try await curfew(run)
            #expect(status == 2)
            let finished = try #require(events.first { $0.event == "finished" && $0.job == "resume" })
            #expect(finished.outcome == "refused")
            #expect(finished.reason?.hasPrefix(
                "its checkpoint could not be read (the stored checkpoint of 'resume' is 1048577 bytes, over the limit of 1048576 bytes (1 MiB))") == true,
                "\(finished.reason ?? "")")
            #expect(logs(events, "resume").isEmpty, "create never ran")
            #expect(try store.checkpoints().map(\.bytes) == [StateStore.maximumCheckpointBytes + 1], "kept")
            #expect(try await curfew(["state", "clear", "resume", "--state", state]).status == 0)
            let again = try await curfew(run)
            #expect(logs(again.1, "resume").contains("resumed at 0"))
        }

        @Test(arguments: ["none", "job"])
        func aCheckpointOverTheLimitIsRefusedAndOneAtTheLimitKept(isolation: String) async throws {
            let plugin = try Fixtures.compile("checkpoint_jobs.c")
            let state = Fixtures.temporaryFolder("state")
            let (status, events, _) = try await curfew(["run", plugin, "--only", "oversize", "--isolate", isolation, "--state", state, "--json"])
            #expect(status == 2)
            let said = logs(events, "oversize")
            #expect(said.contains("over the limit: 2"), "CURFEW_TOO_LARGE")
            #expect(said.contains("checkpoint not saved: 1048577 bytes is over the limit of 1048576 (1 MiB)"))
            #expect(said.contains("at the limit: 0"))
            #expect(said.contains("size: 1048576"))
            #expect(said.contains("loaded back: 1"))
            let shown = try await curfew(["state", "show", "oversize", "--state", state, "--json"])
            #expect(shown.status == 0)
            #expect(shown.stdout.contains(#""bytes":1048576"#))
            // What the store holds is what the job saved (in a worker, it came in a sealed memory file).
            let kept = try #require(try StateStore(folder: state).checkpoints().first)
            let bytes = try #require(try StateStore(folder: state).checkpoint(JobKey(job: "oversize", plugin: kept.plugin)))
            #expect(bytes.count == 1 << 20 && bytes.indices.allSatisfy { bytes[$0] == UInt8(truncatingIfNeeded: $0 &* 7) })
        }

        /// Before, `run` left its rows in `state.db-wal`: a copy of `state.db`
        /// alone had an empty history. Now the log is folded in at exit, and
        /// `state backup` copies the store whole.
        @Test func aRunLeavesItsStoreInStateDbAndBackupCopiesIt() async throws {
            let plugin = try Fixtures.compile("checkpoint_jobs.c")
            let state = Fixtures.temporaryFolder("state")
            let (status, _, _) = try await curfew(["run", plugin, "--only", "resume", "--budget", "1s", "--grace", "900ms", "--state", state, "--json"])
            #expect(status == 0)
            var log = stat()
            #expect(stat(state + "/state.db-wal", &log) != 0 || log.st_size == 0, "the log is empty")
            let copy = Fixtures.temporaryFolder("copy")
            try FileManager.default.copyItem(atPath: state + "/state.db", toPath: copy + "/state.db")
            #expect(try StateStore(folder: copy).history().map(\.job) == ["resume"])

            let backups = Fixtures.temporaryFolder("backup")
            let backup = try await curfew(["state", "backup", backups + "/state.db", "--state", state])
            #expect(backup.status == 0, "\(backup)")
            #expect(try StateStore(folder: backups).history().map(\.job) == ["resume"])
            var info = stat()
            #expect(stat(backups + "/state.db", &info) == 0 && info.st_mode & 0o777 == 0o600)
            let again = try await curfew(["state", "backup", backups + "/state.db", "--state", state])
            #expect(again.status == 1, "never over a file")
        }

        @Test func withoutStateASaveIsUnavailable() async throws {
            let plugin = try Fixtures.compile("checkpoint_jobs.c")
            let (status, events, _) = try await curfew(["run", plugin, "--only", "resume", "--no-state", "--json"])
            #expect(status == 2)
            #expect(logs(events, "resume").contains("checkpoint_save returned 3"))
            #expect(logs(events, "resume").contains("checkpoint not saved: this host keeps no state (run it with a state folder)"))
        }

        @Test func stateAndHistoryCommands() async throws {
            let plugin = try Fixtures.compile("checkpoint_jobs.c")
            let state = Fixtures.temporaryFolder("state")
            _ = try await curfew(["run", plugin, "--only", "resume", "--budget", "1s", "--grace", "800ms", "--state", state, "--json"])
            let list = try await curfew(["state", "list", "--state", state])
            #expect(list.status == 0)
            #expect(list.stdout.contains("resume") && list.stdout.contains("       8  "))
            let history = try await curfew(["history", "--state", state, "--job", "resume"])
            #expect(history.status == 0)
            let lines = history.stdout.split(separator: "\n")
            #expect(lines.count == 2)
            #expect(lines.allSatisfy { $0.count <= 80 })
            #expect(lines.last?.contains("resume           expired") == true)
            let none = try await curfew(["history", "--state", state, "--job", "other"])
            #expect(none.stdout.contains("No runs recorded of job 'other'"))
            let cleared = try await curfew(["state", "clear", "resume", "--state", state])
            #expect(cleared.stdout.contains("Cleared 1 checkpoint."))
            let again = try await curfew(["state", "clear", "resume", "--state", state])
            #expect(again.status == 1)
            #expect(again.stdout.contains("Job 'resume' has no checkpoint."))
            let usage = try await curfew(["state", "clear", "--state", state])
            #expect(usage.status == 64)
            #expect(usage.stdout.contains("clear needs a job name, or --all"))
        }

        @Test func aStoreFromANewerCurfewStopsTheRunBeforeAnyJob() async throws {
            let plugin = try Fixtures.compile("checkpoint_jobs.c")
            let state = Fixtures.temporaryFolder("state")
            let store = try StateStore(folder: state)
            try SQLiteConnection(path: store.path).execute("PRAGMA user_version = 7")
            let (status, _, output) = try await curfew(["run", plugin, "--only", "resume", "--state", state])
            #expect(status == 1)
            #expect(output.contains("was written by a newer Curfew (schema version 7; this one knows up to \(StateStore.schemaVersion))"))
            #expect(!output.contains("started"))
        }

        /// `kill -9` of the host while its job saves checkpoints as fast as it
        /// can, again and again: the store always opens, passes SQLite's
        /// integrity check, and holds one of the last two acknowledged values
        /// whole (4 KiB of one number), never a torn mix.
        @Test func killingTheHostMidSaveNeverTearsTheCheckpoint() async throws {
            let plugin = try Fixtures.compile("checkpoint_jobs.c")
            let state = Fixtures.temporaryFolder("state")
            let acks = state + "/acks"
            let rounds = Fixtures.sanitized ? 20 : 100
            var lastAck: UInt64 = 0
            for round in 0..<rounds {
                let (process, _) = try Fixtures.startCurfew(
                    ["run", plugin, "--only", "tight", "--state", state, "--param", "ack-file=\(acks)", "--budget", "30s"])
                // Wait for this round's first acknowledged save, then a little more.
                let seen = lastAck
                let started = ContinuousClock.now
                while try Self.lastAck(acks) <= seen {
                    try #require(ContinuousClock.now - started < .seconds(20), "round \(round): no save acknowledged")
                    try await Task.sleep(for: .milliseconds(2))
                }
                try await Task.sleep(for: .microseconds(Int.random(in: 0...3000)))
                kill(process.processIdentifier, SIGKILL)
                await Fixtures.wait(for: process)
                lastAck = try Self.lastAck(acks)
                let connection = try SQLiteConnection(path: state + "/state.db")
                #expect(try connection.query("PRAGMA integrity_check").first?.first == .text("ok"))
                let saved = try #require(try StateStore(folder: state).checkpoint(job: "tight"))
                #expect(saved.count == 4096)
                let words = saved.withUnsafeBytes { Array($0.bindMemory(to: UInt64.self)) }
                #expect(Set(words).count == 1, "round \(round): a torn checkpoint")
                #expect(words[0] == lastAck || words[0] == lastAck + 1, "round \(round): \(words[0]) after ack \(lastAck)")
                // The next round goes on from what is saved, as the job does.
                if words[0] == lastAck + 1 { lastAck += 1 }
            }
            #expect(lastAck >= UInt64(rounds), "each round saw a save of its own")
        }

        /// The number on the last whole line of the ack file.
        static func lastAck(_ path: String) throws -> UInt64 {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return 0 }
            // The last piece is empty after a newline, or a line being written.
            let complete = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
            return complete.last.flatMap { UInt64($0.dropFirst(4)) } ?? 0
        }
    }
}
