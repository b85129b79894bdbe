import Curfew
import CurfewHost
import CurfewFormats

/// Every subcommand's description: its words, its options and what each
/// does, and the checks made once all are read.
enum Specs {
    // MARK: run

    /// `run`'s arguments as they are read: the grant is made once both
    /// `--budget` and `--grace` are known.
    struct RunDraft: Sendable {
        var options = RunOptions()
        var budget = GrantPolicy.defaultBudget
        var grace: Duration?
        var stall: Duration?
        /// `--sandbox` (true) or `--no-sandbox` (false), if given.
        var sandbox: Bool?
        /// What `--network`, `--allow-read`, `--allow-write` and `--allow-exec` grant.
        var grants = SandboxPolicy()
        var grantsGiven = false

        /// The options, checked as a whole.
        func finished(_ command: Subcommand) throws(UsageError) -> RunOptions {
            var options = options
            if options.noState && options.stateFolder != nil {
                throw UsageError("--state and --no-state contradict each other", command: command)
            }
            if options.isolation == .none && options.limits != ResourceLimits() {
                throw UsageError("--memory, --cpu-time and --open-files need --isolate job or plugin", command: command)
            }
            if sandbox == false && grantsGiven {
                throw UsageError("--network and --allow-* grant what a sandbox confines: they contradict --no-sandbox", command: command)
            }
            if grants.read.count > SandboxPolicy.maximumPaths || grants.write.count > SandboxPolicy.maximumPaths {
                throw UsageError("--allow-read and --allow-write take at most \(SandboxPolicy.maximumPaths) paths each", command: command)
            }
            // On wherever a worker runs, unless --no-sandbox; in process, asked for, it is an error.
            if options.isolation == .none {
                if sandbox == true || grantsGiven {
                    throw UsageError(
                        "--sandbox and its grants need --isolate job or plugin: in process, plugin code has every right the host has",
                        command: command)
                }
            } else if sandbox != false {
                options.sandbox = grants
            }
            options.policy = try policy(budget: budget, grace: grace, command: command)
            options.policy.stall = stall
            return options
        }
    }

