import Curfew
import CurfewFormats

/// What the machine says, for the conditions that need it: `nil` where a
/// value was not asked for or could not be read.
public struct MachineReading: Sendable, Equatable {
    /// On mains power or a charger (a machine without a battery is).
    public var externalPower: Bool?
    /// The system batteries' mean charge, in percent; `nil`: none there.
    public var batteryPercent: Int?
    /// Whether an IPv4 or IPv6 default route is up; `nil`: neither table could be read.
    public var defaultRoute: Bool?
    /// `some avg10` of the CPU's and memory's pressure, in percent.
    public var cpuPressure: Double?
    public var memoryPressure: Double?
    /// The 1-minute load average per online processor (without PSI).
    public var loadPerCore: Double?
    /// `MemAvailable` of `MemTotal`, in percent (without PSI).
    public var memoryAvailablePercent: Double?
    /// The least free space of the watched file systems, in bytes.
    public var freeBytes: UInt64?

    public init() {}
}

/// Reads power, routes, pressure, memory and free space from the files the
/// kernel shows, under `root`: `/` on a machine, a folder of files shaped
/// like `/sys/class/power_supply` and `/proc` in a test (real parsing, a
/// fake machine). Every file is read whole up to 64 KiB, and parsed in one
/// pass; one that is missing or malformed reads as unknown.
public struct MachineReader: Sendable {
    public let root: String
    /// The folders whose file systems must not run low (the state store's,
    /// the scratch folders').
    public var storagePaths: [String]
    /// The free bytes of a path's file system (`statvfs`, which no file can
    /// stand in for: a test gives its own).
    public var freeBytes: @Sendable (String) -> UInt64?

    /// The machine this runs on.
    public init() {
        self.init(root: "/", freeBytes: { Syscalls.availableBytes($0) })
    }

    public init(root: String, storagePaths: [String] = [], freeBytes: @escaping @Sendable (String) -> UInt64?) {
        self.root = root.hasSuffix("/") ? String(root.dropLast()) : root
        self.storagePaths = storagePaths
        self.freeBytes = freeBytes
    }

    /// Whether this reads the machine it runs on (so the kernel's netlink
    /// events say when to read again).
    public var isLive: Bool { root.isEmpty }

    /// What is read of a file at most: a `/proc` file says it is empty, so
    /// its size is no bound. A route table is read up to `tableLimit`, its
    /// default routes first; every other file is a line or a few.
    private static let limit = 4 << 10
    private static let tableLimit = 256 << 10

    private func text(_ path: String, limit: Int = Self.limit) -> Substring? {
        guard let bytes = try? Syscalls.readPrefix(root + path, count: limit) else { return nil }
        return Substring(decoding: bytes, as: UTF8.self)
    }

    /// Reads what `conditions` need.
    public func read(for conditions: Set<Condition>) -> MachineReading {
        var reading = MachineReading()
        if conditions.contains(.externalPower) || conditions.contains(.battery) {
            let power = powerSupplies()
            reading.externalPower = power.external
            reading.batteryPercent = power.battery
        }
        if conditions.contains(.network) { reading.defaultRoute = defaultRoute() }
        if conditions.contains(.cpu) {
            reading.cpuPressure = text("/proc/pressure/cpu").flatMap(Self.someAverage)
            if reading.cpuPressure == nil, let load = text("/proc/loadavg").flatMap(Self.loadAverage) {
                reading.loadPerCore = load / Double(onlineProcessors())
            }
        }
        if conditions.contains(.memory) {
            reading.memoryPressure = text("/proc/pressure/memory").flatMap(Self.someAverage)
            if reading.memoryPressure == nil { reading.memoryAvailablePercent = text("/proc/meminfo").flatMap(Self.availableMemory) }
        }
        if conditions.contains(.storage) {
            reading.freeBytes = storagePaths.compactMap(freeBytes).min()
        }
        return reading
    }

    // MARK: Power

