import Foundation
import Glibc
import Synchronization
import Testing

@testable import Curfew
@testable import CurfewCLI
@testable import CurfewFormats
@testable import CurfewHost

/// `curfew events`: the kept lines, the followers, and the reader that
/// never reads.
@Suite(.timeLimit(.minutes(1))) struct EventStreamTests {
    /// Reads `fd` to its end: the lines it carried.
    static func readAll(_ fd: Int32) -> [String] {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count <= 0 { break }
            bytes += buffer[..<count]
        }
        return String(decoding: bytes, as: UTF8.self).split(separator: "\n").map(String.init)
    }

    @Test func aReaderGetsTheKeptLinesOfItsJobThenTheEnd() throws {
        let stream = EventStream()
        defer { stream.close() }
        for index in 0..<(EventStream.recentLimit + 5) { stream.publish("{\"n\":\(index)}", job: index % 2 == 0 ? "even" : "odd") }
        let pair = try Syscalls.socketPair(.stream)
        #expect(stream.attach(pair[0], job: "odd", follows: false))
        let lines = Self.readAll(pair[1])
        close(pair[1])
        // The last 1,000 kept, of which the odd ones, oldest first.
        #expect(lines.count == EventStream.recentLimit / 2)
        #expect(lines.first == "{\"n\":5}" && lines.last == "{\"n\":1003}")
    }

    /// Before, a follower that never read would have held every line the
    /// host made. Past 1 MiB behind, what it was not sent is dropped for a
    /// notice, then the end; publishing never waits for it.
    @Test func aReaderThatNeverReadsIsCutOff() throws {
        let stream = EventStream()
        defer { stream.close() }
        let pair = try Syscalls.socketPair(.stream)
        #expect(stream.attach(pair[0], job: nil, follows: true))
        let line = "{\"event\":\"log\",\"message\":\"" + String(repeating: "x", count: 1000) + "\"}"
        for _ in 0..<3000 { stream.publish(line, job: "j") }  // 3 MB
        let lines = Self.readAll(pair[1])
        close(pair[1])
        #expect(lines.last?.contains("\"event\":\"cut-off\"") == true, "\(lines.last ?? "none")")
        // What the socket's own buffers took before the cut: not 3 MB.
        #expect(lines.count < 1100, "lines: \(lines.count)")
        #expect(lines.dropLast().allSatisfy { $0 == line }, "whole lines only")
    }

    /// Before, a reader was given every kept line first, and when they were
    /// more than 1 MiB it was cut off before it heard a new one. It gets the
    /// newest that fill half its buffer, in order.
    @Test func aReaderOfMoreKeptLinesThanItsBufferGetsTheNewest() throws {
        let stream = EventStream()
        defer { stream.close() }
        let filler = String(repeating: "y", count: 2000)
        for index in 0..<EventStream.recentLimit { stream.publish("{\"n\":\(index),\"f\":\"\(filler)\"}", job: "j") }
        let pair = try Syscalls.socketPair(.stream)
        #expect(stream.attach(pair[0], job: nil, follows: false))
        let lines = Self.readAll(pair[1])
        close(pair[1])
        #expect(!lines.contains { $0.contains("cut-off") })
        #expect(lines.count > 200 && lines.count < 300, "about 512 KiB of 2 KB lines: \(lines.count)")
        #expect(lines.last?.hasPrefix("{\"n\":999,") == true)
    }

    /// Events are made into lines by the writer, a batch at a time as the
    /// reader's socket takes them: a follower that reads gets each of its
    /// job's, whole and in order, across many batches.
    @Test func aFollowerGetsEachOfItsJobsEventsInOrder() throws {
        let stream = EventStream()
        defer { stream.close() }
        let pair = try Syscalls.socketPair(.stream)
        defer { close(pair[1]) }
        #expect(stream.attach(pair[0], job: "odd", follows: true))
        let count = 6000
        let message = String(repeating: "m", count: 150)
        for index in 0..<count {
            stream.publish(.log(job: index % 2 == 0 ? "even" : "odd", level: .info, message: "\(index) \(message)"), at: WallTime(milliseconds: Int64(index)))
        }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        var ends = 0
        while ends < count / 2 {
            let read = recv(pair[1], &buffer, buffer.count, 0)
            if read <= 0 { break }
            bytes += buffer[..<read]
            ends += buffer[..<read].count { $0 == 10 }
        }
        let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n").map(String.init)
        #expect(lines.count == count / 2)
        for (index, line) in lines.enumerated() {
            guard line == #"{"event":"log","time":\#(2 * index + 1),"job":"odd","level":"info","message":"\#(2 * index + 1) \#(message)"}"# else {
                Issue.record("line \(index): \(line)")
                break
            }
        }
    }

    /// A plugin's text is cut to 8 KiB a field, and C1 controls and bidi
    /// overrides in it are escaped: one log line cannot cut every reader
    /// off, nor act on a terminal.
    @Test func aPluginsTextIsCutAndEscaped() {
        let huge = EventStream.line(.log(job: "j", level: .info, message: String(repeating: "z", count: 100_000)), at: WallTime(milliseconds: 0))
        #expect(huge.text.utf8.count < 9000)
        let sly = EventStream.line(.log(job: "j", level: .info, message: "a\u{9B}b\u{202E}c"), at: WallTime(milliseconds: 0))
        #expect(sly.text.contains(#"a\u009bb\u202ec"#), "\(sly.text)")
    }

    /// Closed twice, and published to after: nothing happens (before, the
    /// second close wrote to the closed wake pipe's number).
    @Test func closingTwiceAndPublishingAfterAreHarmless() throws {
        let stream = EventStream()
        let pair = try Syscalls.socketPair(.stream)
        #expect(stream.attach(pair[0], job: nil, follows: true))
        stream.close()
        stream.close()
        stream.publish("{}", job: nil)
        #expect(Self.readAll(pair[1]).isEmpty, "the stream ends")
        close(pair[1])
        let after = try Syscalls.socketPair(.stream)
        defer { close(after[0]); close(after[1]) }
        let taken = stream.attach(after[0], job: nil, follows: true)
        #expect(!taken)
    }

    @Test func atMostSixteenReadersFollow() throws {
        let stream = EventStream()
        defer { stream.close() }
        var ends: [Int32] = []
        defer { ends.forEach { close($0) } }
        for _ in 0..<EventStream.maximumReaders {
            let pair = try Syscalls.socketPair(.stream)
            ends.append(pair[1])
            #expect(stream.attach(pair[0], job: nil, follows: true))
        }
        let pair = try Syscalls.socketPair(.stream)
        defer { close(pair[0]); close(pair[1]) }
        let taken = stream.attach(pair[0], job: nil, follows: true)
        #expect(!taken)
    }
}

