import CCurfew
import Glibc
import Synchronization

/// Finds plugin files, loads them with `dlopen`, and validates every field of
/// their descriptors before trusting any of it.
///
/// A bad plugin is rejected with a one-sentence reason and the others still
/// load. Plugins are never unloaded (see DESIGN.md: unloading a Swift-built
/// plugin crashes the process later), so a loaded plugin's hooks stay valid
/// for the life of the process.
public struct PluginLoader: Sendable {
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

    /// Why loading code from `path` would be unsafe, or `nil`: writable by
    /// group or others, or owned by a user who is neither this one nor root.
    func insecurity(_ path: String, status known: Syscalls.FileStatus? = nil) -> CurfewError? {
        guard !allowsInsecurePlugins, let status = known ?? (try? Syscalls.fileStatus(path)) else { return nil }
        let (mode, owner) = (status.mode, status.owner)
        let what = status.isDirectory ? "Folder" : "File"
        if mode & 0o022 != 0 {
            let who = mode & 0o002 != 0 ? "anyone" : "its group"
            return CurfewError(
                .insecure,
                "\(what) is writable by \(who) (mode \(String(mode, radix: 8))), so anyone there could replace the code it runs; "
                    + "chmod go-w it, or pass --allow-insecure-plugins.")
        }
        if owner != geteuid() && owner != 0 {
            return CurfewError(
                .insecure,
                "\(what) is owned by uid \(owner), neither you nor root; chown it, or pass --allow-insecure-plugins.")
        }
        return nil
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

    /// The loaded plugins and rejections, in file order, with a plugin whose
    /// job name an earlier plugin declared rejected.
    static func assemble(_ results: [(String, Result<LoadedPlugin, CurfewError>)], rejected: [RejectedPlugin]) -> PluginScan {
        var scan = PluginScan(rejected: rejected)
        var jobOwners: [String: String] = [:]
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

    /// The files to load, in order, each once, with whether it is known to be
    /// a regular file; paths that cannot be read are rejected.
    func candidates(_ paths: [String], rejected: inout [RejectedPlugin]) -> [(path: String, isRegular: Bool?)] {
        var files: [(path: String, isRegular: Bool?)] = []
        for path in paths {
            do throws(SystemError) {
                let info = try Syscalls.fileStatus(path)
                if let insecure = insecurity(path, status: info) {
                    rejected.append(RejectedPlugin(path: path, error: insecure))
                    continue
                }
                guard info.isDirectory else {
                    files.append((path, info.isRegular))
                    continue
                }
                for entry in try Syscalls.directoryEntries(path)
                where (entry.name.hasSuffix(Self.pluginSuffix) || entry.name.hasSuffix(ForeignManifestReader.suffix))
                    && !entry.name.hasPrefix(".") && entry.isRegular != false
                {
                    let file = path.hasSuffix("/") ? path + entry.name : path + "/" + entry.name
                    if let insecure = insecurity(file) {
                        rejected.append(RejectedPlugin(path: file, error: insecure))
                        continue
                    }
                    files.append((file, entry.isRegular))
                }
            } catch {
                let code: CurfewError.Code = error.errno == ENOENT ? .notFound : .unreadable
                let what = error.errno == ENOENT ? "No such file or folder." : "Cannot be read: \(error.message)."
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
        let libraries = Set(manifests.map {
            let library = ForeignManifestReader.declaredLibrary(ofManifest: $0)
            return Syscalls.realPath(library) ?? library
        })
        return files.filter {
            $0.path.hasSuffix(ForeignManifestReader.suffix) || !libraries.contains(Syscalls.realPath($0.path) ?? $0.path)
        }
    }

    /// Loads and validates one plugin file.
    ///
    /// - Throws: A ``CurfewError`` saying why the file cannot be used.
    public func load(_ path: String) throws(CurfewError) -> LoadedPlugin {
        try load(path, isRegularFile: nil)
    }

    private func load(_ path: String, isRegularFile: Bool?) throws(CurfewError) -> LoadedPlugin {
        // dlopen would block on a FIFO: only regular files go to it.
        if isRegularFile != true { try checkRegularFile(path) }
        // dlopen searches the library path for a name without a slash.
        let handle: UnsafeMutableRawPointer
        switch Syscalls.dlopenPlugin(path.contains("/") ? path : "./" + path) {
        case .success(let opened): handle = opened
        case .failure(let error): throw diagnose(path, error)
        }
        guard let symbol = Syscalls.dlsym(handle, CURFEW_PLUGIN_ENTRY_SYMBOL) else {
            throw CurfewError(
                .missingEntry,
                "No '\(CURFEW_PLUGIN_ENTRY_SYMBOL)' symbol: not a Curfew plugin, or its entry is not exported (mark it CURFEW_EXPORT)."
            )
        }
        let entry = unsafeBitCast(symbol, to: curfew_plugin_entry_fn.self)
        let (descriptor, messages) = HostServices.callEntry(entry)
        guard let descriptor else {
            let why = messages.isEmpty ? "" : ": \(messages.joined(separator: "; "))"
            throw CurfewError(.entryDeclined, "The plugin declined to load (its entry returned NULL)\(why).")
        }
        return try DescriptorValidator(path: path).validate(UnsafeRawPointer(descriptor))
    }

    private func checkRegularFile(_ path: String) throws(CurfewError) {
        let info: Syscalls.FileStatus
        do throws(SystemError) {
            info = try Syscalls.fileStatus(path)
        } catch {
            if error.errno == ENOENT { throw CurfewError(.notFound, "No such file or folder.", underlying: error.message) }
            throw CurfewError(.unreadable, "Cannot be read: \(error.message).", underlying: error.message)
        }
        guard info.isRegular else {
            throw CurfewError(.notELF, "Not a regular file, so not a shared object.")
        }
    }

    /// Why dlopen refused a file, in words: checked only after it failed, so
    /// the success path costs nothing beyond dlopen itself.
    private func diagnose(_ path: String, _ error: DynamicLoaderError) -> CurfewError {
        if let info = try? Syscalls.fileStatus(path), info.size == 0 {
            return CurfewError(.emptyFile, "Empty file (0 bytes), not a shared object.", underlying: error.message)
        }
        if let prefix = try? Syscalls.readPrefix(path, count: 4), prefix != [0x7F, 0x45, 0x4C, 0x46] {
            return CurfewError(
                .notELF, "Not an ELF shared object (it does not start with the ELF magic bytes).", underlying: error.message)
        }
        return CurfewError(.loadFailed, "Cannot be loaded: \(error.message)", underlying: error.message)
    }
}

/// Reads a plugin descriptor field by field, checking each before the next.
struct DescriptorValidator {
    let path: String

    static let minimumPluginSize = UInt32(MemoryLayout<curfew_plugin>.size)
    /// The first version of `curfew_job` ended before `user_data`.
    static let minimumJobSize = UInt32(MemoryLayout<curfew_job>.offset(of: \curfew_job.user_data)!)
    static let jobSizeWithUserData = minimumJobSize + UInt32(MemoryLayout<UnsafeMutableRawPointer?>.size)
    static let knownFlags = UInt32(CURFEW_JOB_CONTINUOUS)

    func validate(_ raw: UnsafeRawPointer) throws(CurfewError) -> LoadedPlugin {
        guard Int(bitPattern: raw) % MemoryLayout<curfew_plugin>.alignment == 0 else {
            throw CurfewError(.invalidDescriptor, "The plugin descriptor is misaligned (\(raw)).")
        }
        // abi_version and struct_size first, before anything else is read.
        let version = raw.load(as: UInt32.self)
        let size = raw.load(fromByteOffset: 4, as: UInt32.self)
        guard version >= 1 && version <= PluginLoader.abiVersion else {
            throw CurfewError(
                .abiVersionMismatch,
                "ABI version \(version), this host speaks \(PluginLoader.abiVersion); rebuild the plugin against this host's curfew.h."
            )
        }
        guard size >= Self.minimumPluginSize else {
            throw CurfewError(
                .structTooSmall,
                "Plugin descriptor struct_size is \(size) bytes, at least \(Self.minimumPluginSize) expected for ABI version \(version)."
            )
        }
        let plugin = raw.assumingMemoryBound(to: curfew_plugin.self).pointee
        guard plugin.reserved == 0 else {
            throw CurfewError(.invalidDescriptor, "Plugin descriptor field 'reserved' is \(plugin.reserved), must be 0.")
        }
        guard plugin.job_count >= 1 && plugin.job_count <= CURFEW_MAX_JOBS else {
            throw CurfewError(
                .invalidJobCount,
                plugin.job_count == 0
                    ? "The plugin declares no jobs (job_count is 0)."
                    : "The plugin declares \(plugin.job_count) jobs, more than the limit of \(CURFEW_MAX_JOBS)."
            )
        }
        guard let table = plugin.jobs else {
            throw CurfewError(.invalidDescriptor, "Plugin descriptor field 'jobs' is NULL but job_count is \(plugin.job_count).")
        }
        var jobs: [PluginJob] = []
        var names = Set<String>()
        for index in 0..<Int(plugin.job_count) {
            let job = try validateJob(table[index], index: index)
            guard names.insert(job.name).inserted else {
                throw CurfewError(.duplicateJobName, "Job name '\(job.name)' is declared twice; job names must be unique.")
            }
            jobs.append(job)
        }
        return LoadedPlugin(path: path, jobs: jobs)
    }

    private func validateJob(_ pointer: UnsafePointer<curfew_job>?, index: Int) throws(CurfewError) -> PluginJob {
        guard let pointer else {
            throw CurfewError(.invalidDescriptor, "Job #\(index) is a NULL pointer.")
        }
        guard Int(bitPattern: pointer) % MemoryLayout<curfew_job>.alignment == 0 else {
            throw CurfewError(.invalidDescriptor, "Job #\(index) descriptor is misaligned.")
        }
        let size = UnsafeRawPointer(pointer).load(as: UInt32.self)
        guard size >= Self.minimumJobSize else {
            throw CurfewError(
                .structTooSmall,
                "Job #\(index) struct_size is \(size) bytes, at least \(Self.minimumJobSize) expected."
            )
        }
        // Read the fields the plugin's struct_size covers, no more.
        let raw = UnsafeRawPointer(pointer)
        func field<T>(_ key: KeyPath<curfew_job, T>) -> T {
            raw.load(fromByteOffset: MemoryLayout<curfew_job>.offset(of: key)!, as: T.self)
        }
        let job = (
            flags: field(\.flags), name: field(\.name), summary: field(\.summary), create: field(\.create),
            chunk: field(\.chunk), expire: field(\.expire), destroy: field(\.destroy))
        let userData = size >= Self.jobSizeWithUserData
            ? raw.load(fromByteOffset: Int(Self.minimumJobSize), as: UnsafeMutableRawPointer?.self) : nil
        let name = try jobName(job.name, index: index)
        let summary = try summaryText(job.summary, job: name)
        guard job.flags & ~Self.knownFlags == 0 else {
            let unknown = String(job.flags & ~Self.knownFlags, radix: 16)
            throw CurfewError(.unknownFlags, "Job '\(name)' has unknown flags 0x\(unknown); this host knows 0x\(String(Self.knownFlags, radix: 16)).")
        }
        if job.chunk != nil && job.expire == nil {
            throw CurfewError(.missingHook, "Job '\(name)' has a chunk hook but no expire hook; a chunked job needs expire for its cleanup.")
        }
        if job.chunk == nil && job.create == nil {
            throw CurfewError(.missingHook, "Job '\(name)' has neither chunk nor create; a task-driven job starts its work in create.")
        }
        return PluginJob(
            name: name, summary: summary, pluginPath: path,
            isContinuous: job.flags & UInt32(CURFEW_JOB_CONTINUOUS) != 0,
            hooks: JobHooks(create: job.create, chunk: job.chunk, expire: job.expire, destroy: job.destroy, userData: userData))
    }

    private func jobName(_ pointer: UnsafePointer<CChar>?, index: Int) throws(CurfewError) -> String {
        guard let pointer else {
            throw CurfewError(.invalidJobName, "Job #\(index) has a NULL name.")
        }
        // Read at most one byte past the limit: the name may not be terminated.
        let length = strnlen(pointer, Int(CURFEW_MAX_JOB_NAME) + 1)
        let bytes = Array(UnsafeRawBufferPointer(start: pointer, count: length))
        if let problem = JobNaming.nameProblem(bytes) {
            throw CurfewError(.invalidJobName, "Job #\(index) \(problem)")
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private func summaryText(_ pointer: UnsafePointer<CChar>?, job: String) throws(CurfewError) -> String {
        guard let pointer else {
            throw CurfewError(.invalidSummary, "Job '\(job)' has a NULL summary.")
        }
        let length = strnlen(pointer, Int(CURFEW_MAX_SUMMARY) + 1)
        let bytes = Array(UnsafeRawBufferPointer(start: pointer, count: length))
        if let problem = JobNaming.summaryProblem(bytes) {
            throw CurfewError(.invalidSummary, "Job '\(job)' \(problem)")
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// The rules for job names and summaries, for plugins and manifests alike.
public enum JobNaming {
    /// Whether `name` is a valid job name: 1 to 64 bytes of `[a-z0-9._-]`,
    /// starting with a letter or digit.
    public static func isValidName(_ name: String) -> Bool {
        nameProblem(Array(name.utf8)) == nil
    }

    /// What is wrong with a name, as the end of a sentence ("has an empty name."), or `nil`.
    static func nameProblem(_ bytes: [UInt8]) -> String? {
        let limit = Int(CURFEW_MAX_JOB_NAME)
        guard !bytes.isEmpty else { return "has an empty name." }
        guard bytes.count <= limit else { return "has a name longer than \(limit) bytes." }
        let isLowerOrDigit = { (byte: UInt8) in (0x61...0x7A).contains(byte) || (0x30...0x39).contains(byte) }
        let valid = bytes.allSatisfy { isLowerOrDigit($0) || $0 == 0x2E || $0 == 0x5F || $0 == 0x2D }
        guard valid && isLowerOrDigit(bytes[0]) else {
            let text = String(decoding: bytes, as: UTF8.self).debugEscaped
            return "has an invalid name '\(text)': use [a-z0-9._-], starting with a letter or digit."
        }
        return nil
    }

    /// What is wrong with a summary, as the end of a sentence, or `nil`.
    static func summaryProblem(_ bytes: [UInt8]) -> String? {
        let limit = Int(CURFEW_MAX_SUMMARY)
        guard bytes.count <= limit else { return "has a summary longer than \(limit) bytes." }
        guard String(validating: bytes, as: UTF8.self) != nil else { return "has a summary that is not valid UTF-8." }
        guard !bytes.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
            return "has a summary with a line break or control character; keep it to one line."
        }
        return nil
    }
}

extension String {
    /// The string with control characters and quotes escaped, for messages.
    var debugEscaped: String {
        let quoted = String(reflecting: self)
        return String(quoted.dropFirst().dropLast())
    }
}
