import Curfew
import CurfewFormats

/// A command-line mistake: printed as `Error: …`, the usage line and a
/// pointer to help, with exit code 64 (EX_USAGE).
public struct UsageError: Error, Equatable, Sendable {
    public let message: String
    /// The subcommand the mistake is in, or `nil` for the top level.
    public let command: Command?

    public init(_ message: String, command: Command?) {
        self.message = message
        self.command = command
    }
}

/// The subcommands.
public enum Command: String, CaseIterable, Sendable {
    case run, serve, status, ctl, list, new, test, state, history, completions, help
}

/// One option of a subcommand.
struct OptionSpec: Sendable {
    let names: [String]
    /// The value's placeholder, or `nil` for a flag.
    let value: String?
    let help: String
    /// The option may be given more than once.
    var repeatable = false
    var label: String { names.joined(separator: ", ") + (value.map { " <\($0)>" } ?? "") }
    var usage: String { names.last! + (value.map { " <\($0)>" } ?? "") }
}

/// What `curfew run` was asked to do.
public struct RunOptions: Equatable, Sendable {
    public var paths: [String] = []
    /// `--budget` and `--grace`.
    public var policy = GrantPolicy()
    public var jobs: Int = RunConfiguration.activeProcessorCount
    public var only: [String] = []
    public var parameters: [String: String] = [:]
    public var allowContinuous = false
    /// `--allow-mode`: background modes allowed by name.
    public var allowedModes: Set<String> = []
    public var json = false
    public var verbose = false
    public var isolation: Isolation = .none
    public var limits = ResourceLimits()
    public var allowInsecurePlugins = false
    /// Ignore the scan cache (its entries are replaced by the new answers).
    public var rescan = false
    /// Where checkpoints and history are kept (`nil`: the default folder).
    public var stateFolder: String?
    /// Keep no state: no checkpoints, no history.
    public var noState = false

    public init() {}

    /// The folder or files to load, `.` when none was given.
    public var effectivePaths: [String] { paths.isEmpty ? ["."] : paths }

    /// The grant, `--jobs`, parameters, isolation and limits these options
    /// ask for (the state store is opened by the command).
    var configuration: RunConfiguration {
        var configuration = RunConfiguration(policy: policy, maxConcurrentJobs: jobs, parameters: parameters)
        configuration.policy.allowsContinuous = allowContinuous
        configuration.policy.allowedModes = allowedModes
        configuration.isolation = isolation
        configuration.limits = limits
        return configuration
    }
}

/// What `curfew serve` was asked to do.
public struct ServeOptions: Equatable, Sendable {
    /// The grant, isolation (default: job), limits, state and output options `run` has.
    public var run = RunOptions()
    /// The operator's per-job policy file.
    public var config: String?
    /// The control socket (default: see ``ControlSocket/defaultPath``).
    public var socket: String?

    public init() { run.isolation = .job }
}

/// What `curfew status` or `curfew ctl` was asked to do.
public struct ControlOptions: Equatable, Sendable {
    /// `ctl`'s action; `nil` for `status`.
    public var action: Server.Command?
    public var json = false
    public var socket: String?

    public init() {}
}

/// What `curfew list` was asked to do.
public struct ListOptions: Equatable, Sendable {
    public var paths: [String] = []
    public var json = false
    public var allowInsecurePlugins = false
    /// Ignore the scan cache (its entries are replaced by the new answers).
    public var rescan = false

    public init() {}

    public var effectivePaths: [String] { paths.isEmpty ? ["."] : paths }
}

/// What `curfew state` was asked to do.
public struct StateOptions: Equatable, Sendable {
    public enum Action: String, Sendable, CaseIterable {
        case list, show, clear, backup
    }

    public var action: Action = .list
    public var job: String?
    /// `backup FILE`: the new file the store is copied to.
    public var destination: String?
    /// `clear --all`: every job's checkpoint.
    public var all = false
    public var json = false
    public var stateFolder: String?

    public init() {}
}

