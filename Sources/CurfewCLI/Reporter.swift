import Curfew
import CurfewHost
import CurfewFormats

/// Turns scan results and run events into human lines or JSON Lines.
final class Reporter: Sendable {
    let console: Console
    let json: Bool
    let verbose: Bool
    private let start = MonotonicClock().now()

    init(console: Console, json: Bool, verbose: Bool) {
        self.console = console
        self.json = json
        self.verbose = verbose
    }

    /// A JSON event whose `time` is `at` (else now), in seconds since the
    /// reporter started: when the event happened, not when it is written.
    private func line(_ event: String, at time: CurfewInstant? = nil) -> JSONLine {
        var line = JSONLine(event: event)
        line.add("time", start.duration(to: time ?? MonotonicClock().now()).seconds)
        return line
    }

    private func tag(_ word: String, _ color: Console.Color? = nil) -> String {
        let padded = word + String(repeating: " ", count: max(1, 10 - word.count))
        guard let color else { return padded }
        return console.paint(word, color) + String(repeating: " ", count: max(1, 10 - word.count))
    }

    func scanned(_ scan: PluginScan) {
        for plugin in scan.plugins {
            if json {
                var event = line("loaded")
                event.add("plugin", plugin.path)
                event.add("jobs", plugin.jobs.map(\.name))
                console.machine(event.text)
            } else {
                console.human(tag("loaded") + "\(Untrusted.line(plugin.path)): " + plugin.jobs.map(\.name).joined(separator: ", "))
            }
        }
        for rejected in scan.rejected {
            if json {
                var event = line("rejected")
                event.add("plugin", rejected.path)
                event.add("code", rejected.error.code.rawValue)
                event.add("reason", rejected.error.description)
                console.machine(event.text)
            }
            // Rejections also reach people when the JSON goes to a pipe.
            console.human(tag("rejected", .red) + "\(Untrusted.line(rejected.path)): \(Untrusted.line(rejected.error.description))")
        }
    }

    /// What the server says of itself: its scans, replaced and removed
    /// files, skipped runs, and the warnings that change nothing.
    func notice(_ notice: Server.Notice) {
        let (level, text): (String, String) =
            switch notice {
            case .info(let text): ("info", text)
            case .warning(let text): ("warning", text)
            case .error(let text): ("error", text)
            }
        let priority: Console.Priority = level == "error" ? .error : level == "warning" ? .warning : .notice
        if json {
            var line = JSONLine(event: "serve")
            line.add("level", level)
            line.add("message", text)
            console.machine(line.text, priority: priority)
        } else {
            console.human(tag("serve", level == "error" ? .red : level == "warning" ? .yellow : nil) + Untrusted.line(text), priority: priority)
        }
    }

    /// Reports `event`, which happened `at` (else now) on the monotonic clock.
    func event(_ event: RunEvent, at time: CurfewInstant? = nil) {
        // A finished job's live line goes with it, not at the next redraw.
        if case .finished(let result) = event { console.removeLive(result.job) }
        let priority = Self.priority(of: event)
        if json {
            console.machine(jsonText(event, at: time), priority: priority)
        } else if let text = humanText(event) {
            console.human(text, priority: priority)
        }
    }

    /// How much an event matters, for the journal: a job's own log level; a
    /// run that failed, crashed, was terminated or refused is a warning.
    static func priority(of event: RunEvent) -> Console.Priority {
        switch event {
        case .log(_, let level, _):
            switch level {
            case .debug: .debug
            case .info: .info
            case .warning: .warning
            case .error: .error
            }
        case .finished(let result):
            [.failed, .crashed, .terminated, .refused].contains(result.outcome) ? .warning : .info
        default:
            .info
        }
    }

    /// Plugin code called `exit(status)` in the host's process: the run ends
    /// here, with no summary. These are the process's last lines: an event
    /// delivered after them (the job's own `started`, on another thread) is
    /// not written.
    func hostExit(status: Int32, job: String?) {
        var event = line("host-exit")
        event.add("job", job)
        event.add("status", Int64(status))
        let who = job.map { "Job '\($0)'" } ?? "Plugin code"
        console.last(
            machine: json ? event.text : nil,
            error: "Error: \(who) called exit(\(status)) in the host's process; the run ends here, with no summary "
                + "(exit status \(ExitCode.jobEndedHost)). Run it with --isolate job to contain that.")
    }

