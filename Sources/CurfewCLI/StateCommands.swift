import Curfew
import CurfewHost
import CurfewFormats

/// `curfew state` and `curfew history`: what the state store remembers.
extension CurfewMain {
    /// The store in `folder` (relative to the working folder), else the
    /// default one; an error line when it cannot be opened.
    static func openStore(_ folder: String?, writer: StoreLock.Holder? = nil) -> Result<StateStore, StoreError> {
        guard let chosen = folder.map(absolute) ?? StateStore.defaultFolder() else {
            return .failure(StoreError(
                message: "No state folder: give one with --state, or set STATE_DIRECTORY, XDG_STATE_HOME or HOME to an absolute path"))
        }
        do throws(CurfewError) {
            return .success(try StateStore(folder: chosen, writer: writer))
        } catch {
            return .failure(StoreError(message: error.description))
        }
    }

    /// The store, or `nil` once the console has said why there is none.
    private static func openStore(_ folder: String?, writer: StoreLock.Holder? = nil, console: Console) -> StateStore? {
        switch openStore(folder, writer: writer) {
        case .success(let store):
            for change in store.madePrivate { console.error("Warning: \(Untrusted.line(change)).") }
            return store
        case .failure(let error):
            console.error("Error: \(Untrusted.line(error.message))")
            return nil
        }
    }

    struct StoreError: Error {
        let message: String
    }

    /// A checkpoint's plugin as `state` shows it.
    static func pluginName(_ path: String) -> String {
        path.isEmpty ? "(unknown plugin, from an older store)" : path
    }

    /// `path` from the working folder, when it is relative.
    static func absolute(_ path: String) -> String {
        StateStore.absolutePath(path)
    }

    static func state(_ options: StateOptions) -> Int32 {
        let console = Console(json: options.json)
        // Clearing writes: it waits for no host, and none may hold the store.
        let writer = options.action == .clear ? StoreLock.Holder.current() : nil
        guard let store = openStore(options.stateFolder, writer: writer, console: console) else { return ExitCode.failure }
        do throws(CurfewError) {
            switch options.action {
            case .list:
                let all = try store.checkpoints()
                if options.json {
                    for entry in all {
                        var line = JSONLine(event: "checkpoint")
                        line.add("job", entry.job)
                        line.add("plugin", entry.plugin)
                        line.add("bytes", Int64(entry.bytes))
                        line.add("saved", formatTimestamp(entry.savedAt, iso: true))
                        console.machine(line.text)
                    }
                } else if all.isEmpty {
                    console.human("No job has a checkpoint (in \(Untrusted.line(store.path))).")
                } else {
                    let width = min(max(all.map(\.job.count).max() ?? 0, 3), 40)
                    console.human("JOB" + String(repeating: " ", count: width - 1) + "     BYTES  SAVED                PLUGIN")
                    for entry in all {
                        let size = String(entry.bytes)
                        console.human(
                            Untrusted.line(clip(entry.job, width)) + String(repeating: " ", count: width - min(entry.job.count, width) + 2)
                                + String(repeating: " ", count: max(0, 10 - size.count)) + size + "  " + formatTimestamp(entry.savedAt, iso: false)
                                + "  " + Untrusted.line(pluginName(entry.plugin)))
                    }
                }
            case .show:
                let job = options.job!
                let saved = try store.checkpoints().filter { $0.job == job }
                if saved.isEmpty {
                    console.error("Error: Job '\(Untrusted.line(job))' has no checkpoint.")
                    return ExitCode.failure
                }
                // A job name may be in several plugins: each keeps its own.
                for entry in saved {
                    guard let bytes = try store.checkpoint(JobKey(job: job, plugin: entry.plugin)) else { continue }
                    if options.json {
                        var line = JSONLine(event: "checkpoint")
                        line.add("job", job)
                        line.add("plugin", entry.plugin)
                        line.add("bytes", Int64(bytes.count))
                        line.add("saved", formatTimestamp(entry.savedAt, iso: true))
                        line.add("data", Base64.encode(bytes))
                        console.machine(line.text)
                    } else {
                        console.human(
                            "\(Untrusted.line(job)) of \(Untrusted.line(pluginName(entry.plugin))): \(bytes.count) byte\(bytes.count == 1 ? "" : "s")"
                                + ", saved \(formatTimestamp(entry.savedAt, iso: false))")
                        for line in hexDump(bytes.prefix(256)) { console.human(line) }
                        if bytes.count > 256 { console.human("(the first 256 bytes of \(bytes.count))") }
                    }
                }
            case .clear:
                let cleared = try store.clearCheckpoints(job: options.all ? nil : options.job)
                if let job = options.job, cleared == 0 {
                    console.error("Error: Job '\(Untrusted.line(job))' has no checkpoint.")
                    return ExitCode.failure
                }
                console.human("Cleared \(cleared) checkpoint\(cleared == 1 ? "" : "s").")
            case .backup:
                let destination = absolute(options.destination!)
                try store.backup(to: destination)
                console.human("Copied the store \(Untrusted.line(store.path)) to \(Untrusted.line(destination)).")
            }
        } catch {
            console.error("Error: \(Untrusted.line(error.description))")
            return ExitCode.failure
        }
        return ExitCode.success
    }

