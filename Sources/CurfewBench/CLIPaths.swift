import Curfew

/// The cases run the way a user runs Curfew: the `curfew` executable, started
/// fresh, against baselines that are fresh processes too. Every pair is
/// measured interleaved, after a warm-up pair that is not counted.
struct CLIBench {
    let options: Options
    let curfew: String
    let include: String
    let work: String

    func size(_ full: Int, tiny: Int) -> Int { options.tiny ? tiny : full }

    /// Runs `measure` once to warm up (not in tiny runs), then once per repetition.
    func repeated(_ measure: () throws -> Void) rethrows {
        if !options.tiny { try measure() }
        for _ in 0..<options.repetitions { try measure() }
    }

    /// A skipped warm-up: drops the first pair a `repeated` loop recorded.
    func droppingWarmUp(_ rows: [Row]) -> [Row] {
        guard !options.tiny else { return rows }
        return rows.map { row in
            var row = row
            if !row.values.isEmpty { row.values.removeFirst() }
            if !row.baseline.isEmpty { row.baseline.removeFirst() }
            return row
        }
    }

    /// Environment for `curfew`: a scan cache and a state store (history,
    /// checkpoints: on, as for a user) of its own under `work`.
    func environment(cache: String) -> [String: String] {
        ["XDG_CACHE_HOME": "\(work)/\(cache)", "XDG_STATE_HOME": "\(work)/\(cache)-state"]
    }

    func compile(_ source: String, _ name: String, shared: Bool) throws -> String {
        let output = "\(work)/\(name)"
        try compileC(source, to: output, include: include, shared: shared, work: work)
        return output
    }

    /// Runs `program` `count` times, two at a time, each under `timeout`, the
    /// way a shell user bounds a job without Curfew.
    func underTimeout(_ program: String, count: Int) throws -> Double {
        let list = "\(work)/xargs-input"
        try writeAll(list, Array((0..<count).map { "\($0)\n" }.joined().utf8))
        return try Command(["xargs", "-P2", "-n1", "-a", list, "timeout", "10", program]).run()
    }

    // MARK: Isolation