    static let runOptions: [OptionSpec<RunDraft>] = [
        budget(\RunDraft.budget, help: "Time each job's grant lasts, from its start to its hard deadline, e.g. 180s, 500ms, 2m. (default: 180s)"),
        grace(\RunDraft.grace, help: "Lead of the expiration handler before the deadline. (default: 5s, at most a quarter of the budget)"),
        OptionSpec(
            ["--stall"], value: "duration",
            help: "Expire a job (stalled) whose progress does not move for this long, continuous jobs too. (default: never)"
        ) { draft, given throws(UsageError) in
            let stall = try duration(given)
            guard stall >= GrantPolicy.minimumStall else { throw given.invalid("the stall time must be at least 100ms") }
            draft.stall = stall
        },
        OptionSpec(
            ["--jobs"], value: "n",
            help: "Run at most n jobs at once. (default: the number of processors it may run on, within its control group's CPU limit)"
        ) { draft, given throws(UsageError) in
            guard let count = Int(given.text), (1...1024).contains(count) else { throw given.invalid("use a whole number from 1 to 1024") }
            draft.options.jobs = count
        },
        OptionSpec(["--only"], value: "name", help: "Run only the named job; repeat for more.", repeatable: true) { draft, given in
            draft.options.only.append(given.text)
        },
        parameter(\RunDraft.options.parameters, help: "A parameter every job can read with param(); repeat for more."),
        OptionSpec(
            ["--allow-continuous"],
            help: "Run continuous jobs, without a budget, until they finish or the host stops: every background mode is allowed."
        ) { draft, _ in draft.options.allowContinuous = true },
        OptionSpec(
            ["--allow-mode"], value: "mode",
            help: "Allow a background mode (audio, voip, location, newsstand-content, external-accessory, bluetooth-central, bluetooth-peripheral, or x-NAME): a continuous job runs when every mode it declares is allowed; repeat for more.",
            repeatable: true, choices: BackgroundMode.known
        ) { draft, given throws(UsageError) in
            guard BackgroundMode.isValidName(given.text) else {
                throw given.invalid("use one of \(BackgroundMode.known.joined(separator: ", ")), or x- and a name of your own")
            }
            draft.options.allowedModes.insert(given.text)
        },
        insecure(\RunDraft.options.allowInsecurePlugins),
        rescan(\RunDraft.options.rescan),
        .flag("--json", help: "Print events as JSON Lines on stdout; human messages go to stderr.", \RunDraft.options.json),
        .flag("--verbose", help: "Also show jobs' debug messages.", \RunDraft.options.verbose),
        stateFolder(\RunDraft.options.stateFolder),
        .flag("--no-state", help: "Keep no state: jobs cannot save checkpoints, and the run is not in the history.", \RunDraft.options.noState),
        OptionSpec(
            ["--isolate"], value: "mode",
            help: "none: jobs run in this process, which trusts the plugin (its crash ends the host); plugin: a worker process per plugin file; job: a worker process per job, so a crash, a hang or a limit ends only that job. (default: none)",
            choices: Isolation.allCases.map(\.rawValue)
        ) { draft, given throws(UsageError) in
            guard let isolation = Isolation(rawValue: given.text) else { throw given.invalid("use none, plugin or job") }
            draft.options.isolation = isolation
        },
        OptionSpec(["--memory"], value: "size", help: "With --isolate: each worker's address space limit, e.g. 512MiB.") { draft, given throws(UsageError) in
            guard let bytes = Quantities.size(given.text), bytes >= ResourceLimits.minimumMemoryBytes else {
                throw given.invalid(
                    "use a size of at least \(ResourceLimits.minimumMemoryBytes >> 20)MiB (a worker needs that much address space to load any plugin), such as 256MiB or 2GiB")
            }
            draft.options.limits.memoryBytes = bytes
        },
        OptionSpec(["--cpu-time"], value: "duration", help: "With --isolate: each worker's CPU time limit.") { draft, given throws(UsageError) in
            let cpu = try duration(given)
            guard cpu >= .seconds(1) else { throw given.invalid("use at least 1s") }
            draft.options.limits.cpuSeconds = UInt64(cpu.seconds.rounded(.up))
        },
        OptionSpec(["--open-files"], value: "n", help: "With --isolate: each worker's limit on open files.") { draft, given throws(UsageError) in
            let ceiling = ResourceLimits.maximumOpenFiles
            guard given.text.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let count = UInt64(given.text), count >= 16, count <= ceiling else {
                throw given.invalid("use a whole number from 16 to \(ceiling) (the most this user may open here)")
            }
            draft.options.limits.openFiles = count
        },
        OptionSpec(
            ["--sandbox"],
            help: "Confine each worker before it loads a plugin: it reads only the system's libraries, its plugin and what --allow-read names, writes only a scratch folder of its own ($CURFEW_SCRATCH) and what --allow-write names, reaches no network, and cannot exec, trace or signal other processes. (default with --isolate job or plugin)"
        ) { draft, _ in draft.sandbox = true },
        OptionSpec(["--no-sandbox"], help: "Run workers with every right of this user: for trusted plugins only.") { draft, _ in draft.sandbox = false },
        OptionSpec(
            ["--network"], value: "access", help: "In the sandbox: off (no network), loopback (TCP to this machine's loopback addresses only) or on. (default: off)",
            choices: SandboxPolicy.Network.allCases.map(\.rawValue)
        ) { draft, given throws(UsageError) in
            guard let network = SandboxPolicy.Network(rawValue: given.text) else { throw given.invalid("use off, loopback or on") }
            draft.grants.network = network
            draft.grantsGiven = true
        },
        OptionSpec(["--allow-read"], value: "path", help: "In the sandbox: a file or folder jobs may read; repeat for more.", repeatable: true) {
            draft, given throws(UsageError) in
            draft.grants.read.append(try grantedPath(given))
            draft.grantsGiven = true
        },
        OptionSpec(
            ["--allow-write"], value: "path", help: "In the sandbox: a file or folder jobs may read and change; repeat for more.", repeatable: true
        ) { draft, given throws(UsageError) in
            draft.grants.write.append(try grantedPath(given))
            draft.grantsGiven = true
        },
        OptionSpec(["--allow-exec"], help: "In the sandbox: jobs may exec programs they can read (/usr/bin and the like).") { draft, _ in
            draft.grants.allowsExec = true
            draft.grantsGiven = true
        },
    ]

    /// A path a sandbox grants: it must exist, and is kept as the real path.
    static func grantedPath(_ given: Given) throws(UsageError) -> String {
        guard let path = SandboxPolicy.resolve(given.text) else { throw given.invalid("no such file or folder") }
        return path
    }

    static let pathsArgument = ("<paths>", "Plugin folders (scanned for *.so and *.curfew.json), .so files and manifests. (default: .)")

    static let run = SubcommandSpec.make(
        .run, summary: "Load plugins and run their jobs, each under a background-task grant.", usage: "curfew run [<paths> ...]",
        discussion: [
            "Each job gets a budget. Shortly before it runs out the job's expire hook",
            "runs; a job still running at the end of the budget is terminated.",
            "Plugins are first loaded in a scanner worker, so one that crashes or",
            "hangs while loading is rejected, not fatal.",
            "SIGINT, SIGTERM or SIGHUP expires every job at once and the host exits",
            "within the lead time; so does closing its output (| head).",
        ],
        arguments: [pathsArgument], options: runOptions,
        exitStatus: [
            ("0", "every job completed or expired cleanly, and no plugin was rejected"),
            ("1", "a path given does not exist, no plugin was found, or the host itself failed"),
            ("2", "a job failed, was terminated, crashed or was refused"),
            ("3", "a plugin file was rejected (the other jobs, if any, ran cleanly)"),
            ("4", "in process, plugin code called exit(); the host names the job"),
            ("5", "in process, plugin code crashed (SIGSEGV, …); the host names the job"),
            ("64", "usage error"),
            ("130", "stopped by SIGINT (143: SIGTERM, 129: SIGHUP) after the jobs cleaned up"),
            ("141", "its output was closed (| head); the jobs cleaned up"),
        ],
        takesPaths: true, start: { RunDraft() },
        positional: { draft, path in draft.options.paths.append(path) },
        finish: { draft throws(UsageError) in .run(try draft.finished(.run)) })

