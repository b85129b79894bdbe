import CurfewFormats
import Dispatch
import Synchronization
import _CurfewShims

/// Where jobs get their workers: a new one from the pool per job, or one
/// per plugin file, shared by its jobs.
///
/// Forked workers are forked ahead of need: while jobs run, up to
/// ``spareCount`` wait for their `run` message, so a job starts on a worker
/// that already exists and the next fork overlaps the job, not the gap
/// between two jobs.
final class WorkerSource: Sendable {
    /// A worker forked ahead of need: the host's ends of its descriptors.
    private struct Spare: Sendable {
        let child: ForkServer.Child
        let server: ForkServer
        let channel: Int32
        let out: Int32
        let err: Int32
        let exitPipe: [Int32]
        /// Its own cgroup, where the host has them: made as it is forked, so a
        /// job does not wait for the move (a migration costs about 0.6 ms).
        let cgroup: WorkerCgroup?
        /// Its scratch folder, in a sandboxed run: made as it is forked, so
        /// a job does not wait for the `mkdir` (on ext4 without a journal,
        /// where inodes just freed are skipped one by one, 0.1–0.2 ms).
        let scratch: String?
    }

    /// Where a request that waits for a fork under way gets it.
    private final class Handoff: @unchecked Sendable {
        // Safe because `spare` is written before `done` is signalled and read after it.
        let done = DispatchSemaphore(value: 0)
        var spare: Spare?
    }

    /// How many forked workers wait at most.
    static let spareCount = 2

    private let pool: WorkerPool
    private let isolation: Isolation
    /// Whether a forked worker's scratch folder is made with it (a sandboxed run).
    private let scratchAhead: Bool
    /// A policy and a job whose sandbox, but for the scratch folder, is
    /// every job's of a run (see ``confinement(for:_:)``).
    typealias Confinement = (policy: SandboxPolicy, job: PluginJob)
    /// What every worker of the run is confined for, when one sandbox serves
    /// them all but its scratch folder: a spare applies it as it waits.
    private let confineAhead: Confinement?
    /// The run's scratch folders, made and emptied for its workers.
    private let scratches: ScratchFolders
    /// Under `--isolate plugin`: each plugin's worker, and how many of the
    /// run's jobs of that plugin have not ended (its worker leaves at 0).
    private struct Shared {
        var workers: [String: WorkerProcess] = [:]
        var jobsLeft: [String: Int] = [:]
        /// The plugins a worker was made for (a second is a replacement).
        var made: Set<String> = []
    }

    private let shared = Mutex(Shared())
    /// The fork server: one kept across runs, one started early for this
    /// run's workers, or one started on first need; when it cannot fork, the
    /// pool serves.
    private let forks: LazyForkServer
    /// Where ``forks`` was taken from and goes back to at the run's end;
    /// `nil`: it is this run's own, closed then.
    private let keptIn: WorkerForkServers?
    private let spares: Mutex<SpareStock<Spare, Handoff>>
    /// How many workers were forked (and of those, found waiting), and how many started with posix_spawn.
    let starts = Mutex(WorkerStarts())

    /// - Parameter expected: How many workers the run will ask for, one per
    ///   job or per plugin (a worker that dies and is replaced aside).
    /// - Parameter jobs: The run's jobs: under `--isolate plugin` a plugin's
    ///   worker is closed when the last of them ends.
    /// - Parameter scratchAhead: Whether each forked worker gets its scratch
    ///   folder as it is forked (a sandboxed run's do).
    /// - Parameter reusesScratch: Whether an emptied scratch folder may go to
    ///   the run's next worker (see ``ScratchFolders/init(reusing:)``).
    /// - Parameter confineAhead: See ``confinement(for:_:)``.
    /// - Parameter kept: Fork servers kept across runs, to take this run's from.
    init(
        pool: WorkerPool, isolation: Isolation, forking: Bool, expected: Int, jobs: [PluginJob] = [], scratchAhead: Bool = false,
        reusesScratch: Bool = false, confineAhead: Confinement? = nil, kept: WorkerForkServers? = nil
    ) {
        scratches = ScratchFolders(reusing: reusesScratch && expected > 1)
        self.pool = pool
        self.isolation = isolation
        self.scratchAhead = scratchAhead
        self.confineAhead = scratchAhead ? confineAhead : nil
        if isolation == .plugin {
            shared.withLock { $0.jobsLeft = jobs.reduce(into: [:]) { $0[$1.loadPath, default: 0] += 1 } }
        }
        let shared = forking ? kept?.server(executable: pool.executable, environment: pool.environment) : nil
        keptIn = shared == nil ? nil : kept
        forks = shared ?? (forking ? Self.takeEarly(executable: pool.executable, environment: pool.environment) : nil)
            ?? LazyForkServer(executable: pool.executable, environment: pool.environment, enabled: forking)
        spares = Mutex(SpareStock(wanted: expected, limit: Self.spareCount))
    }

