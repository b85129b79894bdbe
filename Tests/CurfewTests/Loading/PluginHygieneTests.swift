import Foundation
import Glibc
import Testing

@testable import Curfew

extension ProcessTests {
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
    }
}
