import Synchronization
import _CurfewShims

/// Private, read-only copies of the plugin files a host runs: the scanner
/// vets the copy, the host or its worker loads it, and the history hashes
/// it, so the verdict, the hash and the code that runs are one thing. The
/// user's file may then be overwritten, truncated or deleted while a job
/// runs: the loader maps a file's pages as they are first touched, and a
/// file rewritten in place under a mapping faults the process that maps it.
///
/// Layout: `FOLDER/<hash of the real path>-<hash of its key>-<file name>`,
/// where the key is the file's ``ScanCache/Key`` (size, times, device,
/// inode): one copy per version of a file, written under a staging name
/// and renamed in, so a reader finds a whole copy or none. A plugin that
/// finds libraries through `$ORIGIN` gets a folder of its own instead,
/// `FOLDER/<hash>-<hash>/<file name>`, with the libraries it names that lie
/// beside the original copied in beside it (each with the original's
/// modification time, by which a changed library is seen).
///
/// A copy is checked against its source's status before and after it is
/// made; on kernels with multigrain timestamps (6.13 on) a write after that
/// first `fstat` always moves the source's ctime, so a torn copy is seen.
struct PluginSnapshots: Sendable {
    /// The folder the versions live in: this user's, writable by nobody else.
    let folder: String

    /// How long a version is kept once a newer version of its file is
    /// taken (or the file is gone), in seconds: a host that started with it
    /// may still start a worker on it.
    static let keptAfterReplaced: Int64 = 3600

    /// - Throws: Why `folder` cannot hold snapshots: it, or a folder above
    ///   it, is not this user's alone (whoever could rename it could swap
    ///   the code), or it lies on a file system mounted `noexec`.
    init(folder: String) throws(CurfewError) {
        try PrivateFolder.prepare(folder, what: "the snapshot folder", code: .unreadable)
        if let insecure = PluginLoader().insecurity(folder) {
            throw CurfewError(.insecure, "the snapshot folder \(folder): \(insecure.description)")
        }
        if curfew_shim_mounted_noexec(folder) == 1 {
            throw CurfewError(.unreadable, "the snapshot folder \(folder) is on a file system mounted noexec, where no code can run")
        }
        self.folder = folder
    }

    /// Snapshots in a new folder of the temporary folder, removed when this
    /// process exits: for a host with no cache folder to keep them in.
    static func temporary() throws(CurfewError) -> PluginSnapshots {
        let base = Syscalls.temporaryFolder
        let folder: String
        do throws(SystemError) {
            folder = try Syscalls.makeTemporaryFolder(base + "/curfew-snapshots-")
        } catch {
            throw CurfewError(.unreadable, "cannot make a snapshot folder in \(base): \(error.message)")
        }
        TemporaryFolders.removeAtExit(folder)
        return try PluginSnapshots(folder: folder)
    }

    /// A snapshot: where the code is loaded from, and the key of the bytes
    /// there (the file's key when it was copied, which may be newer than
    /// the caller's).
    struct Taken: Equatable {
        let path: String
        let key: ScanCache.Key
        /// Why the file loads from its own place, not a copy (`path` is
        /// then its real path): a copy could not be made or would not load.
        var inPlace: String? = nil
    }

