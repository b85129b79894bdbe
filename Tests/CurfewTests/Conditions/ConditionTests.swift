import Foundation
import Synchronization
import Testing

@testable import Curfew
@testable import CurfewHost

/// A folder of files shaped like the kernel's, for ``MachineReader``.
final class FakeMachine: Sendable {
    let root = Fixtures.temporaryFolder("machine")
    let free = Atomic<UInt64>(UInt64.max)
    /// How often the free space was read: each read of the machine reads it.
    let reads = Atomic<Int>(0)

    func write(_ path: String, _ text: String) {
        let full = root + path
        try! FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try! text.write(toFile: full, atomically: true, encoding: .utf8)
    }

    func remove(_ path: String) {
        try? FileManager.default.removeItem(atPath: root + path)
    }

    /// A laptop: a mains adapter `online` or not, a battery at `level`.
    func power(online: Bool, level: Int = 50) {
        write("/sys/class/power_supply/AC/type", "Mains\n")
        write("/sys/class/power_supply/AC/online", online ? "1\n" : "0\n")
        write("/sys/class/power_supply/BAT0/type", "Battery\n")
        write("/sys/class/power_supply/BAT0/status", online ? "Charging\n" : "Discharging\n")
        write("/sys/class/power_supply/BAT0/capacity", "\(level)\n")
    }

    func route(up: Bool) {
        var table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        table += "eth0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
        if up { table += "eth0\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n" }
        write("/proc/net/route", table)
        // Only lo's reject route, which is no way out.
        write("/proc/net/ipv6_route", "00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n")
    }

