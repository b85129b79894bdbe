import Foundation
import Testing

@testable import CurfewCLI

/// Help, the manual page, the completion scripts and docs/cli.md are made
/// from one description per subcommand: every subcommand, option and word
/// is in each.
@Suite struct ManualAndCompletionTests {
    @Test func everyOutputShowsEveryOptionOfTheDescription() {
        let page = Manual.roff()
        let reference = Reference.markdown()
        let scripts = Shell.allCases.map { Completions.script(for: $0) }
        for command in Subcommand.allCases {
            let spec = command.spec
            let help = Help.text(command)
            #expect(Help.text(nil).contains(command.rawValue))
            #expect(reference.contains("## curfew \(command.rawValue)\n"))
            for option in spec.options {
                #expect(help.contains(option.label), "\(command) \(option.label)")
                #expect(page.contains(Manual.escape(option.label)), "\(command) \(option.label)")
                #expect(reference.contains("`\(option.label)`"), "\(command) \(option.label)")
                for choice in option.choices {
                    #expect(scripts.allSatisfy { $0.contains(choice) }, "\(command) \(option.label) \(choice)")
                }
            }
            for word in spec.words {
                #expect(scripts.allSatisfy { $0.contains(word) }, "\(command) \(word)")
            }
        }
    }

    /// docs/cli.md is `curfew help --markdown`: one changed without the
    /// other fails here.
    @Test func docsCliMdIsTheReferenceAsMade() throws {
        let file = try String(contentsOf: Fixtures.packageRoot.appendingPathComponent("docs/cli.md"), encoding: .utf8)
        #expect(file == Reference.markdown(), "run: swift run curfew help --markdown > docs/cli.md")
    }

    @Test func helpManAndCompletionsParse() throws {
        #expect(try Invocation(parsing: ["help", "--man"]) == .manual)
        #expect(try Invocation(parsing: ["help", "--markdown"]) == .markdown)
        #expect(try Invocation(parsing: ["help", "--help"]) == .help(.help))
        #expect(usageErrorText(["help", "run", "--man"])?.contains("Give one subcommand, --man or --markdown") == true)
        #expect(try Invocation(parsing: ["completions", "zsh"]) == .completions(.zsh))
        #expect(try Invocation(parsing: ["completions", "--help"]) == .help(.completions))
        #expect(usageErrorText(["completions"])?.contains("Missing the shell: bash, zsh or fish") == true)
        #expect(usageErrorText(["completions", "tcsh"])?.contains("Unknown shell 'tcsh'") == true)
        #expect(usageErrorText(["completions", "bash", "zsh"])?.contains("Unexpected argument 'zsh'") == true)
    }

    @Test func theManualPageHasEverySubcommandsHelpAsRoff() {
        let page = Manual.roff()
        #expect(page.hasPrefix(".TH CURFEW 1 "))
        for command in Subcommand.allCases where command != .help {
            #expect(page.contains(".SH \"CURFEW \(command.rawValue.uppercased())\""))
            for option in command.spec.options {
                #expect(page.contains(Manual.escape(option.label)), "\(command) \(option.label)")
            }
        }
        // No line of help text may read as a roff request.
        let requests = [".TH ", ".SH ", ".nf", ".fi", ".TP", ".I ", ".B "]
        let stray = page.split(separator: "\n").filter { line in line.hasPrefix(".") && !requests.contains { line.hasPrefix($0) } }
        #expect(stray.isEmpty, "\(stray)")
        #expect(Manual.escape(".hidden \\n") == "\\&.hidden \\en")
        // Every variable the host reads is in ENVIRONMENT; a verbatim line fits a terminal.
        for name in ["STATE_DIRECTORY", "XDG_STATE_HOME", "CACHE_DIRECTORY", "RUNTIME_DIRECTORY", "NOTIFY_SOCKET", "JOURNAL_STREAM", "NO_COLOR"] {
            #expect(page.contains(".B \(name)"), "\(name)")
        }
        var verbatim = false
        for line in page.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == ".nf" || line == ".fi" { verbatim = line == ".nf" }
            if verbatim { #expect(line.count <= Manual.width, "\(line)") }
        }
    }

