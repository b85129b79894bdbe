import Curfew
import Dispatch
import Synchronization
import _CurfewShims

func readAll(_ path: String) throws -> [UInt8] {
    do throws(SystemError) {
        return try Syscalls.readToEnd(path, limit: .max)
    } catch {
        throw CurfewError(.notFound, "cannot read \(path): \(error.message)")
    }
}

func writeAll(_ path: String, _ bytes: [UInt8]) throws {
    do throws(SystemError) {
        let fd = try Syscalls.open(path, .write, [.create, .truncate], permissions: 0o644)
        defer { Syscalls.close(fd) }
        try Syscalls.writeAll(fd, bytes)
    } catch {
        throw CurfewError(.unreadable, "cannot write \(path): \(error.message)")
    }
}

/// Removes `path` and everything under it (links are removed, not followed).
func removeTree(_ path: String) {
    guard let info = try? Syscalls.linkStatus(path) else { return }
    if info.isDirectory, let folder = try? Syscalls.openFolder(path) {
        let names = (try? Syscalls.directoryEntries(in: folder))?.map(\.name) ?? []
        Syscalls.close(folder)
        names.forEach { removeTree(path + "/" + $0) }
        try? Syscalls.removeFolder(path)
    } else {
        try? Syscalls.unlink(path)
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
        var merged: [String: String] = [:]
        for text in Syscalls.environment() {
            if let equals = text.firstIndex(of: "=") { merged[String(text[..<equals])] = String(text[text.index(after: equals)...]) }
        }
        for (key, value) in environment { merged[key] = value }
        let program = Program(arguments, environment: merged.map { "\($0.key)=\($0.value)" }, output: stdout)
        let start = now()
        let code: Int32
        do throws(SystemError) {
            code = try program.run()
        } catch {
            throw CurfewError(.notFound, "cannot start \(arguments[0]): \(error.message)")
        }
        let elapsed = Double(now() - start) / 1e9
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
        if Syscalls.isReadable(folder + "/include/curfew.h") { return folder }
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
    ProcessStatistics.cpuNanoseconds()
}

/// Resident bytes of this process (from /proc/self/statm).
func residentBytes() -> Double {
    ProcessStatistics.residentBytes().map { Double($0) } ?? .nan
}

/// Threads of this process (from /proc/self/status).
func threadCount() -> Int {
    ProcessStatistics.threadCount() ?? -1
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