    func pressure(_ resource: String, some: Double) {
        write("/proc/pressure/\(resource)", "some avg10=\(some) avg60=1.00 avg300=0.50 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    }

    var reader: MachineReader {
        MachineReader(root: root, storagePaths: ["/state"]) { [self] _ in
            reads.add(1, ordering: .relaxed)
            return free.load(ordering: .relaxed)
        }
    }
}

/// The readers: real parsing of the kernel's files, on a fake machine.
@Suite struct MachineReaderTests {
    @Test func powerComesFromTheSupplies() {
        let machine = FakeMachine()
        #expect(machine.reader.read(for: [.externalPower]).externalPower == true, "a machine with no supply at all is a server on mains")
        machine.power(online: false, level: 15)
        var reading = machine.reader.read(for: [.externalPower, .battery])
        #expect(reading.externalPower == false)
        #expect(reading.batteryPercent == 15)
        machine.power(online: true, level: 15)
        reading = machine.reader.read(for: [.externalPower])
        #expect(reading.externalPower == true)
        // Plugged in but held below a charge threshold: on external power still.
        machine.write("/sys/class/power_supply/AC/online", "0\n")
        machine.write("/sys/class/power_supply/BAT0/status", "Not charging\n")
        #expect(machine.reader.read(for: [.externalPower]).externalPower == true)
        // A desktop: an offline USB-C supply, no battery: on external power.
        let desktop = FakeMachine()
        desktop.write("/sys/class/power_supply/ucsi-source-psy-1/type", "USB\n")
        desktop.write("/sys/class/power_supply/ucsi-source-psy-1/online", "0\n")
        #expect(desktop.reader.read(for: [.externalPower]).externalPower == true)
        // A mouse's battery is not the machine's.
        machine.write("/sys/class/power_supply/BAT0/status", "Discharging\n")
        machine.write("/sys/class/power_supply/hid-mouse/type", "Battery\n")
        machine.write("/sys/class/power_supply/hid-mouse/scope", "Device\n")
        machine.write("/sys/class/power_supply/hid-mouse/capacity", "90\n")
        #expect(machine.reader.read(for: [.battery]).batteryPercent == 15)
    }

    @Test func aDefaultRouteIsTheNetwork() {
        let machine = FakeMachine()
        #expect(machine.reader.read(for: [.network]).defaultRoute == nil, "no table read: unknown, which holds")
        machine.route(up: false)
        #expect(machine.reader.read(for: [.network]).defaultRoute == false)
        machine.route(up: true)
        #expect(machine.reader.read(for: [.network]).defaultRoute == true)
        // `ip route add unreachable default`: a route, but no way out.
        machine.write("/proc/net/route", "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n*\t00000000\t00000000\t0201\t0\t0\t0\t00000000\t0\t0\t0\n")
        #expect(machine.reader.read(for: [.network]).defaultRoute == false)
        // An IPv6 default route alone is one too.
        machine.route(up: false)
        machine.write("/proc/net/ipv6_route", "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00450003     eth0\n")
        #expect(machine.reader.read(for: [.network]).defaultRoute == true)
    }

    @Test func pressureElseLoadAndAvailableMemory() {
        let machine = FakeMachine()
        machine.pressure("cpu", some: 63.5)
        machine.pressure("memory", some: 0.25)
        var reading = machine.reader.read(for: [.cpu, .memory])
        #expect(reading.cpuPressure == 63.5)
        #expect(reading.memoryPressure == 0.25)
        #expect(reading.loadPerCore == nil)
        // A kernel without PSI: the load per online processor, and MemAvailable.
        machine.remove("/proc/pressure")
        machine.write("/proc/loadavg", "3.00 2.00 1.00 4/321 9999\n")
        machine.write("/sys/devices/system/cpu/online", "0-1,3\n")
        machine.write("/proc/meminfo", "MemTotal:       1000 kB\nMemFree:         10 kB\nMemAvailable:     50 kB\n")
        reading = machine.reader.read(for: [.cpu, .memory])
        #expect(reading.loadPerCore == 1.0)
        #expect(reading.memoryAvailablePercent == 5.0)
        // Malformed files read as unknown, and an unknown holds.
        machine.write("/proc/loadavg", "nan\n")
        machine.write("/proc/meminfo", "MemTotal: lots\n")
        reading = machine.reader.read(for: [.cpu, .memory])
        #expect(reading.loadPerCore == nil && reading.memoryAvailablePercent == nil)
        var needs = JobConditions()
        needs.cpuPercent = 50
        needs.memoryPercent = 10
        #expect(needs.unmet(on: reading).isEmpty)
    }

    /// The kernel's `/proc` files say they are empty. Before, a read sized
    /// by that saw one byte of each: no route, no pressure, no memory.
    @Test func theLiveMachineReadsWhole() throws {
        var reader = MachineReader()
        reader.storagePaths = [NSTemporaryDirectory()]
        let reading = reader.read(for: Set(Condition.allCases))
        if FileManager.default.fileExists(atPath: "/proc/pressure/cpu") {
            #expect(reading.cpuPressure != nil && reading.memoryPressure != nil)
        } else {
            #expect(reading.loadPerCore != nil && reading.memoryAvailablePercent != nil)
        }
        let table = try String(contentsOfFile: "/proc/net/route", encoding: .utf8)
        let routes = table.split(separator: "\n").dropFirst().map { $0.split(whereSeparator: \.isWhitespace) }
        let expected = routes.contains { $0.count >= 8 && $0[1] == "00000000" && $0[7] == "00000000" } || reading.defaultRoute == true
        #expect(reading.defaultRoute == expected)
        #expect(reading.freeBytes != nil)
    }

    @Test func eachConditionIsMetOrNamed() {
        var needs = JobConditions().adding(Set(Condition.allCases))
        var reading = MachineReading()
        reading.externalPower = false
        reading.batteryPercent = 10
        reading.defaultRoute = false
        reading.cpuPressure = 50
        reading.memoryPressure = 10
        reading.freeBytes = (1 << 30) - 1
        #expect(needs.unmet(on: reading) == [.externalPower, .network, .storage, .cpu, .memory, .battery])
        reading.externalPower = true  // charging: a low battery is no reason to wait
        reading.defaultRoute = true
        reading.cpuPressure = 49.9
        reading.memoryPressure = 9.9
        reading.freeBytes = 1 << 30
        #expect(needs.unmet(on: reading).isEmpty)
        needs.storageBytes = 0
        #expect(needs.required == Set(Condition.allCases).subtracting([.storage]))
    }
}

/// `conditions` in the config: each key, its errors, and `false` over the defaults.
@Suite struct ConditionConfigTests {
    @Test func theConfigReadsEachCondition() throws {
        let config = try ServeConfig.parse(Array(#"""
            {"defaults": {"conditions": {"power": true, "storage": "2GiB"}},
             "jobs": {"a": {"conditions": {"network": true, "cpu": 30, "memory": true, "battery": true}},
                      "b": {"conditions": {"power": false, "storage": false}}}}
            """#.utf8), file: "c.json")
        let a = config.policy(for: "a").conditions
        #expect(a.required == Set(Condition.allCases))
        #expect(a.storageBytes == 2 << 30 && a.cpuPercent == 30 && a.memoryPercent == 10 && a.batteryPercent == 20)
        #expect(config.policy(for: "b").conditions.required.isEmpty, "false turns the defaults' off")
        #expect(config.policy(for: "c").conditions.required == [.externalPower, .storage])
    }

    @Test(arguments: [
        (#"{"conditions": ["power"]}"#, #""conditions": must be an object"#),
        (#"{"conditions": {"charging": true}}"#, #""conditions.charging": unknown key"#),
        (#"{"conditions": {"power": 1}}"#, "must be true or false"),
        (#"{"conditions": {"cpu": 0}}"#, "a percentage from 1 to 100"),
        (#"{"conditions": {"battery": 101}}"#, "a percentage from 1 to 100"),
        (#"{"conditions": {"storage": "lots"}}"#, "a size of free space"),
    ])
    func aBadConditionIsNamed(policy: String, expected: String) {
        do {
            _ = try ServeConfig.parse(Array(#"{"jobs": {"a": \#(policy)}}"#.utf8), file: "c.json")
            Issue.record("accepted \(policy)")
        } catch {
            #expect(error.description.contains(expected), "\(error.description)")
        }
    }

    /// Before, a continuous job expired off the charger counted a failure
    /// and backed off, each time, even once power was back.
    @Test func aContinuousJobThatLostItsConditionsRestartsWithoutBackoff() {
        let start = WallTime(milliseconds: 1_000_000)
        var schedule = Schedule(seed: 1)
        schedule.add(job: "c", policy: JobPolicy(), isContinuous: true, persisted: nil, now: start)
        #expect(schedule.takeDue(now: start) == [.start("c")])
        schedule.started(job: "c", now: start)
        let later = start.later(by: .seconds(5))
        #expect(schedule.finished(job: "c", outcome: .expired, requested: nil, lostConditions: true, now: later) == later)
        #expect(schedule.entries["c"]?.failures == 0)
    }

    /// `ctl run` of a run held for its conditions: no starting deadline drops it.
    @Test func aHeldRunTakenByHandIsNotAbandoned() {
        let start = WallTime(milliseconds: 1_000_000)
        var schedule = Schedule(seed: 1)
        var policy = JobPolicy()
        policy.every = .seconds(600)
        policy.startingDeadline = .seconds(1)
        schedule.add(job: "j", policy: policy, isContinuous: false, persisted: nil, now: start)
        #expect(schedule.takeDue(now: start) == [.start("j")])
        schedule.takeByHand(job: "j")
        let abandoned = schedule.abandon(job: "j")
        #expect(!abandoned)
    }

    @Test func aMaskIsReadBitByBit() {
        #expect(Condition.set(of: 0) == [])
        #expect(Condition.set(of: 0b10_0001) == [.externalPower, .battery])
        #expect(Condition.set(of: 1 << 6) == nil, "a bit this build does not know")
        #expect(Condition.mask(of: Condition.allCases) == 0b11_1111)
    }
}

extension ProcessTests.First {
    /// `curfew serve` holds a due run until its conditions hold, and
    /// expires a run whose condition stops holding.
    @Suite(.timeLimit(.minutes(2))) struct ConditionServeTests {
        /// What each condition's fake files say when it does not hold, and
        /// when it does. Each asks for 1K free too (always there), so each
        /// read of the machine counts in ``FakeMachine/reads``.
        struct Case: Sendable, CustomStringConvertible {
            let condition: Condition
            let policy: String
            let unmet: @Sendable (FakeMachine) -> Void
            let met: @Sendable (FakeMachine) -> Void
            var description: String { condition.rawValue }
        }

        static let cases: [Case] = [
            Case(condition: .externalPower, policy: #"{"power": true, "storage": "1K"}"#, unmet: { $0.power(online: false) }, met: { $0.power(online: true) }),
            Case(condition: .network, policy: #"{"network": true, "storage": "1K"}"#, unmet: { $0.route(up: false) }, met: { $0.route(up: true) }),
            Case(condition: .storage, policy: #"{"storage": "1GiB"}"#, unmet: { $0.free.store(1 << 20, ordering: .relaxed) },
                 met: { $0.free.store(2 << 30, ordering: .relaxed) }),
            Case(condition: .cpu, policy: #"{"cpu": 40, "storage": "1K"}"#, unmet: { $0.pressure("cpu", some: 75) }, met: { $0.pressure("cpu", some: 5) }),
            Case(condition: .memory, policy: #"{"memory": true, "storage": "1K"}"#, unmet: { $0.pressure("memory", some: 30) }, met: { $0.pressure("memory", some: 0) }),
            Case(condition: .battery, policy: #"{"battery": 30, "storage": "1K"}"#, unmet: { $0.power(online: false, level: 12) },
                 met: { $0.power(online: false, level: 80) }),
        ]

        final class Seen: Sendable {
            let events = Mutex<[(RunEvent, ContinuousClock.Instant)]>([])
            func started(_ job: String) -> ContinuousClock.Instant? {
                events.withLock { $0.first { if case .started(job, _, _) = $0.0 { true } else { false } }?.1 }
            }
            func expiring(_ job: String) -> ExpirationReason? {
                events.withLock { list in
                    for (event, _) in list { if case .expiring(job, let reason) = event { return reason } }
                    return nil
                }
            }
            func logs(_ job: String) -> [String] {
                events.withLock { $0.compactMap { if case .log(job, _, let text) = $0.0 { text } else { nil } } }
            }
            func finished(_ job: String) -> Int {
                events.withLock { $0.filter { if case .finished(let result) = $0.0 { result.job == job } else { false } }.count }
            }
        }

        func serve(_ jobs: String, on machine: FakeMachine, seen: Seen) throws -> Server {
            let folder = Fixtures.temporaryFolder("served")
            try FileManager.default.copyItem(atPath: try Fixtures.compile("condition_jobs.c"), toPath: folder + "/jobs.so")
            var options = Server.Options(folders: [folder])
            options.run.workerExecutable = Fixtures.curfewExecutable
            options.machine = machine.reader
            options.config = try ServeConfig.parse(Array(#"{"defaults": {"enabled": false}, "jobs": \#(jobs)}"#.utf8), file: "test.json")
            let server = try Server(options: options, onEvent: { event, _ in
                seen.events.withLock { $0.append((event, ContinuousClock.now)) }
            }, onNotice: { _ in })
            try server.start()
            return server
        }

        func until(_ done: () -> Bool) async throws {
            let give = ContinuousClock.now + .seconds(30)
            while !done() && ContinuousClock.now < give { try await Task.sleep(for: .milliseconds(5)) }
        }

        /// Before conditions, each job ran at once whatever the machine said.
        @Test(arguments: cases)
        func aDueRunWaitsForItsConditionThenRunsWithinASecond(_ test: Case) async throws {
            let job = "once"
            let machine = FakeMachine()
            test.unmet(machine)
            let seen = Seen()
            let server = try serve(#"{"once": {"enabled": true, "budget": "2s", "conditions": \#(test.policy)}}"#, on: machine, seen: seen)
            try await until { server.states().first { $0.job == job }?.heldFor == [test.condition] }
            #expect(server.states().first { $0.job == job }?.heldFor == [test.condition])
            // Read again, and it still waits.
            let reads = machine.reads.load(ordering: .relaxed)
            try await until { machine.reads.load(ordering: .relaxed) >= reads + 1 }
            #expect(seen.started("once") == nil, "it waits while its \(test.condition) does not hold")
            let status = server.answer(Array(#"{"command": "status"}"#.utf8))
            #expect(status.contains(#""state":"waiting","waiting_for":["\#(test.condition.rawValue)"]"#), "\(status)")
            let told = ContinuousClock.now
            test.met(machine)
            try await until { seen.finished("once") == 1 }
            let started = try #require(seen.started("once"))
            #expect(told.duration(to: started) < .seconds(1), "started \(told.duration(to: started)) after its condition held")
            #expect(seen.logs("once") == ["once ran"])
            await withCheckedContinuation { done in server.stop { done.resume() } }
        }

        /// `ctl run` starts a held job now, and its run is not held to the
        /// conditions; before, it answered that the job was running already.
        @Test func aHeldJobRunsWhenAskedByHand() async throws {
            let job = "once"
            let machine = FakeMachine()
            machine.power(online: false)
            let seen = Seen()
            let server = try serve(#"{"once": {"enabled": true, "budget": "2s", "conditions": {"power": true}}}"#, on: machine, seen: seen)
            try await until { server.states().first { $0.job == job }?.heldFor == [.externalPower] }
            #expect(server.perform(.run("once")) == .success("Started 'once', which was waiting for its conditions."))
            try await until { seen.finished("once") == 1 }
            #expect(seen.logs("once") == ["once ran"])
            #expect(server.states().first { $0.job == job }?.heldFor == [])
            await withCheckedContinuation { done in server.stop { done.resume() } }
        }

        /// Before, a job ran on when the machine left the charger.
        @Test func aRunIsExpiredWhenItsConditionStopsHolding() async throws {
            let machine = FakeMachine()
            machine.power(online: true)
            let seen = Seen()
            let server = try serve(#"{"steady": {"enabled": true, "budget": "30s", "conditions": {"power": true}}}"#, on: machine, seen: seen)
            try await until { seen.started("steady") != nil }
            let told = ContinuousClock.now
            machine.power(online: false)
            try await until { seen.finished("steady") == 1 }
            #expect(seen.expiring("steady") == .conditions)
            let reason = seen.events.withLock { $0.compactMap { if case .finished(let result) = $0.0 { result.reason } else { nil } }.first }
            #expect(reason?.hasPrefix("a condition it runs under stopped holding") == true, "history's reason: \(reason ?? "none")")
            #expect(seen.logs("steady").contains("expired with reason 5"), "\(seen.logs("steady"))")
            #expect(told.duration(to: .now) < .seconds(5), "long before its 30 s budget")
            await withCheckedContinuation { done in server.stop { done.resume() } }
        }

        /// A job asks for external power mid-run (in its worker): this run
        /// is expired off power, and its next waits for power.
        @Test func aJobAsksForConditionsOfItsOwn() async throws {
            let job = "asks"
            let machine = FakeMachine()
            machine.power(online: false)
            let seen = Seen()
            let server = try serve(#"{"asks": {"enabled": true, "every": "200ms", "budget": "30s"}}"#, on: machine, seen: seen)
            try await until { seen.finished("asks") == 1 }
            #expect(seen.expiring("asks") == .conditions)
            #expect(seen.logs("asks").filter { $0.contains("answered") } == ["power answered 0", "unknown answered 1"], "\(seen.logs("asks"))")
            try await until { server.states().first { $0.job == job }?.heldFor == [.externalPower] }
            #expect(server.states().first { $0.job == job }?.heldFor == [.externalPower], "its next run waits for power")
            machine.power(online: true)
            try await until { seen.events.withLock { $0.filter { if case .started("asks", _, _) = $0.0 { true } else { false } }.count } == 2 }
            #expect(server.states().first { $0.job == job }?.heldFor == [])
            await withCheckedContinuation { done in server.stop { done.resume() } }
        }

        /// Before, each call was an event, and a read of the machine by the
        /// server: a job asking in a loop flooded both. A run may change what
        /// it asks for 64 times; asking for the same again is free.
        @Test func aJobThatAsksInALoopIsBounded() async throws {
            let plugin = try Fixtures.compile("condition_jobs.c")
            let job = try #require(try PluginLoader().load(plugin).jobs.first { $0.name == "asks" })
            var configuration = RunConfiguration()
            configuration.policy = try GrantPolicy(budget: .seconds(10))
            configuration.parameters = ["flood": "1"]
            configuration.watchesConditions = true
            let heard = Mutex<(events: Int, logs: [String])>((0, []))
            let runner = Runner(jobs: [job], configuration: configuration) { event, _ in
                switch event {
                case .conditionsRequired: heard.withLock { $0.events += 1 }
                case .log(_, _, let text): heard.withLock { $0.logs.append(text) }
                default: break
                }
            }
            _ = await runner.run()
            // 64 changes taken; then only the set the host has (network, half
            // of the remaining 36), and never power again.
            #expect(heard.withLock { $0.events } == 64)
            #expect(heard.withLock { $0.logs } == ["conditions not required: a run may change them 64 times", "flood: 82 taken, 118 refused"])
        }

        /// A batch holds no run to conditions: the call says so.
        @Test func aBatchHasNoConditions() async throws {
            let plugin = try Fixtures.compile("condition_jobs.c")
            let job = try #require(try PluginLoader().load(plugin).jobs.first { $0.name == "asks" })
            var configuration = RunConfiguration()
            configuration.policy = try GrantPolicy(budget: .milliseconds(300))
            let logs = Mutex<[String]>([])
            let runner = Runner(jobs: [job], configuration: configuration) { event, _ in
                if case .log(_, _, let text) = event { logs.withLock { $0.append(text) } }
            }
            _ = await runner.run()
            #expect(logs.withLock { $0 }.filter { $0.contains("answered") } == ["power answered 3", "unknown answered 1"])
        }
    }
}