    @Test func aLongLineWrapsAtSpacesOutsideBracketsAndKeepsItsSpacing() {
        let usage = "curfew run [--state <folder>] " + String(repeating: "[--jobs <n>] ", count: 8)
        let lines = Manual.wrap(usage)
        #expect(lines.count > 1 && lines.allSatisfy { $0.count <= Manual.width })
        #expect(lines.dropFirst().allSatisfy { $0.hasPrefix("    [") }, "\(lines)")
        #expect(Manual.wrap("  5    short") == ["  5    short"])
        #expect(Manual.wrap(String(repeating: "x", count: 100)).count == 1, "a word longer than the width stands alone")
    }

    @Test func everyScriptNamesEverySubcommandAndOption() {
        for shell in Shell.allCases {
            let script = Completions.script(for: shell)
            for command in Subcommand.allCases {
                #expect(script.contains(command.rawValue), "\(shell) \(command)")
                for option in command.spec.options {
                    let name = shell == .fish ? "-l \(option.names.last!.dropFirst(2))" : option.names.last!
                    #expect(script.contains(name), "\(shell) \(command) \(name)")
                }
            }
        }
        #expect(Completions.script(for: .zsh).hasPrefix("#compdef curfew\n"))
    }
}

extension ProcessTests.Second {
    @Suite struct BashCompletionTests {
        /// What bash offers after `words` (the last one being completed).
        func offered(_ words: [String]) async throws -> [String] {
            let script = Fixtures.temporaryFolder("completion") + "/curfew.bash"
            try Completions.script(for: .bash).write(toFile: script, atomically: true, encoding: .utf8)
            let quoted = words.map { "'\($0)'" }.joined(separator: " ")
            let result = try await Fixtures.run(
                "/bin/bash", ["-c", "source \(script); COMP_WORDS=(\(quoted)); COMP_CWORD=\(words.count - 1); _curfew; printf '%s\\n' \"${COMPREPLY[@]}\""])
            #expect(result.status == 0, "\(result.stderr)")
            return result.stdout.split(separator: "\n").map(String.init)
        }

        @Test func bashCompletesSubcommandsOptionsAndTheirValues() async throws {
            #expect(try await offered(["curfew", "se"]) == ["serve"])
            #expect(try await offered(["curfew", "serve", "--con"]) == ["--config"])
            #expect(try await offered(["curfew", "run", "--isolate", ""]) == ["none", "plugin", "job"])
            #expect(try await offered(["curfew", "ctl", "f"]) == ["foreground"])
            #expect(try await offered(["curfew", "completions", "z"]) == ["zsh"])
            #expect(try await offered(["curfew", "run", "--allow-mode", "bluetooth-p"]) == ["bluetooth-peripheral"])
        }

        /// Before: after `ctl run` bash offered the verbs again.
        @Test func bashCompletesAServingHostsJobsAfterAJobVerb() async throws {
            let fake = Fixtures.temporaryFolder("fake") + "/curfew"
            try """
                #!/bin/sh
                [ "$1" = status ] && [ "$2" = --json ] || exit 64
                echo '{"app_state":"background","jobs":2}'
                echo '{"job":"tally","plugin":"/p/a.so","state":"idle"}'
                echo '{"job":"talk.v2","plugin":"/p/b.so","state":"running"}'
                """.write(toFile: fake, atomically: true, encoding: .utf8)
            #expect(chmod(fake, 0o755) == 0)
            #expect(try await offered([fake, "ctl", "pause", "ta"]) == ["tally", "talk.v2"])
            #expect(try await offered([fake, "ctl", "run", "talk"]) == ["talk.v2"])
            #expect(try await offered([fake, "ctl", "reload", ""]).isEmpty, "a host verb takes no job")
            #expect(try await offered([fake, "ctl", "pause", "tally", ""]).isEmpty)
            #expect(try await offered([fake, "ctl", "re"]) == ["resume", "reload"])
        }
    }
}
