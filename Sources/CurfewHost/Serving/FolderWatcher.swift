import Curfew
import Dispatch

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

    private static let mask: Inotify.Events = [.closeWrite, .movedTo, .movedFrom, .delete, .modify, .create, .deleteSelf, .moveSelf, .onlyFolder]

    /// Starts watching `folders`; `onChanges` is called on `queue` with the
    /// changes of each read, in the order they happened.
    init(folders: [String], queue: DispatchQueue, onChanges: @escaping @Sendable ([Change]) -> Void) throws(CurfewError) {
        do throws(SystemError) {
            descriptor = try Inotify.open()
        } catch {
            throw CurfewError(.unreadable, "cannot watch the plugin folders: inotify_init1: \(error.message)")
        }
        for folder in folders {
            do throws(SystemError) {
                watches[try Inotify.watch(descriptor, folder, for: Self.mask)] = folder
            } catch {
                Syscalls.close(descriptor)
                let hint = error == .noSpace ? " (raise fs.inotify.max_user_watches)" : ""
                throw CurfewError(.unreadable, "cannot watch \(folder): \(error.message)\(hint)")
            }
        }
        self.onChanges = onChanges
        source = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
        let fd = descriptor
        source.setEventHandler { [unowned self] in self.readEvents() }
        source.setCancelHandler { Syscalls.close(fd) }
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
            guard let count = try? Syscalls.read(descriptor, into: &buffer), count > 0 else { break }
            changes += Self.parse(buffer[..<count], folders: watches)
        }
        for case .folderGone(let folder) in changes {
            // A moved folder's watch would follow it elsewhere: dropped too.
            for (watch, watched) in watches where watched == folder {
                Inotify.unwatch(descriptor, watch)
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
            guard let watch = try? Inotify.watch(descriptor, folder, for: Self.mask) else { return false }
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
        for event in Inotify.events(in: bytes) {
            if event.events.contains(.overflow) {
                changes.append(.overflow)
                continue
            }
            guard let folder = folders[event.watch] else { continue }
            if !event.events.isDisjoint(with: [.deleteSelf, .moveSelf]) {
                changes.append(.folderGone(folder))
                continue
            }
            let name = String(decoding: event.name, as: UTF8.self)
            guard !name.isEmpty, !name.hasPrefix("."), !event.events.contains(.isFolder) else { continue }
            let path = folder.hasSuffix("/") ? folder + name : folder + "/" + name
            if !event.events.isDisjoint(with: [.closeWrite, .movedTo]) {
                changes.append(.written(path))
            } else if !event.events.isDisjoint(with: [.delete, .movedFrom]) {
                changes.append(.removed(path))
            } else if event.events.contains(.modify) {
                changes.append(.writing(path))
            } else if event.events.contains(.create) {
                changes.append(.created(path))
            }
        }
        return changes
    }
}
