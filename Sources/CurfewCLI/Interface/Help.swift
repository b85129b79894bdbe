import Curfew

/// The help texts, built from the option tables so they cannot drift.
public enum Help {
    public static let version = HostInfo.version

    /// Each subcommand in a line, in the order the help lists them.
    static let summaries: [(command: Command, summary: String)] = [
        (.run, "Load plugins and run their jobs, each under a background-task grant."),
        (.serve, "Stay running over live plugin folders, running each job on its schedule."),
        (.status, "Show what a serving host runs, and when each job runs next."),
        (.ctl, "Tell a serving host to run, cancel, pause or resume a job, to rescan, or to change its app state."),
        (.list, "List plugins, their jobs, and the files rejected with the reason."),
        (.test, "Run one job against virtual time and check that it keeps the contract."),
        (.new, "Write a ready-to-build job project in C or Swift."),
        (.state, "List, show or clear the checkpoints jobs saved, or back up the store."),
        (.history, "Show how recent job runs ended, newest first."),
        (.completions, "Print a completion script for bash, zsh or fish."),
        (.help, "Show subcommand help information, or the manual page (--man)."),
    ]

    static let helpOption = OptionSpec(names: ["-h", "--help"], value: nil, help: "Show help information.")

    static let runOptions: [OptionSpec] = [
        OptionSpec(
            names: ["--budget"], value: "duration",
            help: "Time each job's grant lasts, from its start to its hard deadline, e.g. 180s, 500ms, 2m. (default: 180s)"),
        OptionSpec(
            names: ["--grace"], value: "duration",
            help: "Lead of the expiration handler before the deadline. (default: 5s, at most a quarter of the budget)"),
        OptionSpec(names: ["--jobs"], value: "n", help: "Run at most n jobs at once. (default: the number of processors it may run on, within its control group's CPU limit)"),
        OptionSpec(names: ["--only"], value: "name", help: "Run only the named job; repeat for more.", repeatable: true),
        OptionSpec(names: ["--param"], value: "key=value", help: "A parameter every job can read with param(); repeat for more.", repeatable: true),
        OptionSpec(names: ["--allow-continuous"], value: nil, help: "Run continuous jobs, without a budget, until they finish or the host stops: every background mode is allowed."),
        OptionSpec(
            names: ["--allow-mode"], value: "mode",
            help: "Allow a background mode (audio, voip, location, newsstand-content, external-accessory, bluetooth-central, bluetooth-peripheral, or x-NAME): a continuous job runs when every mode it declares is allowed; repeat for more.",
            repeatable: true),
        insecureOption,
        rescanOption,
        OptionSpec(names: ["--json"], value: nil, help: "Print events as JSON Lines on stdout; human messages go to stderr."),
        OptionSpec(names: ["--verbose"], value: nil, help: "Also show jobs' debug messages."),
        stateOption,
        OptionSpec(names: ["--no-state"], value: nil, help: "Keep no state: jobs cannot save checkpoints, and the run is not in the history."),
        OptionSpec(
            names: ["--isolate"], value: "mode",
            help: "none: jobs run in this process, which trusts the plugin (its crash ends the host); plugin: a worker process per plugin file; job: a worker process per job, so a crash, a hang or a limit ends only that job. (default: none)"),
        OptionSpec(names: ["--memory"], value: "size", help: "With --isolate: each worker's address space limit, e.g. 512MiB."),
        OptionSpec(names: ["--cpu-time"], value: "duration", help: "With --isolate: each worker's CPU time limit."),
        OptionSpec(names: ["--open-files"], value: "n", help: "With --isolate: each worker's limit on open files."),
    ]

    /// `run`'s options that serve shares (not --only or --rescan), its own
    /// --isolate (a worker always), and --config and --socket.
    static let serveOptions: [OptionSpec] =
        runOptions.filter { !["--only", "--rescan", "--isolate"].contains($0.names[0]) }
        + [
            OptionSpec(
                names: ["--isolate"], value: "mode",
                help: "job: each run in a fresh worker process of its own. plugin is accepted and does the same here; none is refused. (default: job)"),
            OptionSpec(
                names: ["--config"], value: "file",
                help: "A JSON file of per-job policy: every, earliest_begin, jitter, budget, grace, params, isolate, limits, retry, enabled (see docs/serve.md). Read again on SIGHUP."),
            socketOption,
        ]

