import Curfew
import CurfewFormats

/// What `curfew serve` counts, kept on the server's queue and written in
/// Prometheus' text exposition format (`curfew metrics`). Labels are job
/// names (`curfew_job`: Prometheus sets `job` to the scrape's own),
/// outcomes and reasons, never run ids: a series per job, bounded by the
/// jobs the host has served.
struct ServeMetrics {
    /// Upper bounds of each histogram's buckets, in seconds or bytes.
    static let durationBounds: [Double] = [0.01, 0.1, 1, 10, 60, 300, 1800, 3600]
    static let chunkBounds: [Double] = RunMeasures.chunkBounds.map { Double($0) / 1e9 }
    static let latenessBounds: [Double] = [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1]
    static let saveBounds: [Double] = [0.0001, 0.001, 0.01, 0.1, 1, 10]
    static let checkpointSizeBounds: [Double] = [256, 4096, 65536, 262_144, 1_048_576]

    struct Histogram {
        let bounds: [Double]
        /// Observations in each bound's bucket (at most it, over the one
        /// before: not cumulative, summed as written).
        private(set) var counts: [UInt64]
        private(set) var count: UInt64 = 0
        private(set) var sum: Double = 0

        init(_ bounds: [Double]) {
            self.bounds = bounds
            counts = [UInt64](repeating: 0, count: bounds.count)
        }

        mutating func observe(_ value: Double) {
            if let bucket = bounds.firstIndex(where: { value <= $0 }) { counts[bucket] = Self.saturating(counts[bucket], 1) }
            count = Self.saturating(count, 1)
            sum += value
        }

        /// Adds observations counted elsewhere into the same buckets, the
        /// last of `buckets` holding those above every bound. Saturating:
        /// counts that came from a worker never wrap, and every bucket
        /// stays at most the total.
        mutating func add(buckets: [UInt64], sum: Double) {
            guard buckets.count == bounds.count + 1 else { return }
            var added: UInt64 = 0
            for (index, value) in buckets.enumerated() {
                added = Self.saturating(added, value)
                if index < bounds.count { counts[index] = Self.saturating(counts[index], value) }
            }
            count = Self.saturating(count, added)
            self.sum += sum
        }

        static func saturating(_ a: UInt64, _ b: UInt64) -> UInt64 {
            let (sum, overflow) = a.addingReportingOverflow(b)
            return overflow ? .max : sum
        }
    }

    struct Outcome: Hashable {
        let job: String
        let word: String
    }

    private(set) var started: [String: UInt64] = [:]
    private(set) var retries: [String: UInt64] = [:]
    private(set) var finished: [Outcome: UInt64] = [:]
    private(set) var expirations: [Outcome: UInt64] = [:]
    private(set) var durations: [String: Histogram] = [:]
    private(set) var chunkTimes: [String: Histogram] = [:]
    private(set) var expireLateness: [String: Histogram] = [:]
    private(set) var checkpointSaves: [String: Histogram] = [:]
    private(set) var checkpointSizes: [String: Histogram] = [:]
    private(set) var checkpointFailures: [String: UInt64] = [:]
    /// Runs that failed, crashed or were terminated since the job's last
    /// that completed or expired, by job.
    private(set) var failuresInARow: [String: UInt64] = [:]
    private(set) var workerStarts = WorkerStarts()
    /// Plugin files a scan answered from its cache, and those a scanner loaded.
    private(set) var scannedFiles: (cached: UInt64, loaded: UInt64) = (0, 0)
    /// The last runs, for the status page's timeline, oldest first.
    private(set) var recentRuns: [StatusPage.Run] = []
    static let recentRunLimit = 5000

    mutating func runStarted(_ job: String, isRetry: Bool) {
        started[job, default: 0] &+= 1
        if isRetry { retries[job, default: 0] &+= 1 }
    }

    mutating func runEnded(_ result: JobResult, expiredBy reason: ExpirationReason?, workers: WorkerStarts, at end: WallTime) {
        let start = WallTime(milliseconds: end.milliseconds &- result.elapsed.milliseconds)
        recentRuns.append(StatusPage.Run(job: result.job, started: start, ended: end, outcome: result.outcome.rawValue))
        if recentRuns.count > Self.recentRunLimit + Self.recentRunLimit / 4 { recentRuns.removeFirst(recentRuns.count - Self.recentRunLimit) }
        finished[Outcome(job: result.job, word: result.outcome.rawValue), default: 0] &+= 1
        if let reason { expirations[Outcome(job: result.job, word: reason.rawValue), default: 0] &+= 1 }
        switch result.outcome {
        case .failed, .crashed, .terminated: failuresInARow[result.job, default: 0] &+= 1
        case .completed, .expired: failuresInARow[result.job] = 0
        default: break
        }
        // A refused run never ran: no duration of its own.
        if result.outcome != .refused { durations[result.job, default: Histogram(Self.durationBounds)].observe(max(0, result.elapsed.seconds)) }
        let measures = result.measures
        if !measures.chunkCounts.isEmpty {
            chunkTimes[result.job, default: Histogram(Self.chunkBounds)].add(buckets: measures.chunkCounts, sum: Double(measures.chunkNanoseconds) / 1e9)
        }
        if let late = measures.expireLateness { expireLateness[result.job, default: Histogram(Self.latenessBounds)].observe(late.seconds) }
        workerStarts.add(workers)
    }

