/// `curfew(1)`: the help texts of the tool and of every subcommand, as a
/// manual page. Made from ``Help/text(_:)``, so the two cannot drift.
enum Manual {
    static func roff() -> String {
        var lines = [
            ".TH CURFEW 1 \"\" \"curfew \(escape(Help.version))\" \"User Commands\"",
            ".SH NAME",
            "curfew \\- run background jobs from compiled plugins, each under an iOS-style background-task grant",
            ".SH SYNOPSIS",
            ".nf",
        ]
        lines += Subcommand.allCases.flatMap { wrap(Help.usage($0)).map(escape) }
        lines += [".fi", ".SH DESCRIPTION"]
        lines += verbatim(Help.text(nil))
        for command in Subcommand.allCases where command != .help {
            lines.append(".SH \"CURFEW \(command.rawValue.uppercased())\"")
            lines += verbatim(Help.text(command))
        }
        lines.append(".SH ENVIRONMENT")
        for (name, meaning) in environment {
            lines += [".TP", ".B \(name)", meaning]
        }
        lines += [
            ".SH FILES",
            ".TP",
            ".I include/curfew.h",
            "The C ABI plugins are written against, installed beside this page's binary.",
            ".TP",
            ".I libexec/curfew/curfew-scanner",
            "The plugin scanner, a C program that forks a scanner per plugin file. curfew looks for it beside its own real path, then in ../libexec/curfew/ from there; without it, curfew scans from its own image, more slowly.",
            ".SH SEE ALSO",
            "The README and docs/ of the Curfew package (docs/writing-jobs.md, docs/serve.md, docs/cli.md, docs/running.md); systemd.service(5), systemd.timer(5).",
        ]
        return lines.joined(separator: "\n") + "\n"
    }

    /// The variables curfew reads, and what each changes.
    static let environment: [(String, String)] = [
        ("STATE_DIRECTORY", "The state store's folder (its first entry), as systemd's StateDirectory= sets it; --state overrides it."),
        ("XDG_STATE_HOME", "Without STATE_DIRECTORY: the state store is $XDG_STATE_HOME/curfew."),
        ("HOME", "Without either: the state store is ~/.local/state/curfew, the scan cache ~/.cache/curfew/scan-v2, plugin snapshots ~/.cache/curfew/snapshots."),
        ("CACHE_DIRECTORY", "The scan cache's and snapshots' folder (its first entry, then scan-v2 and snapshots), as systemd's CacheDirectory= sets it."),
        ("XDG_CACHE_HOME", "Without CACHE_DIRECTORY: the scan cache is $XDG_CACHE_HOME/curfew/scan-v2, snapshots $XDG_CACHE_HOME/curfew/snapshots."),
        ("RUNTIME_DIRECTORY", "The control socket is $RUNTIME_DIRECTORY/serve.sock (systemd's RuntimeDirectory=); --socket overrides it."),
        ("XDG_RUNTIME_DIR", "Without RUNTIME_DIRECTORY: the control socket is $XDG_RUNTIME_DIR/curfew/serve.sock, else ~/.cache/curfew/serve.sock, else /tmp/curfew-UID/serve.sock."),
        ("NOTIFY_SOCKET", "serve speaks systemd's notify protocol on it: READY=1, STATUS=, STOPPING=1, WATCHDOG=1."),
        ("WATCHDOG_USEC, WATCHDOG_PID", "serve feeds the watchdog at half this interval when the pid is its own."),
        ("JOURNAL_STREAM", "Output to the journal gets syslog priority prefixes."),
        ("NO_COLOR", "Set: no colour on a terminal."),
    ]

    /// The longest line of a verbatim block: an 80-column terminal, less the page's indent.
    static let width = 72

    /// Help text kept as it is laid out, one roff line a line, lines longer
    /// than ``width`` wrapped.
    private static func verbatim(_ text: String) -> [String] {
        [".nf"] + text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().flatMap { wrap(String($0)).map(escape) } + [".fi"]
    }

    /// `line` broken at spaces outside brackets (`[--state <folder>]` stays
    /// whole) into lines of at most ``width`` characters where it can, the
    /// later ones indented four more than the first; spacing kept.
    static func wrap(_ line: String) -> [String] {
        let indent = String(line.prefix { $0 == " " }) + "    "
        var lines: [String] = []
        var rest = Array(line)
        while rest.count > width {
            // The last space outside brackets within the width, past the indent.
            var depth = 0
            var cut: Int?
            for (index, character) in rest.enumerated() {
                if index > width { break }
                if "[(<".contains(character) { depth += 1 }
                if "])>".contains(character) { depth = max(0, depth - 1) }
                if character == " " && depth == 0 && index > indent.count && rest[index - 1] != " " { cut = index }
            }
            guard let cut else { break }
            lines.append(String(rest[..<cut]))
            rest = Array(indent) + rest[cut...].drop { $0 == " " }
        }
        lines.append(String(rest))
        return lines
    }

    /// A line roff prints as written: backslashes escaped, and a leading
    /// dot or quote (a request) guarded.
    static func escape(_ line: String) -> String {
        let escaped = line.split(separator: "\\", omittingEmptySubsequences: false).joined(separator: "\\e")
        return escaped.hasPrefix(".") || escaped.hasPrefix("'") ? "\\&" + escaped : escaped
    }
}
