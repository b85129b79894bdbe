import Glibc

/// A folder only this user can change: the state store's, the scan cache's
/// and the control socket's. Whoever else could write one could swap what
/// the host trusts in it.
package enum PrivateFolder {
    /// Makes `folder` and any missing folder above it (mode 700), then checks
    /// it is a real folder (not a symlink) of this user's that nobody else
    /// can write. `what` names it in errors ("the state folder"); they carry `code`.
    package static func prepare(_ folder: String, what: String, code: CurfewError.Code) throws(CurfewError) {
        var current = ""
        for component in folder.split(separator: "/") {
            current += "/" + component
            if mkdir(current, 0o700) != 0 && errno != EEXIST {
                throw CurfewError(code, "cannot make \(what) \(current): \(String(cString: strerror(errno)))")
            }
        }
        var info = stat()
        guard lstat(folder, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            throw CurfewError(code, "\(what) \(folder) is not a folder (a symlink is not accepted)")
        }
        guard info.st_uid == geteuid() else {
            throw CurfewError(code, "\(what) \(folder) belongs to another user (uid \(info.st_uid))")
        }
        guard info.st_mode & 0o022 == 0 else {
            throw CurfewError(
                code, "others can write \(what) \(folder) (mode \(String(info.st_mode & 0o777, radix: 8))); run chmod go-w on it")
        }
    }
}