    /// A checkpoint save of `bytes` that took `seconds`, and whether it was kept.
    mutating func checkpointSaved(_ job: String, bytes: Int, seconds: Double, kept: Bool) {
        checkpointSaves[job, default: Histogram(Self.saveBounds)].observe(max(0, seconds))
        if kept {
            checkpointSizes[job, default: Histogram(Self.checkpointSizeBounds)].observe(Double(max(0, bytes)))
        } else {
            checkpointFailures[job, default: 0] &+= 1
        }
    }

    mutating func scanned(fromCache: Int, loaded: Int) {
        scannedFiles.cached &+= UInt64(max(0, fromCache))
        scannedFiles.loaded &+= UInt64(max(0, loaded))
    }
}

/// Prometheus' text exposition format (version 0.0.4), or OpenMetrics
/// 1.0: each family's `# HELP` and `# TYPE`, then its samples, label values
/// escaped. The two differ in a counter's family name (OpenMetrics drops
/// its samples' `_total`), in the `info` type, and in OpenMetrics' `# EOF`.
public struct Exposition {
    public enum Format: Hashable, Sendable {
        case prometheus
        case openMetrics

        /// What a client's `Accept` header prefers: OpenMetrics only when
        /// it names `application/openmetrics-text` (version 1.0.0, or none)
        /// with a quality above zero and no lower than any other range it
        /// names. Read in one pass; a range whose quality it cannot read counts for nothing.
        public init(accept: String?) {
            self = .prometheus
            guard let accept else { return }
            var openMetrics = 0.0
            var other = 0.0
            for range in accept.split(separator: ",", omittingEmptySubsequences: true) {
                var parts = range.split(separator: ";").map { $0.withoutSpacesAround.lowercased() }
                guard !parts.isEmpty else { continue }
                let type = parts.removeFirst()
                var quality: Double? = 1
                var version: String?
                for parameter in parts {
                    let pair = parameter.split(separator: "=", maxSplits: 1).map(\.withoutSpacesAround)
                    guard pair.count == 2 else { continue }
                    if pair[0] == "q" {
                        quality = pair[1].utf8.count <= 5 ? Double(pair[1]).flatMap { (0...1).contains($0) ? $0 : nil } : nil
                    }
                    if pair[0] == "version" { version = String(pair[1]) }
                }
                guard let quality else { continue }
                if type == "application/openmetrics-text" {
                    if version == nil || version == "1.0.0" { openMetrics = max(openMetrics, quality) }
                } else {
                    other = max(other, quality)
                }
            }
            if openMetrics > 0 && openMetrics >= other { self = .openMetrics }
        }

        public var contentType: String {
            switch self {
            case .prometheus: "text/plain; version=0.0.4; charset=utf-8"
            case .openMetrics: "application/openmetrics-text; version=1.0.0; charset=utf-8"
            }
        }
    }

    public enum Kind: String {
        case counter, gauge, histogram
        /// OpenMetrics' info (a gauge of 1 in Prometheus' format): its samples end in `_info`.
        case info
    }

    let format: Format
    private var body = ""

    init(_ format: Format = .prometheus) {
        self.format = format
    }

    /// The whole exposition.
    var text: String { format == .openMetrics ? body + "# EOF\n" : body }

    /// Starts a family named as its samples are (a counter's with `_total`, an info's with `_info`).
    mutating func family(_ name: String, _ kind: Kind, _ help: String) {
        var family = name
        var type = kind.rawValue
        switch (format, kind) {
        case (.openMetrics, .counter) where name.hasSuffix("_total"): family = String(name.dropLast(6))
        case (.openMetrics, .info) where name.hasSuffix("_info"): family = String(name.dropLast(5))
        case (.prometheus, .info): type = "gauge"
        default: break
        }
        body += "# HELP \(family) \(format == .openMetrics ? Self.escaped(help) : help)\n# TYPE \(family) \(type)\n"
    }

    mutating func sample(_ name: String, _ labels: [(String, String)] = [], _ value: Double) {
        body += name
        if !labels.isEmpty {
            body += "{" + labels.map { "\($0.0)=\"\(Self.escaped($0.1))\"" }.joined(separator: ",") + "}"
        }
        body += " " + Self.number(value) + "\n"
    }

    mutating func sample(_ name: String, _ labels: [(String, String)] = [], _ value: UInt64) {
        sample(name, labels, Double(value))
    }

    /// A label value with `\`, `"` and newlines escaped.
    static func escaped(_ value: String) -> String {
        var out = ""
        for character in value.unicodeScalars {
            switch character {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.unicodeScalars.append(character)
            }
        }
        return out
    }

