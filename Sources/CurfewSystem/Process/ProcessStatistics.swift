import Glibc

/// What this process uses, as the kernel counts it.
package enum ProcessStatistics {
    /// CPU time used by all its threads, in nanoseconds (`CLOCK_PROCESS_CPUTIME_ID`).
    package static func cpuNanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// Resident bytes (`/proc/self/statm`'s second field), or `nil`.
    package static func residentBytes() -> UInt64? {
        guard let bytes = try? Syscalls.readPrefix("/proc/self/statm", count: 256) else { return nil }
        let fields = String(decoding: bytes, as: UTF8.self).split(separator: " ")
        guard fields.count > 1, let pages = UInt64(fields[1]) else { return nil }
        let (total, overflow) = pages.multipliedReportingOverflow(by: UInt64(max(sysconf(Int32(_SC_PAGESIZE)), 0)))
        return overflow ? nil : total
    }

    /// Threads (`/proc/self/status`'s `Threads:` line), or `nil`.
    package static func threadCount() -> Int? {
        guard let bytes = try? Syscalls.readPrefix("/proc/self/status", count: 64 << 10) else { return nil }
        for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") where line.hasPrefix("Threads:") {
            return Int(line.dropFirst(8).filter { $0 != " " && $0 != "\t" })
        }
        return nil
    }

    /// Open descriptors (the entries of `/proc/self/fd`, less the one that reads it), or `nil`.
    package static func openDescriptors() -> Int? {
        guard let fd = try? Syscalls.openFolder("/proc/self/fd") else { return nil }
        defer { Syscalls.close(fd) }
        guard let entries = try? Syscalls.directoryEntries(in: fd) else { return nil }
        return max(0, entries.filter { $0.name != "." && $0.name != ".." }.count - 1)
    }
}