    // MARK: serve

    struct ServeDraft: Sendable {
        var run: RunDraft = {
            var run = RunDraft()
            run.options.isolation = .job
            return run
        }()
        var config: String?
        var socket: String?
        var metrics: MetricsAddress?
    }

    static let socketOption = OptionSpec<String?>(
        ["--socket"], value: "path",
        help: "The serving host's control socket. (default: $RUNTIME_DIRECTORY/serve.sock, else $XDG_RUNTIME_DIR/curfew/serve.sock, else ~/.cache/curfew/serve.sock, else /tmp/curfew-UID/serve.sock; status and ctl then try the system service's /run/curfew/serve.sock)"
    ) { socket, given in socket = given.text }

    static let serve = SubcommandSpec.make(
        .serve, summary: "Stay running over live plugin folders, running each job on its schedule.", usage: "curfew serve <folders> ...",
        discussion: [
            "Every job runs once at start, then when it asks (request_next_run) or",
            "every interval its policy sets (--config), one run of a job at a time;",
            "failed, crashed and terminated runs are retried with backoff. Each run",
            "has a worker process of its own: a plugin file written into a folder",
            "(closed, or moved in) is loaded and its jobs scheduled; a replaced one",
            "runs its new code from its next run, while a running job finishes its",
            "grant on the old; a removed one's jobs stop (cancelled). Schedules are",
            "kept in the state store, so a restart goes on where the host stopped,",
            "and a run missed while it was down runs once at start.",
            "SIGHUP rescans the folders and reads --config again. SIGINT or SIGTERM",
            "expires every running job with the shutdown reason and exits within",
            "the lead time. curfew status and curfew ctl talk to it over its control",
            "socket (mode 0600; only this user and root are served).",
        ],
        arguments: [("<folders>", "Plugin folders to serve (*.so and *.curfew.json); at least one.")],
        // `run`'s options but --only and --rescan, its own --isolate, --config and --socket.
        options: runOptions.filter { !["--only", "--rescan", "--isolate"].contains($0.info.names[0]) }.map { $0.within(\ServeDraft.run) }
            + [
                runOptions.first { $0.info.names == ["--isolate"] }!.within(\ServeDraft.run).saying(
                    "job: each run in a fresh worker process of its own. plugin is accepted and does the same here; none is refused. (default: job)"),
                .text(
                    "--config", value: "file",
                    help: "A JSON file of per-job policy: every, on, earliest_begin, jitter, overlap, starting_deadline, budget, grace, stall, params, isolate, limits, retry, enabled, modes, submits, sandbox, conditions (see docs/serve.md). Read again on SIGHUP.",
                    \ServeDraft.config),
                socketOption.within(\ServeDraft.socket),
                OptionSpec(
                    ["--metrics"], value: "address",
                    help: "Serve the host's metrics over HTTP at /metrics in Prometheus' text format or, when asked, OpenMetrics; at 127.0.0.1:PORT, [::1]:PORT, a port alone (on 127.0.0.1), another IP and port (reachable from other machines), or a Unix socket's absolute path."
                ) { draft, given throws(UsageError) in
                    guard let address = MetricsAddress(given.text) else {
                        throw given.invalid("use 127.0.0.1:9464, [::1]:9464, 9464 or an absolute path")
                    }
                    draft.metrics = address
                },
            ],
        exitStatus: [
            ("0", "stopped by SIGINT or SIGTERM after the running jobs cleaned up"),
            ("1", "a folder, the config, the state store (another host holds it) or the control socket cannot be used"),
            ("2", "stopped, but a job's cleanup did not end in time (it was terminated, or its worker crashed)"),
            ("64", "usage error"),
        ],
        takesPaths: true, start: { ServeDraft() },
        positional: { draft, path in draft.run.options.paths.append(path) },
        finish: { draft throws(UsageError) in
            var options = ServeOptions()
            options.run = try draft.run.finished(.serve)
            options.config = draft.config
            options.socket = draft.socket
            options.metrics = draft.metrics
            guard !options.run.paths.isEmpty else { throw UsageError("Missing expected argument '<folders>'", command: .serve) }
            if options.run.isolation == .none {
                throw UsageError(
                    "serve runs every job in a worker, so that a replaced plugin loads its new code: use --isolate job or plugin", command: .serve)
            }
            return .serve(options)
        })

    // MARK: status and ctl

    struct ControlDraft: Sendable {
        var options = ControlOptions()
        var words: [String] = []
        /// `run`'s `--param`, `--at` and `--in`.
        var parameters: [String: String] = [:]
        var at: String?
        var wait: Duration?
    }

