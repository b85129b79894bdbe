import CCurfew
import Synchronization

/// Finds plugin files, loads them with `dlopen`, and validates every field of
/// their descriptors before trusting any of it.
///
/// A bad plugin is rejected with a one-sentence reason and the others still
/// load. Plugins are never unloaded (see DESIGN.md: unloading a Swift-built
/// plugin crashes the process later), so a loaded plugin's hooks stay valid
/// for the life of the process.
///
/// - Important: It never calls `dlclose`, and never reads a descriptor field
///   before ``DescriptorValidator`` has checked the version and size that
///   cover it.
public struct PluginLoader: Sendable {
    /// The rejection of a file whose name is not UTF-8 (shown with U+FFFD in
    /// place of each bad sequence, a text that names no file).
    static let notUTF8 = CurfewError(
        .unreadable, "Its name is not UTF-8, and Curfew names plugins as text in its output, history and state: rename it.")

    /// The file name suffix a folder scan picks up.
    public static let pluginSuffix = ".so"
    /// The ABI version this host speaks.
    public static let abiVersion = UInt32(CURFEW_ABI_VERSION)
    /// The most jobs one plugin or manifest may declare.
    public static let maximumJobs = UInt32(CURFEW_MAX_JOBS)

    /// The `--param` values, which foreign-job manifests bind to arguments at load.
    public let parameters: [String: String]
    /// Load plugin files and folders that others could have written (off by default).
    public let allowsInsecurePlugins: Bool

    public init(parameters: [String: String] = [:], allowsInsecurePlugins: Bool = false) {
        self.parameters = parameters
        self.allowsInsecurePlugins = allowsInsecurePlugins
    }

    /// Why loading code from `path` would be unsafe, or `nil`: it, or a
    /// folder above it up to `/`, is writable by group or others, or owned by
    /// a user who is neither this one nor root (as sshd's `StrictModes`).
    ///
    /// The folders are those above the file's real path, and, for each
    /// symlink on the way to it (the file itself included), those above the
    /// folder holding the link: whoever can write any of them can replace
    /// the code. A folder with the sticky bit (`/tmp`) lets nobody replace
    /// another's entries, so it may be writable by all.
    func insecurity(_ path: String, status known: Syscalls.FileStatus? = nil) -> CurfewError? {
        var verdicts: [String: CurfewError?] = [:]
        return insecurity(path, status: known, verdicts: &verdicts, user: Syscalls.userID)
    }

    /// ``insecurity(_:status:)``, remembering each folder's verdict in
    /// `verdicts`, for `user` (this process's, asked once for a scan).
    func insecurity(
        _ path: String, status known: Syscalls.FileStatus? = nil, verdicts: inout [String: CurfewError?], user: UInt32
    ) -> CurfewError? {
        guard !allowsInsecurePlugins, let status = known ?? (try? Syscalls.fileStatus(path)) else { return nil }
        if let problem = ownInsecurity(status, user: user) { return problem }
        for folder in Self.foldersAbove(path) {
            if let verdict = verdicts[folder] {
                if let verdict { return verdict }
                continue
            }
            let verdict = (try? Syscalls.fileStatus(folder)).flatMap { Self.unsafeOwnership($0, what: "Folder \(folder) (above it)", user: user) }
            verdicts[folder] = verdict
            if let verdict { return verdict }
        }
        return nil
    }

    /// Why a file's or folder's own `status` makes loading from it unsafe,
    /// the folders above it aside.
    private func ownInsecurity(_ status: Syscalls.FileStatus, user: UInt32) -> CurfewError? {
        guard !allowsInsecurePlugins else { return nil }
        return Self.unsafeOwnership(status, what: status.isDirectory ? "Folder" : "File", user: user)
    }

    private static func unsafeOwnership(_ status: Syscalls.FileStatus, what: String, user: UInt32) -> CurfewError? {
        let (mode, owner) = (status.mode, status.owner)
        let sticky = status.isDirectory && mode & 0o1000 != 0
        if mode & 0o022 != 0 && !sticky {
            let who = mode & 0o002 != 0 ? "anyone" : "its group"
            return CurfewError(
                .insecure,
                "\(what) is writable by \(who) (mode \(String(mode & 0o777, radix: 8))), so anyone there could replace the code it runs; "
                    + "chmod go-w it, or pass --allow-insecure-plugins.")
        }
        if owner != user && owner != 0 {
            return CurfewError(
                .insecure,
                "\(what) is owned by uid \(owner), neither you nor root; chown it, or pass --allow-insecure-plugins.")
        }
        return nil
    }

