import Foundation
import Glibc
import Testing

@testable import Curfew

/// A run's scratch folders, taken and given back: one given back is kept
/// only as one made anew would be, and none outlives the run.
@Suite struct ScratchFoldersTests {
    func exists(_ path: String) -> Bool { FileManager.default.fileExists(atPath: path) }

    @Test func aFolderGivenBackIsKeptOnlyEmptiedAndReset() throws {
        let stock = ScratchFolders(reusing: true)
        let folder = try stock.take()
        // What a job the sandbox did not hold back could leave.
        try "left".write(toFile: folder + "/left", atomically: false, encoding: .utf8)
        #expect(mkdir(folder + "/inner", 0o700) == 0)
        try "deeper".write(toFile: folder + "/inner/deeper", atomically: false, encoding: .utf8)
        #expect(symlink("/etc/passwd", folder + "/link") == 0)
        #expect(chmod(folder + "/inner", 0o500) == 0 && chmod(folder, 0o777) == 0)
        try stock.giveBack(folder)
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder).isEmpty)
        var info = stat()
        #expect(stat(folder, &info) == 0 && info.st_mode & 0o7777 == 0o700)
        #expect(exists("/etc/passwd"), "a link inside goes, not what it names")
        #expect(try stock.take() == folder, "the next worker gets it")

        // An attribute a job set could reach the next: such a folder goes.
        typealias SetAttribute = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeRawPointer, Int, Int32) -> Int32
        let symbol = try #require(dlsym(UnsafeMutableRawPointer(bitPattern: 0), "setxattr") as UnsafeMutableRawPointer?)
        let setAttribute = unsafeBitCast(symbol, to: SetAttribute.self)
        if setAttribute(folder, "user.left", "secret", 6, 0) == 0 {
            try stock.giveBack(folder)
            #expect(!exists(folder))
        } else {
            try stock.giveBack(folder)  // (a file system without user attributes)
        }

        // At most `limit` wait; the run's end removes them, and any given back after.
        var folders: [String] = []
        for _ in 0...ScratchFolders.limit { folders.append(try stock.take()) }
        for folder in folders.dropLast() { try stock.giveBack(folder) }
        #expect(folders.filter(exists).count == ScratchFolders.limit + 1)
        stock.close()
        #expect(folders.filter(exists) == [folders.last!])
        try stock.giveBack(folders.last!)
        #expect(!exists(folders.last!))
    }

    /// A run whose jobs may hand one another a descriptor (the network on),
    /// or that has one worker, keeps none.
    @Test func aStockThatDoesNotReuseRemovesWhatItIsGiven() throws {
        let stock = ScratchFolders(reusing: false)
        let folder = try stock.take()
        try stock.giveBack(folder)
        #expect(!exists(folder))
        #expect(try stock.take() != folder)
    }

    /// A path that is a link to a folder is no scratch folder of the run's: removed, never emptied through.
    @Test func aLinkGivenBackIsNotFollowed() throws {
        let stock = ScratchFolders(reusing: true)
        defer { stock.close() }
        let target = Fixtures.temporaryFolder("kept")
        try "mine".write(toFile: target + "/file", atomically: false, encoding: .utf8)
        let link = Fixtures.temporaryFolder("links") + "/scratch"
        #expect(symlink(target, link) == 0)
        #expect(throws: (any Error).self) { try stock.giveBack(link) }
        #expect(exists(target + "/file"))
    }
}