/// What `curfew history` was asked to do.
public struct HistoryOptions: Equatable, Sendable {
    public var job: String?
    public var since: Duration?
    public var limit = 20
    public var json = false
    public var stateFolder: String?

    public init() {}
}

/// A parsed command line.
public enum Invocation: Equatable, Sendable {
    case help(Command?)
    /// `curfew help --man`: the manual page, in roff.
    case manual
    /// `curfew completions SHELL`.
    case completions(Shell)
    case version
    case run(RunOptions)
    case serve(ServeOptions)
    case control(ControlOptions)
    case list(ListOptions)
    case new(NewOptions)
    case test(TestOptions)
    case state(StateOptions)
    case history(HistoryOptions)
}

/// What `curfew test` was asked to do.
public struct TestOptions: Equatable, Sendable {
    public var plugin: String = ""
    public var job: String?
    /// `--budget` and `--grace`.
    public var policy = GrantPolicy()
    public var mode: JobHarness.Mode = .chunkCost(.seconds(1))
    public var parameters: [String: String] = [:]
    public var json = false

    public init() {}
}

/// Parses `curfew`'s arguments (without the program name).
public enum ArgumentParser {
    public static func parse(_ arguments: [String]) throws(UsageError) -> Invocation {
        guard let first = arguments.first else { return .help(nil) }
        switch first {
        case "-h", "--help": return .help(nil)
        case "--version": return .version
        case "help":
            guard arguments.count <= 2 else {
                throw UsageError("Unexpected argument '\(arguments[2])'", command: .help)
            }
            guard let name = arguments.dropFirst().first else { return .help(nil) }
            if name == "--man" { return .manual }
            guard let command = Command(rawValue: name) else {
                throw UsageError("Unknown subcommand '\(name)'", command: nil)
            }
            return .help(command)
        case "run":
            let rest = Array(arguments.dropFirst())
            if rest.contains(where: { $0 == "-h" || $0 == "--help" }) { return .help(.run) }
            return .run(try parseRun(rest))
        case "serve":
            let rest = Array(arguments.dropFirst())
            if rest.contains(where: { $0 == "-h" || $0 == "--help" }) { return .help(.serve) }
            return .serve(try parseServe(rest))
        case "status", "ctl":
            let rest = Array(arguments.dropFirst())
            let command: Command = first == "status" ? .status : .ctl
            if rest.contains(where: { $0 == "-h" || $0 == "--help" }) { return .help(command) }
            return .control(try parseControl(rest, command: command))
        case "list":
            let rest = Array(arguments.dropFirst())
            if rest.contains(where: { $0 == "-h" || $0 == "--help" }) { return .help(.list) }
            return .list(try parseList(rest))
        case "test":
            let rest = Array(arguments.dropFirst())
            if rest.contains(where: { $0 == "-h" || $0 == "--help" }) { return .help(.test) }
            return .test(try parseTest(rest))
        case "new":
            let rest = Array(arguments.dropFirst())
            if rest.contains(where: { $0 == "-h" || $0 == "--help" }) { return .help(.new) }
            return .new(try parseNew(rest))
        case "state":
            let rest = Array(arguments.dropFirst())
            if rest.contains(where: { $0 == "-h" || $0 == "--help" }) { return .help(.state) }
            return .state(try parseState(rest))
        case "completions":
            let rest = Array(arguments.dropFirst())
            if rest.contains(where: { $0 == "-h" || $0 == "--help" }) { return .help(.completions) }
            guard let name = rest.first else { throw UsageError("Missing the shell: bash, zsh or fish", command: .completions) }
            guard let shell = Shell(rawValue: name) else {
                throw UsageError("Unknown shell '\(name)': use bash, zsh or fish", command: .completions)
            }
            guard rest.count == 1 else { throw UsageError("Unexpected argument '\(rest[1])'", command: .completions) }
            return .completions(shell)
        case "history":
            let rest = Array(arguments.dropFirst())
            if rest.contains(where: { $0 == "-h" || $0 == "--help" }) { return .help(.history) }
            return .history(try parseHistory(rest))
        default:
            if first.hasPrefix("-") { throw UsageError("Unknown option '\(first)'", command: nil) }
            throw UsageError("Unknown subcommand '\(first)'", command: nil)
        }
    }

