/// The subcommands.
public enum Subcommand: String, CaseIterable, Sendable {
    case run, serve, status, metrics, events, ctl, list, test, new, state, history, calendar, completions, help

    /// What the subcommand is, says and takes: the one description its
    /// parsing, `--help`, the man page, the completions and docs/cli.md
    /// are all made from.
    var spec: SubcommandSpec {
        switch self {
        case .run: Specs.run
        case .serve: Specs.serve
        case .status: Specs.status
        case .metrics: Specs.metrics
        case .events: Specs.events
        case .ctl: Specs.ctl
        case .list: Specs.list
        case .test: Specs.test
        case .new: Specs.new
        case .state: Specs.state
        case .history: Specs.history
        case .calendar: Specs.calendar
        case .completions: Specs.completions
        case .help: Specs.help
        }
    }
}

/// A command-line mistake: printed as `Error: …`, the usage line and a
/// pointer to help, with exit code 64 (EX_USAGE).
public struct UsageError: Error, Equatable, Sendable {
    public let message: String
    /// The subcommand the mistake is in, or `nil` for the top level.
    public let command: Subcommand?

    public init(_ message: String, command: Subcommand?) {
        self.message = message
        self.command = command
    }
}

/// An option as help, the man page and the completions show it.
struct OptionInfo: Sendable {
    let names: [String]
    /// The value's placeholder, or `nil` for a flag.
    let value: String?
    let help: String
    /// The option may be given more than once.
    let repeatable: Bool
    /// The values a shell completes, when they are a fixed set.
    let choices: [String]

    var label: String { names.joined(separator: ", ") + (value.map { " <\($0)>" } ?? "") }
    var usage: String { names.last! + (value.map { " <\($0)>" } ?? "") }
}

/// The value an option was given, and what to say when it is wrong.
struct Given: Sendable {
    let text: String
    let option: OptionInfo
    let command: Subcommand

    /// "The value '…' is invalid for '--jobs <n>': `hint`".
    func invalid(_ hint: String) -> UsageError {
        UsageError("The value '\(text)' is invalid for '\(option.usage)': \(hint)", command: command)
    }
}

/// One option of a subcommand whose arguments are gathered into a `Draft`:
/// what help says of it, and what it does to the draft.
struct OptionSpec<Draft>: Sendable {
    let info: OptionInfo
    /// For a flag, `given.text` is empty.
    let apply: @Sendable (inout Draft, Given) throws(UsageError) -> Void

    init(
        _ names: [String], value: String? = nil, help: String, repeatable: Bool = false, choices: [String] = [],
        apply: @escaping @Sendable (inout Draft, Given) throws(UsageError) -> Void
    ) {
        info = OptionInfo(names: names, value: value, help: help, repeatable: repeatable, choices: choices)
        self.apply = apply
    }

    init(info: OptionInfo, apply: @escaping @Sendable (inout Draft, Given) throws(UsageError) -> Void) {
        self.info = info
        self.apply = apply
    }

    /// A flag that sets a property.
    static func flag(_ name: String, help: String, _ path: WritableKeyPath<Draft, Bool> & Sendable) -> Self {
        OptionSpec([name], help: help) { draft, _ in draft[keyPath: path] = true }
    }

    /// An option whose value is kept as given.
    static func text(_ name: String, value: String, help: String, _ path: WritableKeyPath<Draft, String?> & Sendable) -> Self {
        OptionSpec([name], value: value, help: help) { draft, given in draft[keyPath: path] = given.text }
    }

    /// The same option, with other words in help.
    func saying(_ help: String) -> Self {
        OptionSpec(info: OptionInfo(names: info.names, value: info.value, help: help, repeatable: info.repeatable, choices: info.choices), apply: apply)
    }

    /// The same option for a draft that holds this one at `path`.
    func within<Outer>(_ path: WritableKeyPath<Outer, Draft> & Sendable) -> OptionSpec<Outer> {
        let apply = self.apply
        return OptionSpec<Outer>(info: info) { (outer: inout Outer, given: Given) throws(UsageError) in
            try apply(&outer[keyPath: path], given)
        }
    }
}