    /// Plugin code run in the host's process faulted: the run ends here,
    /// with no summary. These are the process's last lines.
    func hostCrash(_ fault: HookThread.Fault) {
        var event = line("host-crash")
        event.add("job", fault.job)
        event.add("hook", fault.hook)
        if let chunk = fault.chunk { event.add("chunk", Int64(clamping: chunk)) }
        event.add("signal", fault.signal)
        let place = fault.chunk.map { "chunk \($0)" } ?? fault.hook
        console.last(
            machine: json ? event.text : nil,
            error: "Error: Job '\(fault.job)' crashed with \(fault.signal) in \(place), in the host's process; the run ends here, "
                + "with no summary (exit status \(ExitCode.jobCrashedHost)). --isolate none trusts the plugin: "
                + "run it with --isolate job to contain that.")
    }

    private func humanText(_ event: RunEvent) -> String? {
        switch event {
        case .started(let job, _, let budget):
            let grant = budget.map { "budget \(format($0))" } ?? "no budget: continuous"
            return tag("started") + "\(job) (\(grant))"
        case .log(let job, let level, let message):
            // A message of several lines is one entry: its first line after
            // the job's name, the others indented under it, so none of them
            // can pass for a line of the host's.
            var lines = Untrusted.lines(message)
            let first = lines.removeFirst()
            let entry: String
            switch level {
            case .debug:
                guard verbose else { return nil }
                entry = console.paint("\(job): debug: \(first)", .dim)
            case .info: entry = "\(job): \(first)"
            case .warning: entry = "\(job): " + console.paint("warning:", .yellow) + " \(first)"
            case .error: entry = "\(job): " + console.paint("error:", .red) + " \(first)"
            }
            let indent = String(repeating: " ", count: job.count + 2)
            return ([entry] + lines.map { indent + $0 }).joined(separator: "\n")
        case .progress:
            return nil
        case .output(let plugin, let stream, let line):
            let owner = plugin.map { "(\(Untrusted.line($0)))" } ?? "(plugins)"
            return "\(owner) [\(stream)] \(Untrusted.line(line))"
        case .expiring(let job, let reason):
            return tag("expiring", .yellow) + "\(job): \(reason)"
        case .nextRunRequested(let job, let delay):
            guard verbose else { return nil }
            return tag("next run") + "\(job) asks to run again in \(format(delay))"
        case .runSubmitted(let job, let run):
            guard verbose else { return nil }
            return tag("submit") + "\(job) asks for a run of \(run.job) in \(format(run.after))"
        case .conditionsRequired(let job, let conditions):
            guard verbose else { return nil }
            let named = conditions.sorted().map(\.description).joined(separator: ", ")
            return tag("conditions") + "\(job) asks to run only with \(named.isEmpty ? "its policy's conditions" : named)"
        case .finished(let result):
            var text = tag("finished") + "\(result.job): " + paint(result.outcome) + " (\(Untrusted.line(result.reason)))"
            if result.outcome != .refused {
                let chunks = result.isChunked ? "\(result.chunks) chunk\(result.chunks == 1 ? "" : "s"), " : ""
                text += " after \(chunks)\(formatSeconds(result.elapsed.seconds))s"
            }
            return text
        }
    }

