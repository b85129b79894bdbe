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
        lines += Command.allCases.map { escape(Help.usage($0)) }
        lines += [".fi", ".SH DESCRIPTION"]
        lines += verbatim(Help.text(nil))
        for command in Command.allCases where command != .help {
            lines.append(".SH \"CURFEW \(command.rawValue.uppercased())\"")
            lines += verbatim(Help.text(command))
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
            "The README and docs/writing-jobs.md of the Curfew package; systemd.service(5), systemd.timer(5).",
        ]
        return lines.joined(separator: "\n") + "\n"
    }

    /// Help text kept as it is laid out, one roff line a line.
    private static func verbatim(_ text: String) -> [String] {
        [".nf"] + text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map { escape(String($0)) } + [".fi"]
    }

    /// A line roff prints as written: backslashes escaped, and a leading
    /// dot or quote (a request) guarded.
    static func escape(_ line: String) -> String {
        let escaped = line.split(separator: "\\", omittingEmptySubsequences: false).joined(separator: "\\e")
        return escaped.hasPrefix(".") || escaped.hasPrefix("'") ? "\\&" + escaped : escaped
    }
}
