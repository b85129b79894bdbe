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
        // A lateness no run could have (over a day) is dropped by the host, not believed.
        #expect(RunMeasures(chunkCounts: [], chunkNanoseconds: 0, expireLatenessNanoseconds: 86_400_000_000_001) == nil)
        #expect(RunMeasures(chunkCounts: [1], chunkNanoseconds: 0, expireLatenessNanoseconds: nil) == nil)
    }

    /// Buckets counted in a run become a cumulative histogram per job, in seconds.
    @Test func theMetricsWriteChunkTimesLatenessAndSavesAsHistograms() {
        var metrics = ServeMetrics()
        var result = JobResult(
            job: "j", pluginPath: "/p.so", loadPath: "/p.so", isChunked: true, outcome: .expired, chunks: 15, elapsed: .seconds(2),
            reason: "time ran out; cleanup ran", progress: nil)
        result.measures = RunMeasures(chunkCounts: [0, 0, 0, 0, 14, 1, 0, 0], chunkNanoseconds: 1_700_000_000, expireLatenessNanoseconds: 200_000_000)!
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
