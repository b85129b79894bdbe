import CCurfew
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
        try validate(ProcessMemory(), at: UInt(bitPattern: raw))
    }

    /// The descriptor at `address` of `memory`, checked whole.
    func validate(_ memory: some DescriptorMemory, at address: UInt) throws(CurfewError) -> LoadedPlugin {
        let table = try jobTable(memory, at: address)
        var jobs: [PluginJob] = []
        var names = Set<String>()
        for index in 0..<table.count {
            let job = try validateJob(memory, at: try table.entry(index), index: index)
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
        let memory = ProcessMemory()
        let address = UInt(bitPattern: raw)
        let table = try jobTable(memory, at: address)
        if index >= 0 && index < table.count {
            let job = try validateJob(memory, at: try table.entry(index), index: index)
            if job.name == name { return job }
        }
        guard let job = try validate(memory, at: address).jobs.first(where: { $0.name == name }) else {
            throw CurfewError(.notFound, "The plugin declares no job '\(name)' now: it changed since it was scanned.")
        }
        return job
    }

    /// A descriptor's job table: `count` pointers at `address`.
    private struct JobTable<Memory: DescriptorMemory> {
        let memory: Memory
        let address: UInt
        let count: Int

        func entry(_ index: Int) throws(CurfewError) -> UInt {
            try memory.load(address &+ UInt(index) &* UInt(MemoryLayout<UInt>.stride), as: UInt.self)
        }
    }

    /// The descriptor's job table, after checking every field of the header.
    private func jobTable<Memory: DescriptorMemory>(_ memory: Memory, at raw: UInt) throws(CurfewError) -> JobTable<Memory> {
        guard raw % UInt(MemoryLayout<curfew_plugin>.alignment) == 0 else {
            throw CurfewError(.invalidDescriptor, "The plugin descriptor is misaligned (\(UnsafeRawPointer(bitPattern: raw)!)).")
        }
        // abi_version and struct_size first, before anything else is read.
        let version = try memory.load(raw, as: UInt32.self)
        let size = try memory.load(raw &+ 4, as: UInt32.self)
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
        let plugin = try memory.load(raw, as: curfew_plugin.self)
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
        return JobTable(memory: memory, address: UInt(bitPattern: table), count: Int(plugin.job_count))
    }

    private func validateJob(_ memory: some DescriptorMemory, at raw: UInt, index: Int) throws(CurfewError) -> PluginJob {
        guard raw != 0 else {
            throw CurfewError(.invalidDescriptor, "Job #\(index) is a NULL pointer.")
        }
        guard raw % UInt(MemoryLayout<curfew_job>.alignment) == 0 else {
            throw CurfewError(.invalidDescriptor, "Job #\(index) descriptor is misaligned.")
        }
        let size = try memory.load(raw, as: UInt32.self)
        guard size >= Self.minimumJobSize else {
            throw CurfewError(
                .structTooSmall,
                "Job #\(index) struct_size is \(size) bytes, at least \(Self.minimumJobSize) expected."
            )
        }
        // Read the fields the plugin's struct_size covers, no more.
        func field<T: BitwiseCopyable>(_ key: KeyPath<curfew_job, T>) throws(CurfewError) -> T {
            try memory.load(raw &+ UInt(MemoryLayout<curfew_job>.offset(of: key)!), as: T.self)
        }
        func pointer(_ key: PartialKeyPath<curfew_job>) throws(CurfewError) -> UInt {
            try memory.load(raw &+ UInt(MemoryLayout<curfew_job>.offset(of: key)!), as: UInt.self)
        }
        let flags = try field(\.flags)
        let hooks = (create: try pointer(\.create), chunk: try pointer(\.chunk), expire: try pointer(\.expire), destroy: try pointer(\.destroy))
        let userData = size >= Self.jobSizeWithUserData ? try memory.load(raw &+ UInt(Self.minimumJobSize), as: UInt.self) : 0
        let name = try jobName(memory, at: try pointer(\.name), index: index)
        let summary = try summaryText(memory, at: try pointer(\.summary), job: name)
        guard flags & ~Self.knownFlags == 0 else {
            let unknown = String(flags & ~Self.knownFlags, radix: 16)
            throw CurfewError(.unknownFlags, "Job '\(name)' has unknown flags 0x\(unknown); this host knows 0x\(String(Self.knownFlags, radix: 16)).")
        }
        if hooks.chunk != 0 && hooks.expire == 0 {
            throw CurfewError(.missingHook, "Job '\(name)' has a chunk hook but no expire hook; a chunked job needs expire for its cleanup.")
        }
        if hooks.chunk == 0 && hooks.create == 0 {
            throw CurfewError(.missingHook, "Job '\(name)' has neither chunk nor create; a task-driven job starts its work in create.")
        }
        let continuous = flags & UInt32(CURFEW_JOB_CONTINUOUS) != 0
        var modes: [String] = []
        let text = size >= Self.jobSizeWithModes ? try pointer(\.background_modes) : 0
        if text != 0 {
            // One byte past the limit at most: the text may not be terminated.
            switch BackgroundMode.parse(try memory.text(text, limit: BackgroundMode.maximumTextBytes + 1)) {
            case .success(let parsed): modes = parsed
            case .failure(let problem): throw CurfewError(.invalidDescriptor, "Job '\(name)': \(problem.message).")
            }
            guard continuous else {
                throw CurfewError(.invalidDescriptor, "Job '\(name)' declares background modes but is not continuous; modes are for jobs without a budget.")
            }
        }
        let appEvent = size >= Self.jobSizeWithAppEvent ? try pointer(\.app_event) : 0
        // Addresses become hooks here; only a descriptor in this process's
        // memory is ever called through them.
        return PluginJob(
            name: name, summary: summary, pluginPath: path,
            isContinuous: continuous,
            hooks: JobHooks(
                create: unsafeBitCast(hooks.create, to: curfew_create_fn?.self),
                chunk: unsafeBitCast(hooks.chunk, to: curfew_chunk_fn?.self),
                expire: unsafeBitCast(hooks.expire, to: curfew_expire_fn?.self),
                destroy: unsafeBitCast(hooks.destroy, to: curfew_destroy_fn?.self),
                userData: UnsafeMutableRawPointer(bitPattern: userData),
                appEvent: unsafeBitCast(appEvent, to: curfew_app_event_fn?.self)),
            index: index, backgroundModes: modes)
    }

    private func jobName(_ memory: some DescriptorMemory, at pointer: UInt, index: Int) throws(CurfewError) -> String {
        guard pointer != 0 else {
            throw CurfewError(.invalidJobName, "Job #\(index) has a NULL name.")
        }
        // Read at most one byte past the limit: the name may not be terminated.
        let bytes = try memory.text(pointer, limit: Int(CURFEW_MAX_JOB_NAME) + 1)
        if let problem = JobNaming.nameProblem(bytes) {
            throw CurfewError(.invalidJobName, "Job #\(index) \(problem)")
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private func summaryText(_ memory: some DescriptorMemory, at pointer: UInt, job: String) throws(CurfewError) -> String {
        guard pointer != 0 else {
            throw CurfewError(.invalidSummary, "Job '\(job)' has a NULL summary.")
        }
        let bytes = try memory.text(pointer, limit: Int(CURFEW_MAX_SUMMARY) + 1)
        if let problem = JobNaming.summaryProblem(bytes) {
            throw CurfewError(.invalidSummary, "Job '\(job)' \(problem)")
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// Where a descriptor is read: this process's memory, or a copy a scanner
/// process made of its own (``SnapshotMemory``).
protocol DescriptorMemory {
    /// The value at `address`, which may be unaligned.
    func load<T: BitwiseCopyable>(_ address: UInt, as type: T.Type) throws(CurfewError) -> T
    /// The bytes at `address` up to the first NUL, `limit` at most (`strnlen`'s).
    func text(_ address: UInt, limit: Int) throws(CurfewError) -> [UInt8]
}

/// This process's memory: a read of an address that is not mapped faults,
/// as the plugin's own code would.
struct ProcessMemory: DescriptorMemory {
    func load<T: BitwiseCopyable>(_ address: UInt, as type: T.Type) -> T {
        UnsafeRawPointer(bitPattern: address)!.loadUnaligned(as: T.self)
    }

    func text(_ address: UInt, limit: Int) -> [UInt8] {
        let pointer = UnsafePointer<CChar>(bitPattern: address)!
        return Array(UnsafeRawBufferPointer(start: pointer, count: CStrings.length(pointer, limit: limit)))
    }
}

extension String {
    /// The string with control characters and quotes escaped, for messages.
    var debugEscaped: String {
        let quoted = String(reflecting: self)
        return String(quoted.dropFirst().dropLast())
    }
}