    /// Jobs of about 1 ms of CPU each, a worker process per job, against
    /// each as a program under `timeout`; and a worker's cost per job against
    /// posix_spawn + waitpid of /bin/true.
    func processPerJob() throws -> [Row] {
        let count = size(200, tiny: 4)
        let plugin = "\(work)/per-job"
        try? Syscalls.makeFolder(plugin, permissions: 0o755)
        _ = try compile(Programs.spinPlugin(names: (0..<count).map { "spin-\($0)" }), "per-job/libspin.so", shared: true)
        let program = try compile(Programs.spinProgram, "spin", shared: false)
        var versus = Row(
            name: "--isolate job, \(count) jobs of 1 ms", measure: "ms per job, --jobs 2", unit: "ms",
            baselineName: "each as a program under timeout, xargs -P2", target: .atMost(1))
        var overhead = Row(
            name: "--isolate job, \(count) no-op jobs", measure: "ms a job's worker adds, --jobs 1", unit: "ms",
            baselineName: "posix_spawn + waitpid of /bin/true", target: .atMost(2))
        var used = Row(
            name: "--isolate job, \(count) jobs of 1 ms, a used store", measure: "ms per job, --jobs 2", unit: "ms",
            baselineName: "each as a program under timeout, xargs -P2", target: .atMost(1))
        var sandboxed = Row(
            name: "--isolate job (sandboxed), \(count) jobs of 1 ms", measure: "ms per job, --jobs 2", unit: "ms",
            baselineName: "the same run with --no-sandbox", target: .atMost(1.1))
        var cgroups = Row(
            name: "--isolate job (a cgroup per worker), \(count) jobs of 1 ms", measure: "ms per job, --jobs 2", unit: "ms",
            baselineName: "the same run with CURFEW_CGROUPS=off", target: .atMost(1.1))
        var stored = Row(
            name: "--isolate job (the state store), \(count) jobs of 1 ms", measure: "ms per job, --jobs 2", unit: "ms",
            baselineName: "the same run with --no-state", target: .atMost(1.1))
        var alone = Row(
            name: "--isolate job, no store, sandbox or cgroup, \(count) jobs of 1 ms", measure: "ms per job, --jobs 2", unit: "ms",
            baselineName: "each as a program under timeout, xargs -P2")
        let earlier = size(20, tiny: 1)
        used.note = "the default state store after \(earlier) earlier run\(earlier == 1 ? "" : "s") of the same jobs (history, estimates), not a fresh one"
        let env = environment(cache: "cache-per-job")
        let usedEnv = environment(cache: "cache-per-job-used")
        try Command([curfew, "list", plugin], environment: env).run()  // the scan is cached: measure the runs
        try Command([curfew, "list", plugin], environment: usedEnv).run()
        for _ in 0..<earlier {
            _ = try Command([curfew, "run", "--isolate", "job", "--jobs", "2", plugin], environment: usedEnv).run()
        }
        var round = 0
        try repeated {
            // The default, sandboxed: the path users take. Every other round
            // its three comparisons run first: a run leaves work to the next
            // (the kernel frees its cgroups and scratch inodes after it), and
            // a fixed order would charge that to one side of each pair.
            round += 1
            var off = env
            off[WorkerCgroups.offVariable] = "off"
            let withoutSandbox = [curfew, "run", "--isolate", "job", "--no-sandbox", "--jobs", "2", plugin]
            let withoutCgroups = [curfew, "run", "--isolate", "job", "--jobs", "2", plugin]
            let withoutStore = [curfew, "run", "--isolate", "job", "--no-state", "--jobs", "2", plugin]
            var free = 0.0, bare = 0.0, storeless = 0.0
            if round % 2 == 0 {
                free = try Command(withoutSandbox, environment: env).run()
                bare = try Command(withoutCgroups, environment: off).run()
                storeless = try Command(withoutStore, environment: env).run()
            }
            let run = try Command([curfew, "run", "--isolate", "job", "--jobs", "2", plugin], environment: env).run()
            if round % 2 == 1 {
                free = try Command(withoutSandbox, environment: env).run()
                bare = try Command(withoutCgroups, environment: off).run()
                storeless = try Command(withoutStore, environment: env).run()
            }
            versus.values.append(run / Double(count) * 1e3)
            sandboxed.values.append(run / Double(count) * 1e3)
            sandboxed.baseline.append(free / Double(count) * 1e3)
            cgroups.values.append(run / Double(count) * 1e3)
            cgroups.baseline.append(bare / Double(count) * 1e3)
            stored.values.append(run / Double(count) * 1e3)
            stored.baseline.append(storeless / Double(count) * 1e3)
            // The run without store, sandbox or cgroup and the baseline swap
            // places every other round: each follows a full run (whose cgroups
            // and scratch the kernel frees during the next) as often as the
            // other, and the used store's run always follows one of the two,
            // which leave it nothing.
            let strippedRun = [curfew, "run", "--isolate", "job", "--no-state", "--no-sandbox", "--jobs", "2", plugin]
            var stripped = 0.0
            if round % 2 == 0 { stripped = try Command(strippedRun, environment: off).run() }
            let baseline = try underTimeout(program, count: count) / Double(count) * 1e3
            if round % 2 == 1 { stripped = try Command(strippedRun, environment: off).run() }
            versus.baseline.append(baseline)
            alone.values.append(stripped / Double(count) * 1e3)
            alone.baseline.append(baseline)
            let inUsed = try Command([curfew, "run", "--isolate", "job", "--jobs", "2", plugin], environment: usedEnv).run()
            used.values.append(inUsed / Double(count) * 1e3)
            used.baseline.append(baseline)
            let isolated = try Command(
                [curfew, "run", "--isolate", "job", "--jobs", "1", "--param", "spin-ns=0", plugin], environment: env
            ).run()
            let inProcess = try Command([curfew, "run", "--jobs", "1", "--param", "spin-ns=0", plugin], environment: env).run()
            overhead.values.append((isolated - inProcess) / Double(count) * 1e3)
            overhead.baseline.append(spawnLoop(["/bin/true"], count: count))
        }
        overhead.note = "(run --isolate job − run in process) ÷ jobs: what a worker process, sandboxed, costs a job"
        sandboxed.note = "each worker installs its call filter and makes its Landlock rules while it waits for its job (namespaces only where the kernel has no Landlock); in this run of one plugin's jobs it takes the whole sandbox then, its job's paths and scratch folder included (elsewhere those wait for the job)"
        cgroups.note = "where the host's cgroup is delegated (else the two runs are the same): each worker is moved into a cgroup of its own as it is forked, and the cgroup is killed and removed when it exits"
        alone.note = "--no-state --no-sandbox, CURFEW_CGROUPS=off: a forked worker per job, its chunks on Dispatch under its grant, without the three parts timeout has no counterpart of (each has a row of its own)"
        stored.note = "the default store, kept across the repetitions: each job's running row as it starts, its end row (with its chunk-time estimate and the history pruned), and its checkpoint read at admission"
        return droppingWarmUp([versus, used, alone, overhead, sandboxed, cgroups, stored])
    }

