// Files through the seam: every descriptor opened here is close-on-exec, so
// no program the host starts inherits one, and every error is a SystemError.
import Glibc
import _CurfewShims

extension SystemError: Equatable {
    /// The error the last failed call left in `errno`.
    package static var last: SystemError { SystemError(errno: Glibc.errno) }

    package static func == (a: SystemError, b: SystemError) -> Bool { a.errno == b.errno }

    package static let noEntry = SystemError(errno: ENOENT)
    package static let exists = SystemError(errno: EEXIST)
    package static let notEmpty = SystemError(errno: ENOTEMPTY)
    package static let noSpace = SystemError(errno: ENOSPC)
    /// `EAGAIN`, which is `EWOULDBLOCK` on Linux.
    package static let wouldBlock = SystemError(errno: EAGAIN)
    package static let brokenPipe = SystemError(errno: EPIPE)
    package static let invalid = SystemError(errno: EINVAL)
    package static let tooManyFiles = SystemError(errno: EMFILE)
    package static let tooManyFilesInSystem = SystemError(errno: ENFILE)
    package static let connectionRefused = SystemError(errno: ECONNREFUSED)
    package static let connectionAborted = SystemError(errno: ECONNABORTED)
    package static let timedOut = SystemError(errno: ETIMEDOUT)
    package static let noProcess = SystemError(errno: ESRCH)
}

extension Syscalls {
    /// What a descriptor is opened for.
    package enum Access: Sendable {
        case read, write, readWrite

        var flags: Int32 {
            switch self {
            case .read: O_RDONLY
            case .write: O_WRONLY
            case .readWrite: O_RDWR
            }
        }
    }

    /// How `open` treats the path.
    package struct OpenOptions: OptionSet, Sendable {
        package let rawValue: Int32
        package init(rawValue: Int32) { self.rawValue = rawValue }

        package static let create = OpenOptions(rawValue: O_CREAT)
        /// With `create`: fail with ``SystemError/exists`` when the path is taken.
        package static let exclusive = OpenOptions(rawValue: O_EXCL)
        package static let truncate = OpenOptions(rawValue: O_TRUNC)
        /// Fail when the last component is a symlink.
        package static let noFollow = OpenOptions(rawValue: O_NOFOLLOW)
        /// Do not wait on a FIFO someone swapped in for a file.
        package static let nonBlocking = OpenOptions(rawValue: O_NONBLOCK)
        package static let noTerminal = OpenOptions(rawValue: O_NOCTTY)
        /// Fail unless the path is a folder.
        package static let directory = OpenOptions(rawValue: O_DIRECTORY)
    }

    /// `path`, opened close-on-exec. The caller closes it.
    package static func open(
        _ path: String, _ access: Access, _ options: OpenOptions = [], permissions: UInt32 = 0o600
    ) throws(SystemError) -> Int32 {
        let fd = retryingEINTR { Glibc.open(path, access.flags | options.rawValue | O_CLOEXEC, mode_t(permissions)) }
        guard fd >= 0 else { throw .last }
        return fd
    }

    /// Closes `fd`. Not retried on `EINTR`: Linux has closed it already.
    package static func close(_ fd: Int32) {
        _ = Glibc.close(fd)
    }

    /// One `read`: how many bytes, 0 at the end.
    package static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> Int {
        let count = retryingEINTR { Glibc.read(fd, buffer.baseAddress, buffer.count) }
        guard count >= 0 else { throw .last }
        return count
    }

    /// One `read` into `buffer`, from its start: how many bytes, 0 at the end.
    package static func read(_ fd: Int32, into buffer: inout [UInt8]) throws(SystemError) -> Int {
        try buffer.withUnsafeMutableBytes { bytes in Result { () throws(SystemError) in try read(fd, into: bytes) } }.get()
    }

