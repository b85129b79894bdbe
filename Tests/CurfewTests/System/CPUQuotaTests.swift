import Foundation
import Testing
import _CurfewShims

@testable import Curfew

/// A container's CPU limit or systemd's `CPUQuota=` bounds the processors
/// Curfew sizes itself by, as its affinity does: read from the process's
/// control groups, v2 and v1, its own and every one above it, the smallest
/// limit rounded up; text that does not parse is no limit.
struct CPUQuotaTests {
    /// A control-group tree in a scratch folder: `files` by path under it.
    func tree(_ files: [String: String]) throws -> String {
        let root = Fixtures.temporaryFolder("cgroup")
        for (path, text) in files {
            let full = root + "/" + path
            try FileManager.default.createDirectory(
                atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try text.write(toFile: full, atomically: true, encoding: .utf8)
        }
        return root
    }

    func mountLine(_ id: Int, root: String = "/", point: String, type: String, superOptions: String) -> String {
        "\(id) 23 0:\(id) \(root) \(point) rw,nosuid,nodev,noexec,relatime shared:\(id) - \(type) \(type) \(superOptions)"
    }

    @Test func theSmallestLimitFromTheGroupUpToTheMountWinsRoundedUp() throws {
        let root = try tree([
            "unified/cpu.max": "max 100000\n",
            "unified/pods/cpu.max": "250000 100000\n",  // 2.5 processors: 3
            "unified/pods/pod1/cpu.max": "max 100000\n",
            "unified/pods/pod1/app/cpu.max": "400000 100000\n",
        ])
        let proc = try tree([
            "cgroup": "0::/pods/pod1/app\n",
            "mountinfo": mountLine(30, point: root + "/unified", type: "cgroup2", superOptions: "rw,nsdelegate") + "\n",
        ])
        #expect(CPUQuota.processors(cgroupFile: proc + "/cgroup", mountInfoFile: proc + "/mountinfo") == 3)
    }

    /// A mountinfo longer than the reader's first buffer (16 KiB) is read
    /// whole, in one pass: the cgroup mount after 400 others is found.
    @Test func aLongMountInfoIsReadWhole() throws {
        let root = try tree(["unified/app/cpu.max": "150000 100000\n"])
        let others = (0..<400).map { mountLine(100 + $0, point: "/srv/volume-\($0)", type: "ext4", superOptions: "rw") }
        let mounts = others + [mountLine(30, point: root + "/unified", type: "cgroup2", superOptions: "rw")]
        let text = mounts.joined(separator: "\n") + "\n"
        #expect(text.utf8.count > 16 << 10)
        let proc = try tree(["cgroup": "0::/app\n", "mountinfo": text])
        #expect(CPUQuota.processors(cgroupFile: proc + "/cgroup", mountInfoFile: proc + "/mountinfo") == 2)
    }

    @Test func aV1CPUControllerIsReadAsAV2OneIs() throws {
        let root = try tree([
            "cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
            "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            "cpu,cpuacct/job/cpu.cfs_quota_us": "150000\n",  // one and a half processors: 2
            "cpu,cpuacct/job/cpu.cfs_period_us": "100000\n",
            "cpuset/job/cpu.cfs_quota_us": "10000\n",  // not the cpu controller's hierarchy: 1 if read
            "cpuset/job/cpu.cfs_period_us": "100000\n",
        ])
        let proc = try tree([
            "cgroup": "12:cpuset:/job\n4:cpu,cpuacct:/job\n1:name=systemd:/job\n0::/job\n",
            "mountinfo": [
                mountLine(31, point: root + "/cpuset", type: "cgroup", superOptions: "rw,cpuset"),
                mountLine(32, point: root + "/cpu,cpuacct", type: "cgroup", superOptions: "rw,cpu,cpuacct"),
            ].joined(separator: "\n") + "\n",
        ])
        let folders = CPUQuota.groupFolders(
            cgroups: try String(contentsOfFile: proc + "/cgroup", encoding: .utf8),
            mountInfo: try String(contentsOfFile: proc + "/mountinfo", encoding: .utf8))
        #expect(folders == [CPUQuota.GroupFolder(version: .v1, mountPoint: root + "/cpu,cpuacct", folder: root + "/cpu,cpuacct/job")])
        #expect(CPUQuota.processors(cgroupFile: proc + "/cgroup", mountInfoFile: proc + "/mountinfo") == 2)
    }

    /// Inside a container the mount's root is the container's own group;
    /// a path outside the mount's root (another namespace's) is not read.
    @Test func aGroupIsFoundUnderAMountWhoseRootIsNotTheHierarchysRoot() throws {
        let root = try tree(["mnt/cpu.max": "150000 100000\n", "mnt/inner/cpu.max": "max 100000\n"])
        let mounts = mountLine(40, root: "/kubepods/pod9", point: root + "/mnt", type: "cgroup2", superOptions: "rw") + "\n"
        let inside = CPUQuota.groupFolders(cgroups: "0::/kubepods/pod9/inner\n", mountInfo: mounts)
        #expect(inside == [CPUQuota.GroupFolder(version: .v2, mountPoint: root + "/mnt", folder: root + "/mnt/inner")])
        #expect(inside.flatMap { CPUQuota.limits(along: $0) }.map { CPUQuota.processors(quota: $0.quota, period: $0.period) } == [2])
        #expect(CPUQuota.groupFolders(cgroups: "0::/kubepods/pod10\n", mountInfo: mounts).isEmpty)
        #expect(CPUQuota.groupFolders(cgroups: "0::/kubepods/pod9x\n", mountInfo: mounts).isEmpty)
        // Outside the namespace's root (another group's path, as the kernel writes it).
        let rootMount = mountLine(41, point: root + "/mnt", type: "cgroup2", superOptions: "rw") + "\n"
        #expect(CPUQuota.groupFolders(cgroups: "0::/../sibling\n", mountInfo: rootMount).isEmpty)
        // Deeper than any path the kernel opens: not walked, level by level.
        let deep = String(repeating: "/a", count: 3000)
        #expect(CPUQuota.groupFolders(cgroups: "0::\(deep)\n", mountInfo: rootMount).isEmpty)
    }

    /// A mount with no source (two spaces in a row) still reads its super options.
    @Test func aMountWithAnEmptySourceIsRead() {
        let mount = CPUQuota.Mount("32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime shared:5 - cgroup  rw,cpu,cpuacct"[...])
        #expect(mount?.fileSystem == "cgroup")
        #expect(mount?.superOptions.contains("cpu") == true)
    }

    @Test func noLimitAndTextThatDoesNotParseAreNoLimit() throws {
        let root = try tree([
            "u/cpu.max": "max 100000\n",
            "u/a/cpu.max": "-5 100000\n",
            "u/a/b/cpu.max": "100000 0\n",
            "u/a/b/c/cpu.max": "99999999999999999999 100000\n",
            "u/a/b/c/d/cpu.max": "100000 100000 7\n",
        ])
        let proc = try tree([
            "cgroup": "0::/a/b/c/d\n",
            "mountinfo": mountLine(30, point: root + "/u", type: "cgroup2", superOptions: "rw") + "\n",
        ])
        #expect(CPUQuota.processors(cgroupFile: proc + "/cgroup", mountInfoFile: proc + "/mountinfo") == nil)
        #expect(CPUQuota.processors(cgroupFile: proc + "/missing", mountInfoFile: proc + "/mountinfo") == nil)
        // The same walk reads a limit that parses: the files above were read, and refused.
        try FileManager.default.createDirectory(atPath: root + "/u/a/b/c/d/e", withIntermediateDirectories: true)
        try "300000 100000\n".write(toFile: root + "/u/a/b/c/d/e/cpu.max", atomically: true, encoding: .utf8)
        try "0::/a/b/c/d/e\n".write(toFile: proc + "/cgroup", atomically: true, encoding: .utf8)
        #expect(CPUQuota.processors(cgroupFile: proc + "/cgroup", mountInfoFile: proc + "/mountinfo") == 3)
        #expect(CPUQuota.parseCPUMax("max 100000") == nil)
        #expect(CPUQuota.parseCFS(quota: "-1\n", period: "100000\n") == nil)
        #expect(CPUQuota.processors(quota: 1, period: 100_000) == 1)
        #expect(CPUQuota.processors(quota: .max, period: 1) == Int.max)
        #expect(CPUQuota.processors(quota: 0, period: 100_000) == 1)
    }

    @Test func mountPointsWithEscapedSpacesAreRead() {
        let line = "30 23 0:30 / /sys/fs/my\\040cgroup rw,relatime shared:4 - cgroup2 cgroup2 rw"
        let mount = CPUQuota.Mount(line[...])
        #expect(mount?.point == "/sys/fs/my cgroup")
        #expect(mount?.fileSystem == "cgroup2")
        #expect(CPUQuota.Mount("30 23 0:30 / /x rw - cgroup2"[...]) == nil, "a line cut short")
        #expect(CPUQuota.Mount.unescaped("a\\09b\\"[...]) == "a\\09b\\", "not an escape")
    }

    /// This machine's own groups: the count is never above the affinity's.
    @Test func theProcessorCountIsTheAffinityBoundedByTheLimit() {
        let affinity = max(1, Int(curfew_shim_usable_cpus()))
        let count = RunConfiguration.activeProcessorCount
        #expect(count == min(affinity, CPUQuota.processors() ?? affinity))
    }
}

extension ProcessTests.First {
    /// `curfew run` started in a control group limited to one processor
    /// runs its jobs one at a time by default, as under `taskset -c 0`.
    /// Needs a cpu controller this process may make a group under (root,
    /// a writable cgroupfs); else it is skipped.
    @Suite(.timeLimit(.minutes(1))) struct CPUQuotaRunTests {
        /// A group of one processor's bandwidth, made under this process's
        /// own, or `nil` when none can be made here.
        static func makeGroup() -> String? {
            guard let cgroups = try? String(contentsOfFile: "/proc/self/cgroup", encoding: .utf8),
                let mounts = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)
            else { return nil }
            for found in CPUQuota.groupFolders(cgroups: cgroups, mountInfo: mounts) {
                let group = found.folder + "/curfew-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
                guard mkdir(group, 0o755) == 0 else { continue }
                let limited: Bool
                switch found.version {
                case .v1:
                    limited = write("100000", to: group + "/cpu.cfs_period_us") && write("100000", to: group + "/cpu.cfs_quota_us")
                case .v2:
                    // Only where the cpu controller is on for this group's children
                    // already: enabling it here is refused while this group holds processes.
                    limited = write("100000 100000", to: group + "/cpu.max")
                }
                if limited { return group }
                rmdir(group)
            }
            return nil
        }

