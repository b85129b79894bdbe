import Dispatch
import Glibc
import Synchronization
import _CurfewShims

/// The worker role: `curfew __worker`, started by a host with `--isolate job`.
///
/// It reads one `run` message from fd 3, applies its limits, loads the
/// plugin, runs the one job with the in-process runner, and reports every
/// event back on fd 3; an `expire` message expires the job. It prints nothing
/// itself: its stdout and stderr belong to the plugin, and the host tags them.
public enum IsolationWorker {
    /// The hidden first argument that starts `curfew` as a worker.
    public static let argument = WorkerProtocol.workerArgument

    /// Runs the worker and returns its exit status.
    public static func main() async -> Int32 {
        let channel = WorkerProtocol.channelDescriptor
        let messages = MessageReader(descriptor: channel)
        // A worker the host started ahead of need and no longer needs: the socket just closes.
        guard let run = messages.next() else { return 0 }
        guard let type = run["type"]?.stringValue, type == "run" || type == "scan" else {
            WorkerProtocol.send(#"{"type":"error","message":"the first message was neither 'run' nor 'scan'"}"#, to: channel)
            return 2
        }
        guard let version = run["protocol"]?.numberValue, Int64(version) == WorkerProtocol.version else {
            WorkerProtocol.send(#"{"type":"error","message":"protocol version mismatch"}"#, to: channel)
            return 2
        }
        if type == "scan" {
            let status = SafeScanner.serve(run, channel: channel)
            _exit(status)  // plugins' exit handlers are not this process's business
        }
        let limits = run["limits"]
        let limited = curfew_shim_limit_worker(
            UInt64(limits?["memory"]?.numberValue ?? 0), UInt64(limits?["cpu"]?.numberValue ?? 0),
            UInt64(limits?["files"]?.numberValue ?? 0))
        guard limited == 0 else {
            report(failed: "cannot apply its limits: \(String(cString: strerror(limited)))", to: channel)
            return 1
        }
        var parameters: [String: String] = [:]
        if case .object(let members)? = run["parameters"] {
            for (key, value) in members { parameters[key] = value.stringValue }
        }
        let pluginPath = run["plugin"]?.stringValue ?? ""
        let jobName = run["job"]?.stringValue ?? ""
        // The host checked the file's ownership before it scheduled the job.
        let scan = PluginLoader(parameters: parameters, allowsInsecurePlugins: true).scan([pluginPath])
        if let rejected = scan.rejected.first {
            report(failed: "the worker could not load the plugin: \(rejected.error.description)", to: channel)
            return 1
        }
        guard let job = scan.jobs.first(where: { $0.name == jobName }) else {
            report(failed: "the worker found no job '\(jobName)' in \(pluginPath)", to: channel)
            return 1
        }
        let continuous = if case .bool(true)? = run["continuous"] { true } else { false }
        let lead = Duration.seconds(run["lead"]?.numberValue ?? GrantPolicy.defaultGrace.seconds)
        let budget = run["budget"]?.numberValue.map { Duration.seconds($0) } ?? GrantPolicy.defaultBudget
        // The host owns the clock and expires the job itself; this grant is the same one, seen from here.
        let policy = GrantPolicy(
            budget: budget, grace: continuous ? lead : (lead < budget ? lead : budget / 2), allowsContinuous: continuous)
        let runner = Runner(
            jobs: [job], configuration: RunConfiguration(policy: policy, maxConcurrentJobs: 1, parameters: parameters)
        ) { event in
            if let line = message(for: event) { WorkerProtocol.send(line, to: channel) }
        }
        // Expire messages from the host, until it closes the socket.
        Thread.detach {
            while let message = messages.next() {
                guard message["type"]?.stringValue == "expire",
                    let reason = message["reason"]?.stringValue.flatMap(ExpirationReason.init(rawValue:))
                else { continue }
                runner.expireRunning(reason)
            }
        }
        _ = await runner.run()
        // A terminated job may still hold a thread: leave without exit handlers.
        _exit(0)
    }

    private static func report(failed reason: String, to channel: Int32) {
        var line = JSONLine("type", "finished")
        line.add("outcome", Outcome.failed.rawValue)
        line.add("reason", reason)
        line.add("chunks", 0)
        WorkerProtocol.send(line.text, to: channel)
    }

    static func message(for event: RunEvent) -> String? {
        switch event {
        case .started:
            return nil
        case .log(_, let level, let text):
            var line = JSONLine("type", "log")
            line.add("level", level.description)
            line.add("message", text)
            return line.text
        case .progress(_, let progress):
            var line = JSONLine("type", "progress")
            line.add("completed", progress.completed)
            line.add("total", progress.total)
            return line.text
        case .expiring(_, let reason):
            var line = JSONLine("type", "expiring")
            line.add("reason", reason.rawValue)
            return line.text
        case .finished(let result):
            var line = JSONLine("type", "finished")
            line.add("outcome", result.outcome.rawValue)
            line.add("reason", result.reason)
            line.add("chunks", Int64(clamping: result.chunks))
            if let progress = result.progress {
                line.add("completed", progress.completed)
                line.add("total", progress.total)
            }
            return line.text
        }
    }
}

/// Reads JSON Lines from a descriptor, blocking.
final class MessageReader: @unchecked Sendable {
    // Safe because only one thread reads at a time: main() reads the first
    // message before it starts the thread that reads the rest.
    private let descriptor: Int32
    private var buffer = LineBuffer()
    private var ready: [String] = []

    init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    /// The next message, or `nil` at the end of the stream.
    func next() -> JSONValue? {
        var chunk = [UInt8](repeating: 0, count: 4096)
        while ready.isEmpty {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { return nil }
            ready += chunk.withUnsafeBytes { buffer.append(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
        }
        return try? JSONReader.parse(Array(ready.removeFirst().utf8))
    }
}

/// A detached thread, for a blocking loop that must not hold a Dispatch worker.
enum Thread {
    static func detach(_ body: @escaping @Sendable () -> Void) {
        final class Box { let body: @Sendable () -> Void; init(_ body: @escaping @Sendable () -> Void) { self.body = body } }
        var thread = pthread_t()
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        let created = pthread_create(&thread, nil, { argument in
            let box = Unmanaged<Box>.fromOpaque(argument!).takeRetainedValue()
            box.body()
            return nil
        }, box)
        if created == 0 {
            pthread_detach(thread)
        } else {
            Unmanaged<Box>.fromOpaque(box).release()
        }
    }
}
