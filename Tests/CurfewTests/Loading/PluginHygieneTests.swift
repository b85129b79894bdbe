import Foundation
import Glibc
import Testing

@testable import Curfew

extension ProcessTests.First {
    /// Plugin file hygiene: code that others could have written is not loaded.
    @Suite struct PluginHygieneTests {
        @Test func aFolderOrFileWritableByOthersIsRefused() throws {
            let folder = Fixtures.temporaryFolder("hygiene")
            let plugin = folder + "/plugin.so"
            try FileManager.default.copyItem(atPath: Fixtures.examplePlugins[1], toPath: plugin)
            #expect(chmod(folder, 0o777) == 0)
            var rejected = PluginLoader().scan([folder]).rejected
            #expect(rejected.map(\.path) == [folder])
            #expect(rejected.first?.error.code == .insecure)
            #expect(rejected.first?.error.description
                == "Folder is writable by anyone (mode 777), so anyone there could replace the code it runs; chmod go-w it, or pass --allow-insecure-plugins.")

            #expect(chmod(folder, 0o755) == 0)
            #expect(chmod(plugin, 0o664) == 0)
            rejected = PluginLoader().scan([folder]).rejected
            #expect(rejected.first?.error.description
                == "File is writable by its group (mode 664), so anyone there could replace the code it runs; chmod go-w it, or pass --allow-insecure-plugins.")
            #expect(PluginLoader(allowsInsecurePlugins: true).scan([folder]).jobs.map(\.name) == ["sum-squares"])
        }

        /// Before: only the file (or the folder given) was checked.
        @Test func everyFolderUpToTheRootIsChecked() throws {
            let open = Fixtures.temporaryFolder("hygiene-open")
            let inner = open + "/inner"
            #expect(mkdir(inner, 0o755) == 0)
            try FileManager.default.copyItem(atPath: Fixtures.examplePlugins[1], toPath: inner + "/plugin.so")
            #expect(chmod(open, 0o775) == 0)
            defer { chmod(open, 0o755) }
            var error = try #require(PluginLoader().scan([inner + "/plugin.so"]).rejected.first?.error)
            #expect(error.code == .insecure)
            #expect(error.description
                == "Folder \(open) (above it) is writable by its group (mode 775), so anyone there could replace the code it runs; chmod go-w it, or pass --allow-insecure-plugins.")
            error = try #require(PluginLoader().scan([inner]).rejected.first?.error)
            #expect(error.description.hasPrefix("Folder \(open) (above it) is writable by its group"))

            // A symlink to a safe plugin, in a folder anyone can write: the link can be replaced.
            let safe = Fixtures.temporaryFolder("hygiene-safe")
            try FileManager.default.copyItem(atPath: Fixtures.examplePlugins[1], toPath: safe + "/plugin.so")
            #expect(symlink(safe + "/plugin.so", open + "/link.so") == 0)
            #expect(chmod(open, 0o777) == 0)
            error = try #require(PluginLoader().scan([open + "/link.so"]).rejected.first?.error)
            #expect(error.description.hasPrefix("Folder \(open) (above it) is writable by anyone (mode 777)"))
            #expect(PluginLoader().scan([safe + "/plugin.so"]).rejected.isEmpty, "/tmp is sticky: nobody may replace another's entries")
        }

        @Test(.enabled(if: geteuid() == 0, "changing a file's owner needs root"))
        func aFileOwnedByAnotherUserIsRefused() throws {
            let plugin = Fixtures.temporaryFolder("hygiene") + "/plugin.so"
            try FileManager.default.copyItem(atPath: Fixtures.examplePlugins[1], toPath: plugin)
            #expect(chown(plugin, 54321, 54321) == 0)
            let error = try #require(PluginLoader().scan([plugin]).rejected.first?.error)
            #expect(error.description == "File is owned by uid 54321, neither you nor root; chown it, or pass --allow-insecure-plugins.")
        }

        @Test func theCommandLineSaysWhyAndCanBeTold() async throws {
            let folder = Fixtures.temporaryFolder("hygiene")
            try FileManager.default.copyItem(atPath: Fixtures.examplePlugins[1], toPath: folder + "/plugin.so")
            #expect(chmod(folder + "/plugin.so", 0o666) == 0)
            let refused = try await Fixtures.run(Fixtures.curfewExecutable, ["run", folder, "--isolate", "job"])
            #expect(refused.status == 3)
            #expect(refused.stderr == "Error: Nothing to run: every plugin file was rejected.\n")
            let allowed = try await Fixtures.run(Fixtures.curfewExecutable, ["run", folder, "--isolate", "job", "--allow-insecure-plugins"])
            #expect(allowed.status == 0, "\(allowed.stdout)\(allowed.stderr)")
        }

        /// Before, a name that is not UTF-8 was read with U+FFFD in it, a
        /// text that names no file, and reported as "No such file or folder".
        @Test func aNameThatIsNotUTF8IsSaidToBeOne() async throws {
            let folder = Fixtures.temporaryFolder("names")
            let bytes = Array((folder + "/bad").utf8) + [0xFF] + Array(".so".utf8) + [0]
            let made = bytes.withUnsafeBufferPointer { $0.withMemoryRebound(to: CChar.self) { open($0.baseAddress!, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644) } }
            #expect(made >= 0)
            close(made)
            let rejected = PluginLoader().scan([folder]).rejected
            #expect(rejected.map(\.error.description) == [PluginLoader.notUTF8.description])
            // On the command line: its own error, not a missing file.
            let given = try await Fixtures.run("/bin/sh", ["-c", #"exec "$0" list "$1/bad$(printf '\377').so""#, Fixtures.curfewExecutable, folder])
            #expect(given.status == 64)
            #expect(given.stderr.hasPrefix("Error: argument 2 is not UTF-8"), "\(given.stderr)")
        }
    }
}
