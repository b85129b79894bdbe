import CCurfew
import Glibc
import Synchronization

/// Reads a plugin descriptor field by field, checking each before the next.
struct DescriptorValidator {
    let path: String

    static let minimumPluginSize = UInt32(MemoryLayout<curfew_plugin>.size)
    /// The first version of `curfew_job` ended before `user_data`.
    static let minimumJobSize = UInt32(MemoryLayout<curfew_job>.offset(of: \curfew_job.user_data)!)
    static let jobSizeWithUserData = minimumJobSize + UInt32(MemoryLayout<UnsafeMutableRawPointer?>.size)
    static let jobSizeWithModes = UInt32(MemoryLayout<curfew_job>.offset(of: \curfew_job.background_modes)!)
        + UInt32(MemoryLayout<UnsafePointer<CChar>?>.size)
    static let jobSizeWithAppEvent = UInt32(MemoryLayout<curfew_job>.offset(of: \curfew_job.app_event)!)
        + UInt32(MemoryLayout<curfew_app_event_fn?>.size)
    static let knownFlags = UInt32(CURFEW_JOB_CONTINUOUS)

    func validate(_ raw: UnsafeRawPointer) throws(CurfewError) -> LoadedPlugin {
        let table = try jobTable(raw)
        var jobs: [PluginJob] = []
        var names = Set<String>()
        for index in table.indices {
            let job = try validateJob(table[index], index: index)
            guard names.insert(job.name).inserted else {
                throw CurfewError(.duplicateJobName, "Job name '\(job.name)' is declared twice; job names must be unique.")
            }
            jobs.append(job)
        }
        return LoadedPlugin(path: path, jobs: jobs)
    }

    /// The job named `name`, expected at `index` of the descriptor: that
    /// entry is checked with the plugin's header, what a worker runs once a
    /// scan has checked the whole plugin. When the entry is another job (the
    /// plugin's table changed since), the whole plugin is checked and the
    /// job looked up by name.
    func validate(_ raw: UnsafeRawPointer, job index: Int, named name: String) throws(CurfewError) -> PluginJob {
        let table = try jobTable(raw)
        if table.indices.contains(index) {
            let job = try validateJob(table[index], index: index)
            if job.name == name { return job }
        }
        guard let job = try validate(raw).jobs.first(where: { $0.name == name }) else {
            throw CurfewError(.notFound, "The plugin declares no job '\(name)' now: it changed since it was scanned.")
        }
        return job
    }

    /// The descriptor's job table, after checking every field of the header.
    private func jobTable(_ raw: UnsafeRawPointer) throws(CurfewError) -> UnsafeBufferPointer<UnsafePointer<curfew_job>?> {
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
        return UnsafeBufferPointer(start: table, count: Int(plugin.job_count))
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
        let continuous = job.flags & UInt32(CURFEW_JOB_CONTINUOUS) != 0
        var modes: [String] = []
        if size >= Self.jobSizeWithModes, let text = field(\.background_modes) {
            // One byte past the limit at most: the text may not be terminated.
            let length = strnlen(text, BackgroundMode.maximumTextBytes + 1)
            switch BackgroundMode.parse(Array(UnsafeRawBufferPointer(start: text, count: length))) {
            case .success(let parsed): modes = parsed
            case .failure(let problem): throw CurfewError(.invalidDescriptor, "Job '\(name)': \(problem.message).")
            }
            guard continuous else {
                throw CurfewError(.invalidDescriptor, "Job '\(name)' declares background modes but is not continuous; modes are for jobs without a budget.")
            }
        }
        return PluginJob(
            name: name, summary: summary, pluginPath: path,
            isContinuous: continuous,
            hooks: JobHooks(
                create: job.create, chunk: job.chunk, expire: job.expire, destroy: job.destroy, userData: userData,
                appEvent: size >= Self.jobSizeWithAppEvent ? field(\.app_event) : nil),
            index: index, backgroundModes: modes)
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

extension String {
    /// The string with control characters and quotes escaped, for messages.
    var debugEscaped: String {
        let quoted = String(reflecting: self)
        return String(quoted.dropFirst().dropLast())
    }
}
