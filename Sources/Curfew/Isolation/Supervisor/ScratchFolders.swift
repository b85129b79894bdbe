import Synchronization

/// A run's scratch folders: made for its sandboxed workers, and each, once
/// its worker's cgroup is gone (so no process the job started is left to
/// write in it), emptied and kept for the run's next worker.
///
/// A folder made costs an inode, and one removed frees one: on ext4
/// without a journal, where the allocator skips inodes freed in the last
/// seconds one by one, the `mkdir` of a run that made one a job grew to
/// 0.15–0.2 ms of CPU. An emptied folder is as one made anew: nothing in
/// it, mode 0700, no ACL, no extended attribute a job set
/// (``Syscalls/emptyFolder(_:)``); one that cannot be made so is removed.
final class ScratchFolders: Sendable {
    /// How many emptied folders wait at most.
    static let limit = 4

    private let stock: Mutex<(folders: [String], closed: Bool)>

    /// - Parameter reusing: Whether folders go from one worker to the next:
    ///   not where the run has one worker (a serving host's runs), nor where
    ///   its jobs may open sockets (the network on), with which one job could
    ///   hand another a descriptor of its folder that would outlive it.
    init(reusing: Bool) {
        stock = Mutex(([], !reusing))
    }

    /// An emptied folder, or a new one (private to this user, in the temporary folder).
    func take() throws(SystemError) -> String {
        if let kept = stock.withLock({ $0.folders.popLast() }) { return kept }
        return try Self.make()
    }

    /// A new scratch folder, private to this user, in the temporary folder.
    static func make() throws(SystemError) -> String {
        try Syscalls.makeTemporaryFolder(Syscalls.temporaryFolder + "/curfew-scratch-")
    }

    /// Takes back `folder`, whose worker and every process its jobs started
    /// are gone: kept for the next worker once emptied, else removed (the
    /// run is over, the stock is full, or it cannot be emptied). Throws
    /// what it held that could not be removed.
    func giveBack(_ folder: String) throws(SystemError) {
        let room = stock.withLock { !$0.closed && $0.folders.count < Self.limit }
        guard room, (try? Syscalls.emptyFolder(folder)) != nil else {
            try Syscalls.removeTree(folder)
            return
        }
        let kept = stock.withLock { stock -> Bool in
            guard !stock.closed && stock.folders.count < Self.limit else { return false }
            stock.folders.append(folder)
            return true
        }
        if !kept { try Syscalls.removeTree(folder) }
    }

    /// The run is over: the kept folders go, and those given back later too.
    /// (A stock that does not reuse is closed from the start.)
    func close() {
        let kept = stock.withLock { stock -> [String] in
            stock.closed = true
            defer { stock.folders.removeAll() }
            return stock.folders
        }
        for folder in kept { try? Syscalls.removeTree(folder) }
    }
}