    static func parseRun(_ arguments: [String]) throws(UsageError) -> RunOptions {
        try parseRun(arguments, command: .run) { _, _ throws(UsageError) in false }
    }

    static func parseServe(_ arguments: [String]) throws(UsageError) -> ServeOptions {
        var options = ServeOptions()
        var config: String?
        var socket: String?
        options.run = try parseRun(arguments, command: .serve) { name, value throws(UsageError) in
            switch name {
            case "--config": config = value!
            case "--socket": socket = value!
            default: return false
            }
            return true
        }
        options.config = config
        options.socket = socket
        guard !options.run.paths.isEmpty else { throw UsageError("Missing expected argument '<folders>'", command: .serve) }
        if options.run.isolation == .none {
            throw UsageError(
                "serve runs every job in a worker, so that a replaced plugin loads its new code: use --isolate job or plugin",
                command: .serve)
        }
        return options
    }

    static func parseControl(_ arguments: [String], command: Command) throws(UsageError) -> ControlOptions {
        var options = ControlOptions()
        var positional: [String] = []
        try walk(arguments, command: command) { (name, value) throws(UsageError) in
            switch name {
            case nil: positional.append(value!)
            case "--json": options.json = true
            case "--socket": options.socket = value!
            default: fatalError("option \(name!) is in the table but not handled")
            }
        }
        guard command == .ctl else {
            if let extra = positional.first { throw UsageError("Unexpected argument '\(extra)'", command: command) }
            return options
        }
        guard let verb = positional.first else {
            throw UsageError("Missing the action: run, cancel, pause or resume a job, or reload, foreground or background", command: command)
        }
        if let action = Server.Command(verb: verb, job: nil) {
            guard positional.count == 1 else { throw UsageError("Unexpected argument '\(positional[1])'", command: command) }
            options.action = action
            return options
        }
        guard Server.Command.jobVerbs.contains(verb) else {
            throw UsageError("Unknown action '\(verb)': use run, cancel, pause, resume, reload, foreground or background", command: command)
        }
        guard positional.count >= 2 else { throw UsageError("Missing the job: curfew ctl \(verb) <job>", command: command) }
        guard positional.count == 2 else { throw UsageError("Unexpected argument '\(positional[2])'", command: command) }
        options.action = Server.Command(verb: verb, job: positional[1])
        return options
    }

