import CurfewFormats
import Glibc
import _CurfewShims

/// Scan results by (real path, size, mtime, host ABI), in one JSON file.
struct ScanCache {
    /// A file as it is now: replaced, rewritten or touched, it is another key.
    struct Key: Hashable {
        let path: String
        let size: Int64
        let mtime: Int64
        let ctime: Int64
        let device: UInt64
        let inode: UInt64
    }

    let path: String?
    private var entries: [Key: FileResult] = [:]
    private var changed = false

    /// The largest cache file read.
    static let maximumBytes = 16 << 20

    /// - Parameter path: The cache file. Its folder must be this user's and
    ///   writable by nobody else (it is made so, mode 700, if missing), and
    ///   the file too; otherwise there is no cache: whoever can write it
    ///   decides what the cache vouches for.
    init(path: String?) {
        self.path = path.flatMap { Self.prepareFolder(of: $0) ? $0 : nil }
        guard let path = self.path, let bytes = Self.readOwnFile(path), let root = try? JSONReader.parse(bytes),
            root["abi"]?.numberValue == Double(PluginLoader.abiVersion), case .array(let list)? = root["entries"]
        else { return }
        for entry in list {
            guard let file = entry["path"]?.stringValue, let size = entry["size"]?.integerValue,
                let mtime = entry["mtime"]?.integerValue, let ctime = entry["ctime"]?.integerValue,
                let device = entry["device"]?.integerValue, let inode = entry["inode"]?.integerValue,
                let result = entry["result"], let type = result["type"]?.stringValue, type == "scanned" || type == "rejected"
            else { continue }  // an entry that does not read right is no entry
            let key = Key(path: file, size: size, mtime: mtime, ctime: ctime, device: UInt64(bitPattern: device), inode: UInt64(bitPattern: inode))
            entries[key] = FileResult(message: result)
        }
    }

    /// The key of a file as it is now, or `nil` when it cannot be read.
    static func key(for file: String) -> Key? {
        guard let real = Syscalls.realPath(file), let status = try? Syscalls.fileStatus(real) else { return nil }
        return Key(
            path: real, size: status.size, mtime: status.modified, ctime: status.changed, device: status.device,
            inode: status.inode)
    }

    func lookup(_ key: Key) -> FileResult? { entries[key] }

    mutating func store(_ key: Key, _ result: FileResult) {
        // One entry per path: a changed file replaces its old result.
        entries = entries.filter { $0.key.path != key.path }
        entries[key] = result
        changed = true
    }

    func save() {
        guard changed, let path else { return }
        // Forget files that are gone.
        let entries = entries.filter { access($0.key.path, F_OK) == 0 }
        let lines = entries.sorted { $0.key.path < $1.key.path }.map { key, result in
            "{\"path\":\(JSONLine.quote(key.path)),\"size\":\(key.size),\"mtime\":\(key.mtime),\"ctime\":\(key.ctime),"
                + "\"device\":\(Int64(bitPattern: key.device)),\"inode\":\(Int64(bitPattern: key.inode)),\"result\":\(result.message(file: key.path))}"
        }
        let text = "{\"version\":1,\"abi\":\(PluginLoader.abiVersion),\"entries\":[\n" + lines.joined(separator: ",\n") + "\n]}\n"
        // Write a new file (never one that exists, never through a symlink) and
        // rename it over the cache: readers never see half a cache.
        let bytes = Array(text.utf8)
        for attempt in 0..<8 {
            let temporary = path + ".\(getpid()).\(UInt32.random(in: .min ... .max)).\(attempt).tmp"
            let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            if fd < 0 {
                if errno == EEXIST { continue }
                return
            }
            var offset = 0
            while offset < bytes.count {
                let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, bytes.count - offset) }
                if written < 0 && errno == EINTR { continue }
                if written <= 0 { break }
                offset += written
            }
            close(fd)
            if offset == bytes.count && rename(temporary, path) == 0 { return }
            unlink(temporary)
            return
        }
    }

    /// Makes the cache's folder (mode 700) if missing, and says whether it is
    /// safe to use: a real folder (not a symlink), this user's, writable by
    /// nobody else.
    private static func prepareFolder(of path: String) -> Bool {
        guard let slash = path.lastIndex(of: "/"), path.hasPrefix("/") else { return false }
        let folder = String(path[..<slash])
        var current = ""
        for component in folder.split(separator: "/") {
            current += "/" + component
            mkdir(current, 0o700)
        }
        var info = stat()
        guard lstat(folder, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else { return false }
        return info.st_uid == geteuid() && info.st_mode & 0o022 == 0
    }

    /// The cache file, if it is a regular file of this user's that nobody
    /// else can write, of at most ``maximumBytes``.
    private static func readOwnFile(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid(), info.st_mode & 0o022 == 0,
            info.st_size <= maximumBytes
        else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        var filled = 0
        while filled < bytes.count {
            let count = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + filled, $0.count - filled) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            filled += count
        }
        return Array(bytes.prefix(filled))
    }
}
