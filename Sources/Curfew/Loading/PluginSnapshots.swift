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
/// beside the original copied in beside it.
struct PluginSnapshots: Sendable {
    /// The folder the versions live in: this user's, writable by nobody else.
    let folder: String

    /// How long a version is kept once a newer version of its file is
    /// taken: a host that has not seen the change yet may still start a
    /// worker on it (a served folder is rescanned within a second of a change).
    static let keptAfterReplaced: Int64 = 600

    /// - Throws: Why `folder` cannot hold snapshots: it is not this user's
    ///   alone, or it lies on a file system mounted `noexec`, where no code
    ///   can be mapped from it.
    init(folder: String) throws(CurfewError) {
        try PrivateFolder.prepare(folder, what: "the snapshot folder", code: .unreadable)
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

    /// A snapshot: where its copy is, and the key of the bytes copied (the
    /// file's key when it was copied, which may be newer than the caller's).
    struct Taken: Equatable {
        let path: String
        let key: ScanCache.Key
    }

    /// The snapshot of the file `key` describes (`key.path` is a real
    /// path), copied now unless this version was copied before.
    ///
    /// - Throws: Why the file cannot be copied: it cannot be read, or it
    ///   changed during each of three copies (a file being written).
    func take(_ key: ScanCache.Key) throws(CurfewError) -> Taken {
        var key = key
        let name = Self.fileName(key.path)
        for _ in 0..<3 {
            let stem = folder + "/" + Self.stem(key)
            for path in [stem + "-" + name, stem + "/" + name] where Self.holds(path, size: key.size) {
                return Taken(path: path, key: key)
            }
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
            let temporary = try makeTemporary { path in mkstemps(path, 0) }
            let target = open(temporary, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
            let copied = target >= 0 ? Self.copy(source, as: status, to: target) : .failed(errno)
            if target >= 0 { close(target) }
            switch copied {
            case .copied:
                chmod(temporary, 0o500)
                // Another host may have made this version meanwhile: the same
                // bytes, and whoever maps the one replaced keeps it.
                guard Self.libraryNames(inFileUsingOrigin: temporary) != nil else {
                    guard rename(temporary, stem + "-" + name) == 0 else {
                        let error = errno
                        unlink(temporary)
                        throw Self.unwritable(folder, error)
                    }
                    return Taken(path: stem + "-" + name, key: key)
                }
                // `$ORIGIN` is the folder the copy is in: one of its own, with
                // the libraries it names from beside the original.
                let staging = try makeTemporary { path in mkdtemp(path) == nil ? -1 : 0 }
                guard rename(temporary, staging + "/" + name) == 0 else {
                    let error = errno
                    unlink(temporary)
                    Self.remove(staging)
                    throw Self.unwritable(folder, error)
                }
                copyNeighbours(of: name, from: Self.folder(of: key.path), into: staging)
                if rename(staging, stem) != 0 { Self.remove(staging) }
                return Taken(path: stem + "/" + name, key: key)
            case .changed:
                unlink(temporary)
                guard let now = Self.status(source) else { throw Self.unreadable(errno) }
                key = Self.key(key.path, now)
            case .failed(let error):
                unlink(temporary)
                throw Self.unwritable(folder, error)
            }
        }
        throw CurfewError(
            .unreadable, "It changed while it was being copied, three times: it is loaded once it stops changing.")
    }

    /// A new file or folder `.new-XXXXXX` in the folder, made by `make`
    /// (mkstemps or mkdtemp, given the template to fill in): its path.
    private func makeTemporary(_ make: (UnsafeMutablePointer<CChar>) -> Int32) throws(CurfewError) -> String {
        var template = Array((folder + "/" + Self.stagingPrefix + "XXXXXX").utf8CString)
        let made = template.withUnsafeMutableBufferPointer { make($0.baseAddress!) }
        guard made >= 0 else { throw Self.unwritable(folder, errno) }
        if made > 0 { close(made) }
        return String(cString: template)
    }

    /// What a copy in progress is called.
    private static let stagingPrefix = ".new-"

    /// Removes, in one listing of the folder, every version of the files at
    /// real paths `gone`; the versions of the files `current` describes
    /// other than theirs, once older than ``keptAfterReplaced``; and, as
    /// old, what a host that died left half copied.
    func sweep(current: [ScanCache.Key], gone: [String]) {
        let kept = Set(current.map(Self.stem))
        let replaced = Set(current.map { Self.hash($0.path) })
        let removed = Set(gone.map(Self.hash))
        guard !(replaced.isEmpty && removed.isEmpty), let entries = Self.entries(of: folder) else { return }
        let now = Int64(time(nil))
        func old(_ path: String) -> Bool {
            var info = stat()
            return lstat(path, &info) == 0 && now - Int64(info.st_mtim.tv_sec) > Self.keptAfterReplaced
        }
        for entry in entries {
            let path = folder + "/" + entry
            if entry.hasPrefix(Self.stagingPrefix) {
                if old(path) { Self.remove(path) }
                continue
            }
            // `<path hash>-<version hash>`, then `-<name>` or nothing (a folder).
            guard entry.utf8.count >= 33 else { continue }
            let pathHash = String(entry.prefix(16))
            if removed.contains(pathHash) {
                Self.remove(path)
            } else if replaced.contains(pathHash) && !kept.contains(String(entry.prefix(33))) && old(path) {
                Self.remove(path)
            }
        }
    }

    /// Copies into `staging` each library that the copy `name` there (or a
    /// library copied for it) names and finds through `$ORIGIN`, and that
    /// lies as a regular file in `source`, the original's folder.
    private func copyNeighbours(of name: String, from source: String, into staging: String) {
        var copied: Set<String> = [name]
        var pending = [name]
        var present: Set<String>?
        while let next = pending.popLast() {
            guard let names = Self.libraryNames(inFileUsingOrigin: staging + "/" + next) else { continue }
            if present == nil { present = Set(Self.entries(of: source) ?? []) }
            for library in names.sorted() where !copied.contains(library) && present!.contains(library) {
                copied.insert(library)
                let fd = open(source + "/" + library, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
                guard fd >= 0 else { continue }
                defer { close(fd) }
                let target = open(staging + "/" + library, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o500)
                guard target >= 0 else { continue }
                defer { close(target) }
                guard let status = Self.status(fd), status.st_mode & S_IFMT == S_IFREG, case .copied = Self.copy(fd, as: status, to: target)
                else { continue }
                pending.append(library)
            }
        }
    }

    /// The names of libraries (NUL-terminated strings with `.so` and no
    /// slash, up to 255 bytes) in the file at `path`, when it mentions
    /// `$ORIGIN`; `nil` when it does not. One pass over its bytes: the
    /// dynamic section's names are among them, and a name that is not one
    /// only costs a copy if a file of that name lies beside the plugin.
    static func libraryNames(inFileUsingOrigin path: String) -> Set<String>? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        guard let status = status(fd), status.st_size > 0, let size = Int(exactly: status.st_size) else { return nil }
        // Our own copy, which nobody else can change: mapping it is safe.
        guard let mapped = mmap(nil, size, PROT_READ, MAP_PRIVATE, fd, 0), mapped != MAP_FAILED else { return nil }
        defer { munmap(mapped, size) }
        let bytes = UnsafeRawBufferPointer(start: mapped, count: size)
        guard contains(bytes, "$ORIGIN") || contains(bytes, "${ORIGIN}") else { return nil }
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
        return names
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
                count = curfew_shim_copy_file_range(source, &offset, target, 1 << 30)
                if count < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP) && copied == 0 {
                    inKernel = false
                    continue
                }
            } else {
                if buffer.isEmpty { buffer = [UInt8](repeating: 0, count: 1 << 16) }
                count = buffer.withUnsafeMutableBytes { pread(source, $0.baseAddress, $0.count, off_t(offset)) }
                if count > 0 {
                    var written = 0
                    while written < count {
                        let step = buffer.withUnsafeBytes { write(target, $0.baseAddress! + written, count - written) }
                        if step < 0 && errno == EINTR { continue }
                        if step <= 0 { return .failed(step < 0 ? errno : ENOSPC) }
                        written += step
                    }
                    offset += Int64(count)
                }
            }
            if count < 0 && errno == EINTR { continue }
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

    private static func fileName(_ path: String) -> String {
        path.split(separator: "/").last.map(String.init) ?? path
    }

    private static func folder(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// The names in `folder` but `.` and `..`, or `nil` when it cannot be listed.
    private static func entries(of folder: String) -> [String]? {
        guard let fd = try? Syscalls.openFolder(folder) else { return nil }
        defer { close(fd) }
        return (try? Syscalls.directoryEntries(in: fd))?.map(\.name)
    }

    /// Removes the file or folder at `path`, and what it holds down to
    /// `depth` levels (a snapshot folder has three).
    static func remove(_ path: String, depth: Int = 3) {
        if unlink(path) == 0 || errno == ENOENT { return }
        guard depth > 0 else { return }
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
