import Foundation
import Testing

@testable import Curfew
@testable import CurfewCLI

/// The C kit: the header under strict compilers, its helper macros, and the
/// pkg-config install that lets a plugin build outside this package.
@Suite struct CKitTests {
    @Test func theHeaderBuildsAsStrictC11() async throws {
        let folder = Fixtures.temporaryFolder("ckit")
        try "#include <curfew.h>\nint main(void) { return 0; }\n".write(toFile: folder + "/main.c", atomically: true, encoding: .utf8)
        let result = try await Fixtures.run("/usr/bin/env", [
            "cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only", "-I", Fixtures.includeFolder, folder + "/main.c",
        ])
        #expect(result.status == 0, "\(result.stderr)")
    }

    @Test func theHeaderBuildsAsCPlusPlusWithCLinkage() async throws {
        let folder = Fixtures.temporaryFolder("ckit")
        let source = """
            #include <curfew.h>
            static const curfew_host *host;
            const curfew_plugin *curfew_plugin_entry(const curfew_host *services) { host = services; return nullptr; }
            """
        try source.write(toFile: folder + "/entry.cpp", atomically: true, encoding: .utf8)
        let library = folder + "/entry.so"
        let result = try await Fixtures.run("/usr/bin/env", [
            "c++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-pedantic", "-shared", "-fPIC", "-fvisibility=hidden",
            "-I", Fixtures.includeFolder, folder + "/entry.cpp", "-o", library,
        ])
        #expect(result.status == 0, "\(result.stderr)")
        // Exported unmangled: the host finds the entry, which declines to load.
        let error = try #require(PluginLoader().scan([library]).rejected.first?.error)
        #expect(error.code == .entryDeclined)
    }

    static let macroJob = """
        #include <curfew.h>

        static const curfew_host *host;

        static curfew_chunk_result once(curfew_context *ctx, void *state) {
            (void)state;
            host->log(ctx, CURFEW_LOG_INFO, "declared with the helpers");
            return CURFEW_CHUNK_DONE;
        }

        static void stop(curfew_context *ctx, void *state, curfew_expire_reason reason) {
            (void)ctx; (void)state; (void)reason;
        }

        CURFEW_JOB(first, "macro-first", "The first job.", .chunk = once, .expire = stop);
        CURFEW_JOB(second, "macro-second", "The second job.", .chunk = once, .expire = stop);
        CURFEW_PLUGIN(host, &first, &second)
        """

    @Test func theHelperMacrosDeclareAWholePlugin() async throws {
        let folder = Fixtures.temporaryFolder("ckit")
        try Self.macroJob.write(toFile: folder + "/macros.c", atomically: true, encoding: .utf8)
        let build = try await Fixtures.run("/usr/bin/env", [
            "cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-shared", "-fPIC", "-fvisibility=hidden",
            "-I", Fixtures.includeFolder, folder + "/macros.c", "-o", folder + "/macros.so",
        ])
        #expect(build.status == 0, "\(build.stderr)")
        let plugin = try PluginLoader().load(folder + "/macros.so")
        #expect(plugin.jobs.map(\.name) == ["macro-first", "macro-second"])
        let results = await Runner(jobs: plugin.jobs).run()
        #expect(results.map(\.outcome) == [.completed, .completed])
    }

    @Test func pkgConfigBuildsAPluginOutsideThePackage() async throws {
        let prefix = Fixtures.temporaryFolder("prefix")
        let install = try await Fixtures.run(Fixtures.packageRoot.appendingPathComponent("Scripts/install-c-kit").path, [prefix])
        #expect(install.status == 0, "\(install.stderr)")
        let pc = try String(contentsOfFile: prefix + "/lib/pkgconfig/curfew.pc", encoding: .utf8)
        #expect(pc.contains("Version: \(Help.version)\n"), "the pkg-config version follows the tool's")
        // The command, through a shell, with only the installed prefix to go on.
        let folder = Fixtures.temporaryFolder("outside")
        try Self.macroJob.write(toFile: folder + "/job.c", atomically: true, encoding: .utf8)
        let build = try await Fixtures.run("/bin/sh", [
            "-c", "PKG_CONFIG_PATH='\(prefix)/lib/pkgconfig' && export PKG_CONFIG_PATH && cd '\(folder)' && "
                + "cc -shared -fPIC $(pkg-config --cflags curfew) job.c -o job.so",
        ])
        #expect(build.status == 0, "\(build.stderr)")
        #expect(try PluginLoader().load(folder + "/job.so").jobs.count == 2)
    }

    @Test func theInstallScriptWantsAPrefix() async throws {
        let result = try await Fixtures.run(Fixtures.packageRoot.appendingPathComponent("Scripts/install-c-kit").path, [])
        #expect(result.status == 64)
        #expect(result.stderr == "Usage: Scripts/install-c-kit PREFIX\n")
    }
}