    /// The snapshot of the file `key` describes (`key.path` is a real
    /// path), copied now unless this version was copied before; or the file
    /// itself, saying why, when no copy of it can be made or used.
    ///
    /// - Throws: Why the file cannot be loaded at all: it cannot be read,
    ///   or it changed during each of three copies (a file being written).
    func take(_ key: ScanCache.Key) throws(CurfewError) -> Taken {
        var key = key
        let name = Self.fileName(key.path)
        for _ in 0..<3 {
            let stem = folder + "/" + Self.stem(key)
            if Self.holds(stem + "-" + name, size: key.size) { return Taken(path: stem + "-" + name, key: key) }
            let neighbours = Self.holds(stem + "/" + name, size: key.size) ? neighboursAreCurrent(stem, name, of: key.path) : nil
            if neighbours == true { return Taken(path: stem + "/" + name, key: key) }
            let source: Int32
            do throws(SystemError) {
                source = try Syscalls.open(key.path, .read, [.nonBlocking, .noTerminal])
            } catch {
                throw Self.unreadable(error)
            }
            defer { Syscalls.close(source) }
            guard let status = try? Syscalls.status(of: source), status.isRegular else {
                throw CurfewError(.notELF, "Not a regular file, so not a shared object.")
            }
            let current = Self.key(key.path, status)
            if current != key {
                key = current
                continue  // changed since it was listed: that version may be known
            }
            let inPlace = { (why: String) in Taken(path: key.path, key: key, inPlace: why) }
            let temporary: (path: String, fd: Int32)
            do throws(CurfewError) {
                temporary = try makeTemporaryFile()
            } catch {
                return inPlace(error.description)
            }
            let copied = Self.copy(source, as: status, to: temporary.fd)
            Syscalls.close(temporary.fd)
            switch copied {
            case .copied:
                try? Syscalls.changeMode(temporary.path, to: 0o500)
                let origin = Self.origin(inFile: temporary.path)
                if case .beyondFolder = origin {
                    try? Syscalls.unlink(temporary.path)
                    return inPlace("it finds libraries through a path from $ORIGIN, which a copy elsewhere would not")
                }
                guard case .beside(let names) = origin else {
                    // Another host may have made this version meanwhile: the
                    // same bytes, and whoever maps the one replaced keeps it.
                    do throws(SystemError) {
                        try Syscalls.rename(temporary.path, to: stem + "-" + name)
                    } catch {
                        try? Syscalls.unlink(temporary.path)
                        return inPlace(Self.unwritable(folder, error).description)
                    }
                    return Taken(path: stem + "-" + name, key: key)
                }
                // `$ORIGIN` is the folder the copy is in: one of its own, with
                // the libraries it names from beside the original.
                let staging: String
                do throws(CurfewError) {
                    staging = try makeTemporaryFolder()
                } catch {
                    try? Syscalls.unlink(temporary.path)
                    return inPlace(error.description)
                }
                do throws(SystemError) {
                    try Syscalls.rename(temporary.path, to: staging + "/" + name)
                } catch {
                    try? Syscalls.unlink(temporary.path)
                    Self.remove(staging)
                    return inPlace(Self.unwritable(folder, error).description)
                }
                do throws(CurfewError) {
                    try copyNeighbours(names, of: name, from: Syscalls.folder(of: key.path), into: staging)
                    try publish(staging, as: stem, replacing: neighbours == false)
                    return Taken(path: stem + "/" + name, key: key)
                } catch {
                    Self.remove(staging)
                    return inPlace(error.description)
                }
            case .changed:
                try? Syscalls.unlink(temporary.path)
                do throws(SystemError) {
                    key = Self.key(key.path, try Syscalls.status(of: source))
                } catch {
                    throw Self.unreadable(error)
                }
            case .failed(let error):
                try? Syscalls.unlink(temporary.path)
                return inPlace(Self.unwritable(folder, error).description)
            }
        }
        throw CurfewError(
            .unreadable, "It changed while it was being copied, three times: it is loaded once it stops changing.")
    }

    /// Renames the folder `staging` to `stem`; over a `stem` whose
    /// libraries went stale when `replacing`, by exchanging the two, so a
    /// reader finds one whole folder or the other, and the stale one, now
    /// under the staging name, goes with the next sweep after the grace.
    private func publish(_ staging: String, as stem: String, replacing: Bool) throws(CurfewError) {
        if replacing {
            guard curfew_shim_exchange(staging, stem) == 0 else {
                let error = SystemError.last
                Self.remove(staging)
                throw Self.unwritable(folder, error)
            }
            Self.markReplaced(staging, isFolder: true)
            return
        }
        do throws(SystemError) {
            try Syscalls.rename(staging, to: stem)
        } catch {
            Self.remove(staging)
            // Another host made this version meanwhile: the same copies.
            guard error == .notEmpty || error == .exists else { throw Self.unwritable(folder, error) }
        }
    }