    static let status = SubcommandSpec.make(
        .status, summary: "Show what a serving host runs, and when each job runs next.", usage: "curfew status",
        discussion: [
            "For each job: running (with time remaining and progress), waiting for",
            "a --jobs slot, paused, disabled or idle; its next run, its last outcome,",
            "failures in a row and runs skipped because the last was still going.",
        ],
        options: [
            .flag("--json", help: "Print JSON Lines: the host's (app_state, jobs), then one per job.", \ControlDraft.options.json),
            socketOption.within(\ControlDraft.options.socket),
        ],
        exitStatus: [("0", "done"), ("1", "no host serves on the socket, or it refused"), ("64", "usage error")],
        start: { ControlDraft() },
        positional: { _, word throws(UsageError) in throw UsageError("Unexpected argument '\(word)'", command: .status) },
        finish: { draft in .control(draft.options) })

    static let metrics = SubcommandSpec.make(
        .metrics, summary: "Print a serving host's metrics in Prometheus' text exposition format.", usage: "curfew metrics",
        discussion: [
            "Runs started and ended by job and outcome, expirations by reason, retries,",
            "run and chunk durations, expire-hook lateness, checkpoint saves, worker",
            "starts, scans, each job's state, next run and failures in a row, and the",
            "host's memory, threads and descriptors, as a scrape sees them.",
        ],
        options: [socketOption.within(\ControlDraft.options.socket)],
        exitStatus: [("0", "done"), ("1", "no host serves on the socket, or it refused"), ("64", "usage error")],
        start: { ControlDraft() },
        positional: { _, word throws(UsageError) in throw UsageError("Unexpected argument '\(word)'", command: .metrics) },
        finish: { draft in
            var options = draft.options
            options.metrics = true
            return .control(options)
        })

    struct EventsDraft: Sendable {
        var options = ControlOptions()
        var request = EventsRequest()
    }

    static let events = SubcommandSpec.make(
        .events, summary: "Print a serving host's recent events, or follow them as they come.", usage: "curfew events",
        discussion: [
            "Runs started and finished (with outcome and reason), logs, expirations,",
            "runs waiting for their conditions, plugins' output and the host's notices",
            "(schedules, reloads, app-state moves): the newest kept ones (up to 1,000),",
            "then with --follow each as it comes, progress too, until the host stops.",
            "A reader more than 1 MiB behind is cut off; the host never waits for one.",
        ],
        options: [
            .flag("--follow", help: "Stay, and print each event as it comes.", \EventsDraft.request.follow),
            .flag("--json", help: "Print each event as the host sends it: a JSON line.", \EventsDraft.options.json),
            OptionSpec(["--job"], value: "name", help: "Only this job's events.") { draft, given throws(UsageError) in
                guard JobNaming.isValidName(given.text) else { throw given.invalid("a job name is 1 to 64 of a-z, 0-9, '.', '_', '-'") }
                draft.request.job = given.text
            },
            socketOption.within(\EventsDraft.options.socket),
        ],
        exitStatus: [
            ("0", "done, or the host stopped"), ("1", "no host serves on the socket, it refused, or this reader was cut off"), ("64", "usage error"),
        ],
        start: { EventsDraft() },
        positional: { _, word throws(UsageError) in throw UsageError("Unexpected argument '\(word)'", command: .events) },
        finish: { draft in
            var options = draft.options
            options.events = draft.request
            return .control(options)
        })

    static let ctl = SubcommandSpec.make(
        .ctl, summary: "Tell a serving host to run, cancel, pause or resume a job, to rescan, or to change its app state.",
        usage: "curfew ctl (run | cancel | pause | resume) <job> | curfew ctl (reload | foreground | background)",
        arguments: [
            ("run <job>", "Run the job now, whatever its schedule (not while it runs); with --param, --at or --in, once at that time with those parameters, kept across restarts (after the run going then)."),
            ("cancel <job>", "Expire the job's running grant now, with the cancelled reason."),
            ("pause <job>", "Run the job no more on its schedule, across restarts (ctl run still does)."),
            ("resume <job>", "Put a paused job back on its schedule."),
            ("reload", "Rescan the folders, ignoring the scan cache, and read --config again."),
            ("foreground", "Move the host to the foreground (active): grants stop running down, and jobs hear will-enter-foreground and did-become-active."),
            ("background", "Move the host back to the background: each running grant's clock starts again with its whole budget."),
        ],
        options: [
            parameter(\ControlDraft.parameters, help: "With run: a parameter of this run only, over the job's own; repeat for more."),
            .text("--at", value: "time", help: "With run: run no sooner than this, such as \"2026-12-24 18:00\" (local time) or \"2026-12-24 17:00 UTC\".", \ControlDraft.at),
            OptionSpec(["--in"], value: "duration", help: "With run: run no sooner than this long from now, such as 90m.") { draft, given throws(UsageError) in
                draft.wait = try duration(given)
            },
            socketOption.within(\ControlDraft.options.socket),
        ],
        exitStatus: [("0", "done"), ("1", "no host serves on the socket, or it refused (the reason is printed)"), ("64", "usage error")],
        words: Server.Command.jobVerbs + Server.Command.hostVerbs,
        start: { ControlDraft() },
        positional: { draft, word in draft.words.append(word) },
        finish: { draft throws(UsageError) in
            var options = draft.options
            let words = draft.words
            guard let verb = words.first else {
                throw UsageError("Missing the action: run, cancel, pause or resume a job, or reload, foreground or background", command: .ctl)
            }
            let once = !draft.parameters.isEmpty || draft.at != nil || draft.wait != nil
            if once && verb != "run" { throw UsageError("--param, --at and --in go with run", command: .ctl) }
            if let action = Server.Command(verb: verb, job: nil) {
                guard words.count == 1 else { throw UsageError("Unexpected argument '\(words[1])'", command: .ctl) }
                options.action = action
                return .control(options)
            }
            guard Server.Command.jobVerbs.contains(verb) else {
                throw UsageError("Unknown action '\(verb)': use run, cancel, pause, resume, reload, foreground or background", command: .ctl)
            }
            guard words.count >= 2 else { throw UsageError("Missing the job: curfew ctl \(verb) <job>", command: .ctl) }
            guard words.count == 2 else { throw UsageError("Unexpected argument '\(words[2])'", command: .ctl) }
            options.action = Server.Command(verb: verb, job: words[1])
            guard once else { return .control(options) }
            guard draft.at == nil || draft.wait == nil else { throw UsageError("Give --at or --in, not both", command: .ctl) }
            var at: WallTime?
            if let text = draft.at {
                do throws(CurfewError) {
                    at = WallTime(milliseconds: try CalendarSpec.moment(text) / 1000)
                } catch {
                    throw UsageError("The value '\(text)' is invalid for '--at <time>': use a date and time such as \"2026-12-24 18:00\"", command: .ctl)
                }
            }
            if let wait = draft.wait { at = WallTime.now().later(by: wait) }
            options.action = .runOnce(words[1], parameters: draft.parameters, at: at)
            return .control(options)
        })

