import Glibc
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
        let base = getenv("TMPDIR").map { String(cString: $0) }.flatMap { $0.hasPrefix("/") ? $0 : nil } ?? "/tmp"
        var template = Array((base + "/curfew-snapshots-XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw CurfewError(.unreadable, "cannot make a snapshot folder in \(base): \(String(cString: strerror(errno)))")
        }
        let folder = String(cString: made)
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
            let source = open(key.path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
            guard source >= 0 else { throw Self.unreadable(errno) }
            defer { close(source) }
            guard let status = Self.status(source), status.st_mode & S_IFMT == S_IFREG else {
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
            close(temporary.fd)
            switch copied {
            case .copied:
                chmod(temporary.path, 0o500)
                let origin = Self.origin(inFile: temporary.path)
                if case .beyondFolder = origin {
                    unlink(temporary.path)
                    return inPlace("it finds libraries through a path from $ORIGIN, which a copy elsewhere would not")
                }
                guard case .beside(let names) = origin else {
                    // Another host may have made this version meanwhile: the
                    // same bytes, and whoever maps the one replaced keeps it.
                    guard rename(temporary.path, stem + "-" + name) == 0 else {
                        let error = errno
                        unlink(temporary.path)
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
                    unlink(temporary.path)
                    return inPlace(error.description)
                }
                guard rename(temporary.path, staging + "/" + name) == 0 else {
                    let error = errno
                    unlink(temporary.path)
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
                unlink(temporary.path)
                guard let now = Self.status(source) else { throw Self.unreadable(errno) }
                key = Self.key(key.path, now)
            case .failed(let error):
                unlink(temporary.path)
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
                let error = errno
                Self.remove(staging)
                throw Self.unwritable(folder, error)
            }
            Self.markReplaced(staging, isFolder: true)
            return
        }
        if rename(staging, stem) == 0 { return }
        let error = errno
        Self.remove(staging)
        // Another host made this version meanwhile: the same copies.
        guard error == ENOTEMPTY || error == EEXIST else { throw Self.unwritable(folder, error) }
    }

    /// Whether each library copied beside `name` in the version folder
    /// `stem` is still the one beside the original at `path` (same size,
    /// same modification time).
    private func neighboursAreCurrent(_ stem: String, _ name: String, of path: String) -> Bool {
        let source = Syscalls.folder(of: path)
        for entry in Self.entries(of: stem) ?? [] where entry != name {
            var copy = stat()
            var original = stat()
            guard lstat(stem + "/" + entry, &copy) == 0, stat(source + "/" + entry, &original) == 0,
                original.st_mode & S_IFMT == S_IFREG, original.st_size == copy.st_size,
                original.st_mtim.tv_sec == copy.st_mtim.tv_sec, original.st_mtim.tv_nsec == copy.st_mtim.tv_nsec
            else { return false }
        }
        return true
    }

    /// A new file `.new-XXXXXX` in the folder, open for writing.
    private func makeTemporaryFile() throws(CurfewError) -> (path: String, fd: Int32) {
        var template = Array((folder + "/" + Self.stagingPrefix + "XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { curfew_shim_make_temporary($0.baseAddress!) }
        guard fd >= 0 else { throw Self.unwritable(folder, errno) }
        return (template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }, fd)
    }

    /// A new folder `.new-XXXXXX` in the folder.
    private func makeTemporaryFolder() throws(CurfewError) -> String {
        var template = Array((folder + "/" + Self.stagingPrefix + "XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw Self.unwritable(folder, errno)
        }
        return String(cString: made)
    }

    /// What a copy in progress, or a version exchanged out, is called.
    private static let stagingPrefix = ".new-"

    /// Marks, and later removes, in one listing of the folder: the
    /// versions of the files at real paths `gone`, and those of the files
    /// `current` describes other than theirs. A version is marked replaced
    /// (made read-only to its owner too, which stamps its ctime) when first
    /// seen so, and removed ``keptAfterReplaced`` later; so is what a host
    /// that died left half copied.
    func sweep(current: [ScanCache.Key], gone: [String], now: Int64 = Int64(time(nil))) {
        let kept = Set(current.map(Self.stem))
        let swept = Set(current.map { Self.hash($0.path) }).union(gone.map(Self.hash))
        guard !swept.isEmpty, let entries = Self.entries(of: folder) else { return }
        for entry in entries {
            let path = folder + "/" + entry
            var info = stat()
            guard lstat(path, &info) == 0 else { continue }
            let isFolder = info.st_mode & S_IFMT == S_IFDIR
            let (age, overflow) = now.subtractingReportingOverflow(Int64(info.st_ctim.tv_sec))
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
    private static func isMarkedReplaced(_ info: stat) -> Bool {
        info.st_mode & 0o777 == (info.st_mode & S_IFMT == S_IFDIR ? 0o500 : 0o400)
    }

    private static func markReplaced(_ path: String, isFolder: Bool) {
        chmod(path, isFolder ? 0o500 : 0o400)
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
                let fd = open(source + "/" + library, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
                guard fd >= 0 else { throw Self.neighbourError(library, errno) }
                defer { close(fd) }
                guard let status = Self.status(fd), status.st_mode & S_IFMT == S_IFREG else { continue }
                let target = open(staging + "/" + library, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o500)
                guard target >= 0 else { throw Self.unwritable(folder, errno) }
                var times = [status.st_atim, status.st_mtim]
                let result = Self.copy(fd, as: status, to: target)
                let stamped = futimens(target, &times) == 0
                close(target)
                switch result {
                case .copied where stamped: break
                case .copied, .failed: throw Self.neighbourError(library, errno)
                case .changed: throw CurfewError(.unreadable, "The library \(library) beside it changed while it was being copied.")
                }
                if case .beside(let more) = Self.origin(inFile: staging + "/" + library) { pending.append(more) }
            }
        }
    }

    private static func neighbourError(_ library: String, _ error: Int32) -> CurfewError {
        CurfewError(.unreadable, "The library \(library) beside it cannot be copied: \(String(cString: strerror(error))).")
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
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return .none }
        defer { close(fd) }
        guard let status = status(fd), status.st_size > 0, let size = Int(exactly: status.st_size) else { return .none }
        // Our own copy, which nobody else can change: mapping it is safe.
        guard let mapped = mmap(nil, size, PROT_READ, MAP_PRIVATE, fd, 0), mapped != MAP_FAILED else { return .none }
        defer { munmap(mapped, size) }
        let bytes = UnsafeRawBufferPointer(start: mapped, count: size)
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
        case failed(Int32)
    }

    /// Copies the open file `source`, whose status was `before`, to the
    /// open, empty file `target`.
    private static func copy(_ source: Int32, as before: stat, to target: Int32) -> Copy {
        var copied: Int64 = 0
        var offset: Int64 = 0
        var inKernel = true
        var buffer: [UInt8] = []
        while true {
            var count: Int
            if inKernel {
                count = Syscalls.retryingEINTR { curfew_shim_copy_file_range(source, &offset, target, 1 << 30) }
                if count < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP) && copied == 0 {
                    inKernel = false
                    continue
                }
            } else {
                if buffer.isEmpty { buffer = [UInt8](repeating: 0, count: 1 << 16) }
                count = buffer.withUnsafeMutableBytes { bytes in Syscalls.retryingEINTR { pread(source, bytes.baseAddress, bytes.count, off_t(offset)) } }
                if count > 0 {
                    errno = 0
                    let written = buffer.withUnsafeBytes { Syscalls.writeAll(target, UnsafeRawBufferPointer(rebasing: $0[..<count])) }
                    if written < count { return .failed(errno != 0 ? errno : ENOSPC) }
                    offset += Int64(count)
                }
            }
            if count < 0 { return .failed(errno) }
            if count == 0 { break }
            copied += Int64(count)
        }
        guard let after = status(source), copied == Int64(before.st_size), after.st_size == before.st_size,
            after.st_mtim.tv_sec == before.st_mtim.tv_sec, after.st_mtim.tv_nsec == before.st_mtim.tv_nsec,
            after.st_ctim.tv_sec == before.st_ctim.tv_sec, after.st_ctim.tv_nsec == before.st_ctim.tv_nsec
        else { return .changed }
        return .copied
    }

    /// Whether `path` is a regular file of `size` bytes (a version's copy,
    /// which no one but this user can have changed).
    private static func holds(_ path: String, size: Int64) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFREG && Int64(info.st_size) == size
    }

    private static func status(_ fd: Int32) -> stat? {
        var info = stat()
        return fstat(fd, &info) == 0 ? info : nil
    }

    private static func key(_ path: String, _ info: stat) -> ScanCache.Key {
        ScanCache.Key(
            path: path, size: Int64(info.st_size), mtime: Syscalls.nanoseconds(info.st_mtim),
            ctime: Syscalls.nanoseconds(info.st_ctim), device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
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
        defer { close(fd) }
        return (try? Syscalls.directoryEntries(in: fd))?.filter(\.isUTF8).map(\.name)
    }

    /// Removes the file or folder at `path`, and what it holds down to
    /// `depth` levels (a temporary snapshot folder has two).
    static func remove(_ path: String, depth: Int = 3) {
        if unlink(path) == 0 || errno == ENOENT { return }
        guard depth > 0 else { return }
        chmod(path, 0o700)  // a folder marked replaced is read-only
        for entry in entries(of: path) ?? [] { remove(path + "/" + entry, depth: depth - 1) }
        rmdir(path)
    }

    private static func unreadable(_ error: Int32) -> CurfewError {
        CurfewError(.unreadable, "Cannot be read to copy it: \(String(cString: strerror(error))).")
    }

    private static func unwritable(_ folder: String, _ error: Int32) -> CurfewError {
        CurfewError(.unreadable, "Cannot be copied into \(folder): \(String(cString: strerror(error))).")
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
            atexit {
                for folder in TemporaryFolders.folders.withLock({ $0 ?? [] }) { PluginSnapshots.remove(folder) }
            }
        }
    }
}
