import Curfew
import CurfewFormats

/// The conditions a job's runs wait for, and lose their run over, with the
/// threshold of each (the policy's `conditions`). A field left `nil` is not
/// set here (the defaults' applies); set to off (`false` in the config), it
/// is not asked for, whatever the defaults say.
public struct JobConditions: Sendable, Equatable {
    /// On mains power or a charger.
    public var externalPower: Bool?
    /// A default route up.
    public var network: Bool?
    /// At least this many bytes free on the state store's and the scratch
    /// folders' file systems; zero: off.
    public var storageBytes: UInt64?
    /// CPU pressure (`some avg10` of `/proc/pressure/cpu`, a percentage)
    /// below this; zero: off. Without PSI: the load per core below 1.
    public var cpuPercent: Int?
    /// Memory pressure (`some avg10` of `/proc/pressure/memory`) below this
    /// percentage; zero: off. Without PSI: at least this share of memory available.
    public var memoryPercent: Int?
    /// The battery charged at least this much (percent), or charging, or
    /// none there; zero: off.
    public var batteryPercent: Int?

    /// The thresholds `true` means in the config, and `require_conditions` asks for.
    public static let defaultStorageBytes: UInt64 = 1 << 30
    public static let defaultCPUPercent = 50
    public static let defaultMemoryPercent = 10
    public static let defaultBatteryPercent = 20

    public init() {}

    /// The conditions asked for (off ones left out).
    public var required: Set<Condition> {
        var set: Set<Condition> = []
        if externalPower == true { set.insert(.externalPower) }
        if network == true { set.insert(.network) }
        if (storageBytes ?? 0) > 0 { set.insert(.storage) }
        if (cpuPercent ?? 0) > 0 { set.insert(.cpu) }
        if (memoryPercent ?? 0) > 0 { set.insert(.memory) }
        if (batteryPercent ?? 0) > 0 { set.insert(.battery) }
        return set
    }

    public var isEmpty: Bool { required.isEmpty }

    /// These conditions with every field left out taken from `base`.
    public func over(_ base: JobConditions) -> JobConditions {
        var merged = self
        merged.externalPower = externalPower ?? base.externalPower
        merged.network = network ?? base.network
        merged.storageBytes = storageBytes ?? base.storageBytes
        merged.cpuPercent = cpuPercent ?? base.cpuPercent
        merged.memoryPercent = memoryPercent ?? base.memoryPercent
        merged.batteryPercent = batteryPercent ?? base.batteryPercent
        return merged
    }

    /// These conditions and those a job asked for (`require_conditions`),
    /// the latter at the default thresholds where these set none.
    public func adding(_ asked: Set<Condition>) -> JobConditions {
        var merged = self
        for condition in asked {
            switch condition {
            case .externalPower: merged.externalPower = true
            case .network: merged.network = true
            case .storage: if (storageBytes ?? 0) == 0 { merged.storageBytes = Self.defaultStorageBytes }
            case .cpu: if (cpuPercent ?? 0) == 0 { merged.cpuPercent = Self.defaultCPUPercent }
            case .memory: if (memoryPercent ?? 0) == 0 { merged.memoryPercent = Self.defaultMemoryPercent }
            case .battery: if (batteryPercent ?? 0) == 0 { merged.batteryPercent = Self.defaultBatteryPercent }
            }
        }
        return merged
    }

    /// The conditions asked for that `machine` does not meet, in the
    /// header's order. One the machine could not be read for holds: a
    /// reader that fails must not hold every job for ever.
    public func unmet(on machine: MachineReading) -> [Condition] {
        var unmet: [Condition] = []
        if externalPower == true, machine.externalPower == false { unmet.append(.externalPower) }
        if network == true, machine.defaultRoute == false { unmet.append(.network) }
        if let bytes = storageBytes, bytes > 0, let free = machine.freeBytes, free < bytes { unmet.append(.storage) }
        if let percent = cpuPercent, percent > 0 {
            if let pressure = machine.cpuPressure {
                if pressure >= Double(percent) { unmet.append(.cpu) }
            } else if let load = machine.loadPerCore, load >= 1 {
                unmet.append(.cpu)
            }
        }
        if let percent = memoryPercent, percent > 0 {
            if let pressure = machine.memoryPressure {
                if pressure >= Double(percent) { unmet.append(.memory) }
            } else if let available = machine.memoryAvailablePercent, available < Double(percent) {
                unmet.append(.memory)
            }
        }
        if let percent = batteryPercent, percent > 0, let level = machine.batteryPercent, level < percent, machine.externalPower != true {
            unmet.append(.battery)
        }
        return unmet
    }
}

extension JobConditions {
    /// The keys of a policy's `conditions`.
    static let keys = ["power", "network", "storage", "cpu", "memory", "battery"]

    /// `{"power": true, "storage": "2GiB", "cpu": 30, …}`: each `true` (the
    /// default threshold), `false` (off), or its threshold.
    init(_ value: JSONValue, at place: PolicyPlace) throws(CurfewError) {
        self.init()
        guard case .object(let members) = value else {
            throw place.error("conditions", "must be an object of \(Self.keys.map { "\"\($0)\"" }.joined(separator: ", ")), not \(value.kind)")
        }
        for (key, member) in members {
            let where_ = "conditions." + key
            switch key {
            case "power", "network":
                guard case .bool(let flag) = member else { throw place.error(where_, "must be true or false, not \(member.kind)") }
                if key == "power" { externalPower = flag } else { network = flag }
            case "storage":
                switch member {
                case .bool(let flag): storageBytes = flag ? Self.defaultStorageBytes : 0
                default:
                    guard let text = member.stringValue, let bytes = Quantities.size(text), bytes > 0 else {
                        throw place.error(where_, "must be true, false or a size of free space such as \"2GiB\"")
                    }
                    storageBytes = bytes
                }
            case "cpu", "memory", "battery":
                let percent: Int
                switch member {
                case .bool(let flag):
                    percent = flag ? (key == "cpu" ? Self.defaultCPUPercent : key == "memory" ? Self.defaultMemoryPercent : Self.defaultBatteryPercent) : 0
                default:
                    guard let count = member.integerValue, (1...100).contains(count) else {
                        throw place.error(where_, "must be true, false or a percentage from 1 to 100")
                    }
                    percent = Int(count)
                }
                switch key {
                case "cpu": cpuPercent = percent
                case "memory": memoryPercent = percent
                default: batteryPercent = percent
                }
            default:
                throw place.error(where_, "unknown key (conditions are \(Self.keys.map { "\"\($0)\"" }.joined(separator: ", ")))")
            }
        }
    }
}