/// A subcommand, described once. Made by ``make(_:summary:usage:discussion:arguments:options:exitStatus:notes:words:takesPaths:start:positional:finish:)``,
/// which hides the type its arguments are gathered into.
struct SubcommandSpec: Sendable {
    /// One line: the top-level help's list, and OVERVIEW.
    let summary: String
    /// What comes before the options in the usage line.
    let usage: String
    /// The usage line lists the options after `usage` (not for `help`,
    /// whose `usage` says they go one at a time).
    let usageListsOptions: Bool
    /// Lines of prose after the overview.
    let discussion: [String]
    let arguments: [(String, String)]
    let options: [OptionInfo]
    let exitStatus: [(String, String)]
    /// Lines after the exit status (how to install completions, say).
    let notes: [String]
    /// Words a shell completes where an argument goes.
    let words: [String]
    /// Its other arguments are paths.
    let takesPaths: Bool
    /// The arguments after the subcommand's name, `--help` already handled.
    let parse: @Sendable ([String]) throws(UsageError) -> Invocation

    static func make<Draft>(
        _ command: Subcommand, summary: String, usage: String, discussion: [String] = [], arguments: [(String, String)] = [],
        options: [OptionSpec<Draft>], exitStatus: [(String, String)] = [], notes: [String] = [], words: [String] = [],
        takesPaths: Bool = false, usageListsOptions: Bool = true, start: @escaping @Sendable () -> Draft,
        positional: @escaping @Sendable (inout Draft, String) throws(UsageError) -> Void,
        finish: @escaping @Sendable (Draft) throws(UsageError) -> Invocation
    ) -> SubcommandSpec {
        SubcommandSpec(
            summary: summary, usage: usage, usageListsOptions: usageListsOptions, discussion: discussion, arguments: arguments,
            options: options.map(\.info), exitStatus: exitStatus, notes: notes, words: words, takesPaths: takesPaths,
            parse: { (arguments: [String]) throws(UsageError) -> Invocation in
                var draft = start()
                try walk(arguments, options: options, command: command, into: &draft, positional: positional)
                return try finish(draft)
            })
    }

    /// Applies each option to `draft` as it comes, and hands each other
    /// argument (every one after `--`) to `positional`.
    private static func walk<Draft>(
        _ arguments: [String], options: [OptionSpec<Draft>], command: Subcommand, into draft: inout Draft,
        positional: (inout Draft, String) throws(UsageError) -> Void
    ) throws(UsageError) {
        var index = 0
        var positionalOnly = false
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if positionalOnly || !argument.hasPrefix("-") || argument == "-" {
                try positional(&draft, argument)
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
            guard let option = options.first(where: { $0.info.names.contains(name) }) else {
                throw UsageError("Unknown option '\(name)'", command: command)
            }
            let text: String
            if option.info.value == nil {
                if inlineValue != nil { throw UsageError("The option '\(name)' takes no value", command: command) }
                text = ""
            } else if let inlineValue {
                text = inlineValue
            } else if index < arguments.count {
                text = arguments[index]
                index += 1
            } else {
                throw UsageError("Missing value for '\(option.info.usage)'", command: command)
            }
            try option.apply(&draft, Given(text: text, option: option.info, command: command))
        }
    }
}

/// A parsed command line.
public enum Invocation: Equatable, Sendable {
    case help(Subcommand?)
    /// `curfew help --man`: the manual page, in roff.
    case manual
    /// `curfew help --markdown`: the command-line reference, docs/cli.md.
    case markdown
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
    /// `curfew calendar EXPRESSION…`.
    case calendar(CalendarOptions)

    /// Parses `curfew`'s arguments (without the program name).
    public init(parsing arguments: [String]) throws(UsageError) {
        guard let first = arguments.first else {
            self = .help(nil)
            return
        }
        switch first {
        case "-h", "--help":
            self = .help(nil)
        case "--version":
            self = .version
        default:
            guard let command = Subcommand(rawValue: first) else {
                if first.hasPrefix("-") { throw UsageError("Unknown option '\(first)'", command: nil) }
                throw UsageError("Unknown subcommand '\(first)'", command: nil)
            }
            let rest = Array(arguments.dropFirst())
            if rest.contains(where: { $0 == "-h" || $0 == "--help" }) {
                self = .help(command)
            } else {
                self = try command.spec.parse(rest)
            }
        }
    }
}
