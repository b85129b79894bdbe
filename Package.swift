// swift-tools-version:6.0
import PackageDescription

// Example plugins are C or Swift targets built as dynamic libraries. C ones
// find the ABI header through a header search path into the top-level
// include/ folder, which is also the `CCurfew` module for Swift code.
let examplePlugins: [(product: String, target: String)] = [
    ("ExampleTimerCounter", "ExampleTimerCounter"),
    ("ExampleEarlyFinish", "ExampleEarlyFinish"),
    ("ExampleTaskDriven", "ExampleTaskDriven"),
    ("ExampleSwiftJob", "ExampleSwiftJob"),
    ("ExampleSwiftTasks", "ExampleSwiftTasks"),
]

let cExample: (String) -> Target = { name in
    .target(
        name: name,
        path: "Plugins/\(name)",
        publicHeadersPath: ".",
        cSettings: [.headerSearchPath("../../include"), .unsafeFlags(["-fvisibility=hidden"])]
    )
}

let package = Package(
    name: "Curfew",
    products: [
        .executable(name: "curfew", targets: ["CurfewTool"]),
        .executable(name: "curfew-bench", targets: ["CurfewBench"]),
        // Fuzz targets: built for libFuzzer by .ci/fuzz, a corpus replayer otherwise.
        .executable(name: "curfew-fuzz", targets: ["CurfewFuzz"]),
        .library(name: "Curfew", targets: ["Curfew", "CurfewHost"]),
        // The Swift SDK for job authors; link it statically into each plugin.
        .library(name: "CurfewJob", targets: ["CurfewJob"]),
    ] + examplePlugins.map { .library(name: $0.product, type: .dynamic, targets: [$0.target]) } + [
        .library(name: "CurfewBenchJobs", type: .dynamic, targets: ["BenchmarkJobs"]),
        // A Swift test fixture that imports Foundation; C fixtures are compiled by the tests.
        .library(name: "FixtureFoundationJob", type: .dynamic, targets: ["FixtureFoundationJob"]),
    ],
    targets: [
        // The C ABI, include/curfew.h, as a Swift module.
        .systemLibrary(name: "CCurfew", path: "include"),
        // dlopen, clocks and other libc glue that Swift cannot reach cleanly.
        .target(name: "_CurfewShims", path: "Sources/_CurfewShims", cSettings: [.headerSearchPath("../../include")]),
        // libffi, from Debian's libffi-dev, and accessors for its type globals.
        .systemLibrary(name: "CLibFFI", pkgConfig: "libffi", providers: [.apt(["libffi-dev"])]),
        .target(name: "_CurfewFFI", dependencies: ["CLibFFI"]),
        // SQLite, from Debian's libsqlite3-dev: the state store (checkpoints, history).
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        // libmicrohttpd, from Debian's libmicrohttpd-dev: the HTTP side of
        // `serve --metrics`, so no parser of ours faces the network. Its
        // header only: the C glue loads it when asked (it brings GnuTLS,
        // which no worker should pay for) and calls its variadic start,
        // which Swift cannot.
        .systemLibrary(name: "CMicroHTTPD", providers: [.apt(["libmicrohttpd-dev"])]),
        .target(name: "_CurfewHTTP", dependencies: ["CMicroHTTPD"]),
        // Formats: the readers every outside text goes through (JSON, worker
        // messages, manifests, sizes and durations) and the line writer: pure,
        // depending on nothing of the host's but the ABI's constants (the
        // header, no code), so each can be fuzzed alone.
        .target(name: "CurfewFormats", dependencies: ["CCurfew"]),
        // The vocabulary a job and its host share (expiration reasons, app
        // states and events, log levels, task identifiers) with their C
        // spellings: one definition for the SDK and the host.
        .target(name: "CurfewVocabulary", dependencies: ["CCurfew"]),
        // The seam to the system: libc and libdl calls, typed errors, clocks
        // and timers, locks and threads, helper processes and their ends.
        .target(name: "CurfewSystem", dependencies: ["_CurfewShims", "CurfewFormats"]),
        // The host: grants, loader, runner, isolation, foreign jobs, state. Holds no printing.
        .target(name: "Curfew", dependencies: ["CCurfew", "CurfewVocabulary", "CurfewSystem", "_CurfewShims", "CLibFFI", "_CurfewFFI", "CurfewFormats", "CSQLite"]),
        // The Swift SDK for job authors: a protocol and an export helper.
        // It reads and writes Codable checkpoints as JSON with the formats' reader.
        .target(name: "CurfewJob", dependencies: ["CCurfew", "CurfewVocabulary", "CurfewFormats"]),
        // The hosts an app embeds: a batch run (RunHost) and a resident
        // server (ServeHost: schedules, the config, inotify, the control
        // socket), each with the process's end.
        .target(name: "CurfewHost", dependencies: ["Curfew", "CurfewFormats", "CurfewSystem", "_CurfewShims", "_CurfewHTTP"]),
        // The command line, as a library so its parsing and texts are testable.
        .target(name: "CurfewCLI", dependencies: ["CurfewHost", "Curfew", "CurfewFormats", "_CurfewShims"]),
        .executableTarget(name: "CurfewTool", dependencies: ["CurfewCLI", "CurfewHost", "Curfew", "_CurfewShims"]),
        // Benchmarks: each case against its baseline in the same run.
        .executableTarget(name: "CurfewBench", dependencies: ["Curfew", "CurfewHost", "CCurfew", "_CurfewShims", "CLibFFI", "_CurfewFFI", "CSQLite"]),
        cExample("BenchmarkJobs"),
        .executableTarget(name: "CurfewFuzz", dependencies: ["Curfew", "CurfewHost", "CurfewFormats"]),

        cExample("ExampleTimerCounter"),
        cExample("ExampleEarlyFinish"),
        cExample("ExampleTaskDriven"),
        .target(name: "ExampleSwiftJob", dependencies: ["CurfewJob"], path: "Plugins/ExampleSwiftJob"),
        .target(name: "ExampleSwiftTasks", dependencies: ["CurfewJob"], path: "Plugins/ExampleSwiftTasks"),

        .target(name: "FixtureFoundationJob", dependencies: ["CurfewJob"], path: "Tests/Fixtures/FoundationJob"),

        .testTarget(name: "CurfewTests", dependencies: ["Curfew", "CurfewHost", "CurfewCLI", "_CurfewShims", "CurfewFormats", "CCurfew", "CurfewJob"]),
    ],
    swiftLanguageModes: [.v6]
)
