import CCurfew

/// The C hooks of one job, as read from its descriptor.
struct JobHooks: @unchecked Sendable {
    // Safe because these are immutable addresses of functions in a library
    // that is loaded with RTLD_NODELETE and never unloaded.
    let create: curfew_create_fn?
    let chunk: curfew_chunk_fn?
    let expire: curfew_expire_fn?
    let destroy: curfew_destroy_fn?
    /// The descriptor's `user_data`, handed back through `job_user_data`.
    var userData: UnsafeMutableRawPointer? = nil
    /// The app events hook (`app_event`).
    var appEvent: curfew_app_event_fn? = nil
}

/// A job declared by a loaded plugin.
public struct PluginJob: Sendable, Identifiable {
    /// The job's name, unique within the host.
    public let name: String
    /// The job's one-line summary.
    public let summary: String
    /// The plugin file that declared it: the user's, which names the job's
    /// state and history.
    public let pluginPath: String
    /// The file its code is loaded from: a private snapshot of
    /// `pluginPath` taken before its scan (see ``PluginSnapshots``), else
    /// `pluginPath` itself.
    public internal(set) var loadPath: String
    /// Whether the job is continuous: it has no budget, like an app with an
    /// iOS background mode, and runs only where the host allows it.
    public let isContinuous: Bool
    /// The background modes a continuous job declares (`background_modes`).
    public let backgroundModes: [String]
    let hooks: JobHooks
    /// The manifest's functions, for a job called through libffi.
    let foreign: ForeignJob?
    /// Whether the job does its work in chunks the host calls.
    public let isChunked: Bool
    /// For a job known from a scan in a worker: the library a manifest names.
    private let scannedForeignLibrary: String?
    /// Its place in its plugin's job table (or its manifest's job list): a
    /// worker checks that entry alone, not the whole plugin again.
    let index: Int

    init(
        name: String, summary: String, pluginPath: String, isContinuous: Bool, hooks: JobHooks, foreign: ForeignJob? = nil,
        index: Int, backgroundModes: [String] = []
    ) {
        self.index = index
        self.backgroundModes = backgroundModes
        self.name = name
        self.summary = summary
        self.pluginPath = pluginPath
        self.loadPath = pluginPath
        self.isContinuous = isContinuous
        self.hooks = hooks
        self.foreign = foreign
        self.isChunked = hooks.chunk != nil
        self.scannedForeignLibrary = nil
    }

    /// A job known from a scan in a worker process: this process has not
    /// loaded its plugin, so it has no hooks and runs only in a worker.
    init(
        scannedName name: String, summary: String, pluginPath: String, isContinuous: Bool, isChunked: Bool, foreignLibrary: String?,
        index: Int, backgroundModes: [String] = []
    ) {
        self.index = index
        self.backgroundModes = backgroundModes
        self.name = name
        self.summary = summary
        self.pluginPath = pluginPath
        self.loadPath = pluginPath
        self.isContinuous = isContinuous
        self.hooks = JobHooks(create: nil, chunk: nil, expire: nil, destroy: nil)
        self.foreign = nil
        self.isChunked = isChunked
        self.scannedForeignLibrary = foreignLibrary
    }

    public var id: String { name }

    /// For a job described by a manifest: the library whose functions it calls.
    public var foreignLibrary: String? { foreign?.libraryPath ?? scannedForeignLibrary }
}

/// A plugin file that loaded and passed validation.
public struct LoadedPlugin: Sendable {
    /// The plugin's path, as given or found in a folder.
    public let path: String
    /// The jobs it declares, in its order.
    public let jobs: [PluginJob]
    /// Where its code is loaded from (``PluginJob/loadPath``).
    public let loadPath: String

    init(path: String, jobs: [PluginJob], loadPath: String? = nil) {
        self.path = path
        self.loadPath = loadPath ?? path
        self.jobs = jobs.map { job in
            var job = job
            job.loadPath = loadPath ?? path
            return job
        }
    }
}

/// A plugin file the loader would not run, and why.
public struct RejectedPlugin: Sendable, Error {
    /// The file, as given or found in a folder.
    public let path: String
    /// Why it was rejected; its description is one sentence without the path.
    public let error: CurfewError
}

/// What a scan found: the plugins that loaded and the files rejected.
public struct PluginScan: Sendable {
    public var plugins: [LoadedPlugin] = []
    public var rejected: [RejectedPlugin] = []

    public init(plugins: [LoadedPlugin] = [], rejected: [RejectedPlugin] = []) {
        self.plugins = plugins
        self.rejected = rejected
    }

    /// Every job of every loaded plugin, in load order.
    public var jobs: [PluginJob] { plugins.flatMap(\.jobs) }
}
