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
    private let forks = Mutex<(server: ForkServer?, tried: Bool, works: Bool)>((nil, false, true))
    /// How many workers were forked, and how many started with posix_spawn.
    let starts = Mutex<(forked: Int, spawned: Int)>((0, 0))

    init(pool: WorkerPool, isolation: Isolation, forking: Bool) {
        self.pool = pool
        self.isolation = isolation
        forks.withLock { $0.works = forking }
    }

    /// A new worker: forked by the fork server, or else from the pool.
    private func newWorker() throws(SystemError) -> WorkerProcess {
        let server = forks.withLock { forks -> ForkServer? in
            if !forks.tried {
                forks.tried = true
                forks.server = ForkServer(executable: pool.executable, environment: pool.environment)
            }
            return forks.works ? forks.server : nil
        }
        if let server {
            let (channel, out, err) = try Syscalls.workerDescriptors()
            let exitPipe: [Int32]
            do throws(SystemError) {
                exitPipe = try Syscalls.pipe()
            } catch {
                (channel + out + err).forEach { Glibc.close($0) }
                throw error
            }
            let child = server.fork(channel: channel[1], out: out[1], err: err[1])
            [channel[1], out[1], err[1]].forEach { Glibc.close($0) }
            if let child {
                starts.withLock { $0.forked += 1 }
                return WorkerProcess(forked: child, by: server, channel: channel[0], out: out[0], err: err[0], exitPipe: exitPipe)
            }
            ([channel[0], out[0], err[0]] + exitPipe).forEach { Glibc.close($0) }
            forks.withLock { $0.works = false }  // refused or gone: the pool from now on
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
        forks.withLock { $0.server }?.close()
    }
}