    /// A new worker: forked by the fork server (ahead of need, when one
    /// waits, or the fork under way that no other request waits for), or
    /// else from the pool. `replacing`: for a plugin whose
    /// worker died, a request the expected count did not include.
    private func newWorker(replacing: Bool = false) throws(SystemError) -> WorkerProcess {
        if forks.isOn {
            let forked: Spare?
            var waiting = false
            switch spares.withLock({ $0.take(counted: !replacing, waiter: Handoff()) }) {
            case .spare(let spare):
                forked = spare
                waiting = true
            case .coming(let handoff):
                // The next spares are asked for behind it first.
                refill()
                handoff.done.wait()
                if let spare = handoff.spare { forked = spare } else { forked = try forkOne() }
            case .none:
                forked = try forkOne()
            }
            if let forked {
                starts.withLock {
                    $0.forked += 1
                    if waiting { $0.spareHits += 1 }
                }
                // A spare taken is replaced once its job's run message is sent
                // (``replaceSpares()``): the job waits for no fork request.
                if !waiting { refill() }
                return WorkerProcess(
                    forked: forked.child, by: forked.server, channel: forked.channel, out: forked.out, err: forked.err,
                    exitPipe: forked.exitPipe, cgroup: forked.cgroup, scratch: forked.scratch, scratches: scratches,
                    sandboxed: scratchAhead && Sandbox.landlockABI > 0)
            }
        }
        starts.withLock { $0.spawned += 1 }
        return WorkerProcess(try pool.take(), scratches: scratches)
    }

    /// The descriptors of a worker to fork: its channel, stdout and stderr
    /// (the host's end first, the worker's second), the pipe its exit is
    /// told on, and where the host has a subtree for them, the cgroup to
    /// fork it into (``WorkerCgroups/makeEmpty()``).
    private typealias Descriptors = (
        channel: [Int32], out: [Int32], err: [Int32], exitPipe: [Int32], cgroup: (group: WorkerCgroup, descriptor: Int32)?
    )

    private static func descriptors() throws(SystemError) -> Descriptors {
        let (channel, out, err) = try Syscalls.workerDescriptors()
        do throws(SystemError) {
            let exitPipe = try Syscalls.pipe()
            // Without one, the spare is moved into a cgroup made for it (``cgroup(of:_:)``).
            let cgroup = try? WorkerCgroups.current?.makeEmpty()
            return (channel, out, err, exitPipe, cgroup)
        } catch {
            (channel + out + err).forEach { Syscalls.close($0) }
            throw error
        }
    }

    /// Closes this process's copies of the worker's ends and of its cgroup's
    /// folder, once the fork request that passes them is sent.
    private static func closeWorkerEnds(_ made: Descriptors) {
        [made.channel[1], made.out[1], made.err[1]].forEach { Syscalls.close($0) }
        if let cgroup = made.cgroup { Syscalls.close(cgroup.descriptor) }
    }

    /// A forked spare's cgroup: the one it was forked into; else that one
    /// with the spare moved in (the server could not fork into it); else,
    /// where none was made for it, one made now.
    private static func cgroup(of child: ForkServer.Child, _ made: Descriptors) -> WorkerCgroup? {
        guard let group = made.cgroup?.group else { return WorkerProcess.cgroup(for: child.pid) }
        if child.placed { return group }
        do throws(SystemError) {
            try group.add(child.pid)
            return group
        } catch {
            _ = group.removeTree()
            return nil
        }
    }