extension ProcessTests.First {
    @Suite(.timeLimit(.minutes(2))) struct EventFollowTests {
        /// `curfew events --follow --json` over a real control socket: a
        /// job's runs start and end in order, each stamped when it happened;
        /// the stream ends when the host stops.
        @Test func aFollowerSeesRunsStartAndEnd() async throws {
            let folder = Fixtures.temporaryFolder("served")
            try FileManager.default.copyItem(atPath: try Fixtures.compile("condition_jobs.c"), toPath: folder + "/jobs.so")
            var options = Server.Options(folders: [folder])
            options.run.workerExecutable = Fixtures.curfewExecutable
            options.config = try ServeConfig.parse(
                Array(#"{"defaults": {"enabled": false}, "jobs": {"once": {"enabled": true, "every": "200ms", "budget": "2s"}}}"#.utf8), file: "test.json")
            let server = try Server(options: options, onEvent: { _, _ in }, onNotice: { _ in })
            let path = Fixtures.temporaryFolder("socket") + "/serve.sock"
            let socket = try ControlSocket(path: path, refusesJobs: false, takes: { server.takeReader($0, client: $1) }) { server.answer($0) }
            defer { socket.close() }
            let seen = Mutex<[(line: String, at: Int64)]>([])
            let reading = Task.detached {
                try ControlSocket.stream(path: path, request: #"{"command":"events","follow":true,"job":"once"}"#, follows: true) { bytes in
                    seen.withLock { $0.append((String(decoding: bytes, as: UTF8.self), WallTime.now().milliseconds)) }
                }
            }
            try server.start()
            let give = ContinuousClock.now + .seconds(30)
            while seen.withLock({ $0.filter { $0.line.contains("\"event\":\"finished\"") }.count }) < 2 && ContinuousClock.now < give {
                try await Task.sleep(for: .milliseconds(5))
            }
            await withCheckedContinuation { done in server.stop { done.resume() } }
            try await reading.value  // ended by the host's stop
            let lines = seen.withLock { $0 }
            let kinds = lines.compactMap { line -> String? in
                guard let value = try? JSONReader.parse(Array(line.line.utf8)) else { return nil }
                #expect(value["job"]?.stringValue == "once", "only its job's: \(line.line)")
                return value["event"]?.stringValue
            }
            let runs = kinds.filter { $0 == "started" || $0 == "finished" }
            #expect(runs.count >= 4 && runs.prefix(4) == ["started", "finished", "started", "finished"], "\(kinds)")
            // Each stamped when it happened: never after it arrived.
            for line in lines {
                let value = try #require(try? JSONReader.parse(Array(line.line.utf8)) as JSONValue?)
                let time = try #require(value["time"]?.integerValue)
                #expect(time <= line.at)
            }
        }

        @Test func theCommandLineAsksForEvents() throws {
            guard case .control(let options) = try Invocation(parsing: ["events", "--follow", "--job", "tally", "--json"]) else {
                Issue.record("not control")
                return
            }
            #expect(options.events?.follow == true && options.events?.job == "tally" && options.json)
            #expect(throws: UsageError.self) { try Invocation(parsing: ["events", "--job", "Not A Name"]) }
        }
    }
}