    /// Whether each library copied beside `name` in the version folder
    /// `stem` is still the one beside the original at `path` (same size,
    /// same modification time).
    private func neighboursAreCurrent(_ stem: String, _ name: String, of path: String) -> Bool {
        let source = Syscalls.folder(of: path)
        for entry in Self.entries(of: stem) ?? [] where entry != name {
            guard let copy = try? Syscalls.linkStatus(stem + "/" + entry), let original = try? Syscalls.fileStatus(source + "/" + entry),
                original.isRegular, original.size == copy.size, original.modified == copy.modified
            else { return false }
        }
        return true
    }

    /// A new file `.new-XXXXXX` in the folder, open for writing.
    private func makeTemporaryFile() throws(CurfewError) -> (path: String, fd: Int32) {
        var template = Array((folder + "/" + Self.stagingPrefix + "XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { curfew_shim_make_temporary($0.baseAddress!) }
        guard fd >= 0 else { throw Self.unwritable(folder, .last) }
        return (template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }, fd)
    }

    /// A new folder `.new-XXXXXX` in the folder.
    private func makeTemporaryFolder() throws(CurfewError) -> String {
        do throws(SystemError) {
            return try Syscalls.makeTemporaryFolder(folder + "/" + Self.stagingPrefix)
        } catch {
            throw Self.unwritable(folder, error)
        }
    }

    /// What a copy in progress, or a version exchanged out, is called.
    private static let stagingPrefix = ".new-"

    /// Marks, and later removes, in one listing of the folder: the
    /// versions of the files at real paths `gone`, and those of the files
    /// `current` describes other than theirs. A version is marked replaced
    /// (made read-only to its owner too, which stamps its ctime) when first
    /// seen so, and removed ``keptAfterReplaced`` later; so is what a host
    /// that died left half copied.
    func sweep(current: [ScanCache.Key], gone: [String], now: Int64 = WallTime.now().milliseconds / 1000) {
        let kept = Set(current.map(Self.stem))
        let swept = Set(current.map { Self.hash($0.path) }).union(gone.map(Self.hash))
        guard !swept.isEmpty, let entries = Self.entries(of: folder) else { return }
        for entry in entries {
            let path = folder + "/" + entry
            guard let info = try? Syscalls.linkStatus(path) else { continue }
            let isFolder = info.isDirectory
            let (age, overflow) = now.subtractingReportingOverflow(info.changed / 1_000_000_000)
            let expired = !overflow && age > Self.keptAfterReplaced
            if entry.hasPrefix(Self.stagingPrefix) {
                if expired { Self.remove(path) }
                continue
            }
            // `<path hash>-<version hash>`, then `-<name>` or nothing (a folder).
            guard entry.utf8.count >= 33, swept.contains(String(entry.prefix(16))), !kept.contains(String(entry.prefix(33))) else {
                continue
            }
            if !Self.isMarkedReplaced(info) {
                Self.markReplaced(path, isFolder: isFolder)
            } else if expired {
                Self.remove(path)
            }
        }
    }

    /// A version in use is mode 500 (a file) or 700 (a folder); one
    /// replaced, 400 or 500: its ctime says when it was replaced.
    private static func isMarkedReplaced(_ info: Syscalls.FileStatus) -> Bool {
        info.mode & 0o777 == (info.isDirectory ? 0o500 : 0o400)
    }

    private static func markReplaced(_ path: String, isFolder: Bool) {
        try? Syscalls.changeMode(path, to: isFolder ? 0o500 : 0o400)
    }

    /// Copies into `staging` each library in `names` that lies as a regular
    /// file in `source` (the original's folder), and, in turn, those that a
    /// library copied names through `$ORIGIN`, each with its original's
    /// modification time.
    ///
    /// - Throws: When a library there cannot be copied whole.
    private func copyNeighbours(_ names: Set<String>, of name: String, from source: String, into staging: String) throws(CurfewError) {
        var copied: Set<String> = [name]
        var pending = [names]
        let present = Set(Self.entries(of: source) ?? [])
        while let next = pending.popLast() {
            for library in next.sorted() where !copied.contains(library) && present.contains(library) {
                copied.insert(library)
                let fd: Int32
                do throws(SystemError) {
                    fd = try Syscalls.open(source + "/" + library, .read, [.nonBlocking, .noTerminal])
                } catch {
                    throw Self.neighbourError(library, error)
                }
                defer { Syscalls.close(fd) }
                guard let status = try? Syscalls.status(of: fd), status.isRegular else { continue }
                let target: Int32
                do throws(SystemError) {
                    target = try Syscalls.open(staging + "/" + library, .write, [.create, .exclusive, .noFollow], permissions: 0o500)
                } catch {
                    throw Self.unwritable(folder, error)
                }
                let result = Self.copy(fd, as: status, to: target)
                let stamped: SystemError?
                do throws(SystemError) {
                    try Syscalls.setTimes(of: target, like: status)
                    stamped = nil
                } catch {
                    stamped = error
                }
                Syscalls.close(target)
                switch result {
                case .copied:
                    if let stamped { throw Self.neighbourError(library, stamped) }
                case .failed(let error): throw Self.neighbourError(library, error)
                case .changed: throw CurfewError(.unreadable, "The library \(library) beside it changed while it was being copied.")
                }
                if case .beside(let more) = Self.origin(inFile: staging + "/" + library) { pending.append(more) }
            }
        }
    }

    private static func neighbourError(_ library: String, _ error: SystemError) -> CurfewError {
        CurfewError(.unreadable, "The library \(library) beside it cannot be copied: \(error.message).")
    }

    /// How a library finds others through `$ORIGIN`.
    enum Origin: Equatable {
        /// It does not mention `$ORIGIN`.
        case none
        /// `$ORIGIN` alone: the names of libraries it may find beside itself.
        case beside(Set<String>)
        /// A path from `$ORIGIN` (`$ORIGIN/../lib`): outside its folder.
        case beyondFolder
    }

    /// How the library at `path` (a copy of ours) uses `$ORIGIN`; with it
    /// alone, the names of libraries (NUL-terminated strings with `.so` and
    /// no slash, up to 255 bytes) in it. One pass over its bytes: the
    /// dynamic section's names are among them, and a name that is not one
    /// only costs a copy if a file of that name lies beside the plugin.
    static func origin(inFile path: String) -> Origin {
        guard let fd = try? Syscalls.open(path, .read, [.noFollow]) else { return .none }
        defer { Syscalls.close(fd) }
        guard let status = try? Syscalls.status(of: fd), status.size > 0, let size = Int(exactly: status.size) else { return .none }
        // Our own copy, which nobody else can change: mapping it is safe.
        return Syscalls.withMappedFile(fd, size: size) { origin(in: $0) } ?? .none
    }

    private static func origin(in bytes: UnsafeRawBufferPointer) -> Origin {
        let size = bytes.count
        guard contains(bytes, "$ORIGIN") || contains(bytes, "${ORIGIN}") else { return .none }
        if contains(bytes, "$ORIGIN/") || contains(bytes, "${ORIGIN}/") { return .beyondFolder }
        var names = Set<String>()
        var start = 0
        for index in 0..<size where bytes[index] == 0 {
            let length = index - start
            if length > 3 && length <= 255 {
                let piece = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
                if !piece.contains(UInt8(ascii: "/")) && contains(piece, ".so") {
                    names.insert(String(decoding: piece, as: UTF8.self))
                }
            }
            start = index + 1
        }
        return .beside(names)
    }

    private static func contains(_ bytes: UnsafeRawBufferPointer, _ needle: StaticString) -> Bool {
        guard let base = bytes.baseAddress else { return false }
        return needle.withUTF8Buffer { curfew_shim_contains(base, UInt(bytes.count), $0.baseAddress, UInt($0.count)) != 0 }
    }

    private enum Copy {
        case copied
        /// The source changed while it was copied: the copy is of no version.
        case changed
        case failed(SystemError)
    }

    /// Copies the open file `source`, whose status was `before`, to the
    /// open, empty file `target`.
    private static func copy(_ source: Int32, as before: Syscalls.FileStatus, to target: Int32) -> Copy {
        let copied: Int64
        do throws(SystemError) {
            copied = try Syscalls.copyContents(of: source, to: target)
        } catch {
            return .failed(error)
        }
        guard let after = try? Syscalls.status(of: source), copied == before.size, after.size == before.size,
            after.modified == before.modified, after.changed == before.changed
        else { return .changed }
        return .copied
    }

    /// Whether `path` is a regular file of `size` bytes (a version's copy,
    /// which no one but this user can have changed).
    private static func holds(_ path: String, size: Int64) -> Bool {
        guard let info = try? Syscalls.linkStatus(path) else { return false }
        return info.isRegular && info.size == size
    }

    private static func key(_ path: String, _ info: Syscalls.FileStatus) -> ScanCache.Key {
        ScanCache.Key(path: path, size: info.size, mtime: info.modified, ctime: info.changed, device: info.device, inode: info.inode)
    }

    private static func hash(_ path: String) -> String {
        var hash = FNV1a()
        hash.add(path.utf8)
        return hash.hex
    }

    /// A version's name: `<path hash>-<version hash>`, its copy's name
    /// before `-<file name>`, or its folder's.
    private static func stem(_ key: ScanCache.Key) -> String {
        hash(key.path) + "-" + hash(version: key)
    }

    private static func hash(version key: ScanCache.Key) -> String {
        var hash = FNV1a()
        hash.add("\(key.size) \(key.mtime) \(key.ctime) \(key.device) \(key.inode)".utf8)
        return hash.hex
    }

    /// The copy's name after its stem: the original's, or `plugin.so`
    /// for one too long to fit a name's 255 bytes beside the stem.
    private static func fileName(_ path: String) -> String {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        return name.utf8.count <= 200 ? name : "plugin.so"
    }

    /// The names in `folder` but `.` and `..` (and any that is not UTF-8:
    /// none of this folder's own), or `nil` when it cannot be listed.
    private static func entries(of folder: String) -> [String]? {
        guard let fd = try? Syscalls.openFolder(folder) else { return nil }
        defer { Syscalls.close(fd) }
        return (try? Syscalls.directoryEntries(in: fd))?.filter(\.isUTF8).map(\.name)
    }

    /// Removes the file or folder at `path`, and what it holds down to
    /// `depth` levels (a temporary snapshot folder has two).
    static func remove(_ path: String, depth: Int = 3) {
        do throws(SystemError) {
            try Syscalls.unlink(path)
            return
        } catch {
            if error == .noEntry { return }
        }
        guard depth > 0 else { return }
        try? Syscalls.changeMode(path, to: 0o700)  // a folder marked replaced is read-only
        for entry in entries(of: path) ?? [] { remove(path + "/" + entry, depth: depth - 1) }
        try? Syscalls.removeFolder(path)
    }

    private static func unreadable(_ error: SystemError) -> CurfewError {
        CurfewError(.unreadable, "Cannot be read to copy it: \(error.message).")
    }

    private static func unwritable(_ folder: String, _ error: SystemError) -> CurfewError {
        CurfewError(.unreadable, "Cannot be copied into \(folder): \(error.message).")
    }
}

/// Folders this process removes (one level deep) when it exits.
enum TemporaryFolders {
    private static let folders = Mutex<[String]?>(nil)

    static func removeAtExit(_ folder: String) {
        let first = folders.withLock { folders in
            defer { folders = (folders ?? []) + [folder] }
            return folders == nil
        }
        if first {
            Syscalls.atExit {
                for folder in TemporaryFolders.folders.withLock({ $0 ?? [] }) { PluginSnapshots.remove(folder) }
            }
        }
    }
}