    /// The spare a fork with `made` made, or `nil` (its descriptors closed).
    /// A scratch folder that cannot be made now is made by its first job,
    /// which says why it cannot. Where the run's one sandbox is known, the
    /// spare is told to apply it now (its job's `run` names the same).
    private func spare(_ made: Descriptors, _ forked: (server: ForkServer, child: ForkServer.Child)?) -> Spare? {
        guard let forked else {
            ([made.channel[0], made.out[0], made.err[0]] + made.exitPipe).forEach { Syscalls.close($0) }
            // A server that died after forking into it leaves its child there:
            // killed, waited for and removed off this thread, as a released spare's is.
            if let group = made.cgroup?.group { DispatchQueue.global(qos: .utility).async { _ = WorkerCgroups.giveBack(group, reusable: false, allowed: .seconds(1)) } }
            return nil
        }
        let scratch = scratchAhead ? try? scratches.take() : nil
        if let confineAhead, let scratch {
            // A spare that died meanwhile fails its job as any that dies does.
            _ = WorkerProtocol.send(HostMessage.confine(confineAhead.policy.message(for: confineAhead.job, scratch: scratch)).line, to: made.channel[0])
        }
        return Spare(
            child: forked.child, server: forked.server, channel: made.channel[0], out: made.out[0], err: made.err[0],
            exitPipe: made.exitPipe, cgroup: Self.cgroup(of: forked.child, made), scratch: scratch)
    }

    /// What every worker of a run of `jobs` under `configuration` can be
    /// confined for before its job comes: a policy and a job whose sandbox
    /// is each job's but for the scratch folder. Only under `--isolate job`
    /// (a plugin's worker takes its sandbox with its first job), where the
    /// run's jobs are of one plugin file, and where the rest of the sandbox
    /// is applied ahead (``WorkerSandbox/aheadValue(for:limits:)``: not for
    /// the loopback network, nor under limits).
    static func confinement(for jobs: [PluginJob], _ configuration: RunConfiguration) -> Confinement? {
        guard configuration.isolation == .job, let policy = configuration.sandbox, let first = jobs.first,
            WorkerSandbox.aheadValue(for: policy, limits: configuration.limits) != nil,
            jobs.allSatisfy({ $0.loadPath == first.loadPath && $0.foreignLibrary == first.foreignLibrary })
        else { return nil }
        return (policy, first)
    }

    /// Forks a worker, or `nil` when the server refused or is gone (the pool
    /// serves from then on).
    private func forkOne() throws(SystemError) -> Spare? {
        let made = try Self.descriptors()
        let forked = forks.fork(channel: made.channel[1], out: made.out[1], err: made.err[1], cgroup: made.cgroup?.descriptor)
        Self.closeWorkerEnds(made)
        return spare(made, forked)
    }

    /// Asks for spares, up to ``spareCount`` and to the workers the run will
    /// still ask for, and returns at once: each is stocked as the server's
    /// reply comes, on the thread that reads the replies, so a spare costs
    /// this process no thread and no wait.
    private func refill() {
        let count = spares.withLock { $0.startForks() }
        for _ in 0..<count {
            guard let made = try? Self.descriptors() else {
                forkEnded(nil)
                continue
            }
            let sent = forks.fork(channel: made.channel[1], out: made.out[1], err: made.err[1], cgroup: made.cgroup?.descriptor) { [self] forked in
                forkEnded(spare(made, forked))
            }
            Self.closeWorkerEnds(made)
            if !sent { forkEnded(spare(made, nil)) }
        }
    }

    /// Asks for the spares a worker just taken leaves missing: called once its
    /// job's run message is sent, so the job does not wait for the request.
    func replaceSpares() {
        if forks.isOn { refill() }
    }

    /// A fork ``refill()`` asked for ended (`nil`: it failed).
    private func forkEnded(_ spare: Spare?) {
        switch spares.withLock({ $0.forked(spare) }) {
        case .kept:
            break
        case .release(let unused):
            Self.release(unused)
        case .handOver(let spare, let handoff):
            handoff.spare = spare
            handoff.done.signal()
        }
    }