    private func jsonText(_ event: RunEvent, at time: CurfewInstant?) -> String {
        let line = { (name: String) in self.line(name, at: time) }
        switch event {
        case .started(let job, let plugin, let budget):
            var line = line("started")
            line.add("job", job)
            line.add("plugin", plugin)
            line.add("budget", budget?.seconds)
            return line.text
        case .log(let job, let level, let message):
            var line = line("log")
            line.add("job", job)
            line.add("level", level.description)
            line.add("message", message)
            return line.text
        case .progress(let job, let progress):
            var line = line("progress")
            line.add("job", job)
            line.add("completed", progress.completed)
            line.add("total", progress.total)
            return line.text
        case .expiring(let job, let reason):
            var line = line("expiring")
            line.add("job", job)
            line.add("reason", reason.rawValue)
            return line.text
        case .nextRunRequested(let job, let delay):
            var line = line("next-run")
            line.add("job", job)
            line.add("after", delay.seconds)
            return line.text
        case .runSubmitted(let job, let run):
            var line = line("submit")
            line.add("job", job)
            line.add("target", run.job)
            line.add("after", run.after.seconds)
            return line.text
        case .conditionsRequired(let job, let conditions):
            var line = line("conditions")
            line.add("job", job)
            line.add("conditions", conditions.sorted().map(\.rawValue))
            return line.text
        case .output(let plugin, let stream, let text):
            var line = line("output")
            line.add("plugin", plugin)
            line.add("stream", stream)
            line.add("line", text)
            return line.text
        case .finished(let result):
            var line = line("finished")
            line.add("job", result.job)
            line.add("plugin", result.pluginPath)
            line.add("outcome", result.outcome.rawValue)
            // A task-driven job has no chunks: null, as the table's "-".
            if result.isChunked {
                line.add("chunks", Int64(clamping: result.chunks))
            } else {
                line.addRaw("chunks", "null")
            }
            line.add("elapsed", result.elapsed.seconds)
            line.add("reason", result.reason)
            if let progress = result.progress {
                line.addRaw("progress", "{\"completed\":\(progress.completed),\"total\":\(progress.total)}")
            } else {
                line.addRaw("progress", "null")
            }
            return line.text
        }
    }

    func paint(_ outcome: Outcome) -> String {
        switch outcome {
        case .completed: console.paint(outcome.rawValue, .green)
        case .expired: console.paint(outcome.rawValue, .yellow)
        case .failed, .terminated, .crashed, .interrupted: console.paint(outcome.rawValue, .red)
        case .refused: console.paint(outcome.rawValue, .magenta)
        case .running: outcome.rawValue
        }
    }

    /// The live status lines for the running jobs, each cut to fit
    /// `width` columns when given (a line that fills the last column would
    /// make the terminal wrap it and break the block's redraw).
    func liveLines(_ statuses: [JobStatus], width: Int? = nil) -> [(job: String, line: String)] {
        let nameWidth = statuses.map(\.job.count).max() ?? 0
        return statuses.map { status in
            let time =
                status.timeRemaining.map { "\(formatSeconds($0.seconds))s left" }
                ?? (status.isContinuous ? "no budget" : "starting")
            let name = status.job + String(repeating: " ", count: nameWidth - status.job.count)
            var text = "  ▸ \(name)  \(time)"
            if status.isExpiring { text += "  expiring" }
            if let progress = status.progress { text += "  " + Self.describe(progress) }
            if status.isChunked, let chunks = status.chunks { text += "  \(chunks) chunk\(chunks == 1 ? "" : "s")" }
            if let width { text = Self.cut(text, to: width - 1) }
            return (status.job, console.paint(text, .dim))
        }
    }

    /// `text` in lines of at most `columns` characters, broken at spaces
    /// (a longer word is split), `lines` at most: the last ends in "…" when
    /// text is left over.
    static func wrap(_ text: String, to columns: Int, lines limit: Int) -> [String] {
        let columns = max(columns, 2)
        var lines: [String] = []
        var current = ""
        for word in text.split(separator: " ") {
            var rest = Substring(word)
            if !current.isEmpty && current.count + 1 + rest.count > columns {
                lines.append(current)
                current = ""
            }
            // A word longer than a line is split.
            while rest.count > columns {
                lines.append(String(rest.prefix(columns)))
                rest = rest.dropFirst(columns)
            }
            current += (current.isEmpty ? "" : " ") + rest
        }
        if !current.isEmpty || lines.isEmpty { lines.append(current) }
        guard lines.count > limit else { return lines }
        var kept = Array(lines.prefix(limit))
        let last = kept[limit - 1]
        kept[limit - 1] = last.count + 2 <= columns ? last + " …" : String(last.prefix(columns - 1)) + "…"
        return kept
    }

    /// `text` in at most `columns` characters, ending in "…" when cut.
    static func cut(_ text: String, to columns: Int) -> String {
        guard text.count > columns else { return text }
        guard columns > 1 else { return String(text.prefix(max(columns, 0))) }
        return String(text.prefix(columns - 1)) + "…"
    }

