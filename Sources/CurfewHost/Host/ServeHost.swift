import Curfew
import Synchronization

/// A resident host as `curfew serve` makes it, for any program that embeds
/// Curfew: a ``Server`` over the folders, its control socket, the state
/// store, and the host's end — SIGHUP reloads, the first SIGINT or SIGTERM
/// expires every running job and waits for their cleanup, a second ends the
/// process; processes a killed host before left running are ended first.
///
/// What it prints is the caller's: every line it would say is an ``Event``.
public final class ServeHost: Sendable {
    public struct Options: Sendable {
        /// The folders (absolute), the config and every run's configuration.
        public var server: Server.Options
        /// The control socket's path.
        public var socketPath: String
        /// Where to serve metrics over HTTP (`--metrics`); `nil`: nowhere.
        public var metrics: MetricsAddress?
        /// Keep checkpoints, history and schedules.
        public var keepsState = true
        /// The state store's folder, absolute; `nil` for the default one.
        public var stateFolder: String?
        /// The process is this host's alone, as `curfew serve`'s is: it
        /// handles SIGINT, SIGTERM and SIGHUP, adopts orphaned descendants,
        /// and ends what a killed host before it left running. Off (the default), the caller
        /// handles its signals and calls ``stop(reason:)``.
        public var ownsProcess = false

        public init(server: Server.Options, socketPath: String) {
            self.server = server
            self.socketPath = socketPath
        }
    }

    public enum Event: Sendable {
        case warning(RunHost.Warning)
        case notice(Server.Notice)
        case run(RunEvent, at: CurfewInstant)
        /// The server runs and the socket answers.
        case serving(Server)
        /// Metrics are served over HTTP at this address.
        case metrics(MetricsAddress, port: UInt16?)
        /// A stop was asked for: every running job expires now.
        case stopping(reason: String)
        /// How what the jobs start is ended (see ``RunHost/Event/processes(_:)``).
        case processes(WorkerCgroups.Setup)
    }

    /// Why the host did not start.
    public enum Failure: Error, Sendable, Equatable {
        case signals(String)
        /// The state store cannot be used.
        case store(String)
        /// The server, its socket or its first scan failed.
        case server(String)
    }

    public struct Outcome: Sendable {
        public var failure: Failure?
        /// Jobs whose cleanup did not end in time at the stop.
        public var unclean: [String] = []
        /// What the state store refused as the host left.
        public var stateProblems: [String] = []
        /// 0 after a clean stop; 2 when a cleanup did not end in time; 1
        /// when it did not start.
        public var status: Int32
    }

    public let options: Options
    private let events: @Sendable (Event) -> Void
    private let stop = StopRequest()

    public init(_ options: Options, events: @escaping @Sendable (Event) -> Void = { _ in }) {
        self.options = options
        self.events = events
    }

    /// Stops the host: every running job expires with the shutdown reason.
    public func stop(reason: String) {
        stop.request(status: ExitCode.success, reason: reason)
    }

    /// Serves until stopped.
    public func run() async -> Outcome {
        let reloads = Mutex<(@Sendable () -> Void)?>(nil)
        var signals: SignalMonitor?
        if options.ownsProcess {
            do throws(CurfewError) {
                signals = try stop.catchSignals(status: { _ in ExitCode.success }, hangUp: { reloads.withLock { $0 }?() })
            } catch {
                return Outcome(failure: .signals(error.description), status: ExitCode.failure)
            }
            ChildProcesses.adoptOrphans()
            // Before any other process starts: the host may move into a leaf.
            let setup = WorkerCgroups.prepare()
            events(.processes(setup))
            if case .on(let cgroups) = setup, cgroups.ended > 0 { events(.warning(.strays(cgroups.ended))) }
        }
        defer {
            signals?.cancel()
            if options.ownsProcess { WorkerCgroups.finish() }
        }

        var serverOptions = options.server
        // Once, at the start: the kernel is the same for every run.
        let config = serverOptions.config
        let sandboxes = serverOptions.run.sandbox != nil
            || ([config.defaults] + Array(config.jobs.values)).contains { $0.sandbox != nil && $0.sandbox != SandboxSetting.off }
        if sandboxes, case let missing = SandboxPolicy.unenforced(), !missing.isEmpty {
            events(.warning(.sandboxUnenforced(missing)))
        }
        if options.keepsState {
            switch RunHost.openStore(options.stateFolder, writer: .current(socket: options.socketPath), warn: { events(.warning($0)) }) {
            case .success(let store): serverOptions.run.state = store
            case .failure(let unusable): return Outcome(failure: .store(unusable.message), status: ExitCode.failure)
            }
        }
        if let store = serverOptions.run.state {
            // What a host before this one on the store (held by this one
            // alone now) left running when it was killed: ended before this
            // one starts anything, which it marks in turn.
            let mark = ChildProcesses.mark(of: store.path)
            let strays = ChildProcesses.endMarked(mark)
            if strays > 0 { events(.warning(.strays(strays))) }
            ChildProcesses.mark = mark
        }
        let server: Server
        let socket: ControlSocket
        do throws(CurfewError) {
            server = try Server(
                options: serverOptions, onEvent: { [events] event, time in events(.run(event, at: time)) },
                onNotice: { [events] notice in events(.notice(notice)) })
            socket = try ControlSocket(
                path: options.socketPath, refused: { [events] in events(.notice(.warning($0))) },
                takes: { request, client in server.takeReader(request, client: client) }
            ) { request in
                server.answer(request)
            }
        } catch {
            return Outcome(failure: .server(error.description), status: ExitCode.failure)
        }
        defer { socket.close() }
        reloads.withLock { $0 = { server.reload() } }
        // Listening before any job starts: an address in use fails the start, not a running host.
        let metrics: MetricsServer?
        do throws(CurfewError) {
            metrics = try options.metrics.map { address throws(CurfewError) in
                try MetricsServer(address: address) { request in MetricsServer.page(request, of: server) }
            }
        } catch {
            return Outcome(failure: .server(error.description), status: ExitCode.failure)
        }
        defer { metrics?.stop() }
        do throws(CurfewError) {
            try server.start()
        } catch {
            return Outcome(failure: .server(error.description), status: ExitCode.failure)
        }
        events(.serving(server))
        if let metrics, let address = options.metrics { events(.metrics(address, port: metrics.port)) }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            stop.onRequest { [events] reason in
                events(.stopping(reason: reason))
                server.stop { done.resume() }
            }
        }
        stop.dropAction()
        var outcome = Outcome(unclean: server.jobsUncleanAtStop(), status: stop.status ?? ExitCode.success)
        if let store = serverOptions.run.state {
            do throws(CurfewError) { try store.checkpointLog() } catch { outcome.stateProblems.append(error.description) }
        }
        // A service manager sees the stop as failed: some work did not save.
        if !outcome.unclean.isEmpty && outcome.status == ExitCode.success { outcome.status = ExitCode.jobNotClean }
        return outcome
    }
}