        static func write(_ text: String, to path: String) -> Bool {
            (try? text.write(toFile: path, atomically: false, encoding: .utf8)) != nil
        }

        static let canLimit: Bool = {
            guard RunConfiguration.activeProcessorCount > 1, let group = makeGroup() else { return false }
            rmdir(group)
            return true
        }()

        /// Both jobs of `pair_jobs.c` in one `curfew run` at `--jobs`' default,
        /// started in `group` when given: what each logged ("met" or "alone").
        func runPair(in group: String?) async throws -> [String] {
            let plugin = try Fixtures.compile("pair_jobs.c")
            let marks = Fixtures.temporaryFolder("marks")
            let run = [Fixtures.curfewExecutable, "run", "--no-state", "--budget", "20s", "--param", "dir=\(marks)", plugin]
            let script = group.map { "echo $$ > '\($0)/cgroup.procs' && exec \"$@\"" } ?? "exec \"$@\""
            let result = try await Fixtures.run("/bin/sh", ["-c", script, "sh"] + run, timeout: .seconds(30))
            #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            // The jobs' log lines, "pair-a: met": not a path that happens to hold the word.
            return result.stdout.split(separator: "\n").compactMap { line in
                ["pair-a: ", "pair-b: "].first { line.hasPrefix($0) }.map { String(line.dropFirst($0.count)) }
            }
        }

        @Test(.enabled(if: canLimit, "needs a cpu controller this process may make a group under"))
        func aGroupLimitedToOneProcessorRunsOneJobAtATime() async throws {
            let together = try await runPair(in: nil)
            #expect(together == ["met", "met"], "\(together)")
            let group = try #require(Self.makeGroup())
            defer { rmdir(group) }
            let limited = try await runPair(in: group)
            #expect(limited.contains("alone"), "both jobs ran at once in a group of one processor: \(limited)")
        }
    }
}