    /// The race contract: `expire` never overlaps a chunk and no chunk
    /// follows it, seen from inside the job, in process and in each
    /// isolation mode: every job of a plugin expires mid-loop, `--jobs 2`.
    func raceContract() throws -> Row {
        // Four plugins (a plugin holds at most CURFEW_MAX_JOBS jobs).
        let perPlugin = size(250, tiny: 1)
        let count = 4 * perPlugin
        let plugin = "\(work)/race"
        try? Syscalls.makeFolder(plugin, permissions: 0o755)
        for file in 0..<4 {
            let names = (0..<perPlugin).map { "race-\(file)-\($0)" }
            _ = try compile(Programs.racePlugin(names: names), "race/librace\(file).so", shared: true)
        }
        var row = Row(
            name: "race contract, \(count) runs in each of 3 modes", measure: "expire beside or before a chunk", unit: "runs",
            baselineName: "-", target: .absoluteAtMost(0, "0"))
        let env = environment(cache: "cache-race")
        // Tiny: CI's debug build, whose first worker may take longer than a 20 ms grant.
        let (budget, grace) = options.tiny ? ("300ms", "50ms") : ("40ms", "10ms")
        var broken = 0
        var expiredRuns = 0
        for mode in [[], ["--isolate", "job"], ["--isolate", "plugin"]] {
            let output = "\(work)/race-\(mode.last ?? "none").jsonl"
            var command = Command(
                [curfew, "run", "--json", "--jobs", "2", "--budget", budget, "--grace", grace] + mode + [plugin], environment: env,
                accepted: [0, 2])
            command.stdout = output
            try command.run()
            let lines = String(decoding: try readAll(output), as: UTF8.self).split(separator: "\n")
            // A run that ended at its deadline instead (a loaded machine) tested less: counted apart.
            expiredRuns += lines.filter { $0.contains(#""event":"finished""#) && $0.contains(#""outcome":"expired""#) }.count
            // Runs, not lines: one run may say both.
            var runs = Set<Substring>()
            let key = #""job":""#
            for line in lines where line.contains("race: ") {
                guard let at = line.indices.first(where: { line[$0...].hasPrefix(key) }) else { continue }
                runs.insert(line[line.index(at, offsetBy: key.count)...].prefix { $0 != "\"" })
            }
            broken += runs.count
        }
        row.values = [Double(broken)]
        row.note = "each job spins 200 µs chunks until its \(budget) grant expires (lead \(grace)); its own expire and chunk say when they meet; "
            + (expiredRuns == 3 * count ? "every run expired" : "\(expiredRuns) of \(3 * count) runs expired, the rest met their deadline first")
        return row
    }

    /// One-job plugins, a worker per plugin, against each as a program under
    /// `timeout`; and whether one plugin's N jobs cost linear time.
    func pluginMode() throws -> [Row] {
        let count = size(200, tiny: 4)
        let folder = "\(work)/one-job-plugins"
        try? Syscalls.makeFolder(folder, permissions: 0o755)
        let template = try compile(Programs.spinPlugin(names: ["onejob-00000"]), "onejob.so", shared: true)
        let bytes = try readAll(template)
        for index in 0..<count {
            let name = "onejob-" + String(repeating: "0", count: 5 - String(index).count) + String(index)
            try writePatched(bytes, "\(folder)/lib\(name).so", from: "onejob-00000", to: name)
        }
        let program = try compile(Programs.spinProgram, "spin", shared: false)
        var versus = Row(
            name: "--isolate plugin, \(count) one-job plugins", measure: "ms per job, --jobs 2", unit: "ms",
            baselineName: "each as a program under timeout, xargs -P2", target: .atMost(1))
        let env = environment(cache: "cache-plugin-mode")
        try Command([curfew, "list", folder], environment: env).run()
        try repeated {
            let run = try Command([curfew, "run", "--isolate", "plugin", "--jobs", "2", folder], environment: env).run()
            versus.values.append(run / Double(count) * 1e3)
            versus.baseline.append(try underTimeout(program, count: count) / Double(count) * 1e3)
        }

        // One plugin of many jobs: the cost of a job at 250 against at 100.
        let small = size(100, tiny: 3)
        let large = size(250, tiny: 6)
        var linear = Row(
            name: "--isolate plugin, one plugin of N jobs", measure: "ms per job at \(large) (beyond one job)", unit: "ms",
            baselineName: "the same at \(small)", target: .atMost(1.2))
        var plugins: [Int: String] = [:]
        for jobs in [1, small, large] {
            try? Syscalls.makeFolder("\(work)/jobs-\(jobs)", permissions: 0o755)
            plugins[jobs] = try compile(Programs.spinPlugin(names: (0..<jobs).map { "job-\($0)" }), "jobs-\(jobs)/libjobs.so", shared: true)
            try Command([curfew, "list", plugins[jobs]!], environment: env).run()
        }
        func time(_ jobs: Int) throws -> Double {
            try Command([curfew, "run", "--isolate", "plugin", "--jobs", "1", "--param", "spin-ns=0", plugins[jobs]!], environment: env).run()
        }
        try repeated {
            let one = try time(1)
            linear.baseline.append((try time(small) - one) / Double(small - 1) * 1e3)
            linear.values.append((try time(large) - one) / Double(large - 1) * 1e3)
        }
        linear.note = "(run of N no-op jobs − run of 1) ÷ (N − 1), --isolate plugin --jobs 1: linear when the two match"
        return droppingWarmUp([versus, linear])
    }

    // MARK: Scanning

    /// `curfew list` of a folder of plugins: cold (every file loaded in a
    /// scanner process of its own) against a fresh C program that dlopens
    /// them, cached against cold, and one file's cached listing with a cache
    /// that has seen thousands of other plugins against one that has not.
    func list() throws -> [Row] {
        let count = size(500, tiny: 5)
        let folder = "\(work)/list"
        try? Syscalls.makeFolder(folder, permissions: 0o755)
        let template = try compile(Programs.spinPlugin(names: ["listed-00000"]), "listed.so", shared: true)
        let bytes = try readAll(template)
        for index in 0..<count {
            let name = "listed-" + String(repeating: "0", count: 5 - String(index).count) + String(index)
            try writePatched(bytes, "\(folder)/lib\(name).so", from: "listed-00000", to: name)
        }
        let dlopenAll = try compile(Programs.dlopenAll, "dlopen-all", shared: false)
        var cold = Row(
            name: "list, \(count) plugins", measure: "ms, cold (--rescan)", unit: "ms",
            baselineName: "a C program that dlopens + dlsyms them", target: .atMost(1.5))
        // The rule that each verdict comes from a process that loaded that
        // file alone puts a fork, a dlopen and an exit under every file: the
        // floor, measured as a C program that does only that.
        let forkPerFile = try compile(Programs.forkPerFile, "fork-per-file", shared: false)
        var floor = Row(
            name: "list, \(count) plugins", measure: "ms, cold (--rescan)", unit: "ms",
            baselineName: "a C program that forks a dlopen per file", target: .atMost(1.5))
        var cached = Row(
            name: "list, \(count) plugins", measure: "ms, cached", unit: "ms", baselineName: "the same, cold (--rescan)",
            target: .atMost(0.1))
        let env = environment(cache: "cache-list")
        try repeated {
            let scanned = try Command([curfew, "list", "--rescan", folder], environment: env).run()
            cold.values.append(scanned * 1e3)
            cold.baseline.append(try Command([dlopenAll, folder]).run() * 1e3)
            floor.values.append(scanned * 1e3)
            floor.baseline.append(try Command([forkPerFile, folder]).run() * 1e3)
            cached.values.append(try Command([curfew, "list", folder], environment: env).run() * 1e3)
            cached.baseline.append(scanned * 1e3)
        }

        // What snapshots cost a run: its first run of a folder copies each
        // plugin before the scan (cold), a later one finds the copies (a
        // stat each). Both rescan, and run one job in a worker.
        var snapshotted = Row(
            name: "run --only 1 job, \(count) plugins", measure: "ms, snapshots to take (--rescan)", unit: "ms",
            baselineName: "the same, snapshots taken", target: .atMost(1.5))
        let runEnv = environment(cache: "cache-snapshots")
        let run = [curfew, "run", "--rescan", "--isolate", "job", "--only", "listed-00000", "--param", "spin-ns=0", folder]
        try repeated {
            try Command(["rm", "-rf", "\(work)/cache-snapshots/curfew/snapshots"]).run()
            snapshotted.values.append(try Command(run, environment: runEnv).run() * 1e3)
            snapshotted.baseline.append(try Command(run, environment: runEnv).run() * 1e3)
        }
        snapshotted.note = "the cost of copying every plugin once, on a run that loads one: cold − taken"

        // A cache that has seen other folders' plugins.
        let others = size(4, tiny: 2)
        var crowded = Row(
            name: "list, 1 plugin, cached", measure: "ms, the cache has seen \(others * count) other plugins", unit: "ms",
            baselineName: "the cache has seen only it", target: .atMost(1.2))
        try? Syscalls.makeFolder("\(work)/lone", permissions: 0o755)
        let lone = "\(work)/lone/liblone.so"
        try writePatched(bytes, lone, from: "listed-00000", to: "lone-000000x")
        let emptyEnv = environment(cache: "cache-lone")
        let crowdedEnv = environment(cache: "cache-crowded")
        for other in 0..<others {
            let copy = "\(work)/other-\(other)"
            try? Syscalls.makeFolder(copy, permissions: 0o755)
            for index in 0..<count { try? Syscalls.hardLink("\(folder)/lib\(listedName(index)).so", as: "\(copy)/lib\(listedName(index)).so") }
            try Command([curfew, "list", copy], environment: crowdedEnv).run()
        }
        try Command([curfew, "list", lone], environment: emptyEnv).run()
        try Command([curfew, "list", lone], environment: crowdedEnv).run()
        // Runs of a few milliseconds: five pairs a repetition, each pair in
        // the other order from the last (the first run of a pair is not
        // always the crowded one), none recorded in the warm-up.
        var warmingUp = !options.tiny
        try repeated {
            for pair in 0..<(options.tiny ? 1 : 5) {
                let crowdedFirst = pair % 2 == 0
                let first = try Command([curfew, "list", lone], environment: crowdedFirst ? crowdedEnv : emptyEnv).run() * 1e3
                let second = try Command([curfew, "list", lone], environment: crowdedFirst ? emptyEnv : crowdedEnv).run() * 1e3
                guard !warmingUp else { continue }
                crowded.values.append(crowdedFirst ? first : second)
                crowded.baseline.append(crowdedFirst ? second : first)
            }
            warmingUp = false
        }
        crowded.note = "five interleaved pairs a repetition, alternating which runs first"
        return droppingWarmUp([cold, floor, cached, snapshotted]) + [crowded]
    }

    func listedName(_ index: Int) -> String {
        "listed-" + String(repeating: "0", count: 5 - String(index).count) + String(index)
    }

    // MARK: Output

    /// A job that prints: MiB/s forwarded from a worker, against in process.
    func output() throws -> [Row] {
        let chunks = size(64, tiny: 2)
        try? Syscalls.makeFolder("\(work)/print", permissions: 0o755)
        let plugin = try compile(Programs.printPlugin, "print/libprint.so", shared: true)
        var row = Row(
            name: "output, a job printing \(chunks) MiB", measure: "MiB/s forwarded, --isolate job", unit: "MiB/s",
            baselineName: "the same in process", target: .absoluteAtLeast(100, "≥ 100 MiB/s"))
        let env = environment(cache: "cache-print")
        try Command([curfew, "list", plugin], environment: env).run()
        try repeated {
            let isolated = try Command(
                [curfew, "run", "--isolate", "job", "--budget", "60s", "--param", "chunks=\(chunks)", plugin], environment: env
            ).run()
            let inProcess = try Command([curfew, "run", "--budget", "60s", "--param", "chunks=\(chunks)", plugin], environment: env).run()
            row.values.append(Double(chunks) / isolated)
            row.baseline.append(Double(chunks) / inProcess)
        }
        row.note = "wall time of the whole run, process start and scan included, stdout to /dev/null"
        return droppingWarmUp([row])
    }

    /// Signal lateness of a POSIX timer, which `timeout` waits on, in ms:
    /// median and p99 of `count` timers in a fresh process.
    func timerLateness(count: Int) throws -> (median: Double, p99: Double) {
        let probe = "\(work)/timer-probe"
        if !Syscalls.isExecutable(probe) { _ = try compile(Programs.timerProbe, "timer-probe", shared: false) }
        var command = Command([probe, String(count)])
        command.stdout = "\(work)/timer-probe.out"
        try command.run()
        let text = String(decoding: try readAll(command.stdout), as: UTF8.self)
        let samples = text.split(separator: "\n").compactMap { Double($0) }.map { $0 / 1e6 }
        return (median(samples), percentile(samples, 99))
    }
}

/// Milliseconds per posix_spawn + waitpid of `command`, `count` times in a row
/// (its stdout to /dev/null).
func spawnLoop(_ command: [String], count: Int) -> Double {
    let program = Program(command, onlyOutput: true, searchesPath: false)
    let start = now()
    for _ in 0..<count {
        precondition((try? program.run()) != nil, "cannot spawn \(command[0])")
    }
    return Double(now() - start) / Double(count) / 1e6
}