    /// `run`'s options, or those of a command that shares them (`serve`),
    /// whose own options `other` takes (returning whether it did).
    static func parseRun(
        _ arguments: [String], command: Command, other: (String, String?) throws(UsageError) -> Bool
    ) throws(UsageError) -> RunOptions {
        var options = RunOptions()
        if command == .serve { options.isolation = .job }
        var budget = GrantPolicy.defaultBudget
        var grace: Duration?
        try walk(arguments, command: command) { (name, value) throws(UsageError) in
            guard let name else {
                options.paths.append(value!)
                return
            }
            if try other(name, value) { return }
            let spec = Help.options(for: command).first { $0.names.contains(name) }!
            switch name {
            case "--budget":
                budget = try duration(value!, for: spec, command: command)
                guard budget >= GrantPolicy.minimumBudget else {
                    throw invalid(value!, spec, "the budget must be at least 1ms", command: command)
                }
            case "--grace": grace = try duration(value!, for: spec, command: command)
            case "--jobs":
                guard let count = Int(value!), (1...1024).contains(count) else {
                    throw invalid(value!, spec, "use a whole number from 1 to 1024", command: command)
                }
                options.jobs = count
            case "--only": options.only.append(value!)
            case "--param":
                options.parameters.merge([try keyValue(value!, spec, command: command)]) { $1 }
            case "--allow-continuous": options.allowContinuous = true
            case "--allow-mode":
                guard BackgroundMode.isValidName(value!) else {
                    throw invalid(
                        value!, spec, "use one of \(BackgroundMode.known.joined(separator: ", ")), or x- and a name of your own", command: command)
                }
                options.allowedModes.insert(value!)
            case "--allow-insecure-plugins": options.allowInsecurePlugins = true
            case "--rescan": options.rescan = true
            case "--json": options.json = true
            case "--verbose": options.verbose = true
            case "--state": options.stateFolder = value!
            case "--no-state": options.noState = true
            case "--isolate":
                guard let isolation = Isolation(rawValue: value!) else { throw invalid(value!, spec, "use none, plugin or job", command: command) }
                options.isolation = isolation
            case "--memory":
                guard let bytes = parseSize(value!), bytes >= ResourceLimits.minimumMemoryBytes else {
                    let floor = ResourceLimits.minimumMemoryBytes >> 20
                    throw invalid(
                        value!, spec,
                        "use a size of at least \(floor)MiB (a worker needs that much address space to load any plugin), such as 256MiB or 2GiB",
                        command: command)
                }
                options.limits.memoryBytes = bytes
            case "--cpu-time":
                let cpu = try duration(value!, for: spec, command: command)
                guard cpu >= .seconds(1) else { throw invalid(value!, spec, "use at least 1s", command: command) }
                options.limits.cpuSeconds = UInt64(cpu.seconds.rounded(.up))
            case "--open-files":
                let ceiling = ResourceLimits.maximumOpenFiles
                guard value!.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let count = UInt64(value!), count >= 16, count <= ceiling else {
                    throw invalid(
                        value!, spec, "use a whole number from 16 to \(ceiling) (the most this user may open here)", command: command)
                }
                options.limits.openFiles = count
            default: fatalError("option \(name) is in the table but not handled")
            }
        }
        if options.noState && options.stateFolder != nil {
            throw UsageError("--state and --no-state contradict each other", command: command)
        }
        if options.isolation == .none && options.limits != ResourceLimits() {
            throw UsageError("--memory, --cpu-time and --open-files need --isolate job or plugin", command: command)
        }
        options.policy = try policy(budget: budget, grace: grace, command: command)
        return options
    }

    static func parseState(_ arguments: [String]) throws(UsageError) -> StateOptions {
        var options = StateOptions()
        var positional: [String] = []
        try walk(arguments, command: .state) { (name, value) throws(UsageError) in
            switch name {
            case nil: positional.append(value!)
            case "--json": options.json = true
            case "--all": options.all = true
            case "--state": options.stateFolder = value!
            default: fatalError("option \(name!) is in the table but not handled")
            }
        }
        guard let first = positional.first else { return options }
        guard let action = StateOptions.Action(rawValue: first) else {
            throw UsageError("Unknown action '\(first)': use list, show, clear or backup", command: .state)
        }
        options.action = action
        guard positional.count <= 2 else { throw UsageError("Unexpected argument '\(positional[2])'", command: .state) }
        options.job = positional.count == 2 ? positional[1] : nil
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
        return options
    }

    static func parseHistory(_ arguments: [String]) throws(UsageError) -> HistoryOptions {
        var options = HistoryOptions()
        try walk(arguments, command: .history) { (name, value) throws(UsageError) in
            guard let name else { throw UsageError("Unexpected argument '\(value!)'", command: .history) }
            let spec = Help.historyOptions.first { $0.names.contains(name) }!
            switch name {
            case "--job": options.job = value!
            case "--since":
                let since = try duration(value!, for: spec, command: .history)
                guard since > .zero else { throw invalid(value!, spec, "the duration must be positive", command: .history) }
                options.since = since
            case "--limit":
                guard let limit = Int(value!), (1...1_000_000).contains(limit) else {
                    throw invalid(value!, spec, "use a whole number from 1 to 1000000", command: .history)
                }
                options.limit = limit
            case "--json": options.json = true
            case "--state": options.stateFolder = value!
            default: fatalError("option \(name) is in the table but not handled")
            }
        }
        return options
    }