    static let statusOptions: [OptionSpec] = [
        OptionSpec(names: ["--json"], value: nil, help: "Print JSON Lines: the host's (app_state, jobs), then one per job."),
        socketOption,
    ]

    static let ctlOptions: [OptionSpec] = [socketOption]

    static let socketOption = OptionSpec(
        names: ["--socket"], value: "path",
        help: "The serving host's control socket. (default: $RUNTIME_DIRECTORY/serve.sock, else $XDG_RUNTIME_DIR/curfew/serve.sock, else ~/.cache/curfew/serve.sock, else /tmp/curfew-UID/serve.sock; status and ctl then try the system service's /run/curfew/serve.sock)")

    static let testOptions: [OptionSpec] = [
        OptionSpec(names: ["--job"], value: "name", help: "The job to test. (default: the plugin's only job)"),
        OptionSpec(names: ["--budget"], value: "duration", help: "The grant's budget, in virtual time. (default: 180s)"),
        OptionSpec(
            names: ["--grace"], value: "duration",
            help: "Lead of the expiration before the deadline. (default: 5s, at most a quarter of the budget)"),
        OptionSpec(names: ["--chunk-cost"], value: "duration", help: "Virtual time each chunk takes. (default: 1s)"),
        OptionSpec(
            names: ["--expire-at-chunk"], value: "n",
            help: "Chunks take no time and the grant expires just before chunk n (from 1)."),
        OptionSpec(names: ["--param"], value: "key=value", help: "A parameter the job reads with param(); repeat for more.", repeatable: true),
        OptionSpec(names: ["--json"], value: nil, help: "Print the trace and the result as JSON Lines."),
    ]

    static let newOptions: [OptionSpec] = [
        OptionSpec(
            names: ["--curfew-root"], value: "path",
            help: "The Curfew package to copy curfew.h from (C) or depend on (Swift). (default: the one this tool was built from)"),
    ]

    static let listOptions: [OptionSpec] = [
        OptionSpec(names: ["--json"], value: nil, help: "Print plugins and rejected files as JSON Lines."),
        insecureOption,
        rescanOption,
    ]

    static let stateOptions: [OptionSpec] = [
        OptionSpec(names: ["--all"], value: nil, help: "With clear: every job's checkpoint."),
        OptionSpec(names: ["--json"], value: nil, help: "Print JSON Lines (show: the checkpoint's bytes in base64)."),
        stateOption,
    ]

    static let historyOptions: [OptionSpec] = [
        OptionSpec(names: ["--job"], value: "name", help: "Only this job's runs."),
        OptionSpec(names: ["--since"], value: "duration", help: "Only runs that ended within this long, e.g. 1h, 2d."),
        OptionSpec(names: ["--limit"], value: "n", help: "At most n runs. (default: 20)"),
        OptionSpec(names: ["--json"], value: nil, help: "Print JSON Lines, one a job run."),
        stateOption,
    ]

    static let stateOption = OptionSpec(
        names: ["--state"], value: "folder",
        help: "Where checkpoints and run history are kept; one host writes it at a time. (default: $STATE_DIRECTORY, else $XDG_STATE_HOME/curfew, else ~/.local/state/curfew)")

    static let rescanOption = OptionSpec(
        names: ["--rescan"], value: nil,
        help: "Load every plugin file again in a scanner worker, whatever the scan cache remembers.")

    static let insecureOption = OptionSpec(
        names: ["--allow-insecure-plugins"], value: nil,
        help: "Load plugin files and folders that are writable by group or others, or owned by another user.")

    static func options(for command: Command) -> [OptionSpec] {
        switch command {
        case .run: runOptions
        case .serve: serveOptions
        case .status: statusOptions
        case .ctl: ctlOptions
        case .list: listOptions
        case .new: newOptions
        case .test: testOptions
        case .state: stateOptions
        case .history: historyOptions
        case .completions, .help: []
        }
    }

