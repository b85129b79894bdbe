import Dispatch
import Glibc
import Synchronization
import _CurfewShims

/// Where jobs get their workers: a new one from the pool per job, or one
/// per plugin file, shared by its jobs.
final class WorkerSource: Sendable {
    private let pool: WorkerPool
    private let isolation: Isolation
    private let shared = Mutex<[String: WorkerProcess]>([:])
    /// The fork server, started on first need; when it cannot fork, the pool serves.
    private let forks: LazyForkServer
    /// How many workers were forked, and how many started with posix_spawn.
    let starts = Mutex<(forked: Int, spawned: Int)>((0, 0))

    init(pool: WorkerPool, isolation: Isolation, forking: Bool) {
        self.pool = pool
        self.isolation = isolation
        forks = LazyForkServer(executable: pool.executable, environment: pool.environment, enabled: forking)
    }

    /// A new worker: forked by the fork server, or else from the pool.
    private func newWorker() throws(SystemError) -> WorkerProcess {
        if forks.isOn {
            let (channel, out, err) = try Syscalls.workerDescriptors()
            let exitPipe: [Int32]
            do throws(SystemError) {
                exitPipe = try Syscalls.pipe()
            } catch {
                (channel + out + err).forEach { Glibc.close($0) }
                throw error
            }
            let forked = forks.fork(channel: channel[1], out: out[1], err: err[1])
            [channel[1], out[1], err[1]].forEach { Glibc.close($0) }
            if let forked {
                starts.withLock { $0.forked += 1 }
                return WorkerProcess(
                    forked: forked.child, by: forked.server, channel: channel[0], out: out[0], err: err[0], exitPipe: exitPipe)
            }
            // Refused or gone: the pool from now on.
            ([channel[0], out[0], err[0]] + exitPipe).forEach { Glibc.close($0) }
        }
        starts.withLock { $0.spawned += 1 }
        return WorkerProcess(try pool.take())
    }

    func worker(for job: PluginJob) throws(SystemError) -> WorkerProcess {
        guard isolation == .plugin else { return try newWorker() }
        // Looked up and made under one lock: two admissions never make two workers for one plugin.
        return try shared.withLock { workers throws(SystemError) -> WorkerProcess in
            if let live = workers[job.pluginPath], live.isUsable { return live }
            let process = try newWorker()
            workers[job.pluginPath] = process
            return process
        }
    }

    /// The run is over: idle workers exit, shared ones once their jobs end,
    /// the fork server once it reads the end of its socket.
    func close() {
        // Shared workers first (they leave when their jobs are done), then the
        // idle pool, then the fork server, which kills and reaps what is left.
        shared.withLock { workers in
            workers.values.forEach { $0.close() }
            workers.removeAll()
        }
        pool.close()
        forks.close()
    }
}