    static func history(_ options: HistoryOptions) -> Int32 {
        let console = Console(json: options.json)
        guard let store = openStore(options.stateFolder, console: console) else { return ExitCode.failure }
        let records: [JobRecord]
        do throws(CurfewError) {
            records = try store.history(job: options.job, since: options.since.map { WallTime.now().earlier(by: $0) }, limit: options.limit)
        } catch {
            console.error("Error: \(Untrusted.line(error.description))")
            return ExitCode.failure
        }
        if options.json {
            for record in records {
                var line = JSONLine(event: "job-run")
                line.add("run", record.runID)
                line.add("job", record.job)
                line.add("started", formatTimestamp(record.startedAt, iso: true))
                line.add("ended", formatTimestamp(record.endedAt, iso: true))
                line.add("outcome", record.outcome.rawValue)
                line.add("reason", record.reason)
                line.add("chunks", Int64(clamping: record.chunks))
                if let progress = record.progress {
                    line.add("completed", progress.completed)
                    line.add("total", progress.total)
                }
                line.add("checkpoint_bytes", Int64(record.checkpointBytes))
                line.add("isolation", record.isolation.rawValue)
                if !record.sandbox.isEmpty { line.add("sandbox", record.sandbox) }
                line.add("plugin", record.pluginPath)
                line.add("plugin_hash", record.pluginHash)
                line.add("host_version", record.hostVersion)
                console.machine(line.text)
            }
            return ExitCode.success
        }
        if records.isEmpty {
            console.human("No runs recorded\(options.job.map { " of job '\(Untrusted.line($0))'" } ?? "") (in \(Untrusted.line(store.path))).")
            return ExitCode.success
        }
        for line in historyTable(records) { console.human(line) }
        return ExitCode.success
    }

    /// The history as a table of at most 80 columns: the reason takes what is left.
    static func historyTable(_ records: [JobRecord]) -> [String] {
        func pad(_ text: String, _ width: Int) -> String {
            let clipped = clip(text, width)
            return clipped + String(repeating: " ", count: max(0, width - clipped.count))
        }
        func right(_ text: String, _ width: Int) -> String { String(repeating: " ", count: max(0, width - text.count)) + text }
        var lines = [pad("ENDED", 14) + " " + pad("JOB", 16) + " " + pad("OUTCOME", 10) + " " + right("CHUNKS", 6) + " " + right("TIME", 7) + " REASON"]
        for record in records {
            let elapsed = Double(record.endedAt.milliseconds &- record.startedAt.milliseconds) / 1000
            let line = pad(formatTimestamp(record.endedAt, iso: false), 14) + " " + pad(Untrusted.line(record.job), 16) + " "
                + pad(record.outcome.rawValue, 10) + " " + right(String(record.chunks), 6) + " "
                + right(formatSeconds(max(0, elapsed)) + "s", 7) + " "
            lines.append(line + clip(Untrusted.line(record.reason), max(0, 80 - line.count)))
        }
        return lines
    }

    /// At most `width` characters of `text`, with "…" when cut.
    static func clip(_ text: String, _ width: Int) -> String {
        text.count <= width ? text : String(text.prefix(max(0, width - 1))) + "…"
    }

    /// Local time: "12-01 08:40:12"; or, with `iso`, UTC in ISO 8601 with milliseconds.
    static func formatTimestamp(_ time: WallTime, iso: Bool) -> String {
        // A time before 1970 (a file says what it likes) still reads right.
        let parts = time.fields(utc: iso)
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let clock = "\(two(parts.hour)):\(two(parts.minute)):\(two(parts.second))"
        guard iso else { return "\(two(parts.month))-\(two(parts.day)) \(clock)" }
        let millis = String(parts.millisecond)
        return "\(parts.year)-\(two(parts.month))-\(two(parts.day))T\(clock)."
            + String(repeating: "0", count: 3 - millis.count) + millis + "Z"
    }

    /// 16 bytes a line: offset, hex, and the printable ones as text.
    static func hexDump(_ bytes: ArraySlice<UInt8>) -> [String] {
        let digits = Array("0123456789abcdef")
        var lines: [String] = []
        var offset = 0
        for start in stride(from: bytes.startIndex, to: bytes.endIndex, by: 16) {
            let row = bytes[start..<min(start + 16, bytes.endIndex)]
            let hex = row.map { String([digits[Int($0 >> 4)], digits[Int($0 & 15)]]) }.joined(separator: " ")
            let text = String(row.map { (0x20..<0x7F).contains($0) ? Character(UnicodeScalar($0)) : "." })
            let position = String(offset, radix: 16)
            lines.append("  " + String(repeating: "0", count: max(0, 4 - position.count)) + position + "  "
                + hex + String(repeating: " ", count: 48 - hex.count) + " " + text)
            offset += 16
        }
        return lines
    }
}
