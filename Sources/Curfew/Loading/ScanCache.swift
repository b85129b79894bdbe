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

    init(path: String?) {
        self.path = path
        guard let path, let bytes = try? Syscalls.readFile(path, limit: 64 << 20), let root = try? JSONReader.parse(bytes),
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
        let folder = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
        var current = ""
        for component in folder.split(separator: "/") {
            current += "/" + component
            mkdir(current, 0o700)
        }
        let lines = entries.sorted { $0.key.path < $1.key.path }.map { key, result in
            "{\"path\":\(JSONLine.quote(key.path)),\"size\":\(key.size),\"mtime\":\(key.mtime),\"ctime\":\(key.ctime),"
                + "\"device\":\(Int64(bitPattern: key.device)),\"inode\":\(Int64(bitPattern: key.inode)),\"result\":\(result.message(file: key.path))}"
        }
        let text = "{\"version\":1,\"abi\":\(PluginLoader.abiVersion),\"entries\":[\n" + lines.joined(separator: ",\n") + "\n]}\n"
        // Write a temporary file and rename it over the cache: readers never see half a cache.
        let temporary = path + ".\(getpid()).tmp"
        guard let file = fopen(temporary, "w") else { return }
        let bytes = Array(text.utf8)
        let written = fwrite(bytes, 1, bytes.count, file)
        fclose(file)
        if written == bytes.count { rename(temporary, path) } else { unlink(temporary) }
    }
}
