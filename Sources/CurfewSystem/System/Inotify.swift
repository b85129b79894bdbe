// inotify through the seam: the instance, its watches, and its records read
// from bytes the kernel wrote, every length checked against what was read.
import Glibc

package enum Inotify {
    /// What an inotify watch reports (`IN_*`).
    package struct Events: OptionSet, Sendable {
        package let rawValue: UInt32
        package init(rawValue: UInt32) { self.rawValue = rawValue }

        package static let closeWrite = Events(rawValue: UInt32(IN_CLOSE_WRITE))
        package static let movedTo = Events(rawValue: UInt32(IN_MOVED_TO))
        package static let movedFrom = Events(rawValue: UInt32(IN_MOVED_FROM))
        package static let delete = Events(rawValue: UInt32(IN_DELETE))
        package static let modify = Events(rawValue: UInt32(IN_MODIFY))
        package static let create = Events(rawValue: UInt32(IN_CREATE))
        package static let deleteSelf = Events(rawValue: UInt32(IN_DELETE_SELF))
        package static let moveSelf = Events(rawValue: UInt32(IN_MOVE_SELF))
        /// Watch the path only if it is a folder.
        package static let onlyFolder = Events(rawValue: UInt32(IN_ONLYDIR))
        /// The kernel's queue overflowed: events were lost.
        package static let overflow = Events(rawValue: UInt32(IN_Q_OVERFLOW))
        /// The name is a folder's.
        package static let isFolder = Events(rawValue: UInt32(IN_ISDIR))
    }

    /// One record: the watch it is for, what happened, and the name in the
    /// watched folder (empty for the folder itself), up to its first NUL.
    package struct Event: Equatable {
        package let watch: Int32
        package let events: Events
        package let name: ArraySlice<UInt8>

        package static func == (a: Event, b: Event) -> Bool {
            a.watch == b.watch && a.events.rawValue == b.events.rawValue && a.name.elementsEqual(b.name)
        }
    }

    /// A new instance, non-blocking and close-on-exec. The caller closes it.
    package static func open() throws(SystemError) -> Int32 {
        let fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else { throw .last }
        return fd
    }

    /// Watches `folder` for `events`: the watch's number.
    package static func watch(_ fd: Int32, _ folder: String, for events: Events) throws(SystemError) -> Int32 {
        let watch = inotify_add_watch(fd, folder, events.rawValue)
        guard watch >= 0 else { throw .last }
        return watch
    }

    package static func unwatch(_ fd: Int32, _ watch: Int32) {
        _ = inotify_rm_watch(fd, watch)
    }

    /// The whole records in `bytes` (what one read returned), in order; a
    /// record cut short ends the list.
    package static func events(in bytes: ArraySlice<UInt8>) -> [Event] {
        var events: [Event] = []
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
            let name = bytes[(offset + header)..<(offset + header + length)].prefix { $0 != 0 }
            offset += header + length
            events.append(Event(watch: watch, events: Events(rawValue: mask), name: name))
        }
        return events
    }
}
