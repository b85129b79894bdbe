import Glibc

/// The CPU bandwidth this process's control group allows: what a container's
/// CPU limit (Kubernetes' `resources.limits.cpu`) or systemd's `CPUQuota=`
/// sets. Its CPU affinity can still show every processor of the machine, and
/// sizing `--jobs` by those would have the kernel
/// throttle the process for most of every period.
///
/// Read from cgroup v2's `cpu.max` and cgroup v1's `cpu.cfs_quota_us` and
/// `cpu.cfs_period_us`, in the process's own group and every group above it
/// up to the hierarchy's mount (a parent's limit binds its children too).
/// The smallest limit wins, rounded up to whole processors. Everything read
/// is the kernel's, but it is parsed as untrusted text: a value that does
/// not parse is no limit.
package enum CPUQuota {
    /// The whole processors the process's groups allow, or `nil` when no
    /// group sets a limit (or none can be read).
    package static func processors(
        cgroupFile: String = "/proc/self/cgroup", mountInfoFile: String = "/proc/self/mountinfo"
    ) -> Int? {
        var smallest: Int?
        for folder in ownGroups(cgroupFile: cgroupFile, mountInfoFile: mountInfoFile) {
            for (quota, period) in limits(along: folder) {
                let count = processors(quota: quota, period: period)
                smallest = min(smallest ?? count, count)
            }
        }
        return smallest
    }

    /// This process's groups that can hold a CPU limit (``groupFolders(cgroups:mountInfo:)``),
    /// read from the kernel's files.
    package static func ownGroups(
        cgroupFile: String = "/proc/self/cgroup", mountInfoFile: String = "/proc/self/mountinfo"
    ) -> [GroupFolder] {
        guard let cgroups = readText(cgroupFile, limit: 64 << 10),
            let mounts = readText(mountInfoFile, limit: 1 << 20)
        else { return [] }
        return groupFolders(cgroups: cgroups, mountInfo: mounts)
    }

    /// Whole processors for `quota` of every `period`: rounded up, at least one.
    package static func processors(quota: UInt64, period: UInt64) -> Int {
        precondition(period > 0)
        let whole = quota / period + (quota % period == 0 ? 0 : 1)
        return Int(clamping: max(whole, 1))
    }

    /// A hierarchy the process's group is found in: where it is mounted and
    /// the path of the group under that mount.
    package struct GroupFolder: Equatable {
        package enum Version: Equatable { case v1, v2 }
        package let version: Version
        /// The mount point of the hierarchy.
        package let mountPoint: String
        /// The process's group's folder: the mount point, or a folder under it.
        package let folder: String

        package init(version: Version, mountPoint: String, folder: String) {
            self.version = version
            self.mountPoint = mountPoint
            self.folder = folder
        }
    }

    /// The folders of the process's groups that can hold a CPU limit: the
    /// unified (v2) hierarchy's, and the v1 hierarchy with the `cpu`
    /// controller's. `cgroups` is `/proc/self/cgroup`, `mountInfo`
    /// `/proc/self/mountinfo`.
    package static func groupFolders(cgroups: String, mountInfo: String) -> [GroupFolder] {
        var unifiedPath: String?
        var cpuPath: String?
        for line in cgroups.split(separator: "\n") {
            // hierarchy-ID:controller-list:path, the path last (it may hold ':').
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3, fields[2].hasPrefix("/") else { continue }
            if fields[0] == "0" && fields[1].isEmpty {
                unifiedPath = String(fields[2])
            } else if fields[1].split(separator: ",").contains("cpu") {
                cpuPath = String(fields[2])
            }
        }
        var found: [GroupFolder] = []
        for line in mountInfo.split(separator: "\n") {
            guard let mount = Mount(line) else { continue }
            if mount.fileSystem == "cgroup2", let path = unifiedPath, let folder = mount.folder(of: path) {
                found.append(GroupFolder(version: .v2, mountPoint: mount.point, folder: folder))
                unifiedPath = nil  // the first mount of each is enough
            } else if mount.fileSystem == "cgroup", mount.superOptions.contains("cpu"), let path = cpuPath,
                let folder = mount.folder(of: path)
            {
                found.append(GroupFolder(version: .v1, mountPoint: mount.point, folder: folder))
                cpuPath = nil
            }
        }
        return found
    }

    /// The limits set in `group.folder` and each folder above it, up to and
    /// including the mount point: (quota, period) in the same unit.
    package static func limits(along group: GroupFolder) -> [(quota: UInt64, period: UInt64)] {
        var found: [(UInt64, UInt64)] = []
        var folder = group.folder
        while true {
            switch group.version {
            case .v2:
                if let text = readText(folder + "/cpu.max", limit: 256), let limit = parseCPUMax(text) { found.append(limit) }
            case .v1:
                if let quota = readText(folder + "/cpu.cfs_quota_us", limit: 64),
                    let period = readText(folder + "/cpu.cfs_period_us", limit: 64),
                    let limit = parseCFS(quota: quota, period: period)
                {
                    found.append(limit)
                }
            }
            guard folder != group.mountPoint, let slash = folder.lastIndex(of: "/") else { break }
            let parent = slash == folder.startIndex ? "/" : String(folder[..<slash])
            // Never above the mount point: a folder not under it ends the walk.
            guard parent.count >= group.mountPoint.count, parent.hasPrefix(group.mountPoint) else { break }
            folder = parent
        }
        return found
    }

    /// cgroup v2's `cpu.max`: "QUOTA PERIOD" in microseconds, or "max PERIOD"
    /// (no limit: `nil`).
    package static func parseCPUMax(_ text: String) -> (quota: UInt64, period: UInt64)? {
        let fields = text.split(whereSeparator: { $0 == " " || $0 == "\n" })
        guard fields.count == 2, let quota = number(fields[0]), let period = number(fields[1]), period > 0 else { return nil }
        return (quota, period)
    }

    /// cgroup v1's `cpu.cfs_quota_us` (-1: no limit) and `cpu.cfs_period_us`.
    package static func parseCFS(quota: String, period: String) -> (quota: UInt64, period: UInt64)? {
        let quotaText = quota.split(separator: "\n")
        let periodText = period.split(separator: "\n")
        guard quotaText.count == 1, periodText.count == 1, let quota = number(quotaText[0]),
            let period = number(periodText[0]), period > 0
        else { return nil }
        return (quota, period)
    }

    /// A decimal of at most 19 digits (no sign: "-1" and "max" are no number).
    private static func number(_ text: Substring) -> UInt64? {
        guard !text.isEmpty, text.utf8.count <= 19, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return UInt64(text)
    }

    private static func readText(_ path: String, limit: Int) -> String? {
        // /proc files say they are empty: read up to the limit, not to their size.
        guard let bytes = try? Syscalls.readPrefix(path, count: limit) else { return nil }
        var text = String(decoding: bytes, as: UTF8.self)
        if bytes.count == limit, let lastLine = text.lastIndex(of: "\n") {
            text = String(text[...lastLine])  // a line cut at the limit is not read
        }
        return text
    }

    /// One line of `/proc/self/mountinfo`: "ID PARENT MAJOR:MINOR ROOT
    /// MOUNT-POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER-OPTIONS", with
    /// spaces and the like in paths written as octal escapes.
    package struct Mount {
        package let root: String
        package let point: String
        package let fileSystem: String
        package let superOptions: [Substring]

        package init?(_ line: Substring) {
            // Single spaces: an empty field (a mount with no source) still counts.
            let fields = line.split(separator: " ", omittingEmptySubsequences: false)
            guard fields.count >= 10, let dash = fields.firstIndex(of: "-"), dash >= 6, dash + 3 < fields.count else {
                return nil
            }
            root = Self.unescaped(fields[3])
            point = Self.unescaped(fields[4])
            fileSystem = String(fields[dash + 1])
            superOptions = fields[dash + 3].split(separator: ",")
        }

        /// The folder, under this mount, of the group at `path` (a path from
        /// the hierarchy's root); `nil` when the group is not under the
        /// mount's root.
        package func folder(of path: String) -> String? {
            // Longer than a path the kernel opens: no file of it can be read,
            // and the walk up it costs its length at each level.
            guard path.utf8.count <= Int(PATH_MAX) else { return nil }
            // A group outside this namespace's root reads as "/../…": not ours to walk.
            guard !path.split(separator: "/").contains(where: { $0 == ".." || $0 == "." }) else { return nil }
            let relative: Substring
            if root == "/" {
                relative = path[...]
            } else if path == root {
                relative = ""
            } else if path.hasPrefix(root + "/") {
                relative = path.dropFirst(root.count)
            } else {
                return nil
            }
            let base = point == "/" ? "" : point
            let trimmed = relative == "/" ? "" : relative
            return trimmed.isEmpty ? point : base + trimmed
        }

        /// Undoes the kernel's `\ooo` escapes (space, tab, newline, backslash).
        package static func unescaped(_ field: Substring) -> String {
            guard field.contains("\\") else { return String(field) }
            var bytes: [UInt8] = []
            let utf8 = Array(field.utf8)
            var index = 0
            while index < utf8.count {
                if utf8[index] == 0x5C, index + 3 < utf8.count, let value = octal(utf8[(index + 1)..<(index + 4)])
                {
                    bytes.append(value)
                    index += 4
                } else {
                    bytes.append(utf8[index])
                    index += 1
                }
            }
            return String(decoding: bytes, as: UTF8.self)
        }

        private static func octal(_ digits: ArraySlice<UInt8>) -> UInt8? {
            guard digits.count == 3 else { return nil }
            var value = 0
            for digit in digits {
                guard digit >= 0x30 && digit <= 0x37 else { return nil }
                value = value * 8 + Int(digit - 0x30)
            }
            return value <= 255 ? UInt8(value) : nil
        }
    }
}
