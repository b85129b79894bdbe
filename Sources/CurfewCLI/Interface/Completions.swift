import Curfew
import CurfewHost

/// A shell `curfew completions` writes for.
public enum Shell: String, CaseIterable, Sendable {
    case bash, zsh, fish
}

/// Completion scripts, made from each subcommand's ``SubcommandSpec``: a new
/// option completes as soon as it is in `--help`.
enum Completions {
    static func script(for shell: Shell) -> String {
        switch shell {
        case .bash: bash()
        case .zsh: zsh()
        case .fish: fish()
        }
    }

    /// Every option of every subcommand.
    private static var allOptions: [OptionInfo] {
        Subcommand.allCases.flatMap(\.spec.options)
    }

    /// A description on one line, without the characters the shells' syntax uses.
    private static func plain(_ text: String) -> String {
        let sentence = text.split(separator: ".", maxSplits: 1).first.map(String.init) ?? text
        return String(sentence.filter { !"'\"[]:`$\\\n".contains($0) })
    }

    private static func bash() -> String {
        var lines = [
            "# bash completion for curfew (curfew completions bash)",
            "_curfew() {",
            "    local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"${COMP_WORDS[COMP_CWORD-1]}\"",
            "    if [ \"$COMP_CWORD\" -eq 1 ]; then",
            "        COMPREPLY=($(compgen -W \"\(Subcommand.allCases.map(\.rawValue).joined(separator: " ")) --help --version\" -- \"$cur\"))",
            "        return",
            "    fi",
            "    local options=\"\" words=\"\" paths=0",
            "    case \"${COMP_WORDS[1]}\" in",
        ]
        for command in Subcommand.allCases {
            let options = command.spec.options.flatMap(\.names) + ["--help"]
            lines.append("        \(command.rawValue)) options=\"\(options.joined(separator: " "))\" words=\"\(command.spec.words.joined(separator: " "))\" paths=\(command.spec.takesPaths ? 1 : 0) ;;")
        }
        lines += [
            "    esac",
            // `ctl VERB JOB`: the serving host's jobs, as `status --json` names
            // them (validated names: [a-z0-9._-]); nothing after a host verb.
            "    if [ \"${COMP_WORDS[1]}\" = ctl ] && [ \"$COMP_CWORD\" -gt 2 ]; then",
            "        words=\"\"",
            "        if [ \"$COMP_CWORD\" -eq 3 ]; then",
            "            case \"$prev\" in",
            "                \(Server.Command.jobVerbs.joined(separator: "|"))) words=\"$(\"${COMP_WORDS[0]}\" status --json 2>/dev/null | sed -n 's/.*\"job\":\"\\([a-z0-9._-]*\\)\".*/\\1/p')\" ;;",
            "            esac",
            "        fi",
            "    fi",
            "    case \"$prev\" in",
        ]
        for option in allOptions where !option.choices.isEmpty {
            lines.append("        \(option.names.last!)) COMPREPLY=($(compgen -W \"\(option.choices.joined(separator: " "))\" -- \"$cur\")); return ;;")
        }
        let valued = Set(allOptions.filter { $0.value != nil && $0.choices.isEmpty }.flatMap(\.names))
        lines += [
            "        \(valued.sorted().joined(separator: "|"))) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;",
            "    esac",
            "    if [[ \"$cur\" == -* ]]; then",
            "        COMPREPLY=($(compgen -W \"$options\" -- \"$cur\"))",
            "    else",
            "        COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))",
            "        if [ \"$paths\" -eq 1 ]; then COMPREPLY+=($(compgen -f -- \"$cur\")); fi",
            "    fi",
            "}",
            "complete -o filenames -F _curfew curfew",
        ]
        return lines.joined(separator: "\n") + "\n"
    }

    private static func zsh() -> String {
        var lines = [
            "#compdef curfew",
            "# zsh completion for curfew (curfew completions zsh)",
            "_curfew() {",
            "    local -a subcommands",
            "    subcommands=(",
        ]
        lines += Subcommand.allCases.map { "        '\($0.rawValue):\(plain($0.spec.summary))'" }
        lines += [
            "    )",
            "    if (( CURRENT == 2 )); then",
            "        _describe -t subcommands 'curfew subcommand' subcommands",
            "        return",
            "    fi",
            "    case $words[2] in",
        ]
        for command in Subcommand.allCases {
            var specs = command.spec.options.map { option -> String in
                let names = option.names.count > 1 ? "(\(option.names.joined(separator: " ")))'{\(option.names.joined(separator: ","))}'" : option.names[0]
                let repeats = option.repeatable ? "*" : ""
                let value = option.value.map { name in
                    let fixed = option.choices
                    return ":\(name):" + (fixed.isEmpty ? (name.contains("file") || name.contains("folder") || name.contains("path") ? "_files" : "") : "(\(fixed.joined(separator: " ")))")
                } ?? ""
                return "'\(repeats)\(names)[\(plain(option.help))]\(value)'"
            }
            specs.append("'(-h --help)'{-h,--help}'[Show help information]'")
            let rest = command.spec.words
            if !rest.isEmpty {
                specs.append("'*:argument:(\(rest.joined(separator: " ")))'")
            } else if command.spec.takesPaths {
                specs.append("'*:path:_files'")
            }
            lines.append("        \(command.rawValue)) _arguments \(specs.joined(separator: " ")) ;;")
        }
        lines += ["    esac", "}", "_curfew \"$@\""]
        return lines.joined(separator: "\n") + "\n"
    }

    private static func fish() -> String {
        var lines = [
            "# fish completion for curfew (curfew completions fish)",
            "complete -c curfew -f",
        ]
        for command in Subcommand.allCases {
            lines.append("complete -c curfew -n __fish_use_subcommand -a \(command.rawValue) -d '\(plain(command.spec.summary))'")
        }
        for command in Subcommand.allCases {
            let when = "-n '__fish_seen_subcommand_from \(command.rawValue)'"
            for option in command.spec.options {
                let names = option.names.map { $0.hasPrefix("--") ? "-l \($0.dropFirst(2))" : "-s \($0.dropFirst())" }.joined(separator: " ")
                let fixed = option.choices
                let value = option.value == nil ? "" : fixed.isEmpty ? " -r -F" : " -x -a '\(fixed.joined(separator: " "))'"
                lines.append("complete -c curfew \(when) \(names)\(value) -d '\(plain(option.help))'")
            }
            let rest = command.spec.words
            if !rest.isEmpty { lines.append("complete -c curfew \(when) -a '\(rest.joined(separator: " "))'") }
            if command.spec.takesPaths { lines.append("complete -c curfew \(when) -F") }
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
