import Foundation
import Glibc
import Testing

@testable import Curfew
@testable import CurfewCLI

/// What a person sees on a terminal of a given width: the live block and
/// the final table never wider than the terminal, which would wrap them.
@Suite struct TerminalOutputTests {
    static let results = [
        JobResult(
            job: "sum-squares", pluginPath: "/p.so", loadPath: "/p.so", isChunked: true, outcome: .completed, chunks: 1, elapsed: .milliseconds(20),
            reason: "work done", progress: JobProgress(completed: 1, total: 1)),
        JobResult(
            job: "a-job-with-a-rather-long-name", pluginPath: "/p.so", loadPath: "/p.so", isChunked: true, outcome: .terminated, chunks: 30,
            elapsed: .seconds(2), reason: "chunk 31 was still running at the hard deadline", progress: nil),
        JobResult(
            job: "sync-worker", pluginPath: "/p.so", loadPath: "/p.so", isChunked: false, outcome: .failed, chunks: 0, elapsed: .zero,
            reason: "create failed: " + String(repeating: "the server said no, ", count: 20), progress: nil),
    ]

    /// The table as written to a pipe by a reporter told the width.
    func table(width: Int?) throws -> [String] {
        let ends = try Syscalls.pipe()  // close-on-exec: process tests spawn beside this one
        let reporter = Reporter(console: Console(json: false, output: ends[1]), json: false, verbose: false)
        reporter.summary(Self.results, rejected: 1, width: width)
        close(ends[1])
        let text = String(decoding: FileHandle(fileDescriptor: ends[0], closeOnDealloc: true).readDataToEndOfFile(), as: UTF8.self)
        return text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init).dropLast()
    }

    /// Before: a job that called exit() in process could end the run while
    /// its own `started` was still being delivered on another thread, and
    /// that line came after the one saying the process ended (once, under
    /// AddressSanitizer in CI).
    @Test func nothingIsWrittenAfterTheLineThatSaysPluginCodeEndedTheProcess() throws {
        let ends = try Syscalls.pipe()  // close-on-exec: process tests spawn beside this one
        let null = open("/dev/null", O_WRONLY | O_CLOEXEC)
        defer { close(null) }
        let reporter = Reporter(console: Console(json: true, output: ends[1], error: null), json: true, verbose: false)
        reporter.hostExit(status: 0, job: "exits")
        reporter.event(.started(job: "exits", pluginPath: "/p.so", budget: .seconds(1)))
        close(ends[1])
        let text = String(decoding: FileHandle(fileDescriptor: ends[0], closeOnDealloc: true).readDataToEndOfFile(), as: UTF8.self)
        let lines = text.split(separator: "\n")
        #expect(lines.count == 1, "\(text)")
        #expect(lines.last?.contains(#""event":"host-exit""#) == true, "\(text)")
    }

    /// Before: the table was as wide as its longest reason, and wrapped.
    @Test(arguments: [80, 40])
    func theFinalTableFitsTheTerminal(width: Int) throws {
        let lines = try table(width: width)
        for line in lines { #expect(line.count < width, "\(line.count) columns: \(line)") }
        // Every job and outcome is still there, and each reason begins.
        for result in Self.results {
            #expect(lines.contains { $0.hasPrefix(result.job.prefix(10)) && $0.contains(result.outcome.rawValue) })
            #expect(lines.contains { $0.contains(result.reason.prefix(10)) })
        }
        let tail = width == 80 ? lines.suffix(1) : lines.suffix(2)
        #expect(tail.joined(separator: " ") == "3 jobs: 1 completed, 1 failed, 1 terminated; 1 plugin file rejected")
    }

    @Test func atEightyColumnsTheLeastNeededColumnsGoAndReasonsWrap() throws {
        let lines = try table(width: 80)
        #expect(lines[1] == "JOB                            OUTCOME     CHUNKS  REASON")
        #expect(lines[3] == "a-job-with-a-rather-long-name  terminated      30  chunk 31 was still running")
        #expect(lines[4] == "                                                   at the hard deadline")
        #expect(lines[5].hasPrefix("sync-worker                    failed           -  create failed: the server"))
        #expect(lines[7].hasSuffix("…"), "three lines at most")
    }

    @Test func withoutATerminalNothingIsCut() throws {
        let lines = try table(width: nil)
        #expect(lines.contains { $0.hasSuffix(Self.results[2].reason) })
    }

    /// Before: lines were as long as their content; "1 chunks"; "no budget"
    /// for a budgeted job not started yet.
    @Test(arguments: [80, 40])
    func liveLinesFitTheTerminal(width: Int) {
        let reporter = Reporter(console: Console(json: false, output: -1), json: false, verbose: false)
        let statuses = [
            JobStatus(job: "uploads-to-the-server", isChunked: true, timeRemaining: .seconds(12), progress: JobProgress(completed: 512, total: 1024), chunks: 1, isExpiring: true),
            JobStatus(job: "waits", isChunked: true, timeRemaining: nil, progress: nil, chunks: 0, isExpiring: false),
            JobStatus(job: "plays", isChunked: false, timeRemaining: nil, progress: nil, chunks: nil, isExpiring: false, isContinuous: true),
        ]
        let lines = reporter.liveLines(statuses, width: width).map(\.line)
        for line in lines { #expect(line.count < width, "\(line)") }
        #expect(lines.map(\.count).max()! > 35)
        if width == 80 {
            #expect(lines[0] == "  ▸ uploads-to-the-server  12.00s left  expiring  512/1024 (50%)  1 chunk")
            #expect(lines[1] == "  ▸ waits                  starting  0 chunks")
            #expect(lines[2] == "  ▸ plays                  no budget")
        } else {
            #expect(lines[0].hasSuffix("…"))
        }
    }
}

/// The live block on a real terminal (a pseudo-terminal here).
@Suite struct LiveBlockTests {
    /// Before: a finished job's line stayed in the block until the next redraw.
    @Test(.enabled(if: access("/dev/ptmx", R_OK | W_OK) == 0, "needs pseudo-terminals"))
    func aFinishedJobsLineLeavesTheBlockAtOnce() throws {
        // posix_openpt, by hand (Glibc's module leaves it out): unlock, then ask the number.
        let master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC)
        try #require(master >= 0)
        defer { close(master) }
        var unlock: Int32 = 0
        var number: UInt32 = 0
        let TIOCSPTLCK: UInt = 0x4004_5431, TIOCGPTN: UInt = 0x8004_5430
        try #require(ioctl(master, TIOCSPTLCK, &unlock) == 0 && ioctl(master, TIOCGPTN, &number) == 0)
        let terminal = open("/dev/pts/\(number)", O_RDWR | O_NOCTTY | O_CLOEXEC)
        try #require(terminal >= 0)
        defer { close(terminal) }
        let console = Console(json: false, output: terminal)
        #expect(console.humanIsTerminal)
        let reporter = Reporter(console: console, json: false, verbose: false)
        console.setLive([("first", "  ▸ first"), ("second", "  ▸ second")])
        _ = drain(master)
        let result = JobResult(
            job: "first", pluginPath: "/p.so", loadPath: "/p.so", isChunked: true, outcome: .completed, chunks: 2, elapsed: .milliseconds(5),
            reason: "work done", progress: nil)
        reporter.event(RunEvent.finished(result))
        let written = drain(master)
        // The block is lifted, the finished line written, and only the other job's line put back.
        let last = written.components(separatedBy: "\u{1B}[J").last ?? ""
        #expect(written.contains("finished  first: ") && written.contains("(work done) after 2 chunks"), "\(written.debugDescription)")
        #expect(last.contains("▸ second") && !last.contains("▸ first"), "\(written.debugDescription)")
    }

    /// What the terminal received so far.
    func drain(_ master: Int32) -> String {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            var entry = pollfd(fd: master, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, 50) > 0 else { break }
            let count = buffer.withUnsafeMutableBytes { read(master, $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            bytes += buffer[..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