    // MARK: list

    static let list = SubcommandSpec.make(
        .list, summary: "List plugins, their jobs, and the files rejected with the reason.", usage: "curfew list [<paths> ...]",
        arguments: [pathsArgument],
        options: [
            .flag("--json", help: "Print plugins and rejected files as JSON Lines.", \ListOptions.json),
            insecure(\ListOptions.allowInsecurePlugins),
            rescan(\ListOptions.rescan),
        ],
        exitStatus: [
            ("0", "every plugin file loaded"),
            ("1", "a path given does not exist, or no plugin found"),
            ("3", "a plugin file was rejected"),
            ("64", "usage error"),
            ("141", "its output was closed (| head)"),
        ],
        takesPaths: true, start: { ListOptions() },
        positional: { options, path in options.paths.append(path) },
        finish: { options in .list(options) })

    // MARK: test

    struct TestDraft: Sendable {
        var options = TestOptions()
        var plugins: [String] = []
        var cost: Duration?
        var expireAt: Int?
        var budget = GrantPolicy.defaultBudget
        var grace: Duration?
        var stall: Duration?
    }

    static let test = SubcommandSpec.make(
        .test, summary: "Run one job against virtual time and check that it keeps the contract.", usage: "curfew test <plugin>",
        discussion: [
            "Each chunk advances a virtual clock by --chunk-cost, or the grant expires",
            "just before chunk --expire-at-chunk, so a 180 s grant takes milliseconds",
            "and a chunked job gives the same trace every time. A task-driven job",
            "expires right after create. Checked: tasks begun and never ended, hooks",
            "that do not return (5 s of wall-clock time), host calls after destroy,",
            "chunks that run into the hard deadline, negative or absurd progress.",
        ],
        arguments: [("<plugin>", "A plugin (.so) or a foreign-job manifest (.curfew.json).")],
        options: [
            .text("--job", value: "name", help: "The job to test. (default: the plugin's only job)", \TestDraft.options.job),
            budget(\TestDraft.budget, help: "The grant's budget, in virtual time. (default: 180s)"),
            grace(\TestDraft.grace, help: "Lead of the expiration before the deadline. (default: 5s, at most a quarter of the budget)"),
            OptionSpec(["--chunk-cost"], value: "duration", help: "Virtual time each chunk takes. (default: 1s)") { draft, given throws(UsageError) in
                draft.cost = try duration(given)
            },
            OptionSpec(
                ["--stall"], value: "duration", help: "Expire the job (stalled) when its progress does not move for this long, in virtual time, as serve's \"stall\" does."
            ) { draft, given throws(UsageError) in
                let stall = try duration(given)
                guard stall >= GrantPolicy.minimumStall else { throw given.invalid("the stall time must be at least 100ms") }
                draft.stall = stall
            },
            OptionSpec(
                ["--expire-at-chunk"], value: "n", help: "Chunks take no time and the grant expires just before chunk n (from 1)."
            ) { draft, given throws(UsageError) in
                guard let chunk = Int(given.text), chunk >= 1 else { throw given.invalid("use a chunk number from 1") }
                draft.expireAt = chunk
            },
            parameter(\TestDraft.options.parameters, help: "A parameter the job reads with param(); repeat for more."),
            .flag("--json", help: "Print the trace and the result as JSON Lines.", \TestDraft.options.json),
        ],
        exitStatus: [
            ("0", "the job kept the contract and completed or expired cleanly"),
            ("1", "the plugin or the job could not be loaded"),
            ("2", "the job broke the contract (each violation is listed), or it failed\n(say, its create returned an error), was terminated or was refused"),
            ("64", "usage error"),
        ],
        takesPaths: true, start: { TestDraft() },
        positional: { draft, plugin in draft.plugins.append(plugin) },
        finish: { draft throws(UsageError) in
            var options = draft.options
            guard let plugin = draft.plugins.first else { throw UsageError("Missing expected argument '<plugin>'", command: .test) }
            guard draft.plugins.count == 1 else { throw UsageError("Unexpected argument '\(draft.plugins[1])'", command: .test) }
            options.plugin = plugin
            if draft.cost != nil && draft.expireAt != nil {
                throw UsageError("--chunk-cost and --expire-at-chunk cannot be used together", command: .test)
            }
            if let cost = draft.cost { options.mode = .chunkCost(cost) }
            if let expireAt = draft.expireAt { options.mode = .expireAtChunk(expireAt) }
            options.policy = try policy(budget: draft.budget, grace: draft.grace, command: .test)
            options.policy.stall = draft.stall
            return .test(options)
        })