    /// The usage line of a subcommand, or of the tool.
    public static func usage(_ command: Command?) -> String {
        guard let command else { return "curfew <subcommand>" }
        let options = Self.options(for: command).map { "[\($0.usage)\($0.repeatable ? " ..." : "")]" }
        switch command {
        case .run, .list:
            return (["curfew \(command.rawValue)", "[<paths> ...]"] + options).joined(separator: " ")
        case .serve:
            return (["curfew serve <folders> ..."] + options).joined(separator: " ")
        case .status:
            return (["curfew status"] + options).joined(separator: " ")
        case .ctl:
            return (["curfew ctl (run | cancel | pause | resume) <job> | curfew ctl (reload | foreground | background)"] + options).joined(separator: " ")
        case .new:
            return (["curfew new <language> <name> [<directory>]"] + options).joined(separator: " ")
        case .test:
            return (["curfew test <plugin>"] + options).joined(separator: " ")
        case .state:
            return (["curfew state [list | show <job> | clear <job> | backup <file>]"] + options).joined(separator: " ")
        case .history:
            return (["curfew history"] + options).joined(separator: " ")
        case .completions:
            return "curfew completions (bash | zsh | fish)"
        case .help:
            return "curfew help [<subcommand> | --man]"
        }
    }

    /// The whole help text of a subcommand, or of the tool.
    public static func text(_ command: Command?) -> String {
        var lines: [String] = []
        switch command {
        case nil:
            lines += [
                "OVERVIEW: Run background jobs from compiled plugins, each under an iOS-style background-task grant.",
                "",
                "USAGE: \(usage(nil))",
                "",
                "OPTIONS:",
            ]
            lines += rows([
                ("--version", "Show the version."),
                (helpOption.label, helpOption.help),
            ])
            lines += ["", "SUBCOMMANDS:"]
            lines += rows(summaries.map { ($0.command.rawValue, $0.summary) })
            lines += ["", "  See 'curfew help <subcommand>' for detailed help."]
        case .run?:
            lines += [
                "OVERVIEW: Load plugins and run their jobs, each under a background-task grant.",
                "",
                "Each job gets a budget. Shortly before it runs out the job's expire hook",
                "runs; a job still running at the end of the budget is terminated.",
                "Plugins are first loaded in a scanner worker, so one that crashes or",
                "hangs while loading is rejected, not fatal.",
                "SIGINT, SIGTERM or SIGHUP expires every job at once and the host exits",
                "within the lead time; so does closing its output (| head).",
                "",
                "USAGE: \(usage(.run))",
                "",
                "ARGUMENTS:",
            ]
            lines += rows([("<paths>", "Plugin folders (scanned for *.so and *.curfew.json), .so files and manifests. (default: .)")])
            lines += ["", "OPTIONS:"]
            lines += rows((runOptions + [helpOption]).map { ($0.label, $0.help) })
            lines += [
                "",
                "EXIT STATUS:",
                "  0    every job completed or expired cleanly, and no plugin was rejected",
                "  1    a path given does not exist, no plugin was found, or the host itself failed",
                "  2    a job failed, was terminated, crashed or was refused",
                "  3    a plugin file was rejected (the other jobs, if any, ran cleanly)",
                "  4    in process, plugin code called exit(); the host names the job",
                "  5    in process, plugin code crashed (SIGSEGV, …); the host names the job",
                "  64   usage error",
                "  130  stopped by SIGINT (143: SIGTERM, 129: SIGHUP) after the jobs cleaned up",
                "  141  its output was closed (| head); the jobs cleaned up",
            ]
        case .serve?:
            lines += [
                "OVERVIEW: Stay running over live plugin folders, running each job on its schedule.",
                "",
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
                "",
                "USAGE: \(usage(.serve))",
                "",
                "ARGUMENTS:",
            ]
            lines += rows([("<folders>", "Plugin folders to serve (*.so and *.curfew.json); at least one.")])
            lines += ["", "OPTIONS:"]
            lines += rows((serveOptions + [helpOption]).map { ($0.label, $0.help) })
            lines += [
                "",
                "EXIT STATUS:",
                "  0    stopped by SIGINT or SIGTERM after the running jobs cleaned up",
                "  1    a folder, the config, the state store (another host holds it) or the control socket cannot be used",
                "  2    stopped, but a job's cleanup did not end in time (it was terminated, or its worker crashed)",
                "  64   usage error",
            ]
        case .status?:
            lines += [
                "OVERVIEW: Show what a serving host runs, and when each job runs next.",
                "",
                "For each job: running (with time remaining and progress), waiting for",
                "a --jobs slot, paused, disabled or idle; its next run, its last outcome,",
                "failures in a row and runs skipped because the last was still going.",
                "",
                "USAGE: \(usage(.status))",
                "",
                "OPTIONS:",
            ]
            lines += rows((statusOptions + [helpOption]).map { ($0.label, $0.help) })
            lines += ["", "EXIT STATUS:", "  0    done", "  1    no host serves on the socket, or it refused", "  64   usage error"]
        case .ctl?:
            lines += [
                "OVERVIEW: Tell a serving host to run, cancel, pause or resume a job, to rescan, or to change its app state.",
                "",
                "USAGE: \(usage(.ctl))",
                "",
                "ARGUMENTS:",
            ]
            lines += rows([
                ("run <job>", "Run the job now, whatever its schedule (not while it runs)."),
                ("cancel <job>", "Expire the job's running grant now, with the cancelled reason."),
                ("pause <job>", "Run the job no more on its schedule, across restarts (ctl run still does)."),
                ("resume <job>", "Put a paused job back on its schedule."),
                ("reload", "Rescan the folders, ignoring the scan cache, and read --config again."),
                ("foreground", "Move the host to the foreground (active): grants stop running down, and jobs hear will-enter-foreground and did-become-active."),
                ("background", "Move the host back to the background: each running grant's clock starts again with its whole budget."),
            ])
            lines += ["", "OPTIONS:"]
            lines += rows((ctlOptions + [helpOption]).map { ($0.label, $0.help) })
            lines += ["", "EXIT STATUS:", "  0    done", "  1    no host serves on the socket, or it refused (the reason is printed)", "  64   usage error"]
        case .list?:
            lines += [
                "OVERVIEW: List plugins, their jobs, and the files rejected with the reason.",
                "",
                "USAGE: \(usage(.list))",
                "",
                "ARGUMENTS:",
            ]
            lines += rows([("<paths>", "Plugin folders (scanned for *.so and *.curfew.json), .so files and manifests. (default: .)")])
            lines += ["", "OPTIONS:"]
            lines += rows((listOptions + [helpOption]).map { ($0.label, $0.help) })
            lines += [
                "",
                "EXIT STATUS:",
                "  0    every plugin file loaded",
                "  1    a path given does not exist, or no plugin found",
                "  3    a plugin file was rejected",
                "  64   usage error",
                "  141  its output was closed (| head)",
            ]
        case .test?:
            lines += [
                "OVERVIEW: Run one job against virtual time and check that it keeps the contract.",
                "",
                "Each chunk advances a virtual clock by --chunk-cost, or the grant expires",
                "just before chunk --expire-at-chunk, so a 180 s grant takes milliseconds",
                "and a chunked job gives the same trace every time. A task-driven job",
                "expires right after create. Checked: tasks begun and never ended, hooks",
                "that do not return (5 s of wall-clock time), host calls after destroy,",
                "chunks that run into the hard deadline, negative or absurd progress.",
                "",
                "USAGE: \(usage(.test))",
                "",
                "ARGUMENTS:",
            ]
            lines += rows([("<plugin>", "A plugin (.so) or a foreign-job manifest (.curfew.json).")])
            lines += ["", "OPTIONS:"]
            lines += rows((testOptions + [helpOption]).map { ($0.label, $0.help) })
            lines += [
                "",
                "EXIT STATUS:",
                "  0    the job kept the contract and completed or expired cleanly",
                "  1    the plugin or the job could not be loaded",
                "  2    the job broke the contract (each violation is listed), or it failed",
                "       (say, its create returned an error), was terminated or was refused",
                "  64   usage error",
            ]
        case .new?:
            lines += [
                "OVERVIEW: Write a ready-to-build job project in C or Swift.",
                "",
                "C: NAME.c, a copy of curfew.h and a Makefile (build: make).",
                "Swift: a Package.swift that depends on Curfew by path, and a job",
                "source (build: swift build). Each has a README with its commands.",
                "Existing files are never overwritten.",
                "",
                "USAGE: \(usage(.new))",
                "",
                "ARGUMENTS:",
            ]
            lines += rows([
                ("<language>", "c or swift."),
                ("<name>", "The job's name: 1 to 64 of [a-z0-9._-], starting with a letter or digit."),
                ("<directory>", "Where to write the project. (default: ./<name>)"),
            ])
            lines += ["", "OPTIONS:"]
            lines += rows((newOptions + [helpOption]).map { ($0.label, $0.help) })
        case .state?:
            lines += [
                "OVERVIEW: List, show or clear the checkpoints jobs saved, or back up the store.",
                "",
                "A job saves a checkpoint with checkpoint_save() and its next run loads it",
                "with checkpoint_load(), so work goes on across grants and restarts. One is",
                "kept per plugin file (its absolute path) and job name. A job that completes",
                "has its checkpoint cleared; one that expires, fails, crashes or is",
                "terminated keeps its last one. Clear one by hand to make a job start",
                "afresh; clear is refused while a host holds the store. The store is the",
                "folder's state.db with its state.db-wal (a host folds the log into",
                "state.db as it exits); backup copies it whole while hosts run.",
                "",
                "USAGE: \(usage(.state))",
                "",
                "ARGUMENTS:",
            ]
            lines += rows([
                ("list", "Every job that has a checkpoint: its size and when it was saved. (default)"),
                ("show <job>", "The job's checkpoint in each plugin that has one: size, time, and its first bytes."),
                ("clear <job>", "Clear the job's checkpoint in every plugin (--all: every job's)."),
                ("backup <file>", "Copy the whole store into a new file (never over one), safely while hosts run."),
            ])
            lines += ["", "OPTIONS:"]
            lines += rows((stateOptions + [helpOption]).map { ($0.label, $0.help) })
            lines += ["", "EXIT STATUS:", "  0    done", "  1    no such checkpoint, or the state store cannot be used", "  64   usage error"]
        case .history?:
            lines += [
                "OVERVIEW: Show how recent job runs ended, newest first.",
                "",
                "Every run of curfew run keeps, for each job: when it started and ended,",
                "its outcome and reason, chunks, last progress, checkpoint size, the",
                "isolation mode, the plugin's path and content hash, and the host's",
                "version. The last 1000 runs of each job are kept.",
                "",
                "USAGE: \(usage(.history))",
                "",
                "OPTIONS:",
            ]
            lines += rows((historyOptions + [helpOption]).map { ($0.label, $0.help) })
            lines += ["", "EXIT STATUS:", "  0    done (an empty history too)", "  1    the state store cannot be used", "  64   usage error"]
        case .completions?:
            lines += [
                "OVERVIEW: Print a completion script for bash, zsh or fish, made from these help tables.",
                "",
                "USAGE: \(usage(.completions))",
                "",
                "ARGUMENTS:",
            ]
            lines += rows([("<shell>", "bash, zsh or fish.")])
            lines += [
                "",
                "INSTALL (Scripts/install does it):",
                "  bash   curfew completions bash > /usr/local/share/bash-completion/completions/curfew",
                "  zsh    curfew completions zsh > /usr/local/share/zsh/site-functions/_curfew",
                "  fish   curfew completions fish > /usr/local/share/fish/vendor_completions.d/curfew.fish",
                "",
                "EXIT STATUS:", "  0    printed", "  64   usage error",
            ]
        case .help?:
            lines += [
                "OVERVIEW: Show subcommand help information, or the manual page.",
                "",
                "USAGE: \(usage(.help))",
                "",
                "ARGUMENTS:",
            ]
            lines += rows([
                ("<subcommand>", "The subcommand to describe: run, serve, status, ctl, list, test, new, state, history or completions."),
                ("--man", "Print curfew(1), the manual page: every subcommand's help, in roff."),
            ])
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// Two-column rows: label in a 22-character column, help wrapped at 80.
    static func rows(_ entries: [(String, String)]) -> [String] {
        let column = 26
        var lines: [String] = []
        for (label, help) in entries {
            let wrapped = wrap(help, width: 80 - column)
            if label.count + 2 < column - 1 {
                lines.append("  " + label + String(repeating: " ", count: column - 2 - label.count) + wrapped[0])
            } else {
                lines.append("  " + label)
                lines.append(String(repeating: " ", count: column) + wrapped[0])
            }
            lines += wrapped.dropFirst().map { String(repeating: " ", count: column) + $0 }
        }
        return lines
    }

    private static func wrap(_ text: String, width: Int) -> [String] {
        var lines: [String] = []
        var line = ""
        for word in text.split(separator: " ") {
            if !line.isEmpty && line.count + 1 + word.count > width {
                lines.append(line)
                line = ""
            }
            line += (line.isEmpty ? "" : " ") + word
        }
        lines.append(line)
        return lines
    }

    /// The text printed for a usage error, ending with a newline.
    public static func errorText(_ error: UsageError) -> String {
        let see = error.command.map { "curfew \($0.rawValue) --help" } ?? "curfew --help"
        return "Error: \(error.message)\nUsage: \(usage(error.command))\n  See '\(see)' for more information.\n"
    }
}
