import CCurfew
import Synchronization

/// The `curfew_host` table plugins call, and the bridge from a
/// `curfew_context *` back to the ``JobRun`` it stands for.
///
/// - Important: Every entry is called by plugin code with values the host
///   cannot trust: none may trap, block on a job's queue, or outlive a
///   context (contexts are never freed, see ``HostContext``).
enum HostServices {
    /// The process's one host table.
    // Safe because it is written once, when first used, and only read after.
    nonisolated(unsafe) static let table: UnsafePointer<curfew_host> = {
        let table = UnsafeMutablePointer<curfew_host>.allocate(capacity: 1)
        table.initialize(to: curfew_host(
            abi_version: CURFEW_ABI_VERSION,
            struct_size: UInt32(MemoryLayout<curfew_host>.size),
            time_remaining: { context in
                guard let run = HostContext.from(context) else { return 0 }
                return run.timeRemainingSeconds
            },
            is_expiring: { context in
                HostContext.from(context)?.isExpiring ?? true
            },
            begin_background_task: { context, name, handler, userData in
                guard let run = HostContext.from(context) else { return CURFEW_TASK_INVALID_VALUE }
                let label = name.map { String(cString: $0) } ?? "unnamed"
                return run.beginTask(name: label, handler: handler, userData: userData).rawValue
            },
            end_background_task: { context, task in
                HostContext.from(context)?.endTask(BackgroundTaskIdentifier(rawValue: task))
            },
            app_state: { context in
                HostContext.from(context)?.appState.cValue ?? CURFEW_APP_STATE_BACKGROUND
            },
            log: { context, level, message in
                guard let message else { return }
                let text = String(cString: message)
                let level = LogLevel(level)
                if let run = HostContext.from(context) {
                    run.log(level, text)
                } else {
                    HostServices.entryMessages.withLock { $0?.append(text) }
                }
            },
            report_progress: { context, completed, total in
                HostContext.from(context)?.reportProgress(JobProgress(completed: completed, total: total))
            },
            param: { context, key in
                guard let key, let run = HostContext.from(context) else { return nil }
                return run.parameter(String(cString: key))
            },
            job_user_data: { context in
                HostContext.from(context)?.job.hooks.userData
            },
            checkpoint_save: { context, bytes, length in
                guard let run = HostContext.from(context) else { return CURFEW_UNAVAILABLE }
                guard length <= UInt(StateStore.maximumCheckpointBytes) else {
                    run.log(.error, "checkpoint not saved: \(length) bytes is over the limit of \(StateStore.maximumCheckpointBytes) (1 MiB)")
                    return CURFEW_TOO_LARGE
                }
                guard length == 0 || bytes != nil else {
                    run.log(.error, "checkpoint not saved: NULL bytes with a length of \(length)")
                    return CURFEW_ERROR
                }
                return run.saveCheckpoint(UnsafeRawBufferPointer(start: bytes, count: Int(length)))
            },
            checkpoint_load: { context, buffer, capacity in
                guard let bytes = HostContext.from(context)?.loadCheckpoint() else { return 0 }
                if let buffer, capacity >= UInt(bytes.count) {
                    bytes.withUnsafeBytes { buffer.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
                }
                return size_t(bytes.count)
            },
            request_next_run: { context, seconds in
                guard let run = HostContext.from(context) else { return CURFEW_UNAVAILABLE }
                guard let delay = NextRunRequest.delay(seconds: seconds) else {
                    run.log(.error, "next run not requested: \(seconds) seconds is not a delay from 0 to ten years")
                    return CURFEW_ERROR
                }
                return run.requestNextRun(after: delay)
            },
            scratch_dir: { _ in UnsafePointer(bitPattern: scratchFolder.load(ordering: .acquiring)) },
            submit_run: { context, job, params, seconds in
                guard let run = HostContext.from(context) else { return CURFEW_UNAVAILABLE }
                guard let job, let name = CStrings.bounded(job, limit: 64), JobNaming.isValidName(name) else {
                    run.log(.error, "run not submitted: the job's name is not one (1 to 64 of a-z, 0-9, '.', '_', '-')")
                    return CURFEW_ERROR
                }
                guard let delay = NextRunRequest.delay(seconds: seconds) else {
                    run.log(.error, "run of '\(name)' not submitted: \(seconds) seconds is not a delay from 0 to ten years")
                    return CURFEW_ERROR
                }
                var parameters: [String: String] = [:]
                if let params {
                    var index = 0
                    while let key = params[index] {
                        guard index < 2 * SubmittedRun.maximumParameters, let value = params[index + 1],
                            let keyText = CStrings.bounded(key, limit: SubmittedRun.maximumParameterBytes),
                            let valueText = CStrings.bounded(value, limit: SubmittedRun.maximumParameterBytes), !keyText.isEmpty
                        else {
                            run.log(.error, "run of '\(name)' not submitted: its parameters are not pairs of non-empty keys and values (at most \(SubmittedRun.maximumParameters), \(SubmittedRun.maximumParameterBytes) bytes each) ended by NULL")
                            return CURFEW_ERROR
                        }
                        parameters[keyText] = valueText
                        index += 2
                    }
                }
                return run.submitRun(SubmittedRun(job: name, parameters: parameters, after: delay))
            },
            require_conditions: { context, mask in
                guard let run = HostContext.from(context) else { return CURFEW_UNAVAILABLE }
                guard let conditions = Condition.set(of: mask) else {
                    run.log(.error, "conditions not required: the mask 0x\(String(mask, radix: 16)) has a bit this host does not know")
                    return CURFEW_ERROR
                }
                return run.requireConditions(conditions)
            }
        ))
        return UnsafePointer(table)
    }()

    /// A sandboxed worker's scratch folder, as `scratch_dir` returns it (its
    /// address; 0: none): set once, before any plugin code, and kept for
    /// the process's life.
    private static let scratchFolder = Atomic<Int>(0)

    static func setScratchFolder(_ path: String) {
        let bytes = Array(path.utf8CString)
        let kept = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count)
        kept.initialize(from: bytes, count: bytes.count)
        scratchFolder.store(Int(bitPattern: kept), ordering: .releasing)
    }

    /// Messages logged with a NULL context while an entry function runs.
    static let entryMessages = Mutex<[String]?>(nil)
    /// Serialises entry calls, so messages are attributed to the right plugin.
    private static let entryLock = Mutex(())

    /// Calls a plugin's entry function, collecting what it logs meanwhile.
    static func callEntry(_ entry: curfew_plugin_entry_fn) -> (descriptor: UnsafeRawPointer?, messages: [String]) {
        // The descriptor crosses the lock as an address: a pointer is not Sendable.
        let (address, messages) = entryLock.withLock { _ -> (Int, [String]) in
            entryMessages.withLock { $0 = [] }
            let descriptor = entry(table)
            let messages = entryMessages.withLock { messages in
                defer { messages = nil }
                return messages ?? []
            }
            return (Int(bitPattern: descriptor), messages)
        }
        return (UnsafeRawPointer(bitPattern: address), messages)
    }
}

private let CURFEW_TASK_INVALID_VALUE: curfew_task_id = 0