    // MARK: new

    struct NewDraft: Sendable {
        var words: [String] = []
        var root: String?
    }

    static let new = SubcommandSpec.make(
        .new, summary: "Write a ready-to-build job project in C or Swift.", usage: "curfew new <language> <name> [<directory>]",
        discussion: [
            "C: NAME.c, a copy of curfew.h and a Makefile (build: make).",
            "Swift: a Package.swift that depends on Curfew by path, and a job",
            "source (build: swift build). Each has a README with its commands.",
            "Existing files are never overwritten.",
        ],
        arguments: [
            ("<language>", "c or swift."),
            ("<name>", "The job's name: 1 to 64 of [a-z0-9._-], starting with a letter or digit."),
            ("<directory>", "Where to write the project. (default: ./<name>)"),
        ],
        options: [
            .text(
                "--curfew-root", value: "path",
                help: "The Curfew package to copy curfew.h from (C) or depend on (Swift). (default: the one this tool was built from)",
                \NewDraft.root)
        ],
        words: NewOptions.Language.allCases.map(\.rawValue), takesPaths: true, start: { NewDraft() },
        positional: { draft, word in draft.words.append(word) },
        finish: { draft throws(UsageError) in
            let words = draft.words
            guard let languageName = words.first else { throw UsageError("Missing expected argument '<language>'", command: .new) }
            guard let language = NewOptions.Language(rawValue: languageName) else {
                throw UsageError("The value '\(languageName)' is invalid for '<language>': use c or swift", command: .new)
            }
            guard words.count >= 2 else { throw UsageError("Missing expected argument '<name>'", command: .new) }
            guard words.count <= 3 else { throw UsageError("Unexpected argument '\(words[3])'", command: .new) }
            guard JobNaming.isValidName(words[1]) else {
                throw UsageError(
                    "The value '\(words[1])' is invalid for '<name>': a job name is 1 to 64 of [a-z0-9._-], starting with a letter or digit",
                    command: .new)
            }
            return .new(NewOptions(language: language, name: words[1], directory: words.count == 3 ? words[2] : nil, curfewRoot: draft.root))
        })

    // MARK: state

    struct StateDraft: Sendable {
        var options = StateOptions()
        var words: [String] = []
    }

    static let state = SubcommandSpec.make(
        .state, summary: "List, show or clear the checkpoints jobs saved, or back up the store.",
        usage: "curfew state [list | show <job> | clear <job> | backup <file>]",
        discussion: [
            "A job saves a checkpoint with checkpoint_save() and its next run loads it",
            "with checkpoint_load(), so work goes on across grants and restarts. One is",
            "kept per plugin file (its absolute path) and job name. A job that completes",
            "has its checkpoint cleared; one that expires, fails, crashes or is",
            "terminated keeps its last one. Clear one by hand to make a job start",
            "afresh; clear is refused while a host holds the store. The store is the",
            "folder's state.db with its state.db-wal (a host folds the log into",
            "state.db as it exits); backup copies it whole while hosts run.",
        ],
        arguments: [
            ("list", "Every job that has a checkpoint: its size and when it was saved. (default)"),
            ("show <job>", "The job's checkpoint in each plugin that has one: size, time, and its first bytes."),
            ("clear <job>", "Clear the job's checkpoint in every plugin (--all: every job's)."),
            ("backup <file>", "Copy the whole store into a new file (never over one), safely while hosts run."),
        ],
        options: [
            .flag("--all", help: "With clear: every job's checkpoint.", \StateDraft.options.all),
            .flag("--json", help: "Print JSON Lines (show: the checkpoint's bytes in base64).", \StateDraft.options.json),
            stateFolder(\StateDraft.options.stateFolder),
        ],
        exitStatus: [("0", "done"), ("1", "no such checkpoint, or the state store cannot be used"), ("64", "usage error")],
        words: StateOptions.Action.allCases.map(\.rawValue), start: { StateDraft() },
        positional: { draft, word in draft.words.append(word) },
        finish: { draft throws(UsageError) in
            var options = draft.options
            let words = draft.words
            guard let first = words.first else { return .state(options) }
            guard let action = StateOptions.Action(rawValue: first) else {
                throw UsageError("Unknown action '\(first)': use list, show, clear or backup", command: .state)
            }
            options.action = action
            guard words.count <= 2 else { throw UsageError("Unexpected argument '\(words[2])'", command: .state) }
            options.job = words.count == 2 ? words[1] : nil
            switch action {
            case .backup:
                guard let file = options.job else { throw UsageError("backup needs the file to write", command: .state) }
                options.destination = file
                options.job = nil
            case .list:
                if let job = options.job { throw UsageError("Unexpected argument '\(job)': list shows every job", command: .state) }
            case .show:
                guard options.job != nil else { throw UsageError("show needs a job name", command: .state) }
            case .clear:
                guard (options.job != nil) != options.all else {
                    throw UsageError("clear needs a job name, or --all for every job's checkpoint (not both)", command: .state)
                }
            }
            if options.all && action != .clear { throw UsageError("--all goes with clear", command: .state) }
            return .state(options)
        })

