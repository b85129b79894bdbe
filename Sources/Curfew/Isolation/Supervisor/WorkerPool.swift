import Synchronization

/// Worker processes started ahead of need, each waiting for its `run`
/// message, so a job's start costs a message, not a process start: the
/// Swift runtime's start-up happens while the previous job runs.
///
/// A worker runs one job and exits (a plugin's state never outlives its job);
/// taking one starts its replacement in the background.
final class WorkerPool: Sendable {
    /// A started worker: its process and the host's ends of its socket and pipes.
    struct Worker: Sendable {
        let process: HelperProcess
        let channel: Int32
        let out: Int32
        let err: Int32
    }

    private struct State {
        var idle: [Worker] = []
        var starting = 0
        var closed = false
    }

    let executable: String
    let environment: [String]
    /// How many workers wait at most.
    let capacity: Int
    private let state = Mutex(State())

    init(executable: String, environment: [String], capacity: Int) {
        self.executable = executable
        self.environment = environment
        self.capacity = max(1, capacity)
    }

    /// A waiting worker, or a new one when none waits; starts replacements.
    func take() throws(SystemError) -> Worker {
        let waiting = state.withLock { $0.idle.popLast() }
        defer { refill() }
        if let waiting { return waiting }
        return try start()
    }

    /// Starts workers in the background until `capacity` wait or are starting.
    func refill() {
        let count = state.withLock { state -> Int in
            guard !state.closed else { return 0 }
            let missing = max(0, capacity - state.idle.count - state.starting)
            state.starting += missing
            return missing
        }
        for _ in 0..<count {
            let started = OSThread.detach { [self] in
                let worker = try? start()
                let retire = state.withLock { state -> Bool in
                    state.starting -= 1
                    guard let worker, !state.closed else { return worker != nil }
                    state.idle.append(worker)
                    return false
                }
                if retire, let worker { Self.retire(worker) }
            }
            if !started { state.withLock { $0.starting -= 1 } }
        }
    }

    /// Stops the waiting workers: they read the end of their socket and exit.
    func close() {
        let idle = state.withLock { state -> [Worker] in
            state.closed = true
            defer { state.idle.removeAll() }
            return state.idle
        }
        idle.forEach(Self.retire)
    }

    /// Ends a worker that never got a job: it exits at the end of its
    /// socket, and is killed if it has not a second later.
    private static func retire(_ worker: Worker) {
        [worker.channel, worker.out, worker.err].forEach { Syscalls.close($0) }
        // No thread to wait on (the system refused one): killed at once.
        if !OSThread.detach({ worker.process.end(Teardown([.wait(allowed: .seconds(1))])) }) { worker.process.end(.kill) }
    }

    private func start() throws(SystemError) -> Worker {
        let (channel, out, err) = try Syscalls.workerDescriptors()
        let spawned = Syscalls.spawnWorker(
            executable, arguments: [executable, WorkerProtocol.workerArgument], environment: environment,
            channel: channel[1], out: out[1], err: err[1])
        [channel[1], out[1], err[1]].forEach { Syscalls.close($0) }
        switch spawned {
        case .success(let pid):
            return Worker(process: HelperProcess(pid: pid), channel: channel[0], out: out[0], err: err[0])
        case .failure(let error):
            [channel[0], out[0], err[0]].forEach { Syscalls.close($0) }
            throw error
        }
    }
}
