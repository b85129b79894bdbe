import Foundation
import Testing

@testable import Curfew
@testable import CurfewCLI

extension ProcessTests.First {
    /// `curfew new`: parsing, and the projects it writes.
    @Suite struct NewCommandTests {
        static let usage = "Usage: curfew new <language> <name> [<directory>] [--curfew-root <path>]\n  See 'curfew new --help' for more information.\n"

        @Test func parsing() throws {
            #expect(try Invocation(parsing: ["new", "c", "hello"]) == .new(NewOptions(language: .c, name: "hello")))
            #expect(
                try Invocation(parsing: ["new", "swift", "up.load_2", "jobs/up", "--curfew-root", "/src/curfew"])
                    == .new(NewOptions(language: .swift, name: "up.load_2", directory: "jobs/up", curfewRoot: "/src/curfew")))
            #expect(usageErrorText(["new"]) == "Error: Missing expected argument '<language>'\n" + Self.usage)
            #expect(usageErrorText(["new", "rust", "x"]) == "Error: The value 'rust' is invalid for '<language>': use c or swift\n" + Self.usage)
            #expect(usageErrorText(["new", "c"]) == "Error: Missing expected argument '<name>'\n" + Self.usage)
            #expect(
                usageErrorText(["new", "c", "Hello World"])
                    == "Error: The value 'Hello World' is invalid for '<name>': a job name is 1 to 64 of [a-z0-9._-], starting with a letter or digit\n"
                    + Self.usage)
            #expect(usageErrorText(["new", "c", "a", "b", "c"]) == "Error: Unexpected argument 'c'\n" + Self.usage)
        }

        @Test func help() {
            #expect(Help.text(.new) == """
                OVERVIEW: Write a ready-to-build job project in C or Swift.

                C: NAME.c, a copy of curfew.h and a Makefile (build: make).
                Swift: a Package.swift that depends on Curfew by path, and a job
                source (build: swift build). Each has a README with its commands.
                Existing files are never overwritten.

                USAGE: curfew new <language> <name> [<directory>] [--curfew-root <path>]

                ARGUMENTS:
                  <language>              c or swift.
                  <name>                  The job's name: 1 to 64 of [a-z0-9._-], starting with
                                          a letter or digit.
                  <directory>             Where to write the project. (default: ./<name>)

                OPTIONS:
                  --curfew-root <path>    The Curfew package to copy curfew.h from (C) or depend
                                          on (Swift). (default: the one this tool was built
                                          from)
                  -h, --help              Show help information.

                """)
        }

        @Test func names() {
            #expect(Scaffold.cIdentifier("hello-world.v2") == "hello_world_v2")
            #expect(Scaffold.cIdentifier("3d") == "job_3d")
            #expect(Scaffold.swiftTypeName("hello-world.v2") == "HelloWorldV2")
            #expect(Scaffold.swiftTypeName("3d") == "Job3d")
        }

        @Test func aCProjectBuildsWithMakeAndRuns() async throws {
            let folder = Fixtures.temporaryFolder("new-c") + "/counter"
            let created = try await Fixtures.run(Fixtures.curfewExecutable, ["new", "c", "counter", folder])
            #expect(created.status == 0, "\(created.stderr)")
            #expect(created.stdout == "Created \(folder)/ with counter.c, curfew.h, Makefile, README.md.\nBuild: cd \(folder) && make\n")
            let header = try String(contentsOfFile: folder + "/curfew.h", encoding: .utf8)
            #expect(header == (try String(contentsOfFile: Fixtures.includeFolder + "/curfew.h", encoding: .utf8)))
            let readme = try String(contentsOfFile: folder + "/README.md", encoding: .utf8)
            #expect(readme.contains("    make\n"), "the README names the one build command")

            // Before: adding a library meant editing the rule. Linking one is a variable.
            let build = try await Fixtures.run("/usr/bin/env", ["make", "LDLIBS=-lm"], in: folder)
            #expect(build.status == 0, "\(build.stdout)\(build.stderr)")
            #expect(build.stdout.contains(" -lm"), "\(build.stdout)")
            let plugin = try PluginLoader().load(folder + "/counter.so")
            let configuration = RunConfiguration(parameters: ["items": "3"])
            let results = await Runner(jobs: plugin.jobs, configuration: configuration).run()
            #expect(results.map(\.outcome) == [.completed])
            #expect(results.first?.chunks == 3)
        }

        @Test func aSwiftProjectDependsOnThisPackage() async throws {
            let folder = Fixtures.temporaryFolder("new-swift") + "/up"
            let created = try await Fixtures.run(Fixtures.curfewExecutable, ["new", "swift", "up-load", folder])
            #expect(created.status == 0, "\(created.stderr)")
            let manifest = try String(contentsOfFile: folder + "/Package.swift", encoding: .utf8)
            let root = Fixtures.packageRoot.path
            #expect(manifest.contains(".package(path: \"\(root)\")"))
            #expect(manifest.contains(".product(name: \"CurfewJob\", package: \"\(Fixtures.packageRoot.lastPathComponent)\")"))
            #expect(FileManager.default.fileExists(atPath: folder + "/Sources/UpLoad/UpLoad.swift"))
            // Before: it printed a Duration whole ("179.99975598700001 seconds left").
            let source = try String(contentsOfFile: folder + "/Sources/UpLoad/UpLoad.swift", encoding: .utf8)
            #expect(source.contains("context.timeRemaining.components.seconds) s left"))
            // Building it means a nested `swift build` of this package (about half a
            // minute on two cores): .ci/run does that, builds and runs the plugin.
        }

        @Test func existingFilesAreNeverOverwritten() async throws {
            let folder = Fixtures.temporaryFolder("new-c")
            try "mine\n".write(toFile: folder + "/Makefile", atomically: true, encoding: .utf8)
            let result = try await Fixtures.run(Fixtures.curfewExecutable, ["new", "c", "job", folder])
            #expect(result.status == 1)
            #expect(result.stderr == "Error: Refusing to overwrite \(folder)/Makefile; choose another directory.\n")
            #expect(!FileManager.default.fileExists(atPath: folder + "/job.c"), "nothing is written")
            #expect(try String(contentsOfFile: folder + "/Makefile", encoding: .utf8) == "mine\n")
        }
    }
}
