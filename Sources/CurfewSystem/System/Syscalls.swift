// The seam to libc and libdl, and the one place that retries EINTR: a call
// that a signal can interrupt goes through `retryingEINTR` or one of the
// loops here (PackageLayoutTests fails on an EINTR outside this file). Only
// this target imports Glibc (PackageLayoutTests again): every other target
// reaches the system through these wrappers and their neighbours (Files,
// Sockets, Inotify, ProcessCalls).
import Glibc
import _CurfewShims

/// An errno value with its text.
package struct SystemError: Error {
    package let errno: Int32
    package var message: String { String(cString: strerror(errno)) }

    package init(errno: Int32) { self.errno = errno }
}

/// The seam between the host and libc/libdl: thin wrappers that retry
/// `EINTR` and turn `errno` into ``SystemError``.
///
/// - Important: Nothing here traps on a failed call; callers decide.
package enum Syscalls {
    /// Where a `dirent`'s name begins.
    private static let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!
    /// What `stat` says of a file, following symlinks.
    package struct FileStatus {
        package var isDirectory: Bool
        package var isRegular: Bool
        package var isSymlink: Bool
        package var isSocket: Bool
        package var size: Int64
        /// Hard links to the file.
        package var links: UInt64
        /// Permission bits.
        package var mode: UInt32
        package var owner: UInt32
        /// Access, modification and change times, in nanoseconds.
        package var accessed: Int64
        package var modified: Int64
        package var changed: Int64
        package var device: UInt64
        package var inode: UInt64
    }

    package static func fileStatus(_ path: String) throws(SystemError) -> FileStatus {
        try fileStatus(path, in: AT_FDCWD)
    }

    /// As ``fileStatus(_:)`` for the entry `name` of the folder open as
    /// `folder`: the kernel walks one name, not the whole path again.
    package static func fileStatus(_ name: String, in folder: Int32) throws(SystemError) -> FileStatus {
        var info = Glibc.stat()
        guard fstatat(folder, name, &info, 0) == 0 else { throw SystemError(errno: errno) }
        return FileStatus(info)
    }

    /// A file time in nanoseconds since 1970, saturated: a file may be dated
    /// before 1678 or after 2262, beyond what 64 bits of nanoseconds hold.
    package static func nanoseconds(_ time: timespec) -> Int64 {
        let (scaled, overflow) = Int64(time.tv_sec).multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return time.tv_sec < 0 ? .min : .max }
        return scaled.addingReportingOverflow(Int64(time.tv_nsec)).overflow ? .max : scaled + Int64(time.tv_nsec)
    }

    /// Up to `count` bytes from the start of a file, in one pass. The
    /// buffer starts at 16 KiB at most and grows as it fills, so a generous
    /// `count` (a `/proc` file says it is empty: its size is no bound) costs
    /// only what the file holds.
    package static func readPrefix(_ path: String, count: Int) throws(SystemError) -> [UInt8] {
        let fd = retryingEINTR { Glibc.open(path, O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else { throw SystemError(errno: errno) }
        defer { Glibc.close(fd) }
        let count = max(count, 0)
        var buffer = [UInt8](repeating: 0, count: min(count, 16 << 10))
        var filled = 0
        while filled < count {
            if filled == buffer.count {
                buffer += [UInt8](repeating: 0, count: min(count, buffer.count * 4) - buffer.count)
            }
            let n = buffer.withUnsafeMutableBytes { bytes in
                retryingEINTR { Glibc.read(fd, bytes.baseAddress! + filled, bytes.count - filled) }
            }
            if n < 0 { throw SystemError(errno: errno) }
            if n == 0 { break }
            filled += n
        }
        return Array(buffer.prefix(filled))
    }

    /// A whole file, up to `limit` bytes.
    package static func readFile(_ path: String, limit: Int = 1 << 20) throws(SystemError) -> [UInt8] {
        let info = try fileStatus(path)
        guard info.isRegular else { throw SystemError(errno: EISDIR) }
        guard info.size <= limit else { throw SystemError(errno: EFBIG) }
        return try readPrefix(path, count: max(Int(info.size), 1))
    }

    /// All of what reading `path` gives, to its end, whatever the file (a
    /// pipe, `/dev/stdin`); ``SystemError`` `EFBIG` past `limit` bytes.
    package static func readToEnd(_ path: String, limit: Int) throws(SystemError) -> [UInt8] {
        let bytes = try readPrefix(path, count: limit == .max ? limit : limit + 1)
        guard bytes.count <= limit else { throw SystemError(errno: EFBIG) }
        return bytes
    }

    /// `path`, opened (created 0600 when missing) to be locked and
    /// rewritten: never through a symlink, never inherited by a program the
    /// host starts. The caller closes it.
    package static func openLockFile(_ path: String) throws(SystemError) -> Int32 {
        let fd = retryingEINTR { Glibc.open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600) }
        guard fd >= 0 else { throw SystemError(errno: errno) }
        return fd
    }

    /// Takes `flock`'s exclusive lock on `fd` without waiting: `false`
    /// when another open file holds it. The kernel drops it when the last
    /// descriptor of that open file closes, the holder's death included.
    package static func tryExclusiveLock(_ fd: Int32) throws(SystemError) -> Bool {
        if retryingEINTR({ flock(fd, LOCK_EX | LOCK_NB) }) == 0 { return true }
        if errno == EWOULDBLOCK { return false }
        throw SystemError(errno: errno)
    }

    /// Replaces the contents of the open file `fd` with `bytes`.
    package static func rewrite(_ fd: Int32, with bytes: [UInt8]) throws(SystemError) {
        guard retryingEINTR({ ftruncate(fd, 0) }) == 0 else { throw SystemError(errno: errno) }
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { raw in
                retryingEINTR { pwrite(fd, raw.baseAddress! + written, raw.count - written, off_t(written)) }
            }
            guard n > 0 else { throw SystemError(errno: n < 0 ? errno : EIO) }
            written += n
        }
    }

    /// Up to `count` bytes from the start of the open file `fd`.
    package static func readPrefix(of fd: Int32, count: Int) throws(SystemError) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: max(count, 0))
        var filled = 0
        while filled < buffer.count {
            let n = buffer.withUnsafeMutableBytes { bytes in
                retryingEINTR { pread(fd, bytes.baseAddress! + filled, bytes.count - filled, off_t(filled)) }
            }
            if n < 0 { throw SystemError(errno: errno) }
            if n == 0 { break }
            filled += n
        }
        return Array(buffer.prefix(filled))
    }

    /// The folder at `path`, open to list it (``directoryEntries(in:)``) and
    /// read its entries' status (``fileStatus(_:in:)``). The caller closes it.
    package static func openFolder(_ path: String) throws(SystemError) -> Int32 {
        let fd = retryingEINTR { Glibc.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        guard fd >= 0 else { throw SystemError(errno: errno) }
        return fd
    }

    /// The entries of the open `folder`, without `.` and `..`, sorted
    /// bytewise by name, each with whether it is a regular file (`nil`: the
    /// entry does not say, as for a symlink; ask `fileStatus`). A name that
    /// is not UTF-8 is listed with U+FFFD in place of each bad sequence and
    /// `isUTF8` false: that text names no file.
    package static func directoryEntries(in folder: Int32) throws(SystemError) -> [(name: String, isRegular: Bool?, isUTF8: Bool)] {
        // The listing reads a copy of the descriptor, which it closes.
        let copy = fcntl(folder, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else { throw SystemError(errno: errno) }
        guard let dir = fdopendir(copy) else {
            let error = SystemError(errno: errno)
            Glibc.close(copy)
            throw error
        }
        defer { closedir(dir) }
        var entries: [(name: String, isRegular: Bool?, isUTF8: Bool)] = []
        while let entry = readdir(dir) {
            // The name in place: a record is only as long as its name, and a
            // copy of `d_name` (256 bytes) read past the end of the last one.
            let bytes = (UnsafeRawPointer(entry) + Self.nameOffset).assumingMemoryBound(to: CChar.self)
            let (name, isUTF8) = String(validatingCString: bytes).map { ($0, true) } ?? (String(cString: bytes), false)
            guard name != "." && name != ".." else { continue }
            let type = Int32(entry.pointee.d_type)
            entries.append((name, type == DT_REG ? true : type == DT_LNK || type == DT_UNKNOWN ? nil : false, isUTF8))
        }
        return entries.sorted { bytesPrecede($0.name, $1.name) }
    }

    /// Whether `a`'s UTF-8 bytes sort before `b`'s: compared with `memcmp`,
    /// not byte by byte through the generic sequence comparison.
    package static func bytesPrecede(_ a: String, _ b: String) -> Bool {
        let compared = a.utf8.withContiguousStorageIfAvailable { a in
            b.utf8.withContiguousStorageIfAvailable { b in
                let common = memcmp(a.baseAddress!, b.baseAddress!, min(a.count, b.count))
                return common != 0 ? common < 0 : a.count < b.count
            }
        }
        return (compared ?? nil) ?? a.utf8.lexicographicallyPrecedes(b.utf8)
    }

    /// Whether `path` is a symbolic link itself (`lstat`).
    package static func isSymlink(_ path: String) -> Bool {
        var info = Glibc.stat()
        return lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFLNK
    }

    /// The working directory, or `nil` when it cannot be read.
    package static func currentDirectory() -> String? {
        guard let path = getcwd(nil, 0) else { return nil }
        defer { free(path) }
        return String(cString: path)
    }

    /// The canonical absolute path, or `nil` when it cannot be resolved.
    /// The folder holding `path`: what comes before its last slash (`/`
    /// for a path right under the root, `.` for a bare name).
    package static func folder(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    package static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// A pipe, both ends close-on-exec from the start (`pipe2` through the
    /// shim: it is not visible through Glibc, and pipe + fcntl leaves a window
    /// in which a worker spawned by another thread inherits the ends).
    package static func pipe() throws(SystemError) -> [Int32] {
        var ends: [Int32] = [-1, -1]
        guard curfew_shim_pipe_cloexec(&ends) == 0 else { throw SystemError(errno: errno) }
        return ends
    }

    /// A worker's descriptors: a socket pair and two pipes (stdout, stderr),
    /// all close-on-exec; on failure, none is left open.
    package static func workerDescriptors() throws(SystemError) -> (channel: [Int32], out: [Int32], err: [Int32]) {
        let channel = try socketPair(.stream)
        do throws(SystemError) {
            let out = try pipe()
            do throws(SystemError) {
                return (channel, out, try pipe())
            } catch {
                out.forEach { Glibc.close($0) }
                throw error
            }
        } catch {
            channel.forEach { Glibc.close($0) }
            throw error
        }
    }

    /// This process's environment, as `NAME=value` strings.
    package static func environment() -> [String] {
        var entries: [String] = []
        var cursor = environ
        while let entry = cursor.pointee {
            entries.append(String(cString: entry))
            cursor += 1
        }
        return entries
    }

    /// The environment variable that tells a helper which process started
    /// it, so it can ask to die with that process and check it still lives.
    package static let parentVariable = CURFEW_PARENT_VARIABLE

    /// Starts a worker process (see `curfew_shim_spawn_worker`), from the
    /// ``Spawner`` thread, with ``parentVariable`` set to this process.
    package static func spawnWorker(
        _ path: String, arguments: [String], environment: [String], channel: Int32, out: Int32, err: Int32
    ) -> Result<pid_t, SystemError> {
        let environment = environment.filter { !$0.hasPrefix(parentVariable + "=") } + ["\(parentVariable)=\(getpid())"]
        return Spawner.run {
            func cStrings(_ strings: [String]) -> [UnsafeMutablePointer<CChar>?] { strings.map { strdup($0) } + [nil] }
            let argv = cStrings(arguments)
            let envp = cStrings(environment)
            defer { (argv + envp).forEach { free($0) } }
            var pid: Int32 = 0
            let status = curfew_shim_spawn_worker(path, argv, envp, channel, out, err, &pid)
            return status == 0 ? .success(pid) : .failure(SystemError(errno: status))
        }
    }

    /// `dlopen` with the plugin flags (`RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE`).
    package static func dlopenPlugin(_ path: String) -> Result<UnsafeMutableRawPointer, DynamicLoaderError> {
        _ = dlerror()
        if let handle = curfew_shim_dlopen_plugin(path) { return .success(handle) }
        return .failure(DynamicLoaderError(message: lastDynamicLoaderError()))
    }

    /// `dlsym`, or `nil` when the symbol is absent.
    package static func dlsym(_ handle: UnsafeMutableRawPointer, _ symbol: String) -> UnsafeMutableRawPointer? {
        Glibc.dlsym(handle, symbol)
    }

    private static func lastDynamicLoaderError() -> String {
        guard let text = dlerror() else { return "unknown dynamic loader error" }
        return String(cString: text)
    }

    /// Writes all of `bytes` to `fd`, through short writes and `EINTR`: how
    /// many were written, fewer only when a write failed (`errno` says why)
    /// or wrote nothing.
    package static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int {
        var written = 0
        while written < bytes.count {
            let step = retryingEINTR { Glibc.write(fd, bytes.baseAddress! + written, bytes.count - written) }
            if step <= 0 { break }
            written += step
        }
        return written
    }

    /// Reads into `buffer` until it is full or the file ends, through short
    /// reads and `EINTR`: how many bytes were read, fewer than asked only at
    /// the end of the file or when a read failed (`errno` says why).
    package static func readFully(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        var filled = 0
        while filled < buffer.count {
            let step = retryingEINTR { Glibc.read(fd, buffer.baseAddress! + filled, buffer.count - filled) }
            if step <= 0 { break }
            filled += step
        }
        return filled
    }

    /// poll(2) over `entries` for up to `milliseconds` (-1: no limit). A
    /// signal handled while it waited is not an event: it waits again for
    /// the time left. The count of ready entries, 0 once the time is up, or
    /// -1 with `errno`.
    package static func poll(_ entries: inout [pollfd], milliseconds: Int32) -> Int32 {
        let clock = ContinuousClock()
        let end = milliseconds < 0 ? nil : clock.now + .milliseconds(milliseconds)
        var left = milliseconds
        while true {
            let ready = Glibc.poll(&entries, nfds_t(entries.count), left)
            guard ready < 0 && errno == EINTR else { return ready }
            if let end {
                let remaining = clock.now.duration(to: end)
                if remaining <= .zero { return 0 }
                left = Int32(clamping: remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000 + 1)
            }
        }
    }

    /// Sleeps until `CLOCK_MONOTONIC` reads `nanoseconds`, through signals.
    package static func sleep(untilMonotonic nanoseconds: UInt64) {
        var until = timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
        while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nil) == EINTR {}
    }

    /// `call` again while it fails with `EINTR`: a signal handled while the
    /// call waited is not a failure. For calls that return -1 and set
    /// `errno`; the result, or -1 with `errno` of any other error.
    package static func retryingEINTR<T: BinaryInteger>(_ call: () -> T) -> T {
        while true {
            let result = call()
            if result >= 0 || errno != EINTR { return result }
        }
    }
}

package struct DynamicLoaderError: Error {
    package let message: String

    package init(message: String) { self.message = message }
}