    /// The folders whose owners could replace what `path` names, nearest first.
    static func foldersAbove(_ path: String) -> [String] {
        var folders: [String] = []
        var seen = Set<String>()
        func addAncestors(of real: String) {
            var current = real
            while current != "/", let slash = current.lastIndex(of: "/") {
                current = slash == current.startIndex ? "/" : String(current[..<slash])
                if seen.insert(current).inserted { folders.append(current) }
            }
        }
        if let real = Syscalls.realPath(path) { addAncestors(of: real) }
        let absolute = path.hasPrefix("/") ? path : (Syscalls.currentDirectory() ?? "/") + "/" + path
        var prefix = ""
        for component in absolute.split(separator: "/") {
            let parent = prefix.isEmpty ? "/" : prefix
            prefix += "/" + component
            guard Syscalls.isSymlink(prefix), let holder = Syscalls.realPath(parent) else { continue }
            // The folder holding the link, and those above it.
            if seen.insert(holder).inserted { folders.append(holder) }
            addAncestors(of: holder)
        }
        return folders
    }

    /// Loads the plugins at `paths`: each folder is scanned (not recursively)
    /// for `*.so` files and `*.curfew.json` foreign-job manifests, in name
    /// order; each file is loaded as given. A library that a manifest in the
    /// same scan names is loaded through the manifest, not as a plugin.
    ///
    /// A path that does not exist is rejected like a bad plugin. A file met
    /// twice (say, in a folder and by name) loads once. A job whose name an
    /// earlier plugin already declared gets its plugin rejected.
    public func scan(_ paths: [String]) -> PluginScan {
        var rejected: [RejectedPlugin] = []
        let files = candidates(paths, rejected: &rejected)
        let results = files.map { file -> (String, Result<LoadedPlugin, CurfewError>) in
            do throws(CurfewError) {
                let plugin = try file.path.hasSuffix(ForeignManifestReader.suffix)
                    ? ForeignManifestReader(path: file.path, parameters: parameters).load()
                    : load(file.path, isRegularFile: file.isRegular)
                return (file.path, .success(plugin))
            } catch {
                return (file.path, .failure(error))
            }
        }
        return Self.assemble(results, rejected: rejected)
    }

    /// Loads in this process the plugins a ``SafeScanner`` vouched for,
    /// each from its ``LoadedPlugin/loadPath`` (its snapshot), named by its
    /// path, in order.
    public func load(vouched plugins: [LoadedPlugin]) -> PluginScan {
        let results = plugins.map { plugin -> (String, Result<LoadedPlugin, CurfewError>) in
            guard plugin.loadPath != plugin.path else {
                let loaded = scan([plugin.path])
                return (plugin.path, loaded.plugins.first.map { .success($0) } ?? .failure(loaded.rejected.first?.error ?? Self.notRegularError))
            }
            do throws(CurfewError) {
                let opened = try open(plugin.loadPath, isRegularFile: nil)
                let jobs = try DescriptorValidator(path: plugin.path).validate(opened.descriptor).jobs
                return (plugin.path, .success(LoadedPlugin(path: plugin.path, jobs: jobs, loadPath: plugin.loadPath)))
            } catch {
                // A loader's error quotes the path it loaded: name the user's file.
                let description = error.description.replacing(plugin.loadPath, with: plugin.path)
                return (plugin.path, .failure(CurfewError(error.code, description, underlying: error.underlying)))
            }
        }
        return Self.assemble(results, rejected: [])
    }

    /// The loaded plugins and rejections, in file order, with a plugin whose
    /// job name an earlier plugin declared rejected.
    static func assemble(_ results: [(String, Result<LoadedPlugin, CurfewError>)], rejected: [RejectedPlugin]) -> PluginScan {
        var scan = PluginScan(rejected: rejected)
        var jobOwners: [String: String] = [:]
        jobOwners.reserveCapacity(results.count)
        scan.plugins.reserveCapacity(results.count)
        for (path, result) in results {
            switch result {
            case .failure(let error):
                scan.rejected.append(RejectedPlugin(path: path, error: error))
            case .success(let plugin):
                if let clash = plugin.jobs.first(where: { jobOwners[$0.name] != nil }) {
                    scan.rejected.append(RejectedPlugin(path: path, error: CurfewError(
                        .duplicateJobName,
                        "Job name '\(clash.name)' is already declared by \(jobOwners[clash.name]!); job names must be unique.")))
                    continue
                }
                for job in plugin.jobs { jobOwners[job.name] = path }
                scan.plugins.append(plugin)
            }
        }
        return scan
    }