    /// One `write`: how many bytes were taken.
    package static func write(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(SystemError) -> Int {
        let count = retryingEINTR { Glibc.write(fd, bytes.baseAddress, bytes.count) }
        guard count >= 0 else { throw .last }
        return count
    }

    /// Writes all of `bytes` to `fd`, through short writes.
    package static func writeAll(_ fd: Int32, _ bytes: [UInt8]) throws(SystemError) {
        errno = 0
        let written = bytes.withUnsafeBytes { writeAll(fd, $0) }
        guard written == bytes.count else { throw errno != 0 ? .last : SystemError(errno: EIO) }
    }

    /// What `fstat` says of the open `fd`.
    package static func status(of fd: Int32) throws(SystemError) -> FileStatus {
        var info = Glibc.stat()
        guard fstat(fd, &info) == 0 else { throw .last }
        return FileStatus(info)
    }

    /// What `lstat` says of `path`: a symlink's own status, not its target's.
    package static func linkStatus(_ path: String) throws(SystemError) -> FileStatus {
        var info = Glibc.stat()
        guard lstat(path, &info) == 0 else { throw .last }
        return FileStatus(info)
    }

    /// Whether `path` names anything (a dangling symlink does not).
    package static func exists(_ path: String) -> Bool {
        access(path, F_OK) == 0
    }

    /// Whether this process may read `path`.
    package static func isReadable(_ path: String) -> Bool {
        access(path, R_OK) == 0
    }

    /// Whether this process may execute `path`.
    package static func isExecutable(_ path: String) -> Bool {
        access(path, X_OK) == 0
    }

    package static func changeMode(_ path: String, to permissions: UInt32) throws(SystemError) {
        guard chmod(path, mode_t(permissions)) == 0 else { throw .last }
    }

    package static func changeMode(of fd: Int32, to permissions: UInt32) throws(SystemError) {
        guard fchmod(fd, mode_t(permissions)) == 0 else { throw .last }
    }

    package static func changeOwner(_ path: String, user: UInt32, group: UInt32) throws(SystemError) {
        guard chown(path, user, group) == 0 else { throw .last }
    }

    /// A second name, `link`, for the file at `path`.
    package static func hardLink(_ path: String, as link: String) throws(SystemError) {
        guard Glibc.link(path, link) == 0 else { throw .last }
    }

    /// The target of the symbolic link at `path`.
    package static func linkTarget(_ path: String) throws(SystemError) -> String {
        var buffer = [CChar](repeating: 0, count: 4097)
        let count = readlink(path, &buffer, 4096)
        guard count >= 0 else { throw .last }
        return String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Atomically replaces `target` with `path`.
    package static func rename(_ path: String, to target: String) throws(SystemError) {
        guard Glibc.rename(path, target) == 0 else { throw .last }
    }

    package static func unlink(_ path: String) throws(SystemError) {
        guard Glibc.unlink(path) == 0 else { throw .last }
    }

    /// Removes the empty folder `path`.
    package static func removeFolder(_ path: String) throws(SystemError) {
        guard rmdir(path) == 0 else { throw .last }
    }

    package static func makeFolder(_ path: String, permissions: UInt32 = 0o700) throws(SystemError) {
        guard mkdir(path, mode_t(permissions)) == 0 else { throw .last }
    }

    /// A new folder, 0700, named `prefix` and six random characters.
    package static func makeTemporaryFolder(_ prefix: String) throws(SystemError) -> String {
        var template = Array((prefix + "XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else { throw .last }
        return String(cString: made)
    }

    /// The value of the environment variable `name`, if set.
    package static func environmentValue(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }

    /// Sets the environment variable `name` to `value`. Not thread-safe
    /// (getenv in another thread may read freed memory): for a process that
    /// has one thread, before it starts another.
    package static func setEnvironment(_ name: String, _ value: String) {
        setenv(name, value, 1)
    }

    /// Removes the environment variable `name`; as ``setEnvironment(_:_:)``,
    /// for a process that has one thread.
    package static func unsetEnvironment(_ name: String) {
        unsetenv(name)
    }

    /// Where temporary files go: `$TMPDIR` when it is an absolute path, else `/tmp`.
    package static var temporaryFolder: String {
        environmentValue("TMPDIR").flatMap { $0.hasPrefix("/") ? $0 : nil } ?? "/tmp"
    }

    /// The effective user id.
    package static var userID: UInt32 { geteuid() }

    package static var processID: Int32 { getpid() }

    /// The bytes an unprivileged user may still write on the file system
    /// that holds `path`; `nil` when it cannot be read (or overflows).
    package static func availableBytes(_ path: String) -> UInt64? {
        var status = statvfs()
        guard retryingEINTR({ statvfs(path, &status) }) == 0 else { return nil }
        let (bytes, overflow) = UInt64(status.f_bavail).multipliedReportingOverflow(by: UInt64(status.f_frsize))
        return overflow ? nil : bytes
    }

    /// Gives `fd` the access and modification times in `status`.
    package static func setTimes(of fd: Int32, like status: FileStatus) throws(SystemError) {
        func time(_ nanoseconds: Int64) -> timespec {
            let (seconds, rest) = nanoseconds.quotientAndRemainder(dividingBy: 1_000_000_000)
            return rest < 0 ? timespec(tv_sec: Int(seconds - 1), tv_nsec: Int(rest + 1_000_000_000)) : timespec(tv_sec: Int(seconds), tv_nsec: Int(rest))
        }
        var times = [time(status.accessed), time(status.modified)]
        guard futimens(fd, &times) == 0 else { throw .last }
    }

    /// `body` over the first `size` bytes of the open file `fd`, mapped
    /// read-only and private; `nil` when it cannot be mapped.
    package static func withMappedFile<T>(_ fd: Int32, size: Int, _ body: (UnsafeRawBufferPointer) -> T) -> T? {
        guard size > 0 else { return body(UnsafeRawBufferPointer(start: nil, count: 0)) }
        guard let mapped = mmap(nil, size, PROT_READ, MAP_PRIVATE, fd, 0), mapped != MAP_FAILED else { return nil }
        defer { munmap(mapped, size) }
        return body(UnsafeRawBufferPointer(start: mapped, count: size))
    }

    /// Copies the whole of `source` from its start into `target` at its
    /// current offset: `copy_file_range` (a reflink or in-kernel copy where
    /// the file system can), else `pread`/`write` in 64 KiB steps. How many
    /// bytes were copied.
    package static func copyContents(of source: Int32, to target: Int32) throws(SystemError) -> Int64 {
        var copied: Int64 = 0
        var kernelCopies = true
        var buffer: [UInt8] = []
        while true {
            var count: Int
            if kernelCopies {
                var offset = copied
                count = retryingEINTR { curfew_shim_copy_file_range(source, &offset, target, 1 << 30) }
                if count < 0 && [EXDEV, ENOSYS, EINVAL, EOPNOTSUPP].contains(errno) && copied == 0 {
                    kernelCopies = false
                    continue
                }
                if count < 0 { throw .last }
            } else {
                if buffer.isEmpty { buffer = [UInt8](repeating: 0, count: 1 << 16) }
                let offset = copied
                count = buffer.withUnsafeMutableBytes { bytes in retryingEINTR { pread(source, bytes.baseAddress, bytes.count, off_t(offset)) } }
                if count < 0 { throw .last }
                errno = 0
                let written = buffer.withUnsafeBytes { writeAll(target, UnsafeRawBufferPointer(rebasing: $0.prefix(count))) }
                if written < count { throw errno != 0 ? .last : .noSpace }
            }
            if count == 0 { return copied }
            copied += Int64(count)
        }
    }
}

extension Syscalls.FileStatus {
    init(_ info: stat) {
        let type = info.st_mode & S_IFMT
        self.init(
            isDirectory: type == S_IFDIR, isRegular: type == S_IFREG, isSymlink: type == S_IFLNK, isSocket: type == S_IFSOCK,
            size: Int64(info.st_size), links: UInt64(info.st_nlink), mode: UInt32(info.st_mode & 0o7777), owner: info.st_uid,
            accessed: Syscalls.nanoseconds(info.st_atim), modified: Syscalls.nanoseconds(info.st_mtim),
            changed: Syscalls.nanoseconds(info.st_ctim), device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }
}