    /// A spare no job will use: its socket closes and it exits (it was
    /// waiting for its first message); the fork server reaps it.
    private static func release(_ spare: Spare) {
        ([spare.channel, spare.out, spare.err] + spare.exitPipe).forEach { Syscalls.close($0) }
        // Now, not later: a run that ends at once (a stop, the last job) must
        // not leave it behind. No job wrote in it: one `rmdir`.
        if let scratch = spare.scratch { try? Syscalls.removeTree(scratch) }
        if let cgroup = spare.cgroup { DispatchQueue.global(qos: .utility).async { _ = WorkerCgroups.giveBack(cgroup, reusable: false, allowed: .seconds(1)) } }
    }

    func worker(for job: PluginJob) throws(SystemError) -> WorkerProcess {
        guard isolation == .plugin else { return try newWorker() }
        // Looked up and made under one lock: two admissions never make two workers for one plugin.
        return try shared.withLock { shared throws(SystemError) -> WorkerProcess in
            if let live = shared.workers[job.loadPath], live.isUsable { return live }
            let process = try newWorker(replacing: shared.made.contains(job.loadPath))
            shared.workers[job.loadPath] = process
            shared.made.insert(job.loadPath)
            return process
        }
    }

    /// One of the run's jobs has ended, or was `refused` (it asked for no
    /// worker): under `--isolate plugin`, the last of a plugin's jobs closes
    /// its worker, so a folder of many plugins does not keep a process per
    /// plugin to the run's end. A worker the run will not ask for after all
    /// (a refused job's, a plugin's whose jobs were all refused) is not
    /// waited for with a spare.
    func jobEnded(_ job: PluginJob, refused: Bool = false) {
        guard isolation == .plugin else {
            if refused { spares.withLock { $0.forget() }.forEach(Self.release) }
            return
        }
        let (done, neverMade) = shared.withLock { shared -> (WorkerProcess?, Bool) in
            guard let left = shared.jobsLeft[job.loadPath] else { return (nil, false) }
            guard left <= 1 else {
                shared.jobsLeft[job.loadPath] = left - 1
                return (nil, false)
            }
            shared.jobsLeft[job.loadPath] = nil
            return (shared.workers.removeValue(forKey: job.loadPath), !shared.made.contains(job.loadPath))
        }
        if neverMade { spares.withLock { $0.forget() }.forEach(Self.release) }
        done?.close()
    }

    /// The run is over: idle workers exit, shared ones once their jobs end,
    /// the run's own fork server once it reads the end of its socket (one
    /// kept across runs goes back to its keeper).
    func close() {
        // Shared workers first (they leave when their jobs are done), then the
        // idle pool, then the fork server, which kills and reaps what is left.
        shared.withLock { shared in
            shared.workers.values.forEach { $0.close() }
            shared.workers.removeAll()
        }
        spares.withLock { $0.close() }.forEach(Self.release)
        pool.close()
        if let keptIn { keptIn.release(forks) } else { forks.close() }
        scratches.close()
    }
}

extension WorkerSource {
    /// A fork server started before its run, and the worker executable and
    /// environment it was started for: the next source made for those takes it.
    private static let early = Mutex<(executable: String, environment: [String], forks: LazyForkServer)?>(nil)

    /// Starts a fork server now, for the next run whose workers start with
    /// `executable` and `environment` (one started before and not taken is
    /// closed).
    static func startEarly(executable: String, environment: [String]) {
        let forks = LazyForkServer(executable: executable, environment: environment, enabled: true)
        let replaced = early.withLock { slot -> LazyForkServer? in
            defer { slot = (executable, environment, forks) }
            return slot?.forks
        }
        replaced?.close()
        forks.startSoon()
    }

    /// The fork server started early for `executable` and `environment`, now
    /// this caller's, or `nil`.
    static func takeEarly(executable: String, environment: [String]) -> LazyForkServer? {
        early.withLock { slot -> LazyForkServer? in
            guard let started = slot, started.executable == executable, started.environment == environment else { return nil }
            slot = nil
            return started.forks
        }
    }

    /// Whether the plugin at `path` has a worker open (for tests): it is
    /// closed as the last of the plugin's jobs ends.
    func hasWorker(for path: String) -> Bool { shared.withLock { $0.workers[path] != nil } }

    /// Whether a fork server started early waits for its run (for tests).
    static var earlyWaiting: Bool { early.withLock { $0 != nil } }

    /// The pid of the fork server started early, once it has started (for tests).
    static var earlyServerPid: Int32? { early.withLock { $0?.forks }?.serverPid }