    /// A file to load: its path as given or found in a folder, whether it
    /// is known to be a regular file, and, when the listing already told
    /// them, its real path and status (a scan's cache key needs both).
    struct Candidate {
        let path: String
        let isRegular: Bool?
        var known: (real: String, status: Syscalls.FileStatus)? = nil
    }

    /// The files to load, in order, each once, with whether it is known to be
    /// a regular file; paths that cannot be read are rejected.
    func candidates(_ paths: [String], rejected: inout [RejectedPlugin]) -> [Candidate] {
        var files: [Candidate] = []
        // Asked once for the scan, not once for each file's owner.
        let user = Syscalls.userID
        for path in paths {
            do throws(SystemError) {
                let info = try Syscalls.fileStatus(path)
                var verdicts: [String: CurfewError?] = [:]
                if let insecure = insecurity(path, status: info, verdicts: &verdicts, user: user) {
                    rejected.append(RejectedPlugin(path: path, error: insecure))
                    continue
                }
                guard info.isDirectory else {
                    files.append(Candidate(path: path, isRegular: info.isRegular))
                    continue
                }
                // An entry that is no symlink (the listing says a regular
                // file) lies in the folder's real path, and whoever could
                // replace it could replace the folder: the folder passed
                // above, so its own status is all that is left to check.
                let realFolder = Syscalls.realPath(path)
                // Listed, and its entries' status read one name each, through one descriptor.
                let folder = try Syscalls.openFolder(path)
                defer { Syscalls.close(folder) }
                for entry in try Syscalls.directoryEntries(in: folder)
                where (entry.name.hasSuffix(Self.pluginSuffix) || entry.name.hasSuffix(ForeignManifestReader.suffix))
                    && !entry.name.hasPrefix(".") && entry.isRegular != false
                {
                    let file = path.hasSuffix("/") ? path + entry.name : path + "/" + entry.name
                    guard entry.isUTF8 else {
                        rejected.append(RejectedPlugin(path: file, error: Self.notUTF8))
                        continue
                    }
                    if entry.isRegular == true, let realFolder {
                        let status = try? Syscalls.fileStatus(entry.name, in: folder)
                        if let status, let insecure = ownInsecurity(status, user: user) {
                            rejected.append(RejectedPlugin(path: file, error: insecure))
                            continue
                        }
                        let real = realFolder == "/" ? "/" + entry.name : realFolder + "/" + entry.name
                        files.append(Candidate(path: file, isRegular: status.map(\.isRegular) ?? true, known: status.map { (real, $0) }))
                        continue
                    }
                    if let insecure = insecurity(file, verdicts: &verdicts, user: user) {
                        rejected.append(RejectedPlugin(path: file, error: insecure))
                        continue
                    }
                    files.append(Candidate(path: file, isRegular: entry.isRegular))
                }
            } catch {
                let code: CurfewError.Code = error == .noEntry ? .notFound : .unreadable
                let what = error == .noEntry ? "No such file or folder." : "Cannot be read: \(error.message)."
                rejected.append(RejectedPlugin(path: path, error: CurfewError(code, what, underlying: error.message)))
            }
        }
        // Only several paths can name one file twice; one folder lists each file once.
        if paths.count > 1 {
            var seen = Set<String>()
            files = files.filter { seen.insert(Syscalls.realPath($0.path) ?? $0.path).inserted }
        }
        // A manifest's library is not a plugin of its own.
        let manifests = files.map(\.path).filter { $0.hasSuffix(ForeignManifestReader.suffix) }
        guard !manifests.isEmpty else { return files }
        var libraries = Set<String>()
        var unsafe = Set<String>()
        for manifest in manifests {
            guard let library = ForeignManifestReader.declaredLibrary(ofManifest: manifest) else { continue }
            libraries.insert(Syscalls.realPath(library) ?? library)
            // The library's code runs as much as a plugin's does.
            if let insecure = insecurity(library) {
                rejected.append(RejectedPlugin(path: manifest, error: CurfewError(
                    .insecure, "Its library \(library): \(insecure.description)")))
                unsafe.insert(manifest)
            }
        }
        return files.filter {
            !unsafe.contains($0.path)
                && ($0.path.hasSuffix(ForeignManifestReader.suffix) || !libraries.contains(Syscalls.realPath($0.path) ?? $0.path))
        }
    }

    /// Loads and validates one plugin file.
    ///
    /// - Throws: A ``CurfewError`` saying why the file cannot be used.
    public func load(_ path: String) throws(CurfewError) -> LoadedPlugin {
        try load(path, isRegularFile: nil)
    }