    /// What `/sys/class/power_supply` says: a machine without a system
    /// battery (a server, a desktop) is on external power; one with a
    /// battery is when a non-battery supply (mains, USB) is online or no
    /// battery discharges (charging, full, held below a charge threshold).
    /// The battery level is the mean of the system batteries' (a mouse's
    /// is not the machine's).
    func powerSupplies() -> (external: Bool, battery: Int?) {
        let folder = root + "/sys/class/power_supply"
        guard let fd = try? Syscalls.openFolder(folder) else { return (true, nil) }
        defer { Syscalls.close(fd) }
        let names = ((try? Syscalls.directoryEntries(in: fd)) ?? []).map(\.name).filter { !$0.hasPrefix(".") }.prefix(64)
        var online = false
        var batteries = 0
        var discharging = false
        var levels: [Int] = []
        for name in names {
            let base = "/sys/class/power_supply/" + name
            guard let type = text(base + "/type").map(Self.trimmed) else { continue }
            if text(base + "/scope").map(Self.trimmed) == "Device" { continue }
            if type == "Battery" {
                batteries += 1
                if text(base + "/status").map(Self.trimmed) == "Discharging" { discharging = true }
                if let level = text(base + "/capacity").map(Self.trimmed).flatMap({ Int($0) }), (0...100).contains(level) { levels.append(level) }
            } else if text(base + "/online").map(Self.trimmed) == "1" {
                online = true
            }
        }
        let external = batteries == 0 || online || !discharging
        return (external, levels.isEmpty ? nil : levels.reduce(0, +) / levels.count)
    }

    // MARK: Network

    /// Whether `/proc/net/route` or `/proc/net/ipv6_route` has a default
    /// route that is up and not a reject route (`unreachable default`, or
    /// IPv6's on `lo`); `nil` when neither can be read.
    func defaultRoute() -> Bool? {
        let ipv4 = text("/proc/net/route", limit: Self.tableLimit)
        let ipv6 = text("/proc/net/ipv6_route", limit: Self.tableLimit)
        guard ipv4 != nil || ipv6 != nil else { return nil }
        if let table = ipv4 {
            // Iface Destination Gateway Flags RefCnt Use Metric Mask …, hex.
            for line in table.split(separator: "\n").dropFirst() {
                let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                guard fields.count >= 8, fields[1] == "00000000", fields[7] == "00000000",
                    let flags = UInt32(fields[3], radix: 16), flags & 0x1 != 0, flags & 0x200 == 0
                else { continue }
                return true
            }
        }
        if let table = ipv6 {
            // destination, its prefix length, source, its length, next hop, metric, refs, use, flags, device.
            for line in table.split(separator: "\n") {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                guard fields.count >= 10, fields[1] == "00", fields[0].utf8.allSatisfy({ $0 == UInt8(ascii: "0") }),
                    fields[9] != "lo", let flags = UInt32(fields[8], radix: 16), flags & 0x1 != 0, flags & 0x200 == 0
                else { continue }
                return true
            }
        }
        return false
    }

    // MARK: Pressure and load

    /// `avg10` of the `some` line of a PSI file.
    static func someAverage(_ text: Substring) -> Double? {
        for line in text.split(separator: "\n").prefix(4) where line.hasPrefix("some ") {
            for field in line.split(separator: " ") where field.hasPrefix("avg10=") {
                guard let value = Double(field.dropFirst(6)), value.isFinite, value >= 0 else { return nil }
                return value
            }
        }
        return nil
    }

    /// The first field of `/proc/loadavg`.
    static func loadAverage(_ text: Substring) -> Double? {
        guard let first = text.split(separator: " ", maxSplits: 1).first, let value = Double(first), value.isFinite, value >= 0 else { return nil }
        return value
    }

    /// `MemAvailable` of `MemTotal`, in percent.
    static func availableMemory(_ text: Substring) -> Double? {
        var total: Double?
        var available: Double?
        for line in text.split(separator: "\n").prefix(256) {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 2, let value = UInt64(fields[1]) else { continue }
            if fields[0] == "MemTotal:" { total = Double(value) }
            if fields[0] == "MemAvailable:" { available = Double(value) }
        }
        guard let total, let available, total > 0 else { return nil }
        return min(100, available / total * 100)
    }

    /// The processors `/sys/devices/system/cpu/online` lists ("0-3,6"),
    /// else this process's count.
    func onlineProcessors() -> Int {
        guard let list = text("/sys/devices/system/cpu/online").map(Self.trimmed) else { return RunConfiguration.activeProcessorCount }
        var count = 0
        for range in list.split(separator: ",").prefix(1024) {
            let ends = range.split(separator: "-")
            guard let low = ends.first.flatMap({ Int($0) }), let high = (ends.count == 2 ? Int(ends[1]) : low), ends.count <= 2, high >= low,
                high - low < 1 << 16
            else { return RunConfiguration.activeProcessorCount }
            count += high - low + 1
        }
        return max(1, count)
    }

    /// The first line, without spaces around it ("Not charging" stays whole).
    static func trimmed(_ text: Substring) -> String {
        String(text.prefix { $0 != "\n" }.withoutSpacesAround)
    }
}
