import Curfew
import CurfewHost
import Dispatch
import Synchronization

/// What `curfew serve` tells the service manager that started it (systemd's
/// notify protocol; nothing without `$NOTIFY_SOCKET`): `READY=1` once the
/// first scan is done, `STATUS=` with the running and next jobs, `WATCHDOG=1`
/// at half of `$WATCHDOG_USEC`, `STOPPING=1` on a stop request and, while
/// jobs clean up, `EXTEND_TIMEOUT_USEC` to the longest cleanup left.
///
/// The watchdog is fed from the server's own queue (``Server/probe(_:)``),
/// not by a timer alone, and one probe at a time: a server whose queue is
/// stuck, or so slow that probes pile up behind one another, stops feeding
/// it, and systemd restarts it. (Queued each tick, a backlog's probes were
/// answered late in bursts that kept a stalled server alive.)
final class ServiceLink: Sendable {
    private let notifier: ServiceNotifier?
    let watchdog: Duration?
    private let timer = Mutex<TimerSource?>(nil)
    /// Whether a probe is queued on the server and not answered yet.
    private let probing = Atomic<Bool>(false)

    private struct TimerSource: @unchecked Sendable {
        // Safe because a dispatch source is thread-safe to activate and cancel.
        let source: any DispatchSourceTimer
    }

    /// How often the status is sent when no watchdog sets the pace.
    static let statusInterval: Duration = .seconds(1)

    init(environment: [String: String]) {
        notifier = ServiceNotifier(environment: environment)
        watchdog = notifier == nil ? nil : ServiceNotifier.watchdogTimeout(environment: environment)
    }

    /// The first scan is done: ready, and the status and watchdog from now on.
    func ready(_ server: Server) {
        guard let notifier else { return }
        server.probe { states, _ in
            notifier.send(["READY=1", "STATUS=" + Self.status(states, stopping: false)])
        }
        let interval = min(watchdog.map { $0 / 2 } ?? Self.statusInterval, Self.statusInterval)
        let source = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "curfew.service"))
        source.schedule(deadline: .now() + Self.dispatch(interval), repeating: Self.dispatch(interval))
        source.setEventHandler { [self] in tick(server) }
        source.activate()
        let kept = TimerSource(source: source)
        timer.withLock { $0 = kept }
    }

    func tick(_ server: Server) {
        guard let notifier, !probing.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let feedsWatchdog = watchdog != nil
        server.probe { [self] states, stopping in
            defer { probing.store(false, ordering: .releasing) }
            var fields = feedsWatchdog ? ["WATCHDOG=1"] : []
            fields.append("STATUS=" + Self.status(states, stopping: stopping))
            if stopping, let longest = states.compactMap({ $0.running?.timeRemaining }).max() {
                // The running jobs' cleanups end by then: systemd waits for them, no longer.
                fields.append("EXTEND_TIMEOUT_USEC=\(Self.microseconds(longest + .seconds(1)))")
            }
            notifier.send(fields)
        }
    }

    /// A stop was asked for (SIGTERM): say so at once.
    func stopping(_ reason: String) {
        notifier?.send(["STOPPING=1", "STATUS=stopping (\(reason)): running jobs clean up"])
    }

    func cancel() {
        timer.withLock { $0?.source.cancel() }
    }

    /// "2 running: tally (1.2 s left), asks; next: sync in 40 s; 5 jobs".
    static func status(_ states: [Server.JobState], stopping: Bool) -> String {
        let running = states.filter { $0.running != nil }
        var parts: [String] = []
        if running.isEmpty {
            parts.append(stopping ? "stopping: every job has ended" : "idle")
        } else {
            let names = running.prefix(3).map { state in
                state.running?.timeRemaining.map { "\(state.job) (\(formatSeconds($0.seconds)) s left)" } ?? state.job
            }
            parts.append((stopping ? "stopping: " : "") + "\(running.count) running: " + names.joined(separator: ", ")
                + (running.count > 3 ? ", …" : ""))
        }
        let now = WallTime.now().milliseconds
        if !stopping, let next = states.filter({ $0.running == nil && !$0.entry.isPaused && $0.entry.policy.enabled != false })
            .compactMap({ state in state.entry.nextRun.map { (state.job, $0.milliseconds) } }).min(by: { $0.1 < $1.1 })
        {
            parts.append("next: \(next.0) in \(formatSeconds(Double(millisecondsUntil(next.1, from: now)) / 1000)) s")
        }
        parts.append("\(states.count) job\(states.count == 1 ? "" : "s")")
        return parts.joined(separator: "; ")
    }

    static func microseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds.multipliedReportingOverflow(by: 1_000_000).overflow ? .max : seconds * 1_000_000 + attoseconds / 1_000_000_000_000
    }

    private static func dispatch(_ duration: Duration) -> DispatchTimeInterval {
        .microseconds(Int(clamping: microseconds(duration)))
    }
}