    // MARK: history

    static let history = SubcommandSpec.make(
        .history, summary: "Show how recent job runs ended, newest first.", usage: "curfew history",
        discussion: [
            "Every run of curfew run keeps, for each job: when it started and ended,",
            "its outcome and reason, chunks, last progress, checkpoint size, the",
            "isolation mode, the plugin's path and content hash, and the host's",
            "version. The last 1000 runs of each job are kept.",
        ],
        options: [
            .text("--job", value: "name", help: "Only this job's runs.", \HistoryOptions.job),
            OptionSpec(["--since"], value: "duration", help: "Only runs that ended within this long, e.g. 90m, 48h.") { options, given throws(UsageError) in
                let since = try duration(given)
                guard since > .zero else { throw given.invalid("the duration must be positive") }
                options.since = since
            },
            OptionSpec(["--limit"], value: "n", help: "At most n runs. (default: 20)") { options, given throws(UsageError) in
                guard let limit = Int(given.text), (1...1_000_000).contains(limit) else { throw given.invalid("use a whole number from 1 to 1000000") }
                options.limit = limit
            },
            .flag("--json", help: "Print JSON Lines, one a job run.", \HistoryOptions.json),
            stateFolder(\HistoryOptions.stateFolder),
        ],
        exitStatus: [("0", "done (an empty history too)"), ("1", "the state store cannot be used"), ("64", "usage error")],
        start: { HistoryOptions() },
        positional: { _, word throws(UsageError) in throw UsageError("Unexpected argument '\(word)'", command: .history) },
        finish: { options in .history(options) })

    // MARK: calendar

    static let calendar = SubcommandSpec.make(
        .calendar, summary: "Show when calendar expressions elapse next, laid out as systemd-analyze calendar lays it out.",
        usage: "curfew calendar <expression>...",
        discussion: [
            "An expression in systemd's calendar syntax (systemd.time(7)), as a job's",
            "\"on\" takes in serve's config: [WEEKDAYS] [[YEAR-]MONTH-DAY]",
            "[HOUR:MINUTE[:SECOND]] [ZONE], such as \"Mon..Fri *-*-* 02:00 Europe/Berlin\",",
            "\"*-02~01\" (February's last day), \"*:0/15\" or \"hourly\". Each is printed",
            "in its normalized form with its next elapses, in the local time zone.",
            "Where systemd 252 skips a time (a repetition carried over midnight, as",
            "*:0/40 at 00:00; a time just past a clock change that crosses an hour),",
            "curfew runs it.",
        ],
        arguments: [("<expression>", "A calendar expression; give several to see each.")],
        options: [
            OptionSpec(["--iterations"], value: "n", help: "Show the next n elapses, 0 to 1000. (default: 1)") { options, given throws(UsageError) in
                guard let count = Int(given.text), (0...1000).contains(count) else { throw given.invalid("use a whole number from 0 to 1000") }
                options.iterations = count
            },
            OptionSpec(["--base-time"], value: "time", help: "Count from this time, not now: a date and time such as \"2026-03-28 12:00:00 UTC\", or @ and seconds since 1970.") {
                options, given throws(UsageError) in
                options.baseTime = given.text
            },
        ],
        exitStatus: [("0", "every expression was read"), ("1", "an expression is not one, or a time zone cannot be read"), ("64", "usage error")],
        start: { CalendarOptions() },
        positional: { options, word in options.expressions.append(word) },
        finish: { options throws(UsageError) in
            guard !options.expressions.isEmpty else { throw UsageError("Missing the calendar expression", command: .calendar) }
            return .calendar(options)
        })

    // MARK: completions and help

