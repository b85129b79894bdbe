import Glibc
import Testing

@testable import Curfew

/// The seam's wrappers say what the kernel said: typed errors, not -1.
@Suite(.timeLimit(.minutes(1))) struct SeamTests {
    /// A new folder, 0700, made by the seam.
    private func scratch() throws -> String {
        let folder = try Syscalls.makeTemporaryFolder(Fixtures.workRoot + "/seam-")
        #expect(try Syscalls.linkStatus(folder).mode == 0o700)
        return folder
    }

    @Test func openRefusesWhatItsOptionsForbidAndNamesTheError() throws {
        let folder = try scratch()
        defer { PluginSnapshots.remove(folder) }
        let file = folder + "/file"
        let fd = try Syscalls.open(file, .write, [.create, .exclusive], permissions: 0o600)
        try Syscalls.writeAll(fd, Array("hello".utf8))
        Syscalls.close(fd)
        #expect(throws: SystemError.exists) { try Syscalls.open(file, .write, [.create, .exclusive]) }
        try Syscalls.hardLink(file, as: folder + "/second")
        #expect(try Syscalls.linkStatus(file).links == 2)
        #expect(symlink(file, folder + "/link") == 0)
        #expect(throws: SystemError(errno: ELOOP)) { try Syscalls.open(folder + "/link", .read, [.noFollow]) }
        #expect(try Syscalls.linkStatus(folder + "/link").isSymlink)
        #expect(try Syscalls.linkTarget(folder + "/link") == file)
        #expect(throws: SystemError.noEntry) { try Syscalls.open(folder + "/missing", .read) }
        // Any file reads to its end, not only a regular one; past the limit is an error.
        #expect(try Syscalls.readToEnd("/dev/null", limit: 0).isEmpty)
        #expect(try Syscalls.readToEnd(file, limit: 5) == Array("hello".utf8))
        #expect(throws: SystemError(errno: EFBIG)) { try Syscalls.readToEnd(file, limit: 4) }

        let read = try Syscalls.open(file, .read)
        defer { Syscalls.close(read) }
        // Every descriptor the seam opens is close-on-exec.
        #expect(fcntl(read, F_GETFD) & FD_CLOEXEC != 0)
        var buffer = [UInt8](repeating: 0, count: 16)
        #expect(try Syscalls.read(read, into: &buffer) == 5)
        #expect(Array(buffer.prefix(5)) == Array("hello".utf8))
        #expect(try Syscalls.status(of: read).mode == 0o600)
    }

    @Test func aCopyIsWholeAndKeepsItsSourcesTimes() throws {
        let folder = try scratch()
        defer { PluginSnapshots.remove(folder) }
        // Three 64 KiB steps and a bit: a copy that stopped at a step would show.
        let bytes = (0..<(3 * 65536 + 17)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let sourceFD = try Syscalls.open(folder + "/source", .readWrite, [.create])
        defer { Syscalls.close(sourceFD) }
        try Syscalls.writeAll(sourceFD, bytes)
        var old = [timespec(tv_sec: 1_000_000_000, tv_nsec: 5), timespec(tv_sec: 1_000_000_000, tv_nsec: 123_456_789)]
        #expect(futimens(sourceFD, &old) == 0)
        let target = try Syscalls.open(folder + "/target", .write, [.create, .exclusive])
        #expect(try Syscalls.copyContents(of: sourceFD, to: target) == Int64(bytes.count))
        let status = try Syscalls.status(of: sourceFD)
        try Syscalls.setTimes(of: target, like: status)
        Syscalls.close(target)
        #expect(try Syscalls.readFile(folder + "/target") == bytes)
        #expect(try Syscalls.fileStatus(folder + "/target").modified == 1_000_000_000_123_456_789)
    }

    @Test func aPollSaysWhichDescriptorIsReadyAndWhichEnded() throws {
        let first = try Syscalls.socketPair(.stream)
        let second = try Syscalls.socketPair(.seqpacket)
        defer { (first + second).forEach { Syscalls.close($0) } }
        _ = try Syscalls.send(first[1], Array("x".utf8))
        Syscalls.shutdownSending(second[1])
        var entries = [Syscalls.PollEntry(first[0]), Syscalls.PollEntry(second[0]), Syscalls.PollEntry(first[1], input: false, output: true)]
        #expect(Syscalls.poll(&entries, milliseconds: 1000) == 3)
        #expect(entries[0].isReadable && !entries[0].isClosed)
        #expect(entries[1].hasInputOrEnd)
        #expect(entries[2].isWritable && !entries[2].hasInputOrEnd)
        var buffer = [UInt8](repeating: 0, count: 4)
        #expect(try Syscalls.receive(first[0], into: &buffer, nonBlocking: true) == 1)
        #expect(throws: SystemError.wouldBlock) { try Syscalls.receive(first[0], into: &buffer, nonBlocking: true) }
        #expect(try Syscalls.receive(second[0], into: &buffer) == 0)
        #expect(!Syscalls.waitForInput(first[0], milliseconds: 0))
    }

    @Test func aLocalSocketConnectsItsListenerAndNamesThePeer() throws {
        let folder = try scratch()
        defer { PluginSnapshots.remove(folder) }
        let path = folder + "/socket"
        let listening = try Syscalls.listenLocal(at: path, backlog: 1)
        defer { Syscalls.close(listening) }
        #expect(try Syscalls.linkStatus(path).isSocket)
        #expect(try Syscalls.linkStatus(path).mode == 0o600)
        #expect(throws: SystemError.wouldBlock) { try Syscalls.accept(listening) }
        let client = try Syscalls.connectLocal(to: path, by: nil)
        defer { Syscalls.close(client) }
        let served = try Syscalls.accept(listening)
        defer { Syscalls.close(served) }
        #expect(Syscalls.peerUserID(served) == Syscalls.userID)
        #expect(Syscalls.sendAll(client, Array("ping".utf8)) == 4)
        var buffer = [UInt8](repeating: 0, count: 8)
        #expect(try Syscalls.receive(served, into: &buffer) == 4)
        #expect(throws: SystemError.noEntry) { try Syscalls.connectLocal(to: folder + "/none", by: nil) }
        let long = "/" + String(repeating: "x", count: Syscalls.maximumSocketPathBytes)
        #expect(throws: SystemError.invalid) { try Syscalls.connectLocal(to: long, by: nil) }
        #expect(Syscalls.localAddress(long) == nil)
    }

    @Test func aProgramRunsToItsEndAndSaysHowItEnded() throws {
        let folder = try scratch()
        defer { PluginSnapshots.remove(folder) }
        #expect(try Program(["sh", "-c", "exit 3"]).run() == 3)
        // Run from a thread of Dispatch's, which blocks every signal: the
        // program's own mask is empty all the same.
        #expect(try Program(["sh", "-c", "kill -TERM $$"]).run() == 128 + SIGTERM)
        let output = folder + "/out"
        #expect(try Program(["sh", "-c", "printf %s \"$SEAM\""], environment: ["SEAM=here"], output: output).run() == 0)
        #expect(try Syscalls.readFile(output) == Array("here".utf8))
        // Prepared once, run again: the same program each time.
        let twice = Program(["/bin/sh", "-c", "exit 0"], searchesPath: false)
        #expect(try twice.run() == 0 && twice.run() == 0)
        #expect(throws: SystemError.noEntry) { try Program([folder + "/missing"], searchesPath: false).run() }
        // A descriptor some other code left inheritable is not the program's:
        // it would hold a pipe's end open, and its reader would never see the end.
        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        defer { ends.forEach { close($0) } }
        let listing = folder + "/fds"
        #expect(try Program(["sh", "-c", "ls /proc/$$/fd"], output: listing).run() == 0)
        let open = String(decoding: try Syscalls.readFile(listing), as: UTF8.self).split(separator: "\n").compactMap { Int32($0) }
        #expect(open.allSatisfy { $0 <= 2 || !ends.contains($0) }, "\(open) holds \(ends)")
    }

    @Test func theProcessCountsItsThreadsAndMemory() throws {
        #expect((ProcessStatistics.threadCount() ?? 0) >= 1)
        #expect((ProcessStatistics.residentBytes() ?? 0) > 1 << 20)
        let before = ProcessStatistics.cpuNanoseconds()
        while ProcessStatistics.cpuNanoseconds() == before {}
        #expect(ProcessStatistics.cpuNanoseconds() > before)
    }

    @Test func aWallTimeReadsOnTheCalendarBefore1970Too() {
        func read(_ milliseconds: Int64) -> [Int] {
            let f = WallTime(milliseconds: milliseconds).fields(utc: true)
            return [f.year, f.month, f.day, f.hour, f.minute, f.second, f.millisecond]
        }
        #expect(read(-1) == [1969, 12, 31, 23, 59, 59, 999])
        #expect(read(1_780_000_000_123) == [2026, 5, 28, 20, 26, 40, 123])
    }

    @Test func inotifyRecordsAreReadOnlyAsFarAsTheyAreWhole() {
        func record(_ watch: Int32, _ mask: UInt32, _ name: String) -> [UInt8] {
            var padded = Array(name.utf8)
            if !padded.isEmpty { padded += [UInt8](repeating: 0, count: 16 - padded.count % 16) }
            return withUnsafeBytes(of: watch.littleEndian, Array.init) + withUnsafeBytes(of: mask.littleEndian, Array.init)
                + [0, 0, 0, 0] + withUnsafeBytes(of: UInt32(padded.count).littleEndian, Array.init) + padded
        }
        let bytes = record(1, UInt32(IN_CLOSE_WRITE), "a.so") + record(2, UInt32(IN_DELETE_SELF), "")
        let events = Inotify.events(in: bytes[...])
        #expect(events.map(\.watch) == [1, 2])
        #expect(events[0].events.contains(.closeWrite) && Array(events[0].name) == Array("a.so".utf8))
        #expect(events[1].events.contains(.deleteSelf) && events[1].name.isEmpty)
        // A record whose name runs past what was read is not one.
        #expect(Inotify.events(in: bytes.dropLast(8)).count == 1)
        #expect(Inotify.events(in: bytes.prefix(28)).isEmpty)
        #expect(Inotify.events(in: bytes.prefix(15)).isEmpty)
    }
}