    static func parseList(_ arguments: [String]) throws(UsageError) -> ListOptions {
        var options = ListOptions()
        try walk(arguments, command: .list) { (name, value) throws(UsageError) in
            guard let name else {
                options.paths.append(value!)
                return
            }
            switch name {
            case "--json": options.json = true
            case "--allow-insecure-plugins": options.allowInsecurePlugins = true
            case "--rescan": options.rescan = true
            default: fatalError("option \(name) is in the table but not handled")
            }
        }
        return options
    }

    static func parseTest(_ arguments: [String]) throws(UsageError) -> TestOptions {
        var options = TestOptions()
        var plugins: [String] = []
        var cost: Duration?
        var expireAt: Int?
        var budget = GrantPolicy.defaultBudget
        var grace: Duration?
        try walk(arguments, command: .test) { (name, value) throws(UsageError) in
            guard let name else {
                plugins.append(value!)
                return
            }
            let spec = Help.testOptions.first { $0.names.contains(name) }!
            switch name {
            case "--job": options.job = value!
            case "--budget":
                budget = try duration(value!, for: spec, command: .test)
                guard budget >= GrantPolicy.minimumBudget else {
                    throw invalid(value!, spec, "the budget must be at least 1ms", command: .test)
                }
            case "--grace": grace = try duration(value!, for: spec, command: .test)
            case "--chunk-cost":
                cost = try duration(value!, for: spec, command: .test)
            case "--expire-at-chunk":
                guard let chunk = Int(value!), chunk >= 1 else { throw invalid(value!, spec, "use a chunk number from 1", command: .test) }
                expireAt = chunk
            case "--param":
                options.parameters.merge([try keyValue(value!, spec, command: .test)]) { $1 }
            case "--json": options.json = true
            default: fatalError("option \(name) is in the table but not handled")
            }
        }
        guard let plugin = plugins.first else { throw UsageError("Missing expected argument '<plugin>'", command: .test) }
        guard plugins.count == 1 else { throw UsageError("Unexpected argument '\(plugins[1])'", command: .test) }
        options.plugin = plugin
        if cost != nil && expireAt != nil {
            throw UsageError("--chunk-cost and --expire-at-chunk cannot be used together", command: .test)
        }
        if let cost { options.mode = .chunkCost(cost) }
        if let expireAt { options.mode = .expireAtChunk(expireAt) }
        options.policy = try policy(budget: budget, grace: grace, command: .test)
        return options
    }

    /// The grant `--budget` and `--grace` ask for, or what is wrong with
    /// them in the flags' words (the budget's least was checked as it was
    /// read, so what is left to refuse is the grace).
    static func policy(budget: Duration, grace: Duration?, command: Command) throws(UsageError) -> GrantPolicy {
        do throws(CurfewError) {
            return try GrantPolicy(budget: budget, grace: grace)
        } catch {
            let given = grace.map { "--grace \(format($0))" } ?? "--grace"
            throw UsageError("\(given) must be positive and shorter than --budget \(format(budget))", command: command)
        }
    }

    static func parseNew(_ arguments: [String]) throws(UsageError) -> NewOptions {
        var positional: [String] = []
        var root: String?
        try walk(arguments, command: .new) { (name, value) throws(UsageError) in
            guard let name else {
                positional.append(value!)
                return
            }
            switch name {
            case "--curfew-root": root = value!
            default: fatalError("option \(name) is in the table but not handled")
            }
        }
        guard let languageName = positional.first else {
            throw UsageError("Missing expected argument '<language>'", command: .new)
        }
        guard let language = NewOptions.Language(rawValue: languageName) else {
            throw UsageError("The value '\(languageName)' is invalid for '<language>': use c or swift", command: .new)
        }
        guard positional.count >= 2 else { throw UsageError("Missing expected argument '<name>'", command: .new) }
        guard positional.count <= 3 else { throw UsageError("Unexpected argument '\(positional[3])'", command: .new) }
        let name = positional[1]
        let valid = JobNaming.isValidName(name)
        guard valid else {
            throw UsageError(
                "The value '\(name)' is invalid for '<name>': a job name is 1 to 64 of [a-z0-9._-], starting with a letter or digit",
                command: .new)
        }
        return NewOptions(language: language, name: name, directory: positional.count == 3 ? positional[2] : nil, curfewRoot: root)
    }

