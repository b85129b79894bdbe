import CurfewFormats
import Dispatch
import Glibc
import Synchronization
import Testing

@testable import Curfew

/// A worker's main thread waits for the host's messages all its life,
/// while its jobs' threads write on the same socket.
@Suite(.timeLimit(.minutes(1))) struct WorkerChannelTests {
    /// Field `index` (from 1) of /proc/self/task/`tid`/stat, past the name.
    private func statField(_ tid: pid_t, _ index: Int) -> String? {
        guard let text = try? readText("/proc/self/task/\(tid)/stat"), let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        return index >= 3 && index - 3 < fields.count ? String(fields[index - 3]) : nil
    }

    private func readText(_ path: String) throws -> String {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw SystemError(errno: errno) }
        defer { close(descriptor) }
        var bytes = [UInt8](repeating: 0, count: 4096)
        let count = bytes.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        return String(decoding: bytes[..<max(0, count)], as: UTF8.self)
    }

    /// The calling thread's id, from /proc/thread-self (PID/task/TID).
    private func threadID() -> pid_t {
        var bytes = [CChar](repeating: 0, count: 64)
        let count = readlink("/proc/thread-self", &bytes, bytes.count - 1)
        guard count > 0 else { return 0 }
        let text = String(decoding: bytes[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return text.split(separator: "/").last.flatMap { pid_t($0) } ?? 0
    }

    /// How many times thread `tid` has given up its core to wait.
    private func voluntarySwitches(_ tid: pid_t) -> Int? {
        guard let text = try? readText("/proc/self/task/\(tid)/status") else { return nil }
        let line = text.split(separator: "\n").first { $0.hasPrefix("voluntary_ctxt_switches:") }
        return line.flatMap { Int($0.split(separator: "\t").last ?? "") }
    }

    /// Waits until thread `tid` sleeps (state S).
    private func untilAsleep(_ tid: pid_t) -> Bool {
        for _ in 0..<5_000 {
            if statField(tid, 3) == "S" { return true }
            usleep(200)
        }
        return false
    }

    /// Before: a shared worker (`--isolate plugin`) kept every ended job's
    /// runner, walked by its status timer every 100 ms, and the checkpoint
    /// its run brought (up to 1 MiB): a plugin's jobs, run one after
    /// another, held memory that grew with their number.
    @Test func aSharedWorkerKeepsNothingOfAJobThatEnded() throws {
        let plugin = try Fixtures.compile("runner_jobs.c")
        let job = try #require(PluginLoader().load(plugin).jobs.first { $0.name == "count" })
        var pair: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        defer { pair.forEach { close($0) } }
        let host = WorkerHost(channel: pair[0], endsLeftovers: false)
        host.start(HostMessage.Run(
            plugin: plugin, job: "count", index: job.index, budgetNanoseconds: 30_000_000_000, graceNanoseconds: 1_000_000_000,
            started: MonotonicClock().now().nanoseconds, app: .background,
            keepsState: true, checkpoint: [UInt8](repeating: 7, count: 4096), estimate: nil, continuous: false, last: false,
            parameters: ["limit": "3"], limits: HostMessage.Limits(memoryBytes: 0, cpuSeconds: 0, openFiles: 0)))
        var lines = LineBuffer()
        var outcome: String?
        var chunk = [UInt8](repeating: 0, count: 4096)
        while outcome == nil {
            let count = chunk.withUnsafeMutableBytes { read(pair[1], $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            for line in chunk.withUnsafeBytes({ lines.append(UnsafeRawBufferPointer(rebasing: $0[..<count])) }) {
                if case .finished(_, _, let ended, _, _, _)? = try? WorkerMessage.decode(Array(line.utf8)) { outcome = ended }
            }
        }
        #expect(outcome == "completed")
        var kept = (host.keptJobCount, host.checkpoints.heldCount)
        for _ in 0..<5000 where kept != (0, 0) {
            usleep(1000)
            kept = (host.keptJobCount, host.checkpoints.heldCount)
        }
        #expect(kept.0 == 0, "its runner is kept")
        #expect(kept.1 == 0, "its checkpoint is kept")
    }

    /// Before: the worker rewrote a lead it could not keep to half the
    /// budget, in silence; the host's policy is one the worker builds as
    /// is, or refuses with the reason ``GrantPolicy`` gives.
    @Test func aRunWhoseGraceIsNotShorterThanItsBudgetIsRefused() throws {
        var pair: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        defer { pair.forEach { close($0) } }
        let host = WorkerHost(channel: pair[0], endsLeftovers: false)
        host.start(HostMessage.Run(
            plugin: "/nonexistent/p.so", job: "count", index: nil, budgetNanoseconds: 1_000_000_000, graceNanoseconds: 1_000_000_000,
            started: MonotonicClock().now().nanoseconds, app: .background, keepsState: false, checkpoint: nil, estimate: nil,
            continuous: false, last: false, parameters: [:], limits: HostMessage.Limits(memoryBytes: 0, cpuSeconds: 0, openFiles: 0)))
        var chunk = [UInt8](repeating: 0, count: 4096)
        let count = chunk.withUnsafeMutableBytes { read(pair[1], $0.baseAddress, $0.count) }
        try #require(count > 0)
        let line = Array(chunk[..<(count - 1)])
        guard case .finished(_, _, let outcome, let reason, _, _) = try WorkerMessage.decode(line) else {
            Issue.record("not a finish: \(String(decoding: line, as: UTF8.self))")
            return
        }
        #expect(outcome == "failed")
        #expect(reason == "the host sent a grant the worker cannot keep: The grace 1.000s must be positive and shorter than the budget 1.000s.")
    }

    /// Before: the reader waited in read(2), which a stream socket wakes
    /// each time the peer reads what this side wrote (it has room again):
    /// every message a job sent woke the worker's main thread for nothing,
    /// a wake and two switches per message on a busy machine.
    @Test func aWaitingReaderIsNotWokenWhenTheHostReadsWhatTheWorkerWrote() throws {
        var pair: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        defer { pair.forEach { close($0) } }
        let (worker, host) = (pair[0], pair[1])
        let reader = MessageReader(descriptor: worker)
        let tid = Mutex<pid_t>(0)
        let got = Mutex<Result<HostMessage, MessageInvalid>?>(nil)
        let done = DispatchSemaphore(value: 0)
        try #require(OSThread.detach {
            tid.withLock { $0 = threadID() }
            let message = reader.next()
            got.withLock { $0 = message }
            done.signal()
        })
        var reading: pid_t = 0
        for _ in 0..<5_000 where reading == 0 {
            reading = tid.withLock { $0 }
            usleep(200)
        }
        try #require(reading != 0 && untilAsleep(reading))
        let before = try #require(voluntarySwitches(reading))
        let rounds = 20
        for round in 0..<rounds {
            // A job's message, and the host reading it whole.
            let line = Array("{\"type\":\"status\",\"n\":\(round)}\n".utf8)
            try #require(line.withUnsafeBytes { write(worker, $0.baseAddress, $0.count) } == line.count)
            var taken = [UInt8](repeating: 0, count: line.count)
            var read = 0
            while read < line.count {
                let count = taken.withUnsafeMutableBytes { Glibc.read(host, $0.baseAddress! + read, line.count - read) }
                try #require(count > 0)
                read += count
            }
            try #require(untilAsleep(reading))
        }
        let woken = try #require(voluntarySwitches(reading)) - before
        #expect(woken <= 2, "the reader woke \(woken) times for \(rounds) messages the host read")
        // It still wakes for a message to it.
        let closing = Array("{\"type\":\"close\"}\n".utf8)
        try #require(closing.withUnsafeBytes { write(host, $0.baseAddress, $0.count) } == closing.count)
        try #require(done.wait(timeout: .now() + 10) == .success)
        #expect(got.withLock { $0 } == .success(.close))
    }
}
