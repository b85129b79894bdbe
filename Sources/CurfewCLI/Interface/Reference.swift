/// docs/cli.md, the command-line reference: every subcommand's help in
/// Markdown, made from the same ``SubcommandSpec``s as `--help`, the man
/// page and the completions (`curfew help --markdown > docs/cli.md`; a
/// test fails when the file and the specs differ).
enum Reference {
    static func markdown() -> String {
        var lines = [
            "# Command-line reference",
            "",
            "<!-- Made by `curfew help --markdown`: change the subcommands' descriptions",
            "     (Sources/CurfewCLI/Interface/Specs.swift), then write this file again. -->",
            "",
            "What isolation guarantees, how plugins are loaded, and the JSON events",
            "`run --json` prints are in [running.md](running.md); `serve`'s",
            "configuration is in [serve.md](serve.md).",
            "",
            "```text",
        ]
        lines += Subcommand.allCases.flatMap { Manual.wrap(Help.usage($0)) } + ["curfew --version", "```"]
        for command in Subcommand.allCases {
            let spec = command.spec
            lines += ["", "## curfew \(command.rawValue)", "", spec.summary.escapedForMarkdown()]
            if !spec.discussion.isEmpty { lines += ["", spec.discussion.joined(separator: " ").escapedForMarkdown()] }
            lines += ["", "```text"] + Manual.wrap(Help.usage(command)) + ["```"]
            if !spec.arguments.isEmpty { lines += [""] + table(["argument", "meaning"], spec.arguments.map { ["`\($0.0)`", $0.1] }) }
            if !spec.options.isEmpty {
                lines += [""] + table(["option", "meaning"], spec.options.map { option in
                    ["`\(option.label)`", option.help]
                })
            }
            if !spec.exitStatus.isEmpty {
                lines += [""] + table(["exit status", "meaning"], spec.exitStatus.map { [$0.0, $0.1.split(separator: "\n").joined(separator: " ")] })
            }
            if !spec.notes.isEmpty { lines += ["", "```text"] + spec.notes + ["```"] }
        }
        lines += ["", "## Environment", ""]
        lines += table(["variable", "meaning"], Manual.environment.map { ["`\($0.0)`", $0.1] })
        return lines.joined(separator: "\n") + "\n"
    }

    /// A Markdown table; a cell in backticks is code, any other is text.
    private static func table(_ header: [String], _ rows: [[String]]) -> [String] {
        func row(_ cells: [String]) -> String {
            "| " + cells.map { $0.hasPrefix("`") ? $0.replacingPipes() : $0.escapedForMarkdown() }.joined(separator: " | ") + " |"
        }
        return [row(header), "|" + String(repeating: "---|", count: header.count)] + rows.map(row)
    }
}

extension String {
    /// A `|` escaped, so that it does not end a table's cell.
    fileprivate func replacingPipes() -> String {
        split(separator: "|", omittingEmptySubsequences: false).joined(separator: "\\|")
    }

    /// Help text as Markdown text: every character Markdown gives a
    /// meaning inside a line escaped, `<` an entity (a `<name>` is not an
    /// HTML tag), `&` one too (`&lt;` in help stays as written).
    fileprivate func escapedForMarkdown() -> String {
        var text = ""
        for character in self {
            switch character {
            case "\\", "`", "*", "_", "[", "]", "|", "#": text += "\\" + String(character)
            case "<": text += "&lt;"
            case "&": text += "&amp;"
            default: text.append(character)
            }
        }
        return text
    }
}
