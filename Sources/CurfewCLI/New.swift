import Curfew

/// What `curfew new` was asked to write.
public struct NewOptions: Equatable, Sendable {
    /// The language of the project `curfew new` writes.
    public enum Language: String, Sendable, CaseIterable { case c, swift }

    public var language: Language
    public var name: String
    /// Where to write; `nil` for `./NAME`.
    public var directory: String?
    /// The Curfew package to take the header from and depend on; `nil` for
    /// the one this tool was built from.
    public var curfewRoot: String?

    public init(language: Language, name: String, directory: String? = nil, curfewRoot: String? = nil) {
        self.language = language
        self.name = name
        self.directory = directory
        self.curfewRoot = curfewRoot
    }

    public var effectiveDirectory: String { directory ?? name }
}

/// Writes a ready-to-build job project.
enum Scaffold {
    /// The Curfew package this tool was built from.
    static let builtFromRoot: String = {
        // This file is Sources/CurfewCLI/New.swift in the package.
        var path = #filePath
        for _ in 0..<3 { path = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)]) }
        return path
    }()

    struct File {
        let name: String
        let contents: String
        var mode: UInt32 = 0o644
    }

    /// The files of the project, by name relative to its directory.
    static func files(_ options: NewOptions, root: String) throws(ScaffoldError) -> [File] {
        switch options.language {
        case .c:
            let header = try readFile(root + "/include/curfew.h")
            let symbol = cIdentifier(options.name)
            return [
                File(name: "\(options.name).c", contents: cSource(options.name, symbol: symbol)),
                File(name: "curfew.h", contents: header),
                File(name: "Makefile", contents: makefile(options.name)),
                File(name: "README.md", contents: cReadme(options.name)),
            ]
        case .swift:
            guard Syscalls.isReadable(root + "/Package.swift") else {
                throw ScaffoldError("No Curfew package at \(root) (no Package.swift); pass --curfew-root PATH.")
            }
            let type = swiftTypeName(options.name)
            let identity = String(root.split(separator: "/").last ?? "curfew")
            return [
                File(name: "Package.swift", contents: swiftManifest(type, root: root, identity: identity)),
                File(name: "Sources/\(type)/\(type).swift", contents: swiftSource(options.name, type: type)),
                File(name: "README.md", contents: swiftReadme(options.name, type: type)),
            ]
        }
    }

    /// Writes the project; refuses, writing nothing, when any of its files exists.
    static func write(_ options: NewOptions) throws(ScaffoldError) -> [String] {
        let root = options.curfewRoot ?? builtFromRoot
        let files = try files(options, root: root)
        let directory = options.effectiveDirectory
        let existing = files.map { directory + "/" + $0.name }.filter(Syscalls.exists)
        guard existing.isEmpty else {
            throw ScaffoldError("Refusing to overwrite \(existing.joined(separator: ", ")); choose another directory.")
        }
        for file in files {
            let path = directory + "/" + file.name
            try makeDirectories(String(path[..<path.lastIndex(of: "/")!]))
            try create(path, file.contents, mode: file.mode)
        }
        return files.map(\.name)
    }

    // MARK: Names

    /// A C identifier from a job name: `hello-world` → `hello_world`.
    static func cIdentifier(_ name: String) -> String {
        let mapped = String(name.map { $0.isLetter || $0.isNumber ? $0 : "_" })
        return mapped.first?.isNumber == true ? "job_" + mapped : mapped
    }

    /// A Swift type name from a job name: `hello-world` → `HelloWorld`.
    static func swiftTypeName(_ name: String) -> String {
        let words = name.split(whereSeparator: { !$0.isLetter && !$0.isNumber })
        let joined = words.map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined()
        return joined.first?.isLetter == true ? joined : "Job" + joined
    }

    // MARK: C

    static func cSource(_ name: String, symbol: String) -> String {
        """
        /* \(name): a Curfew background job. Build: make. Run: curfew run \(name).so
         *
         * Each chunk handles one item, then asks to be called again 200 ms later
         * (a timer-like job never sleeps on a worker thread). If the grant expires
         * first, `expire` saves how many are done as a checkpoint, and the next
         * run goes on from there.
         *
         * Parameter: --param items=N (default 10). */
        #include "curfew.h"

        #include <stdio.h>
        #include <stdlib.h>

        static const curfew_host *host;

        typedef struct {
            long done;
            long items;
        } \(symbol)_state;

        static curfew_status \(symbol)_create(curfew_context *ctx, void **state) {
            \(symbol)_state *s = calloc(1, sizeof *s);
            if (s == NULL) {
                host->log(ctx, CURFEW_LOG_ERROR, "out of memory");
                return CURFEW_ERROR;
            }
            const char *items = host->param(ctx, "items");
            s->items = items != NULL ? strtol(items, NULL, 10) : 10;
            /* Go on from the last run's checkpoint, if it left one. */
            long done = 0;
            if (host->checkpoint_load(ctx, &done, sizeof done) == sizeof done && done > 0 && done < s->items) {
                s->done = done;
                char line[80];
                snprintf(line, sizeof line, "resuming after %ld of %ld items", s->done, s->items);
                host->log(ctx, CURFEW_LOG_INFO, line);
            }
            *state = s;
            return CURFEW_OK;
        }

        static curfew_chunk_result \(symbol)_chunk(curfew_context *ctx, void *state) {
            \(symbol)_state *s = state;
            s->done++;
            host->report_progress(ctx, s->done, s->items);
            char line[80];
            snprintf(line, sizeof line, "item %ld of %ld (%.1f s left)", s->done, s->items, host->time_remaining(ctx));
            host->log(ctx, CURFEW_LOG_INFO, line);
            return s->done < s->items ? CURFEW_CHUNK_AFTER_MS(200) : CURFEW_CHUNK_DONE;
        }

        static void \(symbol)_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
            \(symbol)_state *s = state;
            (void)reason;
            /* Durable when it returns: the next run's create loads it. */
            curfew_status saved = host->checkpoint_save(ctx, &s->done, sizeof s->done);
            char line[96];
            snprintf(line, sizeof line, "out of time after %ld of %ld items%s", s->done, s->items,
                     saved == CURFEW_OK ? ": checkpoint saved" : "");
            host->log(ctx, CURFEW_LOG_WARNING, line);
        }

        static void \(symbol)_destroy(curfew_context *ctx, void *state) {
            (void)ctx;
            free(state);
        }

        CURFEW_JOB(\(symbol)_job, "\(name)", "Handles items one per chunk.",
                   .create = \(symbol)_create, .chunk = \(symbol)_chunk,
                   .expire = \(symbol)_expire, .destroy = \(symbol)_destroy);

        CURFEW_PLUGIN(host, &\(symbol)_job)

        """
    }

    static func makefile(_ name: String) -> String {
        """
        # Builds \(name).so, a Curfew job plugin: make
        CC ?= cc
        CFLAGS ?= -O2 -g -Wall -Wextra
        # Libraries the job links, e.g. LDLIBS = -lz (or: make LDLIBS=-lz).
        LDLIBS ?=

        \(name).so: \(name).c curfew.h
        \t$(CC) $(CFLAGS) -std=c11 -shared -fPIC -fvisibility=hidden -I. \(name).c -o $@ $(LDLIBS)

        clean:
        \trm -f \(name).so

        .PHONY: clean

        """
    }

    static func cReadme(_ name: String) -> String {
        """
        # \(name)

        A Curfew background job in C. `curfew.h` is a copy of the ABI header
        this project was made with.

        Build:

            make

        Run it under a grant, and test what happens when the grant expires at
        its third chunk:

            curfew run \(name).so
            curfew test \(name).so --expire-at-chunk 3

        """
    }

    // MARK: Swift

    static func swiftManifest(_ type: String, root: String, identity: String) -> String {
        """
        // swift-tools-version:6.0
        import PackageDescription

        // A Curfew job plugin. The CurfewJob SDK is linked into the plugin
        // statically, so the plugin carries its own copy.
        let package = Package(
            name: "\(type)",
            products: [
                .library(name: "\(type)", type: .dynamic, targets: ["\(type)"]),
            ],
            dependencies: [
                .package(path: "\(root)"),
            ],
            targets: [
                .target(name: "\(type)", dependencies: [.product(name: "CurfewJob", package: "\(identity)")]),
            ],
            swiftLanguageModes: [.v6]
        )

        """
    }

    static func swiftSource(_ name: String, type: String) -> String {
        """
        // \(name): a Curfew background job in Swift.
        //
        // Each chunk handles one item, then asks to be called again 200 ms later.
        // If the grant expires first, `expire` saves how many are done as a
        // checkpoint, and the next run goes on from there.
        //
        // Parameter: --param items=N (default 10).
        import CurfewJob

        struct \(type): Job {
            static let name = "\(name)"
            static let summary = "Handles items one per chunk."

            /// What a run saves when its grant expires: any Codable value.
            struct Checkpoint: Codable {
                var done: Int
            }

            let items: Int
            var done = 0

            init(context: JobContext) throws {
                items = context.parameter("items").flatMap { Int($0) } ?? 10
                // Go on from the last run's checkpoint, if it left one.
                if let saved = try? context.loadCheckpoint(as: Checkpoint.self), saved.done > 0, saved.done < items {
                    done = saved.done
                    context.log("resuming after \\(done) of \\(items) items")
                }
            }

            mutating func chunk(_ context: JobContext) -> ChunkResult {
                done += 1
                context.reportProgress(completed: Int64(done), total: Int64(items))
                context.log("item \\(done) of \\(items) (\\(context.timeRemaining.components.seconds) s left)")
                return done < items ? .continueAfter(.milliseconds(200)) : .done
            }

            mutating func expire(reason: ExpirationReason, context: JobContext) {
                // Durable when it returns: the next run's init loads it.
                let saved = (try? context.saveCheckpoint(encoding: Checkpoint(done: done))) != nil
                context.log("out of time after \\(done) of \\(items) items\\(saved ? ": checkpoint saved" : "")", level: .warning)
            }
        }

        @_cdecl("curfew_plugin_entry")
        public func curfewPluginEntry(_ host: CurfewHostTable?) -> CurfewPluginDescriptor? {
            CurfewPlugin.export(host: host, jobs: [\(type).self])
        }

        """
    }

    static func swiftReadme(_ name: String, type: String) -> String {
        """
        # \(name)

        A Curfew background job in Swift, on the CurfewJob SDK.

        Build (the plugin is `.build/debug/lib\(type).so`):

            swift build

        Run it under a grant, and test what happens when the grant expires at
        its third chunk:

            curfew run .build/debug/lib\(type).so
            curfew test .build/debug/lib\(type).so --expire-at-chunk 3

        """
    }

    // MARK: Files

    static func readFile(_ path: String) throws(ScaffoldError) -> String {
        do throws(SystemError) {
            return String(decoding: try Syscalls.readToEnd(path, limit: 16 << 20), as: UTF8.self)
        } catch {
            throw ScaffoldError("Cannot read \(path): \(error.message); pass --curfew-root PATH.")
        }
    }

    static func makeDirectories(_ path: String) throws(ScaffoldError) {
        var current = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            current += "/" + component
            do throws(SystemError) {
                try Syscalls.makeFolder(current, permissions: 0o755)
            } catch {
                guard error == .exists else { throw ScaffoldError("Cannot create \(current): \(error.message).") }
            }
        }
    }

    static func create(_ path: String, _ contents: String, mode: UInt32) throws(ScaffoldError) {
        // Exclusive: never overwrite, even a file that appeared since the check.
        let fd: Int32
        do throws(SystemError) {
            fd = try Syscalls.open(path, .write, [.create, .exclusive], permissions: mode)
        } catch {
            throw ScaffoldError("Cannot create \(path): \(error.message).")
        }
        defer { Syscalls.close(fd) }
        do throws(SystemError) {
            try Syscalls.writeAll(fd, Array(contents.utf8))
        } catch {
            throw ScaffoldError("Cannot write \(path): \(error.message).")
        }
    }
}

/// Why `curfew new` wrote nothing: one sentence.
struct ScaffoldError: Error {
    let message: String
    init(_ message: String) { self.message = message }
}