    /// The numbers come from the job: any pair of Int64 is shown, none traps
    /// (a percentage past 100 is shown as over 100).
    static func describe(_ progress: JobProgress) -> String {
        guard progress.total > 0 else { return "\(progress.completed)" }
        let percent = Double(progress.completed) * 100 / Double(progress.total)
        let shown = percent > 100 ? ">100" : percent < 0 ? "<0" : String(Int(percent.rounded(.down)))
        return "\(progress.completed)/\(progress.total) (\(shown)%)"
    }

    /// The table printed when the run ends, fitted to `width` columns when
    /// given (a terminal's): the least needed columns go first (progress,
    /// elapsed, chunks), long job names are cut, and each reason wraps in its
    /// column (three lines at most), or under its row where the row leaves
    /// it no room.
    func summary(_ results: [JobResult], rejected: Int, width requested: Int? = nil) {
        guard !json else { return }
        // Below 30 columns no table fits: lines as they are, for the terminal to wrap.
        let width = requested.flatMap { $0 >= 30 ? $0 : nil }
        let header = ["JOB", "OUTCOME", "CHUNKS", "ELAPSED", "PROGRESS", "REASON"]
        var rows = results.map { result in
            [
                result.job, result.outcome.rawValue, result.isChunked ? String(result.chunks) : "-",
                result.outcome == .refused ? "-" : formatSeconds(result.elapsed.seconds) + "s",
                result.progress.map(Self.describe) ?? "-", Untrusted.line(result.reason),
            ]
        }
        let reasonColumn = header.count - 1
        let minimumReason = 20
        var shown = Array(header.indices)
        func columnWidth(_ column: Int) -> Int { ([header] + rows).map { $0[column].count }.max()! }
        /// The columns before the reason, with their separators.
        func prefixWidth() -> Int { shown.filter { $0 != reasonColumn }.map { columnWidth($0) + 2 }.reduce(0, +) }
        if let width {
            for column in [4, 3, 2] where prefixWidth() + minimumReason > width - 1 {
                shown.removeAll { $0 == column }
            }
            // Job names past what the row can hold are cut.
            let jobRoom = width - 1 - (columnWidth(1) + 2) - 2
            if columnWidth(0) > jobRoom { rows = rows.map { [Self.cut($0[0], to: max(jobRoom, 8))] + $0.dropFirst() } }
        }
        let widths = Dictionary(uniqueKeysWithValues: shown.map { ($0, columnWidth($0)) })
        let prefix = prefixWidth()
        let below = width.map { $0 - 1 - prefix < minimumReason } ?? false
        let rightAligned: Set<Int> = [2, 3]
        func render(_ cells: [String], outcome: Outcome?) -> [String] {
            var line = ""
            for column in shown where column != reasonColumn {
                let cell = cells[column]
                let pad = String(repeating: " ", count: widths[column]! - cell.count)
                let painted = column == 1 && outcome != nil ? paint(outcome!) : cell
                line += (rightAligned.contains(column) ? pad + painted : painted + pad) + "  "
            }
            let reason = cells[reasonColumn]
            guard let width else { return [line + reason] }
            if below {
                let trimmed = String(line.reversed().drop { $0 == " " }.reversed())
                return [trimmed] + Self.wrap(reason, to: width - 5, lines: 3).map { "    " + $0 }
            }
            let wrapped = Self.wrap(reason, to: width - 1 - prefix, lines: 3)
            let indent = String(repeating: " ", count: prefix)
            return [line + (wrapped.first ?? "")] + wrapped.dropFirst().map { indent + $0 }
        }
        console.human("")
        for line in render(header, outcome: nil) where line.contains(where: { $0 != " " }) {
            console.human(console.paint(line, .bold))
        }
        for (row, result) in zip(rows, results) {
            render(row, outcome: result.outcome).forEach { console.human($0) }
        }
        var counts: [String] = []
        for outcome in Outcome.allCases {
            let count = results.filter { $0.outcome == outcome }.count
            if count > 0 { counts.append("\(count) \(outcome.rawValue)") }
        }
        var tail = "\(results.count) job\(results.count == 1 ? "" : "s"): " + counts.joined(separator: ", ")
        if rejected > 0 { tail += "; \(rejected) plugin file\(rejected == 1 ? "" : "s") rejected" }
        if let width {
            Self.wrap(tail, to: width - 1, lines: 4).forEach { console.human($0) }
        } else {
            console.human(tail)
        }
    }
}