    /// A sample value: integers without a fraction, `+Inf`, `-Inf`, `NaN`.
    static func number(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return "\(value)"
    }
}

extension ServeMetrics {
    /// The job-level families, written into `out`; failures in a row for
    /// each of `jobs` (those served now).
    func write(into out: inout Exposition, jobs: [String]) {
        out.family("curfew_runs_started_total", .counter, "Runs started, by job.")
        for (job, count) in started.sorted(by: { $0.key < $1.key }) { out.sample("curfew_runs_started_total", [("curfew_job", job)], count) }
        out.family("curfew_runs_total", .counter, "Runs ended, by job and outcome.")
        for (key, count) in finished.sorted(by: { ($0.key.job, $0.key.word) < ($1.key.job, $1.key.word) }) {
            out.sample("curfew_runs_total", [("curfew_job", key.job), ("outcome", key.word)], count)
        }
        out.family("curfew_run_expirations_total", .counter, "Runs whose grant expired, by job and reason.")
        for (key, count) in expirations.sorted(by: { ($0.key.job, $0.key.word) < ($1.key.job, $1.key.word) }) {
            out.sample("curfew_run_expirations_total", [("curfew_job", key.job), ("reason", key.word)], count)
        }
        out.family("curfew_run_retries_total", .counter, "Runs started as a retry of a failed one, by job.")
        for (job, count) in retries.sorted(by: { $0.key < $1.key }) { out.sample("curfew_run_retries_total", [("curfew_job", job)], count) }
        out.family("curfew_run_duration_seconds", .histogram, "How long runs took, from start to end, by job.")
        out.histograms("curfew_run_duration_seconds", durations)
        out.family("curfew_chunk_duration_seconds", .histogram, "How long each chunk took, by job.")
        out.histograms("curfew_chunk_duration_seconds", chunkTimes)
        out.family("curfew_expire_lateness_seconds", .histogram, "How late each timed-out run's expire hook was called after its expiration point, by job.")
        out.histograms("curfew_expire_lateness_seconds", expireLateness)
        out.family("curfew_checkpoint_save_seconds", .histogram, "How long each checkpoint save took to be durable (or refused), by job.")
        out.histograms("curfew_checkpoint_save_seconds", checkpointSaves)
        out.family("curfew_checkpoint_size_bytes", .histogram, "The size of each checkpoint saved, by job.")
        out.histograms("curfew_checkpoint_size_bytes", checkpointSizes)
        out.family("curfew_checkpoint_save_failures_total", .counter, "Checkpoint saves the host refused or the store could not keep, by job.")
        for (job, count) in checkpointFailures.sorted(by: { $0.key < $1.key }) { out.sample("curfew_checkpoint_save_failures_total", [("curfew_job", job)], count) }
        out.family("curfew_job_consecutive_failures", .gauge, "Runs of each job that failed, crashed or were terminated since its last that completed or expired.")
        for job in jobs { out.sample("curfew_job_consecutive_failures", [("curfew_job", job)], failuresInARow[job] ?? 0) }
        out.family("curfew_worker_starts_total", .counter, "Worker processes started for runs, forked by the fork server or spawned.")
        out.sample("curfew_worker_starts_total", [("how", "forked")], UInt64(max(0, workerStarts.forked)))
        out.sample("curfew_worker_starts_total", [("how", "spawned")], UInt64(max(0, workerStarts.spawned)))
        out.family("curfew_worker_spare_hits_total", .counter, "Forked worker starts that found a spare worker forked ahead and waiting.")
        out.sample("curfew_worker_spare_hits_total", [], UInt64(max(0, workerStarts.spareHits)))
        out.family("curfew_scan_cache_hits_total", .counter, "Plugin files a scan answered from its cache.")
        out.sample("curfew_scan_cache_hits_total", [], scannedFiles.cached)
        out.family("curfew_scan_files_loaded_total", .counter, "Plugin files a scan loaded in a scanner worker (cache misses and rescans).")
        out.sample("curfew_scan_files_loaded_total", [], scannedFiles.loaded)
    }
}

extension Exposition {
    /// A histogram family's samples, one series per job, cumulative as the format wants.
    mutating func histograms(_ name: String, _ histograms: [String: ServeMetrics.Histogram]) {
        for (job, histogram) in histograms.sorted(by: { $0.key < $1.key }) {
            var cumulative: UInt64 = 0
            for (bound, count) in zip(histogram.bounds, histogram.counts) {
                cumulative = min(ServeMetrics.Histogram.saturating(cumulative, count), histogram.count)
                sample(name + "_bucket", [("curfew_job", job), ("le", Self.number(bound))], cumulative)
            }
            sample(name + "_bucket", [("curfew_job", job), ("le", "+Inf")], histogram.count)
            sample(name + "_sum", [("curfew_job", job)], histogram.sum)
            sample(name + "_count", [("curfew_job", job)], histogram.count)
        }
    }
}
