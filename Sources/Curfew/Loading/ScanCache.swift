import CurfewFormats
import Dispatch
import Synchronization
import _CurfewShims

/// Scan results by (real path, size, times, device, inode, host ABI), one
/// JSON file per plugin folder: a lookup reads only the shard of the file's
/// own folder, and a miss rewrites only that shard, so what a scan costs
/// does not grow with the plugins other folders have cached.
package struct ScanCache: Sendable {
    /// A file as it is now: replaced, rewritten or touched, it is another key.
    package struct Key: Hashable {
        let path: String
        let size: Int64
        let mtime: Int64
        let ctime: Int64
        let device: UInt64
        let inode: UInt64
    }

    /// One folder's results, by real path (one entry a path).
    private struct Shard: Sendable {
        var entries: [String: (key: Key, result: FileResult)] = [:]
        var changed = false
        /// Paths stored by this scan: their files were just there.
        var stored = Set<String>()
    }

    /// The cache folder, or `nil` for no cache.
    let folder: String?
    /// Shards read so far, by shard file name.
    private var shards: [String: Shard] = [:]
    /// The folder of the last file looked up and its shard's name: a scan
    /// looks up a folder's files one after another.
    private var lastFolder: (path: Substring, name: String)?

    /// The largest shard read.
    static let maximumBytes = 16 << 20
    /// The shards' format: one of another version is not read (3: jobs carry their background modes).
    static let version = 3

    /// - Parameter folder: The cache folder. It must be this user's and
    ///   writable by nobody else (it is made so, mode 700, if missing), and
    ///   each shard too; otherwise there is no cache: whoever can write it
    ///   decides what the cache vouches for.
    init(folder: String?) {
        self.folder = folder.flatMap { folder in
            guard folder.hasPrefix("/") else { return nil }
            return (try? PrivateFolder.prepare(folder, what: "the scan cache", code: .unreadable)) != nil ? folder : nil
        }
    }

    /// The shard file (a name in the cache folder) for the file at real path
    /// `path`: its folder's path, hashed (FNV-1a, 64 bits). Folders whose
    /// hashes collide share a shard; entries keep their whole paths.
    static func shardName(for path: String) -> String {
        shardName(folder: folder(of: path))
    }

    private static func folder(of path: String) -> Substring {
        Substring(path.utf8.lastIndex(of: UInt8(ascii: "/")).map { path.utf8[..<$0] } ?? path.utf8[...])
    }

    private static func shardName(folder: Substring) -> String {
        var hash = FNV1a()
        hash.add(folder.utf8)
        return hash.hex + ".json"
    }

    /// The shard file name for `path`, as ``shardName(for:)``, computed once
    /// for the files of one folder in a row.
    private mutating func cachedShardName(for path: String) -> String {
        let folder = Self.folder(of: path)
        // Bytes, as the name hashes them (`==` would match another normalization).
        if let lastFolder, lastFolder.path.utf8.elementsEqual(folder.utf8) { return lastFolder.name }
        let name = Self.shardName(folder: folder)
        lastFolder = (folder, name)
        return name
    }

    /// The key of a file as it is now, or `nil` when it cannot be read.
    package static func key(for file: String) -> Key? {
        guard let real = Syscalls.realPath(file), let status = try? Syscalls.fileStatus(real) else { return nil }
        return key(real: real, status: status)
    }

    /// The key of the file at real path `real`, whose status is `status`.
    static func key(real: String, status: Syscalls.FileStatus) -> Key {
        Key(
            path: real, size: status.size, mtime: status.modified, ctime: status.changed, device: status.device,
            inode: status.inode)
    }

    mutating func lookup(_ key: Key) -> FileResult? {
        guard let entry = shard(for: key.path)?.entries[key.path], entry.key == key else { return nil }
        return entry.result
    }

    mutating func store(_ key: Key, _ result: FileResult) {
        let name = cachedShardName(for: key.path)
        guard shard(for: key.path) != nil else { return }
        // One entry per path: a changed file replaces its old result.
        shards[name]!.entries[key.path] = (key, result)
        shards[name]!.changed = true
        shards[name]!.stored.insert(key.path)
    }

    /// Reads now the shards of the files at real paths `paths`, each once.
    mutating func load(shardsOf paths: [String]) {
        for path in paths { _ = shard(for: path) }
    }

    /// Reads the shards of the files at real paths `paths` on a thread of
    /// its own, while the caller works on. The closure returned waits for
    /// it and gives this cache with them read (it reads them itself when no
    /// thread could start).
    func loading(shardsOf paths: [String]) -> () -> ScanCache {
        let before = self
        let read = { @Sendable () -> ScanCache in
            var cache = before
            cache.load(shardsOf: paths)
            return cache
        }
        guard !paths.isEmpty else { return { before } }
        let done = DispatchSemaphore(value: 0)
        let loaded = Mutex<ScanCache?>(nil)
        guard OSThread.detach({
            let cache = read()
            loaded.withLock { $0 = cache }
            done.signal()
        }) else { return read }
        return {
            done.wait()
            return loaded.withLock { $0 } ?? before
        }
    }

    /// Writes the shards that changed, forgetting their files that are
    /// gone: the real paths forgotten.
    @discardableResult
    func save() -> [String] {
        guard let folder else { return [] }
        var forgotten: [String] = []
        for (name, shard) in shards where shard.changed {
            var entries: [(key: Key, result: FileResult)] = []
            for entry in shard.entries.values {
                if shard.stored.contains(entry.key.path) || Syscalls.exists(entry.key.path) {
                    entries.append(entry)
                } else {
                    forgotten.append(entry.key.path)
                }
            }
            entries.sort { Syscalls.bytesPrecede($0.key.path, $1.key.path) }
            // Appended in place: one string, not one per entry joined.
            var text = "{\"version\":\(Self.version),\"abi\":\(PluginLoader.abiVersion),\"entries\":[\n"
            for (index, (key, result)) in entries.enumerated() {
                text += index == 0 ? "{\"path\":" : ",\n{\"path\":"
                JSONLine.append(quoted: key.path, to: &text)
                text += ",\"size\":" + String(key.size) + ",\"mtime\":" + String(key.mtime) + ",\"ctime\":" + String(key.ctime)
                text += ",\"device\":" + String(Int64(bitPattern: key.device)) + ",\"inode\":" + String(Int64(bitPattern: key.inode))
                text += ",\"result\":" + result.message(file: nil) + "}"
            }
            text += "\n]}\n"
            Self.replace(folder + "/" + name, with: Array(text.utf8))
        }
        return forgotten
    }

    /// The shard `path` belongs to, read on first need; `nil` with no cache.
    private mutating func shard(for path: String) -> Shard? {
        guard let folder else { return nil }
        let name = cachedShardName(for: path)
        if let shard = shards[name] { return shard }
        let shard = Self.readOwnFile(folder + "/" + name).map(Self.parse) ?? Shard()
        shards[name] = shard
        return shard
    }

    private static func parse(_ bytes: [UInt8]) -> Shard {
        (try? entries(ofShard: bytes)).map { Shard(entries: $0) } ?? Shard()
    }

    /// A shard's entries by path: none when it is not JSON, or of another
    /// version or ABI; an entry that does not read right is no entry. Read
    /// a value at a time, straight into keys and results: a tree of the
    /// whole text, built, converted and freed, was a sixth of a cached
    /// list's time.
    static func entries(ofShard bytes: [UInt8]) throws(JSONSyntaxError) -> [String: (key: Key, result: FileResult)] {
        var reader = JSONReader(bytes)
        var version: Int64?
        var abi: Double?
        var entries: [String: (key: Key, result: FileResult)]?
        try reader.readObject { reader, member throws(JSONSyntaxError) in
            switch (member, reader.nextKind()) {
            case ("version", .number): version = try reader.readInteger()
            case ("abi", .number): abi = try reader.readDouble()
            case ("entries", .array):
                var read: [String: (key: Key, result: FileResult)] = [:]
                // Room for as many entries as a shard of this size holds, about.
                read.reserveCapacity(bytes.count / 256)
                try reader.readArray { reader throws(JSONSyntaxError) in
                    if let entry = try Self.entry(&reader) { read[entry.key.path] = entry }
                }
                entries = read
            default: break  // skipped
            }
        }
        try reader.finish()
        guard version == Int64(Self.version), abi == Double(PluginLoader.abiVersion), let entries else { return [:] }
        return entries
    }

    /// One entry of a shard, or `nil` when it does not read right.
    private static func entry(_ reader: inout JSONReader) throws(JSONSyntaxError) -> (key: Key, result: FileResult)? {
        var path: String?
        var (size, mtime, ctime, device, inode): (Int64?, Int64?, Int64?, Int64?, Int64?)
        var result: (result: FileResult, type: String?, file: String?)?
        let object = try reader.readObjectIfOne { reader, member, kind throws(JSONSyntaxError) in
            switch member {
            case "path" where kind == .string: path = try reader.readString()
            case "size" where kind == .number: size = try reader.readInteger()
            case "mtime" where kind == .number: mtime = try reader.readInteger()
            case "ctime" where kind == .number: ctime = try reader.readInteger()
            case "device" where kind == .number: device = try reader.readInteger()
            case "inode" where kind == .number: inode = try reader.readInteger()
            case "result": result = try FileResult.read(&reader)
            default: break  // skipped
            }
        }
        guard object, let path, let size, let mtime, let ctime, let device, let inode, let result, result.type == "scanned" || result.type == "rejected"
        else { return nil }
        let key = Key(path: path, size: size, mtime: mtime, ctime: ctime, device: UInt64(bitPattern: device), inode: UInt64(bitPattern: inode))
        return (key, result.result)
    }

    /// Writes a new file (never one that exists, never through a symlink)
    /// and renames it over `path`: readers never see half a shard.
    private static func replace(_ path: String, with bytes: [UInt8]) {
        for attempt in 0..<8 {
            let temporary = path + ".\(Syscalls.processID).\(UInt32.random(in: .min ... .max)).\(attempt).tmp"
            let fd: Int32
            do throws(SystemError) {
                fd = try Syscalls.open(temporary, .write, [.create, .exclusive, .noFollow], permissions: 0o600)
            } catch {
                if error == .exists { continue }
                return
            }
            let written = bytes.withUnsafeBytes { Syscalls.writeAll(fd, $0) }
            Syscalls.close(fd)
            if written == bytes.count && (try? Syscalls.rename(temporary, to: path)) != nil { return }
            try? Syscalls.unlink(temporary)
            return
        }
    }

    /// The shard file, if it is a regular file of this user's that nobody
    /// else can write, of at most ``maximumBytes``.
    private static func readOwnFile(_ path: String) -> [UInt8]? {
        guard let fd = try? Syscalls.open(path, .read, [.noFollow, .nonBlocking]) else { return nil }
        defer { Syscalls.close(fd) }
        guard let info = try? Syscalls.status(of: fd), info.isRegular, info.owner == Syscalls.userID, info.mode & 0o022 == 0,
            info.size <= maximumBytes
        else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(info.size))
        let filled = bytes.withUnsafeMutableBytes { Syscalls.readFully(fd, into: $0) }
        return Array(bytes.prefix(filled))
    }
}
