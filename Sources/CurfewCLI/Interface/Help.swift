import Curfew

/// The help texts, made from each subcommand's ``SubcommandSpec``.
public enum Help {
    public static let version = HostInfo.version

    static let helpOption = OptionInfo(names: ["-h", "--help"], value: nil, help: "Show help information.", repeatable: false, choices: [])

    /// The usage line of a subcommand, or of the tool.
    public static func usage(_ command: Subcommand?) -> String {
        guard let command else { return "curfew <subcommand>" }
        let spec = command.spec
        guard spec.usageListsOptions else { return spec.usage }
        return ([spec.usage] + spec.options.map { "[\($0.usage)\($0.repeatable ? " ..." : "")]" }).joined(separator: " ")
    }

    /// The whole help text of a subcommand, or of the tool.
    public static func text(_ command: Subcommand?) -> String {
        guard let command else { return topLevel() }
        let spec = command.spec
        var lines = ["OVERVIEW: \(spec.summary)", ""]
        if !spec.discussion.isEmpty { lines += spec.discussion + [""] }
        lines += ["USAGE: \(usage(command))", ""]
        if !spec.arguments.isEmpty { lines += ["ARGUMENTS:"] + rows(spec.arguments) + [""] }
        lines += ["OPTIONS:"] + rows((spec.options + [helpOption]).map { ($0.label, $0.help) })
        if !spec.exitStatus.isEmpty { lines += ["", "EXIT STATUS:"] + exitRows(spec.exitStatus) }
        if !spec.notes.isEmpty { lines += [""] + spec.notes }
        return lines.joined(separator: "\n") + "\n"
    }

    private static func topLevel() -> String {
        var lines = [
            "OVERVIEW: Run background jobs from compiled plugins, each under an iOS-style background-task grant.",
            "",
            "USAGE: \(usage(nil))",
            "",
            "OPTIONS:",
        ]
        lines += rows([("--version", "Show the version."), (helpOption.label, helpOption.help)])
        lines += ["", "SUBCOMMANDS:"]
        lines += rows(Subcommand.allCases.map { ($0.rawValue, $0.spec.summary) })
        lines += ["", "  See 'curfew help <subcommand>' for detailed help."]
        return lines.joined(separator: "\n") + "\n"
    }

    /// "  64   usage error": the status in a column of five, a meaning's
    /// later lines under its first.
    static func exitRows(_ entries: [(String, String)]) -> [String] {
        entries.flatMap { status, meaning in
            meaning.split(separator: "\n").enumerated().map { index, line in
                index == 0 ? "  " + status + String(repeating: " ", count: max(1, 5 - status.count)) + line : "       " + line
            }
        }
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