    /// Walks the arguments, calling `body` with (option name, value) for each
    /// option and (nil, argument) for each positional argument.
    private static func walk(
        _ arguments: [String], command: Command, _ body: (String?, String?) throws(UsageError) -> Void
    ) throws(UsageError) {
        let specs = Help.options(for: command)
        var index = 0
        var positionalOnly = false
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if positionalOnly || !argument.hasPrefix("-") || argument == "-" {
                try body(nil, argument)
                continue
            }
            if argument == "--" {
                positionalOnly = true
                continue
            }
            var name = argument
            var inlineValue: String?
            if let equals = argument.firstIndex(of: "="), argument.hasPrefix("--") {
                name = String(argument[..<equals])
                inlineValue = String(argument[argument.index(after: equals)...])
            }
            guard let spec = specs.first(where: { $0.names.contains(name) }) else {
                throw UsageError("Unknown option '\(name)'", command: command)
            }
            if spec.value == nil {
                if inlineValue != nil { throw UsageError("The option '\(name)' takes no value", command: command) }
                try body(name, nil)
                continue
            }
            if let inlineValue {
                try body(name, inlineValue)
            } else if index < arguments.count {
                try body(name, arguments[index])
                index += 1
            } else {
                throw UsageError("Missing value for '\(spec.usage)'", command: command)
            }
        }
    }

    private static func invalid(_ value: String, _ spec: OptionSpec, _ hint: String, command: Command) -> UsageError {
        UsageError("The value '\(value)' is invalid for '\(spec.usage)': \(hint)", command: command)
    }

    private static func duration(_ text: String, for spec: OptionSpec, command: Command) throws(UsageError) -> Duration {
        guard let duration = parseDuration(text) else {
            throw invalid(text, spec, "use a duration such as 180s, 500ms or 2m", command: command)
        }
        return duration
    }

    private static func keyValue(_ text: String, _ spec: OptionSpec, command: Command) throws(UsageError) -> (String, String) {
        guard let equals = text.firstIndex(of: "="), equals != text.startIndex else {
            throw invalid(text, spec, "use key=value", command: command)
        }
        return (String(text[..<equals]), String(text[text.index(after: equals)...]))
    }

    /// Parses `256MiB`, `2GiB`, `512KiB`, `64M`, `1G`, or a bare number of bytes.
    public static func parseSize(_ text: String) -> UInt64? { Quantities.size(text) }

    /// Parses `500ms`, `1.5s`, `2m`, `1h`, or a bare number of seconds.
    public static func parseDuration(_ text: String) -> Duration? { Quantities.duration(text) }
}

/// The milliseconds from `now` until `next`: 0 once it has passed, and
/// saturating, for either may come from outside.
func millisecondsUntil(_ next: Int64, from now: Int64) -> Int64 {
    let (wait, overflow) = next.subtractingReportingOverflow(now)
    return overflow ? (next > now ? .max : 0) : max(0, wait)
}

/// A duration as people write it: `180s`, `500ms`, `2.5s`.
public func format(_ duration: Duration) -> String {
    let nanoseconds = duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
    if nanoseconds % 1_000_000_000 == 0 { return "\(nanoseconds / 1_000_000_000)s" }
    if nanoseconds < 1_000_000_000 && nanoseconds % 1_000_000 == 0 { return "\(nanoseconds / 1_000_000)ms" }
    return formatSeconds(duration.seconds) + "s"
}

/// Seconds with two decimals, e.g. `6.02`; bounded to 0 … 10^12 s, for a
/// value may come from outside (a serving host's answer) and be any number.
func formatSeconds(_ seconds: Double) -> String {
    let bounded = seconds.isFinite ? min(max(seconds, 0), 1e12) : 0
    let hundredths = Int64((bounded * 100).rounded())
    let fraction = hundredths % 100
    return "\(hundredths / 100).\(fraction < 10 ? "0" : "")\(fraction)"
}