    /// A plugin opened and its entry called, its descriptor not yet checked:
    /// for a worker, which checks only the jobs it runs, once a scan has
    /// checked the whole file.
    struct OpenedPlugin: @unchecked Sendable {
        // Safe because the descriptor is only read, and plugins are never unloaded.
        let descriptor: UnsafeRawPointer
        let validator: DescriptorValidator

        /// The job at `index` of its table, named `name`, checked with the
        /// plugin's header (the plugin may have changed since its scan).
        func job(_ index: Int, named name: String) throws(CurfewError) -> PluginJob {
            try validator.validate(descriptor, job: index, named: name)
        }
    }

    private func load(_ path: String, isRegularFile: Bool?) throws(CurfewError) -> LoadedPlugin {
        let opened = try open(path, isRegularFile: isRegularFile)
        return try opened.validator.validate(opened.descriptor)
    }

    /// Opens the plugin at `path` and calls its entry (once: keep the result).
    func open(_ path: String) throws(CurfewError) -> OpenedPlugin {
        try open(path, isRegularFile: nil)
    }

    private func open(_ path: String, isRegularFile: Bool?) throws(CurfewError) -> OpenedPlugin {
        // dlopen would block on a FIFO: only regular files go to it.
        if isRegularFile != true { try checkRegularFile(path) }
        // dlopen searches the library path for a name without a slash.
        let handle: UnsafeMutableRawPointer
        switch Syscalls.dlopenPlugin(path.contains("/") ? path : "./" + path) {
        case .success(let opened): handle = opened
        case .failure(let error): throw Self.diagnose(path, error)
        }
        guard let symbol = Syscalls.dlsym(handle, CURFEW_PLUGIN_ENTRY_SYMBOL) else { throw Self.missingEntryError }
        let entry = unsafeBitCast(symbol, to: curfew_plugin_entry_fn.self)
        let (descriptor, messages) = HostServices.callEntry(entry)
        guard let descriptor else { throw Self.declinedError(messages) }
        return OpenedPlugin(descriptor: UnsafeRawPointer(descriptor), validator: DescriptorValidator(path: path))
    }

    private func checkRegularFile(_ path: String) throws(CurfewError) {
        let info: Syscalls.FileStatus
        do throws(SystemError) {
            info = try Syscalls.fileStatus(path)
        } catch {
            throw Self.statError(error)
        }
        guard info.isRegular else { throw Self.notRegularError }
    }

    // Why a file is refused, the same words whichever process loaded it
    // (this one, or a scanner that reported back).

    static func statError(_ error: SystemError) -> CurfewError {
        if error == .noEntry { return CurfewError(.notFound, "No such file or folder.", underlying: error.message) }
        return CurfewError(.unreadable, "Cannot be read: \(error.message).", underlying: error.message)
    }

    static let notRegularError = CurfewError(.notELF, "Not a regular file, so not a shared object.")

    static let missingEntryError = CurfewError(
        .missingEntry,
        "No '\(CURFEW_PLUGIN_ENTRY_SYMBOL)' symbol: not a Curfew plugin, or its entry is not exported (mark it CURFEW_EXPORT).")

    /// An entry returned NULL, having logged `messages`.
    static func declinedError(_ messages: [String]) -> CurfewError {
        let why = messages.isEmpty ? "" : ": \(messages.joined(separator: "; "))"
        return CurfewError(.entryDeclined, "The plugin declined to load (its entry returned NULL)\(why).")
    }

    /// Why dlopen refused a file, in words: checked only after it failed, so
    /// the success path costs nothing beyond dlopen itself.
    static func diagnose(_ path: String, _ error: DynamicLoaderError) -> CurfewError {
        if let info = try? Syscalls.fileStatus(path), info.size == 0 { return dlopenError(.empty, error) }
        if let prefix = try? Syscalls.readPrefix(path, count: 4), prefix != [0x7F, 0x45, 0x4C, 0x46] { return dlopenError(.notELF, error) }
        return dlopenError(.other, error)
    }

    /// Why dlopen refused a file.
    enum DynamicLoaderCause {
        case empty, notELF, other
    }

    static func dlopenError(_ cause: DynamicLoaderCause, _ error: DynamicLoaderError) -> CurfewError {
        switch cause {
        case .empty: CurfewError(.emptyFile, "Empty file (0 bytes), not a shared object.", underlying: error.message)
        case .notELF:
            CurfewError(.notELF, "Not an ELF shared object (it does not start with the ELF magic bytes).", underlying: error.message)
        case .other: CurfewError(.loadFailed, "Cannot be loaded: \(error.message)", underlying: error.message)
        }
    }
}
