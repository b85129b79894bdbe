import Curfew
import CurfewHost
import Dispatch

extension Bench {
    /// What `curfew events` costs a run (issue 46): `count` jobs whose
    /// events each become a line published to an ``EventStream`` that one
    /// reader follows and never reads, as a serving host's do, against the
    /// same run with its events going nowhere; and how long after it is
    /// published a line reaches a reader that reads (to the millisecond:
    /// the lines carry wall-clock milliseconds).
    func events() async throws -> [Row] {
        let count = size(1000, tiny: 10)
        let jobs = Array(repeating: benchJobs["bench-spin"]!, count: count)
        let parameters = ["count": "\(size(100, tiny: 2))", "spin-ns": "10000"]
        var overhead = Row(
            name: "events, \(count) jobs, a follower that never reads", measure: "run time", unit: "ms",
            baselineName: "the same run, its events to no one", target: .atMost(1.02))
        var latency = Row(
            name: "events, \(count) jobs, a follower that reads", measure: "publish to reader p99", unit: "ms",
            baselineName: "-", target: .absoluteAtMost(100, "< 100 ms"))
        func run(_ onEvent: @escaping @Sendable (RunEvent, CurfewInstant) -> Void) async -> Double {
            let configuration = RunConfiguration(policy: try! GrantPolicy(budget: .seconds(3600)), maxConcurrentJobs: 2, parameters: parameters)
            let runner = Runner(jobs: jobs, configuration: configuration, timedEvents: onEvent)
            let start = now()
            _ = await runner.run()
            return Double(now() - start) / 1e6
        }
        func publishing(to stream: EventStream) -> @Sendable (RunEvent, CurfewInstant) -> Void {
            { event, _ in stream.publish(event, at: .now()) }
        }
        for _ in 0..<options.repetitions {
            overhead.baseline.append(await run { _, _ in })
            let stuck = EventStream()
            let pair = try Syscalls.socketPair(.stream)
            _ = stuck.attach(pair[0], job: nil, follows: true)
            overhead.values.append(await run(publishing(to: stuck)))
            stuck.close()
            Syscalls.close(pair[1])

            let read = EventStream()
            let ends = try Syscalls.socketPair(.stream)
            _ = read.attach(ends[0], job: nil, follows: true)
            let reader = LatencyReader(fd: ends[1])
            _ = await run(publishing(to: read))
            read.close()
            let lags = reader.finish()
            latency.values.append(percentile(lags, 99))
        }
        overhead.note = "each job spins \(parameters["count"]!) chunks of 10 µs, two at a time; the follower never reads"
        latency.note = "lines stamped with wall-clock milliseconds as they are published"
        return [overhead, latency]
    }
}

/// Reads lines from a socket on a thread of its own and keeps, for each,
/// how many milliseconds passed since its `"time"`.
final class LatencyReader: @unchecked Sendable {
    // Safe because `lags` is written by the thread and read after it is joined (`done`).
    private var lags: [Double] = []
    private let done = DispatchSemaphore(value: 0)
    private let fd: Int32

    init(fd: Int32) {
        self.fd = fd
        _ = OSThread.detach { [self] in
            var pending: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while let count = try? Syscalls.receive(fd, into: &buffer), count > 0 {
                pending += buffer[..<count]
                while let end = pending.firstIndex(of: 10) {
                    let line = String(decoding: pending[..<end], as: UTF8.self)
                    pending.removeFirst(end + 1)
                    if let range = line.firstRange(of: "\"time\":") {
                        let digits = line[range.upperBound...].prefix { $0.isNumber }
                        if let sent = Int64(digits) { lags.append(Double(WallTime.now().milliseconds - sent)) }
                    }
                }
            }
            done.signal()
        }
    }

    /// Waits for the stream's end: the lags seen.
    func finish() -> [Double] {
        done.wait()
        Syscalls.close(fd)
        return lags
    }
}
