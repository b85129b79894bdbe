import Curfew
import Dispatch
import Synchronization
import Glibc
import _CurfewShims

func readAll(_ path: String) throws -> [UInt8] {
    guard let file = fopen(path, "rb") else { throw CurfewError(.notFound, "cannot open \(path)") }
    defer { fclose(file) }
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = fread(&buffer, 1, buffer.count, file)
        if count == 0 { break }
        bytes += buffer.prefix(count)
    }
    return bytes
}

func writeAll(_ path: String, _ bytes: [UInt8]) throws {
    guard let file = fopen(path, "wb") else { throw CurfewError(.unreadable, "cannot write \(path)") }
    defer { fclose(file) }
    guard fwrite(bytes, 1, bytes.count, file) == bytes.count else { throw CurfewError(.unreadable, "short write to \(path)") }
}

/// Removes `path` and everything under it (links are removed, not followed).
func removeTree(_ path: String) {
    var info = stat()
    guard lstat(path, &info) == 0 else { return }
    if info.st_mode & S_IFMT == S_IFDIR, let folder = opendir(path) {
        var names: [String] = []
        while let entry = readdir(folder) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name != "." && name != ".." { names.append(name) }
        }
        closedir(folder)
        names.forEach { removeTree(path + "/" + $0) }
        rmdir(path)
    } else {
        unlink(path)
    }
}

/// A command the benchmarks run as a user would: a fresh process.
struct Command {
    var arguments: [String]
    /// Added to (and overriding) this process's environment.
    var environment: [String: String] = [:]
    /// Where its stdout goes (stderr goes to /dev/null unless `showErrors`).
    var stdout = "/dev/null"
    /// Exit statuses that count as success.
    var accepted: Set<Int32> = [0]

    init(_ arguments: [String], environment: [String: String] = [:], accepted: Set<Int32> = [0]) {
        self.arguments = arguments
        self.environment = environment
        self.accepted = accepted
    }

    /// Runs it to its end; returns the wall time in seconds. Throws when it
    /// cannot start or exits with a status not accepted.
    @discardableResult
    func run() throws -> Double {
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var merged: [String: String] = [:]
        var index = 0
        while let entry = environ[index] {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") { merged[String(text[..<equals])] = String(text[text.index(after: equals)...]) }
            index += 1
        }
        for (key, value) in environment { merged[key] = value }
        let envp = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { envp.forEach { free($0) } }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let start = now()
        var pid: pid_t = 0
        let spawned = posix_spawnp(&pid, arguments[0], &actions, nil, argv, envp)
        guard spawned == 0 else { throw CurfewError(.notFound, "cannot start \(arguments[0]): \(String(cString: strerror(spawned)))") }
        var status: Int32 = 0
        _ = Syscalls.retryingEINTR { waitpid(pid, &status, 0) }
        let elapsed = Double(now() - start) / 1e9
        let code = status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        guard accepted.contains(code) else {
            throw CurfewError(.unreadable, "\(arguments.prefix(4).joined(separator: " ")) … exited with \(code)")
        }
        return elapsed
    }
}

/// Compiles C `source` with `cc -O2` into `output`: a shared library when
/// `shared`, else a program. `include` is the folder holding curfew.h.
func compileC(_ source: String, to output: String, include: String, shared: Bool, work: String) throws {
    let file = output + ".c"
    try writeAll(file, Array(source.utf8))
    var arguments = ["cc", "-O2", "-std=c11", "-I", include, "-o", output, file]
    if shared { arguments += ["-shared", "-fPIC"] }
    try Command(arguments).run()
}

/// The folder that holds `include/curfew.h`, found upward from `start`.
func packageRoot(from start: String) -> String? {
    var folder = start
    while !folder.isEmpty {
        if access(folder + "/include/curfew.h", R_OK) == 0 { return folder }
        guard let slash = folder.lastIndex(of: "/") else { return nil }
        folder = String(folder[..<slash])
    }
    return nil
}

