import Testing

@testable import Curfew
@testable import CurfewFormats
@testable import CurfewHost

/// The measures a run takes of its chunks and its `expire` hook, as a
/// worker sends them and as the metrics write them.
@Suite struct RunMeasuresTests {
    /// The chunk loop's comparisons and the bounds the metrics name are one scale.
    @Test func eachChunkTimeFallsInTheBucketItsBoundsSay() {
        #expect(RunMeasures.chunkBuckets == RunMeasures.chunkBounds.count + 1)
        for (index, bound) in RunMeasures.chunkBounds.enumerated() {
            #expect(RunMeasures.bucket(bound) == index)
            #expect(RunMeasures.bucket(bound + 1) == index + 1)
        }
        #expect(RunMeasures.bucket(0) == 0)
        #expect(RunMeasures.bucket(.max) == RunMeasures.chunkBuckets - 1)
    }

    @Test func aWorkersMeasuresAreCheckedFieldByField() throws {
        let line = #"{"type":"measures","job":"j","chunk_counts":[1,2,3,4,5,6,7,8],"chunk_ns":99,"expire_late_ns":1000}"#
        #expect(try WorkerMessage.decode(Array(line.utf8)) == .measures(job: "j", chunkCounts: [1, 2, 3, 4, 5, 6, 7, 8], chunkNanoseconds: 99, expireLateNanoseconds: 1000))
        let none = #"{"type":"measures","job":"j","chunk_counts":[],"chunk_ns":0}"#
        #expect(try WorkerMessage.decode(Array(none.utf8)) == .measures(job: "j", chunkCounts: [], chunkNanoseconds: 0, expireLateNanoseconds: nil))
        let bad: [(String, String)] = [
            (#""chunk_counts":[1,2],"chunk_ns":0"#, "\"chunk_counts\" holds other than none or 8 counts"),
            (#""chunk_counts":[1,2,3,4,5,6,7,8,9],"chunk_ns":0"#, "more than 8 in \"chunk_counts\""),
            (#""chunk_counts":[1,2,3,4,5,6,7,-8],"chunk_ns":0"#, "\"chunk_counts\" holds other than counts"),
            (#""chunk_counts":[1,2,3,4,5,6,7,"8"],"chunk_ns":0"#, "\"chunk_counts\" holds other than counts"),
            (#""chunk_counts":{},"chunk_ns":0"#, "\"chunk_counts\" is an object, not an array"),
            (#""chunk_counts":[],"chunk_ns":-1"#, "a negative \"chunk_ns\" (-1)"),
            (#""chunk_counts":[],"chunk_ns":0,"expire_late_ns":-1"#, "a negative \"expire_late_ns\" (-1)"),
            (#""chunk_counts":[],"chunk_ns":0,"more":1"#, "unknown field 'more'"),
        ]
        for (fields, reason) in bad {
            let line = #"{"type":"measures","job":"j","# + fields + "}"
            #expect(throws: WorkerMessage.Invalid(reason: reason), "\(line)") { try WorkerMessage.decode(Array(line.utf8)) }
        }
    }

    /// A worker's measures are a claim plugin code can forge: the host keeps
    /// chunk counts only where they add up to the chunks it counted and
    /// their time fits the run, and a lateness only where it fits too.
    @Test func aWorkersMeasuresAreKeptOnlyWhereTheyFitTheRun() {
        let counts: [UInt64] = [3, 0, 0, 0, 0, 0, 0, 1]
        func measures(_ counts: [UInt64], _ nanoseconds: UInt64, _ late: UInt64?) -> RunMeasures {
            RunMeasures(chunkCounts: counts, chunkNanoseconds: nanoseconds, expireLatenessNanoseconds: late, chunks: 4, elapsed: .seconds(20))
        }
        let kept = measures(counts, 12_000_000_000, 5_000)
        #expect(kept.chunkCounts == counts && kept.chunkNanoseconds == 12_000_000_000 && kept.expireLateness == .nanoseconds(5_000))
        #expect(measures([3, 0, 0, 0, 0, 0, 0, 2], 1, nil).chunkCounts.isEmpty, "five chunks counted of four")
        #expect(measures([UInt64.max, 5, 0, 0, 0, 0, 0, 0], 1, nil).chunkCounts.isEmpty, "a sum that wraps")
        #expect(measures(counts, 21_000_000_000, nil).chunkCounts.isEmpty, "more chunk time than the run took")
        #expect(measures([1, 2], 1, nil).chunkCounts.isEmpty)
        let late = measures(counts, 1, 30_000_000_000)
        #expect(late.expireLateness == nil && late.chunkCounts == counts, "a lateness past the run's end goes alone")
    }

    /// However large the counts a histogram is given, it never wraps: each
    /// cumulative bucket stays at most the count.
    @Test func aHistogramSaturates() {
        var histogram = ServeMetrics.Histogram(ServeMetrics.chunkBounds)
        histogram.add(buckets: [UInt64.max, 1, 0, 0, 0, 0, 0, UInt64.max], sum: 1)
        histogram.add(buckets: [1, 0, 0, 0, 0, 0, 0, 0], sum: 1)
        #expect(histogram.count == .max && histogram.counts[0] == .max && histogram.counts[1] == 1)
        var out = Exposition()
        out.histograms("x_seconds", ["j": histogram])
        let values = out.text.split(separator: "\n").filter { $0.hasPrefix("x_seconds_bucket") }.compactMap { Double($0.split(separator: " ")[1]) }
        #expect(values.count == 8 && values == values.sorted(), "\(out.text)")
    }

    /// Buckets counted in a run become a cumulative histogram per job, in seconds.
    @Test func theMetricsWriteChunkTimesLatenessAndSavesAsHistograms() {
        var metrics = ServeMetrics()
        var result = JobResult(
            job: "j", pluginPath: "/p.so", loadPath: "/p.so", isChunked: true, outcome: .expired, chunks: 15, elapsed: .seconds(2),
            reason: "time ran out; cleanup ran", progress: nil)
        result.measures = RunMeasures(
            chunkCounts: [0, 0, 0, 0, 14, 1, 0, 0], chunkNanoseconds: 1_700_000_000, expireLatenessNanoseconds: 200_000_000, chunks: 15,
            elapsed: .seconds(2))
        metrics.runEnded(result, expiredBy: .timeout, workers: WorkerStarts(), at: WallTime(milliseconds: 10_000))
        metrics.checkpointSaved("j", bytes: 8, seconds: 0.002, kept: true)
        metrics.checkpointSaved("j", bytes: 2 << 20, seconds: 0.0001, kept: false)
        metrics.scanned(fromCache: 3, loaded: 1)
        var out = Exposition()
        metrics.write(into: &out, jobs: ["j"])
        let text = out.text
        for line in [
            "curfew_chunk_duration_seconds_bucket{curfew_job=\"j\",le=\"0.01\"} 0",
            "curfew_chunk_duration_seconds_bucket{curfew_job=\"j\",le=\"0.1\"} 14",
            "curfew_chunk_duration_seconds_bucket{curfew_job=\"j\",le=\"1\"} 15",
            "curfew_chunk_duration_seconds_bucket{curfew_job=\"j\",le=\"+Inf\"} 15",
            "curfew_chunk_duration_seconds_sum{curfew_job=\"j\"} 1.7",
            "curfew_expire_lateness_seconds_bucket{curfew_job=\"j\",le=\"0.1\"} 0",
            "curfew_expire_lateness_seconds_bucket{curfew_job=\"j\",le=\"0.5\"} 1",
            "curfew_checkpoint_save_seconds_count{curfew_job=\"j\"} 2",
            "curfew_checkpoint_size_bytes_bucket{curfew_job=\"j\",le=\"256\"} 1",
            "curfew_checkpoint_size_bytes_count{curfew_job=\"j\"} 1",
            "curfew_checkpoint_save_failures_total{curfew_job=\"j\"} 1",
            "curfew_scan_cache_hits_total 3",
            "curfew_scan_files_loaded_total 1",
            "curfew_worker_spare_hits_total 0",
        ] {
            #expect(text.contains("\n" + line + "\n"), "\(line)")
        }
    }
}