    static let completions = SubcommandSpec.make(
        .completions, summary: "Print a completion script for bash, zsh or fish.", usage: "curfew completions (bash | zsh | fish)",
        discussion: ["Made from the descriptions curfew help shows."],
        arguments: [("<shell>", "bash, zsh or fish.")], options: [OptionSpec<[String]>](),
        exitStatus: [("0", "printed"), ("64", "usage error")],
        notes: [
            "INSTALL (Scripts/install does it):",
            "  bash   curfew completions bash > /usr/local/share/bash-completion/completions/curfew",
            "  zsh    curfew completions zsh > /usr/local/share/zsh/site-functions/_curfew",
            "  fish   curfew completions fish > /usr/local/share/fish/vendor_completions.d/curfew.fish",
        ],
        words: Shell.allCases.map(\.rawValue), start: { [] },
        positional: { words, word in words.append(word) },
        finish: { words throws(UsageError) in
            guard let name = words.first else { throw UsageError("Missing the shell: bash, zsh or fish", command: .completions) }
            guard let shell = Shell(rawValue: name) else { throw UsageError("Unknown shell '\(name)': use bash, zsh or fish", command: .completions) }
            guard words.count == 1 else { throw UsageError("Unexpected argument '\(words[1])'", command: .completions) }
            return .completions(shell)
        })

    struct HelpDraft: Sendable {
        var manual = false
        var markdown = false
        var words: [String] = []
    }

    static let help = SubcommandSpec.make(
        .help, summary: "Show subcommand help information, the manual page (--man) or the reference (--markdown).",
        usage: "curfew help [<subcommand> | --man | --markdown]",
        arguments: [("<subcommand>", "The subcommand to describe: run, serve, status, metrics, events, ctl, list, test, new, state, history, calendar or completions.")],
        options: [
            .flag("--man", help: "Print curfew(1), the manual page: every subcommand's help, in roff.", \HelpDraft.manual),
            .flag("--markdown", help: "Print the command-line reference, docs/cli.md: every subcommand's help, in Markdown.", \HelpDraft.markdown),
        ],
        words: Subcommand.allCases.filter { $0 != .help }.map(\.rawValue), usageListsOptions: false, start: { HelpDraft() },
        positional: { draft, word in draft.words.append(word) },
        finish: { draft throws(UsageError) in
            if draft.words.count + (draft.manual ? 1 : 0) + (draft.markdown ? 1 : 0) > 1 {
                throw UsageError("Give one subcommand, --man or --markdown", command: .help)
            }
            if draft.manual { return .manual }
            if draft.markdown { return .markdown }
            guard let name = draft.words.first else { return .help(nil) }
            guard let command = Subcommand(rawValue: name) else { throw UsageError("Unknown subcommand '\(name)'", command: nil) }
            return .help(command)
        })

    // MARK: Options several subcommands share

    static func budget<Draft>(_ path: WritableKeyPath<Draft, Duration> & Sendable, help: String) -> OptionSpec<Draft> {
        OptionSpec(["--budget"], value: "duration", help: help) { draft, given throws(UsageError) in
            let budget = try duration(given)
            guard budget >= GrantPolicy.minimumBudget else { throw given.invalid("the budget must be at least 1ms") }
            draft[keyPath: path] = budget
        }
    }

    static func grace<Draft>(_ path: WritableKeyPath<Draft, Duration?> & Sendable, help: String) -> OptionSpec<Draft> {
        OptionSpec(["--grace"], value: "duration", help: help) { draft, given throws(UsageError) in
            draft[keyPath: path] = try duration(given)
        }
    }

    static func parameter<Draft>(_ path: WritableKeyPath<Draft, [String: String]> & Sendable, help: String) -> OptionSpec<Draft> {
        OptionSpec(["--param"], value: "key=value", help: help, repeatable: true) { draft, given throws(UsageError) in
            let text = given.text
            guard let equals = text.firstIndex(of: "="), equals != text.startIndex else { throw given.invalid("use key=value") }
            draft[keyPath: path][String(text[..<equals])] = String(text[text.index(after: equals)...])
        }
    }

    static func stateFolder<Draft>(_ path: WritableKeyPath<Draft, String?> & Sendable) -> OptionSpec<Draft> {
        .text(
            "--state", value: "folder",
            help: "Where checkpoints and run history are kept; one host writes it at a time. (default: $STATE_DIRECTORY, else $XDG_STATE_HOME/curfew, else ~/.local/state/curfew)",
            path)
    }

    static func rescan<Draft>(_ path: WritableKeyPath<Draft, Bool> & Sendable) -> OptionSpec<Draft> {
        .flag("--rescan", help: "Load every plugin file again in a scanner worker, whatever the scan cache remembers.", path)
    }

    static func insecure<Draft>(_ path: WritableKeyPath<Draft, Bool> & Sendable) -> OptionSpec<Draft> {
        .flag("--allow-insecure-plugins", help: "Load plugin files and folders that are writable by group or others, or owned by another user.", path)
    }

    static func duration(_ given: Given) throws(UsageError) -> Duration {
        guard let duration = Quantities.duration(given.text) else { throw given.invalid("use a duration such as 180s, 500ms or 2m") }
        return duration
    }

    /// The grant `--budget` and `--grace` ask for, or what is wrong with
    /// them in the flags' words (the budget's least was checked as it was
    /// read, so what is left to refuse is the grace).
    static func policy(budget: Duration, grace: Duration?, command: Subcommand) throws(UsageError) -> GrantPolicy {
        do throws(CurfewError) {
            return try GrantPolicy(budget: budget, grace: grace)
        } catch {
            let given = grace.map { "--grace \(format($0))" } ?? "--grace"
            throw UsageError("\(given) must be positive and shorter than --budget \(format(budget))", command: command)
        }
    }
}
