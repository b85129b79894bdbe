import Curfew
import Dispatch
import Glibc

/// Watches plugin folders with inotify and says what changed in them.
///
/// A file counts as written once its writer closes it (`IN_CLOSE_WRITE`) or
/// it is moved in whole (`IN_MOVED_TO`); until then a file being written
/// (`IN_MODIFY` seen, no close yet) is reported as such, so the server never
/// loads half a plugin. A name that appears whole (IN_CREATE of a link:
/// `ln`, `ln -s`) is reported as ``Change/created(_:)``. Dotfiles are ignored (editors and `rsync` write
/// there first). A full event queue (`IN_Q_OVERFLOW`) is reported as
/// ``Change/overflow``: what was lost is unknown, so the caller rescans.
/// A folder deleted or moved away is watched no more until ``rewatch()``
/// finds it again.
package final class FolderWatcher: @unchecked Sendable {
    // Safe because after init everything happens on `queue`.

    package enum Change: Equatable, Sendable {
        /// Written and closed, or moved in.
        case written(String)
        /// Opened for writing and written to, not closed yet.
        case writing(String)
        /// A name made in the folder: a link is whole at once, a new file is
        /// written (and reported written) after.
        case created(String)
        /// Deleted or moved away.
        case removed(String)
        /// The kernel dropped events: rescan everything.
        case overflow
        /// A watched folder itself was deleted or moved.
        case folderGone(String)
    }

    private let descriptor: Int32
    private var watches: [Int32: String] = [:]
    /// Folders whose watch is gone (deleted or moved away), in order.
    private(set) var missing: [String] = []
    private let source: any DispatchSourceRead
    private let onChanges: @Sendable ([Change]) -> Void

    private static let mask = UInt32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_MODIFY | IN_CREATE)
        | UInt32(IN_DELETE_SELF | IN_MOVE_SELF) | UInt32(IN_ONLYDIR)

    /// Starts watching `folders`; `onChanges` is called on `queue` with the
    /// changes of each read, in the order they happened.
    init(folders: [String], queue: DispatchQueue, onChanges: @escaping @Sendable ([Change]) -> Void) throws(CurfewError) {
        descriptor = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard descriptor >= 0 else {
            throw CurfewError(.unreadable, "cannot watch the plugin folders: inotify_init1: \(String(cString: strerror(errno)))")
        }
        for folder in folders {
            let watch = inotify_add_watch(descriptor, folder, Self.mask)
            guard watch >= 0 else {
                let why = String(cString: strerror(errno))
                close(descriptor)
                let hint = errno == ENOSPC ? " (raise fs.inotify.max_user_watches)" : ""
                throw CurfewError(.unreadable, "cannot watch \(folder): \(why)\(hint)")
            }
            watches[watch] = folder
        }
        self.onChanges = onChanges
        source = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
        let fd = descriptor
        source.setEventHandler { [unowned self] in self.readEvents() }
        source.setCancelHandler { close(fd) }
        source.activate()
    }

    /// Stops watching and closes the descriptor.
    func cancel() {
        source.cancel()
    }

    private func readEvents() {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var changes: [Change] = []
        while true {
            let count = buffer.withUnsafeMutableBytes { bytes in Syscalls.retryingEINTR { read(descriptor, bytes.baseAddress, bytes.count) } }
            guard count > 0 else { break }
            changes += Self.parse(buffer[..<count], folders: watches)
        }
        for case .folderGone(let folder) in changes {
            // A moved folder's watch would follow it elsewhere: dropped too.
            for (watch, watched) in watches where watched == folder {
                inotify_rm_watch(descriptor, watch)
                watches[watch] = nil
            }
            if !missing.contains(folder) { missing.append(folder) }
        }
        if !changes.isEmpty { onChanges(changes) }
    }

    /// Watches again each missing folder that is there again (made anew,
    /// or moved back): those it now watches.
    func rewatch() -> [String] {
        var back: [String] = []
        missing.removeAll { folder in
            let watch = inotify_add_watch(descriptor, folder, Self.mask)
            guard watch >= 0 else { return false }
            watches[watch] = folder
            back.append(folder)
            return true
        }
        return back
    }

    /// The changes in a run of `inotify_event`s. The kernel wrote them, but
    /// every length is still checked against what was read.
    package static func parse(_ bytes: ArraySlice<UInt8>, folders: [Int32: String]) -> [Change] {
        var changes: [Change] = []
        var offset = bytes.startIndex
        let header = 16  // wd, mask, cookie, len: four 32-bit fields
        func field(_ at: Int) -> UInt32 {
            UInt32(bytes[at]) | UInt32(bytes[at + 1]) << 8 | UInt32(bytes[at + 2]) << 16 | UInt32(bytes[at + 3]) << 24
        }
        while bytes.endIndex - offset >= header {
            let watch = Int32(bitPattern: field(offset))
            let mask = field(offset + 4)
            let length = Int(field(offset + 12))
            guard length <= bytes.endIndex - offset - header else { break }
            let nameBytes = bytes[(offset + header)..<(offset + header + length)].prefix { $0 != 0 }
            offset += header + length
            if mask & UInt32(IN_Q_OVERFLOW) != 0 {
                changes.append(.overflow)
                continue
            }
            guard let folder = folders[watch] else { continue }
            if mask & UInt32(IN_DELETE_SELF | IN_MOVE_SELF) != 0 {
                changes.append(.folderGone(folder))
                continue
            }
            let name = String(decoding: nameBytes, as: UTF8.self)
            guard !name.isEmpty, !name.hasPrefix("."), mask & UInt32(IN_ISDIR) == 0 else { continue }
            let path = folder.hasSuffix("/") ? folder + name : folder + "/" + name
            if mask & UInt32(IN_CLOSE_WRITE | IN_MOVED_TO) != 0 {
                changes.append(.written(path))
            } else if mask & UInt32(IN_DELETE | IN_MOVED_FROM) != 0 {
                changes.append(.removed(path))
            } else if mask & UInt32(IN_MODIFY) != 0 {
                changes.append(.writing(path))
            } else if mask & UInt32(IN_CREATE) != 0 {
                changes.append(.created(path))
            }
        }
        return changes
    }
}