/// Writes a copy of `bytes` to `path` with every `from` replaced by `to`
/// (the same length): one compiled plugin becomes many with distinct job names.
func writePatched(_ bytes: [UInt8], _ path: String, from: String, to: String) throws {
    let old = Array(from.utf8)
    let new = Array(to.utf8)
    precondition(old.count == new.count)
    var copy = bytes
    var index = 0
    var replaced = 0
    while index + old.count <= copy.count {
        if copy[index] == old[0] && Array(copy[index..<index + old.count]) == old {
            copy.replaceSubrange(index..<index + old.count, with: new)
            index += old.count
            replaced += 1
        } else {
            index += 1
        }
    }
    precondition(replaced > 0, "no '\(from)' in the plugin")
    try writeAll(path, copy)
}

/// CPU time this process has used, all threads (`CLOCK_PROCESS_CPUTIME_ID`).
func processCPUNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

/// Resident bytes of this process (from /proc/self/statm).
func residentBytes() -> Double {
    guard let file = fopen("/proc/self/statm", "r") else { return .nan }
    defer { fclose(file) }
    var size = 0
    var resident = 0
    guard withUnsafeMutablePointer(to: &size, { s in withUnsafeMutablePointer(to: &resident) { r in
        withVaList([s, r]) { vfscanf(file, "%ld %ld", $0) }
    } }) == 2 else { return .nan }
    return Double(resident) * Double(sysconf(Int32(_SC_PAGESIZE)))
}

/// Threads of this process (from /proc/self/status).
func threadCount() -> Int {
    guard let file = fopen("/proc/self/status", "r") else { return -1 }
    defer { fclose(file) }
    var line = [CChar](repeating: 0, count: 256)
    while fgets(&line, Int32(line.count), file) != nil {
        let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if text.hasPrefix("Threads:") { return Int(text.dropFirst(8).trimmingCharacters(in: " \t\n")) ?? -1 }
    }
    return -1
}

extension StringProtocol {
    func trimmingCharacters(in set: String) -> String {
        let skip = Set(set)
        return String(drop { skip.contains($0) }.reversed().drop { skip.contains($0) }.reversed())
    }
}

/// The floor under an expiration's lateness on this machine: as many
/// threads as cores that do nothing but spin through the given deadlines
/// (monotonic nanoseconds, earliest first), each taking the next one and
/// noting how late it saw it pass, in milliseconds. Nothing in a host can
/// run earlier than these threads see a deadline pass; only the machine
/// taking a core away (another process, the hypervisor) makes one late.
func spinningLateness(deadlines: [UInt64], threads: Int) -> [Double] {
    let next = Atomic<Int>(0)
    let lateness = UnsafeMutableBufferPointer<Double>.allocate(capacity: deadlines.count)
    defer { lateness.deallocate() }
    lateness.initialize(repeating: 0)
    nonisolated(unsafe) let results = lateness
    DispatchQueue.concurrentPerform(iterations: max(1, threads)) { _ in
        while true {
            let index = next.add(1, ordering: .relaxed).oldValue
            guard index < deadlines.count else { return }
            let deadline = deadlines[index]
            var seen = now()
            while seen < deadline { seen = now() }
            results[index] = Double(seen - deadline) / 1e6
        }
    }
    return Array(lateness)
}

/// What a host that sleeps between expirations pays on this machine: one
/// thread that sleeps until the next of the given deadlines (monotonic
/// nanoseconds, earliest first; an absolute `clock_nanosleep` with a timer
/// slack of 1 ns, as the host's own threads have) and, each time it wakes,
/// notes how late it is for every deadline passed, in milliseconds. The
/// calling thread keeps that slack.
func sleepingLateness(deadlines: [UInt64]) -> [Double] {
    var lateness = [Double](repeating: 0, count: deadlines.count)
    // The calling thread keeps the slack: the live-jobs child ends after.
    _ = curfew_shim_set_timer_slack(1)
    var index = 0
    while index < deadlines.count {
        Syscalls.sleep(untilMonotonic: deadlines[index])
        let woke = now()
        while index < deadlines.count && deadlines[index] <= woke {
            lateness[index] = Double(woke - deadlines[index]) / 1e6
            index += 1
        }
    }
    return lateness
}
