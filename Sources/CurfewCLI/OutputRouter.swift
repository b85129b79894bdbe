import Curfew
import Synchronization

/// Decides whose a line of captured plugin output is, in process: the one
/// running job's, when only one runs; otherwise its plugin's, when every
/// running job comes from one file; otherwise nobody's in particular.
final class OutputRouter: Sendable {
    private struct State {
        var reporter: Reporter?
        var runner: Runner?
        var pluginOfJob: [String: String] = [:]
        /// A job whose end is being reported: still a candidate owner of the
        /// lines read meanwhile, though the runner no longer counts it.
        var finishing: String?
    }

    private let state = Mutex(State())

    /// Where lines go from now on; before this, there is no plugin code to print.
    func start(reporting reporter: Reporter) {
        state.withLock { $0.reporter = reporter }
    }

    /// The run whose jobs the lines may belong to.
    func attach(_ runner: Runner) {
        state.withLock { state in
            state.runner = runner
            for job in runner.jobs { state.pluginOfJob[job.name] = job.pluginPath }
        }
    }

    /// The names of the jobs running now.
    private func runningJobs() -> [String] {
        state.withLock { $0.runner }?.status().map(\.job) ?? []
    }

    /// Whether no job but `job` is running.
    func noJobRuns(besides job: String) -> Bool {
        runningJobs().allSatisfy { $0 == job }
    }

    /// The job a line or an `exit` is most likely from: the only one running.
    func soleRunningJob() -> String? {
        let running = runningJobs()
        return running.count == 1 ? running[0] : nil
    }

    /// Delivers the output still in `capture` before `job`'s end is
    /// reported, so its last lines come first; with no other job left
    /// running, a last line without a newline is its too.
    func jobFinishing(_ job: String, capture: OutputCapture) {
        state.withLock { $0.finishing = job }
        capture.drain(includingPartialLines: noJobRuns(besides: job))
        state.withLock { $0.finishing = nil }
    }

    func route(_ stream: OutputCapture.Stream, _ line: String) {
        let (reporter, plugins, finishing) = state.withLock { ($0.reporter, $0.pluginOfJob, $0.finishing) }
        guard let reporter else { return }
        var running = runningJobs()
        if let finishing, !running.contains(finishing) { running.append(finishing) }
        if running.count == 1 {
            // The same event a worker's output becomes, so every mode reads alike.
            let level: LogLevel = stream == .stdout ? .info : .warning
            return reporter.event(.log(job: running[0], level: level, message: "[\(stream.rawValue)] \(line)"))
        }
        let files = Set(running.compactMap { plugins[$0] })
        reporter.event(.output(pluginPath: files.count == 1 ? files.first : nil, stream: stream.rawValue, line: line))
    }
}
