import CurfewFormats
import Foundation
import Testing

@testable import Curfew
@testable import CurfewHost
@testable import CurfewCLI

/// Parsing, help and error texts, compared whole.
@Suite struct ArgumentTests {
    @Test func topLevelHelp() {
        #expect(Help.text(nil) == """
            OVERVIEW: Run background jobs from compiled plugins, each under an iOS-style background-task grant.

            USAGE: curfew <subcommand>

            OPTIONS:
              --version               Show the version.
              -h, --help              Show help information.

            SUBCOMMANDS:
              run                     Load plugins and run their jobs, each under a
                                      background-task grant.
              serve                   Stay running over live plugin folders, running each
                                      job on its schedule.
              status                  Show what a serving host runs, and when each job runs
                                      next.
              metrics                 Print a serving host's metrics in Prometheus' text
                                      exposition format.
              events                  Print a serving host's recent events, or follow them
                                      as they come.
              ctl                     Tell a serving host to run, cancel, pause or resume a
                                      job, to rescan, or to change its app state.
              list                    List plugins, their jobs, and the files rejected with
                                      the reason.
              test                    Run one job against virtual time and check that it
                                      keeps the contract.
              new                     Write a ready-to-build job project in C or Swift.
              state                   List, show or clear the checkpoints jobs saved, or
                                      back up the store.
              history                 Show how recent job runs ended, newest first.
              calendar                Show when calendar expressions elapse next, laid out
                                      as systemd-analyze calendar lays it out.
              completions             Print a completion script for bash, zsh or fish.
              help                    Show subcommand help information, the manual page
                                      (--man) or the reference (--markdown).

              See 'curfew help <subcommand>' for detailed help.

            """)
    }

    @Test func runHelp() {
        #expect(Help.text(.run) == """
            OVERVIEW: Load plugins and run their jobs, each under a background-task grant.

            Each job gets a budget. Shortly before it runs out the job's expire hook
            runs; a job still running at the end of the budget is terminated.
            Plugins are first loaded in a scanner worker, so one that crashes or
            hangs while loading is rejected, not fatal.
            SIGINT, SIGTERM or SIGHUP expires every job at once and the host exits
            within the lead time; so does closing its output (| head).

            USAGE: curfew run [<paths> ...] [--budget <duration>] [--grace <duration>] [--stall <duration>] [--jobs <n>] [--only <name> ...] [--param <key=value> ...] [--allow-continuous] [--allow-mode <mode> ...] [--allow-insecure-plugins] [--rescan] [--json] [--verbose] [--state <folder>] [--no-state] [--isolate <mode>] [--memory <size>] [--cpu-time <duration>] [--open-files <n>] [--sandbox] [--no-sandbox] [--network <access>] [--allow-read <path> ...] [--allow-write <path> ...] [--allow-exec]

            ARGUMENTS:
              <paths>                 Plugin folders (scanned for *.so and *.curfew.json),
                                      .so files and manifests. (default: .)

            OPTIONS:
              --budget <duration>     Time each job's grant lasts, from its start to its
                                      hard deadline, e.g. 180s, 500ms, 2m. (default: 180s)
              --grace <duration>      Lead of the expiration handler before the deadline.
                                      (default: 5s, at most a quarter of the budget)
              --stall <duration>      Expire a job (stalled) whose progress does not move
                                      for this long, continuous jobs too. (default: never)
              --jobs <n>              Run at most n jobs at once. (default: the number of
                                      processors it may run on, within its control group's
                                      CPU limit)
              --only <name>           Run only the named job; repeat for more.
              --param <key=value>     A parameter every job can read with param(); repeat
                                      for more.
              --allow-continuous      Run continuous jobs, without a budget, until they
                                      finish or the host stops: every background mode is
                                      allowed.
              --allow-mode <mode>     Allow a background mode (audio, voip, location,
                                      newsstand-content, external-accessory,
                                      bluetooth-central, bluetooth-peripheral, or x-NAME): a
                                      continuous job runs when every mode it declares is
                                      allowed; repeat for more.
              --allow-insecure-plugins
                                      Load plugin files and folders that are writable by
                                      group or others, or owned by another user.
              --rescan                Load every plugin file again in a scanner worker,
                                      whatever the scan cache remembers.
              --json                  Print events as JSON Lines on stdout; human messages
                                      go to stderr.
              --verbose               Also show jobs' debug messages.
              --state <folder>        Where checkpoints and run history are kept; one host
                                      writes it at a time. (default: $STATE_DIRECTORY, else
                                      $XDG_STATE_HOME/curfew, else ~/.local/state/curfew)
              --no-state              Keep no state: jobs cannot save checkpoints, and the
                                      run is not in the history.
              --isolate <mode>        none: jobs run in this process, which trusts the
                                      plugin (its crash ends the host); plugin: a worker
                                      process per plugin file; job: a worker process per
                                      job, so a crash, a hang or a limit ends only that job.
                                      (default: none)
              --memory <size>         With --isolate: each worker's address space limit,
                                      e.g. 512MiB.
              --cpu-time <duration>   With --isolate: each worker's CPU time limit.
              --open-files <n>        With --isolate: each worker's limit on open files.
              --sandbox               Confine each worker before it loads a plugin: it reads
                                      only the system's libraries, its plugin and what
                                      --allow-read names, writes only a scratch folder of
                                      its own ($CURFEW_SCRATCH) and what --allow-write
                                      names, reaches no network, and cannot exec, trace or
                                      signal other processes. (default with --isolate job or
                                      plugin)
              --no-sandbox            Run workers with every right of this user: for trusted
                                      plugins only.
              --network <access>      In the sandbox: off (no network), loopback (TCP to
                                      this machine's loopback addresses only) or on.
                                      (default: off)
              --allow-read <path>     In the sandbox: a file or folder jobs may read; repeat
                                      for more.
              --allow-write <path>    In the sandbox: a file or folder jobs may read and
                                      change; repeat for more.
              --allow-exec            In the sandbox: jobs may exec programs they can read
                                      (/usr/bin and the like).
              -h, --help              Show help information.

            EXIT STATUS:
              0    every job completed or expired cleanly, and no plugin was rejected
              1    a path given does not exist, no plugin was found, or the host itself failed
              2    a job failed, was terminated, crashed or was refused
              3    a plugin file was rejected (the other jobs, if any, ran cleanly)
              4    in process, plugin code called exit(); the host names the job
              5    in process, plugin code crashed (SIGSEGV, …); the host names the job
              64   usage error
              130  stopped by SIGINT (143: SIGTERM, 129: SIGHUP) after the jobs cleaned up
              141  its output was closed (| head); the jobs cleaned up

            """)
    }

    @Test func listHelp() {
        #expect(Help.text(.list) == """
            OVERVIEW: List plugins, their jobs, and the files rejected with the reason.

            USAGE: curfew list [<paths> ...] [--json] [--allow-insecure-plugins] [--rescan]

            ARGUMENTS:
              <paths>                 Plugin folders (scanned for *.so and *.curfew.json),
                                      .so files and manifests. (default: .)

            OPTIONS:
              --json                  Print plugins and rejected files as JSON Lines.
              --allow-insecure-plugins
                                      Load plugin files and folders that are writable by
                                      group or others, or owned by another user.
              --rescan                Load every plugin file again in a scanner worker,
                                      whatever the scan cache remembers.
              -h, --help              Show help information.

            EXIT STATUS:
              0    every plugin file loaded
              1    a path given does not exist, or no plugin found
              3    a plugin file was rejected
              64   usage error
              141  its output was closed (| head)

            """)
    }

    @Test func helpRequests() throws {
        #expect(try Invocation(parsing: []) == .help(nil))
        #expect(try Invocation(parsing: ["--help"]) == .help(nil))
        #expect(try Invocation(parsing: ["help", "run"]) == .help(.run))
        #expect(try Invocation(parsing: ["run", "plugins", "-h"]) == .help(.run))
        #expect(try Invocation(parsing: ["list", "--help"]) == .help(.list))
        #expect(try Invocation(parsing: ["--version"]) == .version)
    }

    @Test func runOptions() throws {
        let invocation = try Invocation(parsing: [
            "run", "plugins", "--budget", "8s", "--grace=500ms", "--jobs", "3", "--only", "a", "--only", "b",
            "--param", "k=v=w", "--param", "empty=", "--allow-continuous", "--json", "--", "--odd-name.so",
        ])
        var expected = RunOptions()
        expected.paths = ["plugins", "--odd-name.so"]
        expected.policy = try GrantPolicy(budget: .seconds(8), grace: .milliseconds(500))
        expected.jobs = 3
        expected.only = ["a", "b"]
        expected.parameters = ["k": "v=w", "empty": ""]
        expected.allowContinuous = true
        expected.json = true
        #expect(invocation == .run(expected))
    }

    @Test func defaults() throws {
        guard case .run(let options) = try Invocation(parsing: ["run"]) else {
            Issue.record("not a run")
            return
        }
        #expect(options.effectivePaths == ["."])
        #expect(options.policy.budget == .seconds(180))
        #expect(options.policy.grace == nil)
        #expect(options.jobs == RunConfiguration.activeProcessorCount)
    }

    @Test(arguments: [
        ("180s", Duration.seconds(180)), ("500ms", .milliseconds(500)), ("1.5s", .milliseconds(1500)),
        ("2m", .seconds(120)), ("1h", .seconds(3600)), ("42", .seconds(42)), ("0.25", .milliseconds(250)),
        // Before: refused.
        ("1m30s", .seconds(90)), ("1h30m", .seconds(5400)), ("2s500ms", .milliseconds(2500)), ("1h2m3s4ms", .milliseconds(3_723_004)),
    ])
    func durations(text: String, expected: Duration) {
        #expect(Quantities.duration(text) == expected)
    }

    @Test(arguments: ["", "s", "-1s", "1.2.3s", "abc", "1 s", "5d", "1e3s", "nan", "30s1m", "1m1m", "1mm", "1m30", "m30s", "999999999s1s"])
    func badDurations(text: String) {
        #expect(Quantities.duration(text) == nil)
    }

    static let runUsage =
        "Usage: curfew run [<paths> ...] [--budget <duration>] [--grace <duration>] [--stall <duration>] [--jobs <n>] [--only <name> ...] [--param <key=value> ...] [--allow-continuous] [--allow-mode <mode> ...] [--allow-insecure-plugins] [--rescan] [--json] [--verbose] [--state <folder>] [--no-state] [--isolate <mode>] [--memory <size>] [--cpu-time <duration>] [--open-files <n>] [--sandbox] [--no-sandbox] [--network <access>] [--allow-read <path> ...] [--allow-write <path> ...] [--allow-exec]\n  See 'curfew run --help' for more information.\n"

    @Test func serveAndControlArguments() throws {
        guard case .serve(let serve) = try Invocation(parsing: ["serve", "plugins", "--config", "c.json", "--socket", "/run/s", "--budget", "2s"])
        else { Issue.record("not serve"); return }
        #expect(serve.run.paths == ["plugins"] && serve.config == "c.json" && serve.socket == "/run/s")
        #expect(serve.run.isolation == .job, "a worker per job by default")
        #expect(serve.run.policy.budget == .seconds(2))
        #expect(try Invocation(parsing: ["ctl", "cancel", "tally"]) == .control({ var o = ControlOptions(); o.action = .cancel("tally"); return o }()))
        #expect(try Invocation(parsing: ["ctl", "reload"]) == .control({ var o = ControlOptions(); o.action = .reload; return o }()))
        #expect(try Invocation(parsing: ["status", "--json"]) == .control({ var o = ControlOptions(); o.json = true; return o }()))
        #expect(usageErrorText(["serve"])?.hasPrefix("Error: Missing expected argument '<folders>'\nUsage: curfew serve <folders> ...") == true)
        #expect(usageErrorText(["serve", "p", "--isolate", "none"])?.hasPrefix("Error: serve runs every job in a worker") == true)
        #expect(usageErrorText(["serve", "p", "--only", "x"])?.hasPrefix("Error: Unknown option '--only'") == true)
        #expect(usageErrorText(["ctl"])?.hasPrefix("Error: Missing the action") == true)
        #expect(usageErrorText(["ctl", "stop", "x"])?.hasPrefix("Error: Unknown action 'stop'") == true)
        #expect(usageErrorText(["ctl", "run"])?.hasPrefix("Error: Missing the job: curfew ctl run <job>") == true)
        #expect(usageErrorText(["ctl", "run", "a", "b"])?.hasPrefix("Error: Unexpected argument 'b'") == true)
        #expect(usageErrorText(["run", "--allow-mode", "radio"])?.hasPrefix("Error: The value 'radio' is invalid for '--allow-mode <mode>': use one of audio, voip") == true)
        #expect(usageErrorText(["status", "x"])?.hasPrefix("Error: Unexpected argument 'x'") == true)
        #expect(try Invocation(parsing: ["state", "backup", "b.db"]) == .state({ var o = StateOptions(); o.action = .backup; o.destination = "b.db"; return o }()))
        #expect(usageErrorText(["state", "backup"])?.hasPrefix("Error: backup needs the file to write") == true)
        #expect(usageErrorText(["state", "backup", "b.db", "--all"])?.hasPrefix("Error: --all goes with clear") == true)
    }

    @Test func usageErrors() {
        #expect(usageErrorText(["run", "--bogus"]) == "Error: Unknown option '--bogus'\n" + Self.runUsage)
        #expect(usageErrorText(["run", "--budget"]) == "Error: Missing value for '--budget <duration>'\n" + Self.runUsage)
        #expect(
            usageErrorText(["run", "--budget", "soon"])
                == "Error: The value 'soon' is invalid for '--budget <duration>': use a duration such as 180s, 500ms or 2m\n"
                + Self.runUsage)
        #expect(
            usageErrorText(["run", "--budget", "0s"])
                == "Error: The value '0s' is invalid for '--budget <duration>': the budget must be at least 1ms\n" + Self.runUsage)
        // Before: a budget of a few nanoseconds passed, and trapped every worker.
        #expect(
            usageErrorText(["run", "--budget", "0.0000005s"])
                == "Error: The value '0.0000005s' is invalid for '--budget <duration>': the budget must be at least 1ms\n" + Self.runUsage)
        #expect(
            usageErrorText(["run", "--jobs", "0"])
                == "Error: The value '0' is invalid for '--jobs <n>': use a whole number from 1 to 1024\n" + Self.runUsage)
        #expect(
            usageErrorText(["run", "--param", "novalue"])
                == "Error: The value 'novalue' is invalid for '--param <key=value>': use key=value\n" + Self.runUsage)
        #expect(
            usageErrorText(["run", "--budget", "4s", "--grace", "4s"])
                == "Error: --grace 4s must be positive and shorter than --budget 4s\n" + Self.runUsage)
        #expect(
            usageErrorText(["run", "--grace", "0s"])
                == "Error: --grace 0s must be positive and shorter than --budget 180s\n" + Self.runUsage)
        #expect(usageErrorText(["run", "--json=yes"]) == "Error: The option '--json' takes no value\n" + Self.runUsage)
        #expect(
            usageErrorText(["launch"])
                == "Error: Unknown subcommand 'launch'\nUsage: curfew <subcommand>\n  See 'curfew --help' for more information.\n")
        #expect(
            usageErrorText(["list", "--budget", "1s"])
                == "Error: Unknown option '--budget'\nUsage: curfew list [<paths> ...] [--json] [--allow-insecure-plugins] [--rescan]\n  See 'curfew list --help' for more information.\n")
    }

    @Test func exitCodes() {
        func result(_ outcome: Outcome) -> JobResult {
            JobResult(job: "j", pluginPath: "p", loadPath: "p", isChunked: true, outcome: outcome, chunks: 0, elapsed: .zero, reason: "", progress: nil)
        }
        #expect(ExitCode.forRun([result(.completed), result(.expired)], rejected: 0, stop: nil) == 0)
        #expect(ExitCode.forRun([result(.completed)], rejected: 1, stop: nil) == 3)
        #expect(ExitCode.forRun([result(.failed)], rejected: 1, stop: nil) == 2)
        #expect(ExitCode.forRun([result(.terminated)], rejected: 0, stop: nil) == 2)
        #expect(ExitCode.forRun([result(.refused)], rejected: 0, stop: nil) == 2)
        #expect(ExitCode.forRun([result(.expired)], rejected: 0, stop: 143) == 143)
    }

    /// A limit no worker could run under is refused with its floor or ceiling.
    @Test func limitsThatCannotWorkAreRefused() {
        let floor = ResourceLimits.minimumMemoryBytes >> 20
        #expect(
            (usageErrorText(["run", "--isolate", "job", "--memory", "16MiB"]) ?? "").hasPrefix(
                "Error: The value '16MiB' is invalid for '--memory <size>': use a size of at least \(floor)MiB"))
        let ceiling = ResourceLimits.maximumOpenFiles
        #expect(
            usageErrorText(["run", "--isolate", "job", "--open-files", "\(ceiling + 1)"])
                == "Error: The value '\(ceiling + 1)' is invalid for '--open-files <n>': use a whole number from 16 to \(ceiling) (the most this user may open here)\n"
                + Self.runUsage)
        #expect((try? Invocation(parsing: ["run", "--isolate", "job", "--open-files", "\(ceiling)"])) != nil)
        #expect((try? Invocation(parsing: ["run", "--isolate", "job", "--open-files", "+64"])) == nil)
        #expect((try? Invocation(parsing: ["run", "--isolate", "job", "--memory", "\(floor)MiB"])) != nil)
    }

    /// Sizes and durations from outside: never a trap, never a sign or a stray character.
    @Test(arguments: ["+5", "-5", "5 MiB", "18446744073709551616", "17179869184GiB", "", "MiB", String(repeating: "9", count: 100_000)])
    func sizesThatAreNotSizes(_ text: String) {
        #expect(Quantities.size(text) == nil)
    }

    @Test func jsonStringsAreEscaped() {
        var line = JSONLine(event: "log")
        line.add("message", "say \"hi\"\n\tback\\slash \u{1}")
        line.add("elapsed", 1.5)
        line.add("budget", nil as Double?)
        #expect(line.text == #"{"event":"log","message":"say \"hi\"\n\tback\\slash \u0001","elapsed":1.5,"budget":null}"#)
    }

    /// Numbers to the microsecond, in fixed point: no exponent, no float
    /// noise, the sign kept, an integer written as one.
    @Test(arguments: [
        (1.5, "1.5"), (0.000005, "0.000005"), (0.0000004, "0"), (-0.25, "-0.25"), (3600, "3600"), (0.1 + 0.2, "0.3"),
        (-2e-7, "0"), (123456789.000001, "123456789.000001"), (1e13, "10000000000000"), (1e300, "1e+300"),
    ])
    func jsonNumbersAreFixedPointToTheMicrosecond(_ value: Double, _ text: String) {
        #expect(JSONLine.number(value) == text)
    }
}
