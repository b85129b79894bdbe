import Foundation
import Testing

@testable import Curfew

/// One writer per state store: a second is refused with the holder named,
/// readers open it beside the writer, and the holder's death frees it.
@Suite struct StoreLockTests {
    @Test func aSecondWriterIsRefusedWithTheHolderNamedAndTheFirstsEndFreesIt() throws {
        let folder = Fixtures.temporaryFolder("state")
        var first: StateStore? = try StateStore(
            folder: folder, writer: StoreLock.Holder(pid: 4242, command: "curfew serve plugins", socket: "/run/x/serve.sock"))
        #expect(first != nil)
        #expect(throws: CurfewError.self) { try StateStore(folder: folder, writer: .current()) }
        do {
            _ = try StateStore(folder: folder, writer: .current())
        } catch {
            #expect(error.code == .stateLocked)
            #expect(error.description.contains("'curfew serve plugins' (pid 4242, control socket /run/x/serve.sock)"), "\(error.description)")
        }
        let reader = try StateStore(folder: folder)
        #expect(try reader.history().isEmpty, "a reader opens the store beside its writer")
        first = nil
        // A process another test is starting this moment has a copy of the
        // lock's descriptor until its exec closes it (posix_spawn runs no
        // atfork handler): the lock is free once that exec is done.
        func writer() throws -> StateStore? {
            do {
                return try StateStore(folder: folder, writer: .current())
            } catch {
                guard error.code == .stateLocked else { throw error }
                return nil
            }
        }
        var next = try writer()
        for _ in 0..<200 where next == nil {
            usleep(10_000)
            next = try writer()
        }
        #expect(next?.writerLock != nil)
    }

    @Test func whatALockFileSaysIsReadAsUntrustedText() {
        #expect(StoreLock.Holder.parse(Array("pid 12\ncommand a b\nsocket /s\n".utf8))
            == StoreLock.Holder(pid: 12, command: "a b", socket: "/s"))
        #expect(StoreLock.Holder.parse(Array("pid -3\ncommand x\n".utf8)) == nil)
        #expect(StoreLock.Holder.parse(Array("pid 99999999999999999999\n".utf8)) == nil)
        #expect(StoreLock.Holder.parse([0xFF, 0x00, 0x0A]) == nil)
        #expect(StoreLock.Holder.parse(Array("garbage\npid 7\nextra key\n".utf8))?.pid == 7)
        let sneaky = StoreLock.Holder(pid: 1, command: "curfew run\nsocket /evil\rx")
        #expect(!sneaky.text.contains("\nsocket") && !sneaky.text.contains("\r"), "a value cannot add a line of its own")
        #expect(StoreLock.Holder.parse(Array(sneaky.text.utf8))?.socket == nil)
        let long = StoreLock.Holder(pid: 1, command: String(repeating: "x", count: 5000))
        #expect(long.text.utf8.count < StoreLock.maximumRead)
        #expect(StoreLock.refusal(folder: "/f", holder: nil).contains("another host (it has not yet said which)"))
    }

    @Test func theLockFileIsNotASymlinkAndIsPrivate() throws {
        let folder = Fixtures.temporaryFolder("state")
        let elsewhere = Fixtures.temporaryFolder("elsewhere") + "/target"
        #expect(symlink(elsewhere, folder + "/" + StoreLock.fileName) == 0)
        #expect(throws: CurfewError.self) { try StoreLock(folder: folder, holder: .current()) }
        #expect(!FileManager.default.fileExists(atPath: elsewhere), "nothing is made through the link")
        let other = Fixtures.temporaryFolder("state")
        let lock = try StoreLock(folder: other, holder: .current())
        var info = stat()
        #expect(stat(lock.path, &info) == 0 && info.st_mode & 0o777 == 0o600)
    }
}

extension ProcessTests.Second {
    /// The same across processes: `serve` holds the store, `run` and `state
    /// clear` beside it are refused naming it, `history` reads, and its
    /// SIGKILL frees the store.
    @Suite(.timeLimit(.minutes(2))) struct StoreLockProcessTests {
        @Test func aServeHoldsItsStoreUntilItIsKilled() async throws {
            let folder = Fixtures.temporaryFolder("served")
            let state = Fixtures.temporaryFolder("state")
            let serve = try ServeProcess(folder: folder, state: state)
            await serve.wait(for: "control socket")
            let pid = serve.process.processIdentifier
            let plugin = try #require(Fixtures.examplePlugins.first)

            let run = try await Fixtures.run(Fixtures.curfewExecutable, ["run", "--state", state, "--budget", "1s", plugin])
            #expect(run.status == 1)
            #expect(run.stderr.contains("is in use by '") && run.stderr.contains("(pid \(pid), control socket \(serve.socket))"), "\(run.stderr)")
            let clear = try await Fixtures.run(Fixtures.curfewExecutable, ["state", "clear", "--all", "--state", state])
            #expect(clear.status == 1 && clear.stderr.contains("pid \(pid)"), "\(clear.stderr)")
            let history = try await Fixtures.run(Fixtures.curfewExecutable, ["history", "--state", state])
            #expect(history.status == 0, "\(history.stderr)")
            let second = try await Fixtures.run(
                Fixtures.curfewExecutable, ["serve", folder, "--state", state, "--socket", serve.socket + "2"], timeout: .seconds(30))
            #expect(second.status == 1 && second.stderr.contains("pid \(pid)"), "\(second.stderr)")

            kill(pid, SIGKILL)
            await Fixtures.wait(for: serve.process)
            let after = try await Fixtures.run(Fixtures.curfewExecutable, ["run", "--state", state, "--budget", "1s", plugin])
            #expect(after.status != 1, "a holder killed with SIGKILL frees the store: \(after.stderr)")
            #expect(!after.stderr.contains("in use by"))
        }
    }
}