    /// Closes a fork server started early that no run took.
    static func discardEarly() {
        early.withLock { slot -> LazyForkServer? in
            defer { slot = nil }
            return slot?.forks
        }?.close()
    }
}

/// The workers forked ahead of need, and those being forked, bounded by
/// how many the run will still ask for: a spare beyond that would wait, a
/// process doing nothing, until the run ends. A fork started while more
/// were wanted may end after requests took workers of their own: its spare
/// is then released, not kept.
///
/// A request that finds no spare waiting while one is being forked waits
/// for that one (each fork is promised to one request, in the order they
/// came): the server forks in the order asked, so a fork of its own would
/// come after it.
struct SpareStock<Spare, Waiter> {
    private(set) var ready: [Spare] = []
    private(set) var forking = 0
    /// Requests waiting for a fork under way, first come first: the first
    /// fork to end goes to the first.
    private(set) var waiters: [Waiter] = []
    /// Workers the run will still ask for.
    private(set) var wanted: Int
    /// How many wait at most.
    let limit: Int
    private var closed = false

    init(wanted: Int, limit: Int) {
        self.wanted = max(0, wanted)
        self.limit = limit
    }

    /// What a request for a worker gets.
    enum Taken {
        /// A spare that waited.
        case spare(Spare)
        /// None waits, and a fork is under way that no other request waits
        /// for: this waiter gets it as it ends (``forked(_:)`` hands it over).
        case coming(Waiter)
        /// None waits or is coming: the request forks one of its own.
        case none
    }

    /// A worker is asked for: a spare if one waits, else a fork under way.
    /// `counted`: one of the requests `wanted` counts (not a replacement).
    /// No more spares wait than requests are left, so none becomes surplus here.
    mutating func take(counted: Bool = true, waiter: @autoclosure () -> Waiter) -> Taken {
        if counted { wanted = max(0, wanted - 1) }
        if let spare = ready.popLast() { return .spare(spare) }
        guard forking > waiters.count else { return .none }
        let waiter = waiter()
        waiters.append(waiter)
        return .coming(waiter)
    }

    /// A request counted in `wanted` will not come: the spares beyond the
    /// requests left, to release.
    mutating func forget() -> [Spare] {
        wanted = max(0, wanted - 1)
        guard ready.count > wanted else { return [] }
        defer { ready.removeLast(ready.count - wanted) }
        return Array(ready[wanted...])
    }

    /// How many forks to start now (counted as under way).
    mutating func startForks() -> Int {
        guard !closed else { return 0 }
        // A fork a request waits for will not be a spare.
        let missing = max(0, min(limit, wanted) - ready.count - (forking - waiters.count))
        forking += missing
        return missing
    }

    /// What becomes of a fork that ended.
    enum Ended {
        /// It waits as a spare, or it failed and no request waited for it.
        case kept
        /// No request will take it: release it.
        case release(Spare)
        /// This request waited for it (`nil`: the fork failed, and the
        /// request starts its worker another way).
        case handOver(Spare?, to: Waiter)
    }

    /// A fork started by ``startForks()`` ended (`nil`: it failed): to the
    /// first request that waits for one, else a spare, or released when no
    /// request will take it.
    mutating func forked(_ spare: Spare?) -> Ended {
        assert(forking > 0, "a fork ended that was not started")
        forking = max(0, forking - 1)
        if !waiters.isEmpty { return .handOver(spare, to: waiters.removeFirst()) }
        guard let spare else { return .kept }
        guard !closed && ready.count < min(limit, wanted) else { return .release(spare) }
        ready.append(spare)
        return .kept
    }

    /// The run is over: the spares waiting, to release; forks still under
    /// way release theirs as they end.
    mutating func close() -> [Spare] {
        closed = true
        defer { ready.removeAll() }
        return ready
    }
}

/// How a run's workers were started.
package struct WorkerStarts: Sendable, Equatable {
    /// Forked by the fork server.
    package var forked = 0
    /// Of those, found forked ahead and waiting as the job asked.
    package var spareHits = 0
    /// Started with posix_spawn (no fork server, or it could not fork).
    package var spawned = 0

    package init() {}

    package mutating func add(_ other: WorkerStarts) {
        forked &+= other.forked
        spareHits &+= other.spareHits
        spawned &+= other.spawned
    }
}
