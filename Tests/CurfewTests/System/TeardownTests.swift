import Foundation
import Glibc
import Testing
import _CurfewShims

@testable import Curfew

extension ProcessTests.First {
    /// Every helper ends through a `Teardown`: asked first, killed (with its
    /// group) once its allowed time is over, and reaped exactly once.
    @Suite(.timeLimit(.minutes(1))) struct TeardownTests {
        /// `/bin/sh -c script`, a child of this process leading its own
        /// group, once the script has written a line to its stdout (when it
        /// has set its traps).
        func spawn(_ script: String) throws -> HelperProcess {
            let null = open("/dev/null", O_RDWR | O_CLOEXEC)
            var ready: [Int32] = [-1, -1]
            #expect(curfew_shim_pipe_cloexec(&ready) == 0)
            defer { [null, ready[0]].forEach { close($0) } }
            let spawned = Syscalls.spawnWorker(
                "/bin/sh", arguments: ["/bin/sh", "-c", script], environment: ["PATH=/usr/bin:/bin"], channel: null,
                out: ready[1], err: null)
            close(ready[1])
            let helper = HelperProcess(pid: try spawned.get())
            var byte: UInt8 = 0
            while read(ready[0], &byte, 1) < 0 && errno == EINTR {}
            return helper
        }

        /// The signal that ended a wait status, or `nil` when it exited.
        func signal(_ status: Int32?) -> Int32? {
            guard let status, status & 0x7f != 0 else { return nil }
            return status & 0x7f
        }

        /// Waits (five seconds at most) until `pid` is gone or a zombie.
        func isGone(_ pid: pid_t) -> Bool {
            for _ in 0..<500 {
                guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return true }
                // The state follows the name's closing parenthesis.
                if let close = stat.lastIndex(of: ")"), stat[stat.index(close, offsetBy: 2)] == "Z" { return true }
                usleep(10_000)
            }
            return false
        }

        @Test func aHelperThatLeavesWhenAskedIsNotKilled() throws {
            let helper = try spawn("trap 'exit 7' TERM; echo; while :; do sleep 0.01; done")
            let status = helper.end(Teardown([.signal(SIGTERM, allowed: .seconds(30))]))
            #expect(signal(status) == nil)
            #expect(status.map { ($0 >> 8) & 0xff } == 7)
        }

        @Test func aHelperThatIgnoresTheAskIsKilledOnceItsTimeIsOver() throws {
            let helper = try spawn("trap '' TERM; echo; while :; do sleep 0.01; done")
            let status = helper.end(Teardown([.signal(SIGTERM, allowed: .milliseconds(50))]))
            #expect(signal(status) == SIGKILL)
        }

        @Test func stepsAreTakenInTurnUntilOneWorks() throws {
            // Ignores TERM, leaves on INT.
            let helper = try spawn("trap '' TERM; trap 'exit 3' INT; echo; while :; do sleep 0.01; done")
            let status = helper.end(
                Teardown([.signal(SIGTERM, allowed: .milliseconds(50)), .signal(SIGINT, allowed: .seconds(30))]))
            #expect(status.map { ($0 >> 8) & 0xff } == 3)
        }

        @Test func whatAHelperLeftInItsGroupIsKilledWithIt() throws {
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("teardown-\(getpid())-\(UUID())").path
            defer { unlink(file) }
            let helper = try spawn("sleep 60 > /dev/null & echo $! > '\(file)'; echo; exit 0")
            #expect(helper.end(Teardown([.wait(allowed: .seconds(30))])) == 0)
            let left = try #require(pid_t(try String(contentsOfFile: file, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)))
            #expect(isGone(left))
        }

        @Test func aHelperIsReapedOnceWhoeverAsks() async throws {
            let helper = try spawn("echo; exit 5")
            let statuses = await withTaskGroup(of: Int32?.self) { group in
                for _ in 0..<4 { group.addTask { helper.reap() } }
                return await group.reduce(into: []) { $0.append($1) }
            }
            #expect(statuses == Array(repeating: 5 << 8, count: 4))
        }
    }
}

extension ProcessTests.First {
    /// A spare that never got a job is asked to leave by the end of its
    /// socket; one that does not is killed a second later, not left running.
    @Suite(.timeLimit(.minutes(1))) struct SpareRetireTests {
        /// The pids of this process's children whose command is `name`.
        func children(named name: String) -> [pid_t] {
            let me = getpid()
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
            return entries.compactMap { entry -> pid_t? in
                guard let pid = pid_t(entry),
                    let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                    let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")")
                else { return nil }
                let comm = stat[stat.index(after: open)..<close]
                let fields = stat[stat.index(close, offsetBy: 2)...].split(separator: " ")
                // After the name: the state, then the parent's pid.
                guard comm == name, fields.count > 2, fields[0] != "Z", pid_t(fields[1]) == me else { return nil }
                return pid
            }
        }

        @Test func aSpareThatIgnoresTheEndOfItsSocketIsKilled() throws {
            // A "worker" that ignores its socket's end: it sleeps on (its
            // command is the script's name, cut to 15 bytes as the kernel does).
            let folder = Fixtures.temporaryFolder("stubborn")
            let name = "stubborn-\(getpid())"
            let script = folder + "/" + name
            try "#!/bin/sh\nsleep 60\n".write(toFile: script, atomically: true, encoding: .utf8)
            #expect(chmod(script, 0o755) == 0)
            let pool = WorkerPool(executable: script, environment: ["PATH=/usr/bin:/bin"], capacity: 1)
            pool.refill()
            var spares: [pid_t] = []
            for _ in 0..<500 where spares.isEmpty {
                usleep(10_000)
                spares = children(named: String(name.prefix(15)))
            }
            try #require(spares.count == 1, "the spare started")
            pool.close()
            var gone = false
            for _ in 0..<500 where !gone {
                usleep(10_000)
                gone = children(named: String(name.prefix(15))).isEmpty
            }
            #expect(gone, "the spare still runs 5 s after the pool closed")
        }
    }
}
