import Curfew

/// The status page `serve --metrics` shows at `/`: every job with its
/// state, time left, progress, next run and last outcome, and a timeline of
/// the runs of the last ``window`` coloured by outcome. Self-contained HTML
/// with inline CSS and SVG, no script, refreshing itself; read-only.
enum StatusPage {
    /// How far back the timeline reaches.
    static let window: Duration = .seconds(6 * 3600)
    static let refreshSeconds = 5

    /// A run the timeline shows.
    struct Run {
        let job: String
        let started: WallTime
        let ended: WallTime
        let outcome: String
    }

    static let colours: [String: String] = [
        "completed": "#2e9d4a", "expired": "#d99a1e", "failed": "#d1423a", "crashed": "#8e1c16", "terminated": "#7a3fa0",
        "refused": "#8a8a8a", "interrupted": "#5b7fb5", "running": "#2b6cb0",
    ]

    static func html(states: [Server.JobState], runs: [Run], now: WallTime) -> String {
        let from = WallTime(milliseconds: now.milliseconds &- window.milliseconds)
        var page = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8">
            <meta http-equiv="refresh" content="\(refreshSeconds)">
            <title>curfew serve</title>
            <style>
            body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
            table{border-collapse:collapse;margin-bottom:1.5em}
            th,td{text-align:left;padding:.25em .8em;border-bottom:1px solid #ddd}
            th{font-weight:600}.num{text-align:right}
            .legend span{display:inline-block;margin-right:1em}
            .legend i{display:inline-block;width:.8em;height:.8em;margin-right:.3em;vertical-align:middle}
            </style></head><body>
            <h1>curfew serve</h1>
            <p>\(states.count) job\(states.count == 1 ? "" : "s"), as of \(escaped(stamp(now))). This page refreshes itself every \(refreshSeconds) s.</p>
            <table id="jobs"><thead><tr><th>job</th><th>state</th><th class="num">time left</th><th>progress</th><th>next run</th><th>last outcome</th></tr></thead><tbody>

            """
        for state in states {
            let word = state.running != nil ? "running" : !state.heldFor.isEmpty
                ? "waiting: " + state.heldFor.map(\.description).joined(separator: ", ")
                : state.isWaiting ? "waiting for a slot" : state.entry.policy.enabled == false ? "disabled" : state.entry.isPaused ? "paused" : "idle"
            let left = state.running?.timeRemaining.map { format($0.seconds) + " s" } ?? ""
            let progress = state.running?.progress.map { $0.total > 0 ? "\($0.completed)/\($0.total)" : "\($0.completed) done" } ?? ""
            let next = state.entry.nextRun.map { next in
                next.milliseconds <= now.milliseconds ? "due" : "in " + format(Double(next.milliseconds &- now.milliseconds) / 1000) + " s"
            } ?? ""
            page += "<tr data-job=\"\(escaped(state.job))\"><td>\(escaped(state.job))</td><td>\(escaped(word))</td><td class=\"num\">\(left)</td>"
            page += "<td>\(escaped(progress))</td><td>\(escaped(next))</td><td>\(escaped(state.entry.lastOutcome?.rawValue ?? ""))</td></tr>\n"
        }
        page += "</tbody></table>\n<h2>Runs of the last \(window.milliseconds / 3_600_000) hours</h2>\n"
        page += timeline(jobs: states.map(\.job), runs: runs.filter { $0.ended.milliseconds >= from.milliseconds }, from: from, to: now)
        page += "<p class=\"legend\">"
        for outcome in ["completed", "expired", "failed", "crashed", "terminated", "refused"] {
            page += "<span><i style=\"background:\(colours[outcome]!)\"></i>\(outcome)</span>"
        }
        page += "</p>\n</body></html>\n"
        return page
    }

    /// An SVG of one row per job and one rectangle per run, at least 2
    /// pixels wide so a short run shows.
    static func timeline(jobs: [String], runs: [Run], from: WallTime, to: WallTime) -> String {
        let label = 160.0
        let width = 900.0
        let row = 18.0
        let span = Double(max(1, to.milliseconds &- from.milliseconds))
        let rows = Dictionary(jobs.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
        var svg = "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(label + width))\" height=\"\(Int(Double(jobs.count) * row + 20))\" role=\"img\" aria-label=\"runs by job over time\">\n"
        for (index, job) in jobs.enumerated() {
            let y = Double(index) * row
            svg += "<text x=\"0\" y=\"\(format(y + 13))\" font-size=\"12\">\(escaped(job))</text>"
            svg += "<line x1=\"\(Int(label))\" x2=\"\(Int(label + width))\" y1=\"\(format(y + row - 1))\" y2=\"\(format(y + row - 1))\" stroke=\"#eee\"/>\n"
        }
        for run in runs {
            guard let index = rows[run.job] else { continue }
            let start = max(0, Double(run.started.milliseconds &- from.milliseconds)) / span * width
            let end = min(span, Double(run.ended.milliseconds &- from.milliseconds)) / span * width
            let x = label + start
            let w = max(2, end - start)
            let colour = colours[run.outcome] ?? "#444"
            svg += "<rect class=\"run\" data-job=\"\(escaped(run.job))\" data-outcome=\"\(escaped(run.outcome))\" x=\"\(format(x))\" y=\"\(format(Double(index) * row + 2))\" width=\"\(format(w))\" height=\"\(format(row - 5))\" fill=\"\(colour)\">"
            svg += "<title>\(escaped(run.job)): \(escaped(run.outcome)), \(escaped(stamp(run.started))) to \(escaped(stamp(run.ended)))</title></rect>\n"
        }
        let axis = Double(jobs.count) * row + 14
        svg += "<text x=\"\(Int(label))\" y=\"\(format(axis))\" font-size=\"11\" fill=\"#666\">\(escaped(stamp(from)))</text>"
        svg += "<text x=\"\(Int(label + width))\" y=\"\(format(axis))\" font-size=\"11\" fill=\"#666\" text-anchor=\"end\">now</text>\n</svg>\n"
        return svg
    }

    /// `text` safe in HTML text and attribute values.
    static func escaped(_ text: String) -> String {
        var out = ""
        for character in text.unicodeScalars {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.unicodeScalars.append(character)
            }
        }
        return out
    }

    static func stamp(_ time: WallTime) -> String {
        TimeZones.local().stamp(time.milliseconds.multipliedClamped(by: 1000))
    }

    /// A number with at most one decimal.
    static func format(_ value: Double) -> String {
        let tenths = (value * 10).rounded()
        guard tenths.isFinite, abs(tenths) < 1e15 else { return "0" }
        let whole = Int64(tenths)
        return whole % 10 == 0 ? "\(whole / 10)" : "\(whole / 10).\(abs(whole % 10))"
    }
}
