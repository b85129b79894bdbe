import Curfew
import CurfewHost
import CurfewFormats

/// What each fuzz target feeds its input to. Every target must return for
/// any input without trapping, in time linear in the input.
enum FuzzTarget: String, CaseIterable {
    /// The JSON reader every outside text goes through.
    case json
    /// The decoder of a worker's messages.
    case workerMessage = "worker-message"
    /// The decoder of the host's messages to a worker; what decodes encodes back to itself.
    case hostMessage = "host-message"
    /// A foreign-job manifest, read and bound to the C library's functions.
    case manifest
    /// The size and duration parsers of the command line.
    case quantities
    /// `curfew serve`'s config file, and inotify's records as the watcher reads them.
    case serveConfig = "serve-config"
    /// A request on `curfew serve`'s control socket, answered by a server with no jobs.
    case controlRequest = "control-request"
    /// A calendar expression and its next elapses; the same bytes as a TZif zone file.
    case calendar

    /// The one input the target runs.
    func run(_ bytes: [UInt8]) {
        switch self {
        case .json:
            _ = try? JSONReader.parse(bytes)
        case .workerMessage:
            _ = try? WorkerMessage.decode(bytes)
        case .hostMessage:
            if let message = try? HostMessage.decode(bytes), (try? HostMessage.decode(Array(message.line.utf8))) != message {
                fatalError("a host message does not read back as itself")
            }
        case .manifest:
            // The manifest's own library would be `fuzz.so` beside it (absent):
            // the corpus names the C library with "system-library".
            let reader = ForeignManifestReader(path: "/nonexistent/fuzz.curfew.json", parameters: ["n": "12", "file": "/dev/null"])
            _ = try? reader.load(bytes)
        case .quantities:
            let text = String(decoding: bytes, as: UTF8.self)
            _ = Quantities.size(text)
            _ = Quantities.duration(text)
        case .serveConfig:
            _ = try? ServeConfig.parse(bytes, file: "fuzz.json")
            _ = FolderWatcher.parse(bytes[...], folders: [1: "/p", 2: "/q"])
        case .controlRequest:
            _ = Self.server?.answer(bytes)
        case .calendar:
            // An expression walked through a zone with clock changes (its
            // gaps and repeated hours), and the bytes as a zone walked by a
            // fixed expression.
            if let spec = try? CalendarSpec(String(decoding: bytes, as: UTF8.self), zoneExists: { $0 == "Europe/Berlin" }) {
                _ = spec.next(after: 1_774_742_400_000_000, in: Self.berlin)
            }
            if let zone = ZoneRules(name: "fuzz", tzif: bytes), let spec = try? CalendarSpec("*:0/20") {
                _ = zone.instants(local: 1_800_000_000)
                _ = spec.next(after: 1_774_742_400_000_000, in: zone)
            }
        }
    }

    /// Berlin's rule, read from no file.
    private static let berlin = ZoneRules(name: "Europe/Berlin", rule: PosixZoneRule("CET-1CEST,M3.5.0,M10.5.0/3")!)

    /// A server that was never started: it answers from an empty catalog.
    private static let server = try? Server(options: Server.Options(folders: []), onEvent: { _, _ in }, onNotice: { _ in })

    /// The target a process fuzzes: `CURFEW_FUZZ_TARGET` names it.
    static func fromEnvironment(_ value: String?) -> FuzzTarget? {
        value.flatMap(FuzzTarget.init(rawValue:))
    }
}
