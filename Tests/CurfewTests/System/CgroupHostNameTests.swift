import Foundation
import Testing

@testable import Curfew

/// How a host names its cgroup folder, and when it takes another's for a
/// dead host's (whose processes it then kills): never for one alive.
@Suite struct CgroupHostNameTests {
    typealias HostName = WorkerCgroups.HostName

    @Test func aFolderNameReadsBackAndNothingElseDoes() throws {
        let me = try #require(HostName.current())
        #expect(HostName(folderName: me.folderName) == me)
        for name in ["curfew.", "curfew.12", "curfew.12.34", "curfew.12.34.56.78", "curfew.-1.2.3", "curfew.0.2.3", "curfew.a.2.3",
                     "curfew.1..3", "curfew.1.2.99999999999999999999999", "Curfew.1.2.3", "other.1.2.3", "curfew.1.2.3 "] {
            #expect(HostName(folderName: name) == nil, "\(name)")
        }
    }

    @Test func onlyAHostThatIsGoneIsTakenForGone() throws {
        let me = try #require(HostName.current())
        #expect(!me.isGone(seenFrom: me), "this host")
        // Alive: the test's parent process, with its own start.
        let parent = getppid()
        let parentStart = try #require(HostName.startTime(of: "\(parent)"))
        #expect(!HostName(pid: parent, start: parentStart, namespace: me.namespace).isGone(seenFrom: me))
        // Its pid, but a later start: the pid was used again.
        #expect(HostName(pid: parent, start: parentStart + 1, namespace: me.namespace).isGone(seenFrom: me))
        // Another pid namespace's host is not this one's to judge.
        #expect(!HostName(pid: parent, start: parentStart + 1, namespace: me.namespace &+ 1).isGone(seenFrom: me))
        // A pid no process has.
        let exited = Process()
        exited.executableURL = URL(fileURLWithPath: "/bin/true")
        try exited.run()
        exited.waitUntilExit()
        #expect(HostName(pid: exited.processIdentifier, start: 1, namespace: me.namespace).isGone(seenFrom: me))
    }
}
