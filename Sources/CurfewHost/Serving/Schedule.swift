import Curfew

/// When each job of `curfew serve` runs next: the job's own requests, the
/// operator's policy, retries with backoff, catch-up after a restart and
/// one instance of a job at a time.
///
/// A value with no clock and no timer: every call is given the wall time,
/// so tests step it by hand and a year of schedules runs in microseconds.
/// The server persists ``Entry/nextRun`` so that a restart keeps it.
public struct Schedule: Sendable {
    public struct Entry: Sendable, Equatable {
        public var policy: JobPolicy
        public let isContinuous: Bool
        /// When the job runs next; `nil`: not until asked (`curfew ctl run`).
        public var nextRun: WallTime?
        /// The slot of a job with `every` or `on`, before jitter: slots come
        /// every `every` from the first, whatever the runs take, or at each
        /// elapse of its calendar.
        public var slot: WallTime?
        /// Due (or started by hand) and not ended: running, or waiting for
        /// a `--jobs` slot until ``Schedule/started(job:now:)``.
        public var isRunning = false
        /// Its run has started, not only come due.
        public var hasStarted = false
        /// Failed runs in a row (the retry count).
        public var failures = 0
        /// Paused by the operator: it runs only when asked.
        public var isPaused = false
        /// Runs that came due while the last was still going, or too late
        /// for the policy's starting deadline.
        public var skipped = 0
        /// A run came due while the last was still going, and the policy's
        /// `overlap` is queue or replace: it runs when that one ends.
        public var runsAgain = false
        public var lastOutcome: Outcome?
        public var lastEnded: WallTime?
        /// When the running run began.
        public var runningSince: WallTime?
        /// A job with `on`: the wall time its next elapse is sought after
        /// (the last slot taken, or when the calendar was set). On the wall
        /// clock, so a jump of it neither repeats a slot nor loses one.
        public var calendarFrom: WallTime?
        /// When a one-off run asked for it (`curfew ctl run --at`) is due:
        /// it starts then even if the job is paused or not enabled; while
        /// the job runs, it waits for that run's end.
        public var requested: WallTime?
        /// The run going now carries out the job's earliest one-off run:
        /// the schedule alone says so, on its one clock.
        public var carriesRequest = false
        /// The run going now was asked for by `curfew ctl run`.
        public var byHand = false
    }

    /// What a run that came due became.
    public enum Due: Sendable, Equatable {
        case start(String)
        /// Still running from the last time: skipped and recorded.
        case skip(String)
        /// Due again while its last due run still waits for a slot: that one
        /// run covers both, and nothing is skipped.
        case merged(String)
        /// Due while its last run is going, with `overlap: queue`: it runs
        /// once that one ends.
        case queued(String)
        /// Due while its last run is going, with `overlap: replace`: the
        /// server cancels that run, and this one runs once it has ended.
        case replace(String)
        /// Due longer ago than the policy's starting deadline: skipped.
        case late(String)
    }

    /// The least time between a job's runs that its schedule (`every`) or
    /// its own request (`request_next_run`) may ask for.
    public static let minimumGap: Duration = .milliseconds(100)

    public private(set) var entries: [String: Entry] = [:]
    private var random: SplitMix64
    /// Each job that may start, by its next run (and name): what is due,
    /// and the next wake, in O(log n) a step, not a walk of every job.
    /// Items go stale as entries change; each is checked when it surfaces.
    private var queue = DueQueue()
    /// How far the wall clock is ahead of the schedules' timeline: calendars
    /// name wall times, everything else here is on the timeline.
    public private(set) var wallLead: Duration = .zero

    /// - Parameter seed: Seeds the jitter; tests give a fixed one.
    public init(seed: UInt64) {
        random = SplitMix64(seed: seed)
    }

    /// Adds a job; one known already keeps its schedule. A new job's first
    /// run is the one `persisted` when the store remembers one (at once when
    /// that time has passed: a schedule missed while the host was down runs
    /// once, not once per missed slot), else now; never sooner than its
    /// `earliest_begin` after `now`, plus jitter. Its failures in a row go on
    /// from the store's count, and its last outcome from the history's.
    public mutating func add(
        job: String, policy: JobPolicy, isContinuous: Bool, persisted: ScheduleRecord?,
        last: (outcome: Outcome, ended: WallTime)? = nil, now: WallTime
    ) {
        guard entries[job] == nil else { return }
        var entry = Entry(policy: policy, isContinuous: isContinuous)
        entry.lastOutcome = last?.outcome
        entry.lastEnded = last?.ended
        entry.failures = persisted?.failures ?? 0
        entry.skipped = persisted?.skipped ?? 0
        entry.isPaused = persisted?.isPaused ?? false
        let earliest = now.later(by: policy.earliestBegin ?? .zero)
        // A new calendar job waits for its calendar's first elapse.
        if policy.calendar != nil { entry.calendarFrom = earliest.later(by: wallLead) }
        let start = policy.calendar == nil ? earliest : calendarSlot(entry)
        // A job the store kept waiting to be asked runs on a schedule it has been given since.
        let hasSchedule = policy.every != nil || policy.calendar != nil
        let remembered = persisted == nil ? start : persisted?.nextRun ?? (hasSchedule ? start : nil)
        guard let remembered else {
            // The store says it had no next run: it waits to be asked.
            put(job, entry)
            return
        }
        if let deadline = policy.startingDeadline, hasSchedule, !isContinuous, entry.failures == 0,
            now.milliseconds &- remembered.milliseconds > deadline.milliseconds
        {
            // A slot missed while the host was down, longer ago than the
            // starting deadline: skipped; the job goes on from its next slot.
            // (A retry, a job's own request and a continuous job's restart
            // are not slots: they run late rather than never.)
            entry.skipped += 1
            entry.slot = remembered
            advanceSlot(&entry, now: earliest)
            put(job, entry)
            return
        }
        let first = max(remembered, earliest)
        entry.slot = policy.every == nil && policy.calendar == nil ? nil : first
        entry.nextRun = first.later(by: jitter(policy))
        put(job, entry)
    }

    /// Gives a known job a new policy (the config was read again). A new
    /// `every` starts its slots from `now`, a new `on` at its next elapse;
    /// one taken away leaves the job its next run, if it has one, and then
    /// only its own requests.
    public mutating func update(job: String, policy: JobPolicy, now: WallTime) {
        guard var entry = entries[job] else { return }
        let changed = entry.policy.every != policy.every
        let newCalendar = entry.policy.calendar != policy.calendar
        entry.policy = policy
        if newCalendar, policy.calendar != nil {
            entry.calendarFrom = now.later(by: wallLead)
            entry.slot = calendarSlot(entry)
            entry.nextRun = entry.slot.map { $0.later(by: jitter(policy)) }
        } else if changed {
            entry.slot = policy.every.map { now.later(by: $0) }
            if let slot = entry.slot {
                let next = slot.later(by: jitter(policy))
                entry.nextRun = entry.nextRun.map { min($0, next) } ?? next
            }
        }
        put(job, entry)
    }

    public mutating func remove(job: String) {
        entries[job] = nil
    }

    /// Stores `entry` for `name`, queued by its next run when it may start.
    private mutating func put(_ name: String, _ entry: Entry) {
        entries[name] = entry
        if let next = Self.nextStart(entry) { queue.push(next, name) }
        // Stale items past twice the jobs: queued again from the entries.
        if queue.count > 2 * entries.count + 64 {
            queue = DueQueue()
            for (name, entry) in entries {
                if let next = Self.nextStart(entry) { queue.push(next, name) }
            }
        }
    }

    /// Whether the run that comes due is one of the job's slots (`every`,
    /// `on`), which a starting deadline may skip: not a retry, a job's own
    /// request or a continuous job's restart.
    private static func isSlot(_ entry: Entry) -> Bool {
        (entry.policy.every != nil || entry.policy.calendar != nil) && !entry.isContinuous && entry.failures == 0
    }

    private static func mayStart(_ entry: Entry) -> Bool {
        entry.policy.enabled != false && !entry.isPaused
    }

    /// When the job starts next: its next run if it may start on its own,
    /// or a one-off run asked of it, whichever comes first.
    private static func nextStart(_ entry: Entry) -> WallTime? {
        let scheduled = mayStart(entry) ? entry.nextRun : nil
        // A running job's request is queued again when the run ends (`put`):
        // queued now, it would come due, be put back and come due again.
        guard let requested = entry.requested, !entry.isRunning else { return scheduled }
        return scheduled.map { min($0, requested) } ?? requested
    }

    /// Whether the queued item (`time`, `name`) still says when that job may start.
    private func isCurrent(_ time: WallTime, _ name: String) -> Bool {
        guard let entry = entries[name] else { return false }
        return Self.nextStart(entry) == time
    }

    /// The earliest next run of a job that may start, for the server's timer.
    public var nextWake: WallTime? {
        mutating get {
            while let top = queue.first, !isCurrent(top.time, top.name) { queue.pop() }
            return queue.first?.time
        }
    }

    /// The runs due at `now`, earliest first (in name order at one time):
    /// to start, or to skip because the last run of that job is still
    /// going. Either way a job with `every` moves on to its first slot
    /// after `now` (slots missed meanwhile are not made up one by one); one
    /// without waits for the run's end.
    public mutating func takeDue(now: WallTime) -> [Due] {
        var due: [Due] = []
        while let top = queue.first, top.time <= now {
            queue.pop()
            let name = top.name
            guard isCurrent(top.time, name), var entry = entries[name] else { continue }
            if entry.isRunning && !entry.hasStarted {
                due.append(.merged(name))
            } else if entry.isRunning {
                // A continuous job is not replaced or queued by its slots; a run
                // that carries a one-off run is not cancelled by one.
                let overlap = entry.isContinuous ? .skip : entry.policy.overlap ?? .skip
                switch overlap == .replace && entry.carriesRequest ? .queue : overlap {
                case .skip:
                    entry.skipped += 1
                    due.append(.skip(name))
                case .queue:
                    entry.runsAgain = true
                    due.append(.queued(name))
                case .replace:
                    entry.runsAgain = true
                    due.append(.replace(name))
                }
            } else if let deadline = entry.policy.startingDeadline, Self.isSlot(entry),
                now.milliseconds &- top.time.milliseconds > deadline.milliseconds, entry.requested.map({ $0 > now }) ?? true
            {
                // A one-off run asked for is never too late; a slot is.
                entry.skipped += 1
                due.append(.late(name))
            } else {
                entry.isRunning = true
                entry.runningSince = now
                // The run carries out the request that came due (the server
                // asks for the job's next one when it ends).
                entry.carriesRequest = entry.requested.map { $0 <= now } ?? false
                if entry.carriesRequest { entry.requested = nil }
                due.append(.start(name))
            }
            advanceSlot(&entry, now: now)
            put(name, entry)
        }
        return due
    }

    /// The wall clock is now `lead` ahead of the schedules' timeline (it
    /// jumped): each calendar slot is found again from the wall time it was
    /// sought after, so a jump forward past a slot runs it at once and one
    /// back does not run a slot twice. `every` slots keep their periods; a
    /// pending retry keeps its time. Returns the jobs whose next run moved.
    public mutating func wallClockMoved(lead: Duration, now: WallTime) -> [String] {
        wallLead = lead
        var moved: [String] = []
        for (name, var entry) in entries where entry.policy.calendar != nil {
            entry.slot = calendarSlot(entry)
            // A run due now (queued behind the last, or caught up) stays due.
            let dueNow = !entry.isRunning && (entry.nextRun.map { $0 <= now } ?? false)
            if entry.isRunning || (entry.failures == 0 && !dueNow) {
                entry.nextRun = entry.slot.map { $0.later(by: jitter(entry.policy)) }
            }
            put(name, entry)
            moved.append(name)
        }
        return moved
    }

    /// The next elapse of `entry`'s calendar after its `calendarFrom`, on the timeline.
    private func calendarSlot(_ entry: Entry) -> WallTime? {
        guard let calendar = entry.policy.calendar, let from = entry.calendarFrom else { return nil }
        return CalendarEvent.next(of: calendar, after: from)?.earlier(by: wallLead)
    }

    /// Moves a job with `every` or `on` to its first slot after `now` (with
    /// jitter); one without has no next run until its run ends.
    private mutating func advanceSlot(_ entry: inout Entry, now: WallTime) {
        if entry.policy.calendar != nil {
            // A retry run between slots leaves the slots as they are.
            if let slot = entry.slot, slot > now {
                entry.nextRun = slot.later(by: jitter(entry.policy))
                return
            }
            // The first elapse after now (missed ones are not made up one by
            // one), and no sooner than `every`'s floor after the slot taken.
            let floor = entry.slot.map { $0.later(by: Self.minimumGap).earlier(by: .milliseconds(1)) } ?? now
            entry.calendarFrom = max(now, floor).later(by: wallLead)
            entry.slot = calendarSlot(entry)
            entry.nextRun = entry.slot.map { $0.later(by: jitter(entry.policy)) }
            return
        }
        guard let every = entry.policy.every, every > .zero else {
            entry.slot = nil
            entry.nextRun = nil
            return
        }
        let step = max(every.milliseconds, 1)
        let slot = entry.slot ?? now
        // A retry run between slots leaves the slots as they are.
        if slot > now {
            entry.nextRun = slot.later(by: jitter(entry.policy))
            return
        }
        let behind = max(0, now.milliseconds &- slot.milliseconds)
        let slots = behind / step + 1
        let (span, overflow) = slots.multipliedReportingOverflow(by: step)
        entry.slot = overflow ? WallTime(milliseconds: .max) : slot.later(by: .milliseconds(span))
        entry.nextRun = entry.slot!.later(by: jitter(entry.policy))
    }

    /// A due run of `job` waited for a slot past its starting deadline: it
    /// does not run, and counts as skipped. False when it is not waiting.
    public mutating func abandon(job: String) -> Bool {
        // A one-off run asked for, or one started by hand, is never too late; a slot is.
        guard var entry = entries[job], entry.isRunning, !entry.hasStarted, !entry.carriesRequest, !entry.byHand, Self.isSlot(entry)
        else { return false }
        entry.isRunning = false
        entry.runningSince = nil
        entry.skipped += 1
        put(job, entry)
        return true
    }

    /// A due run of `job` has left the wait for a slot and started: from now
    /// on, a slot that comes before its end is skipped.
    public mutating func started(job: String, now: WallTime) {
        guard var entry = entries[job], entry.isRunning else { return }
        entry.hasStarted = true
        entry.runningSince = now
        put(job, entry)
    }

    /// Makes `job`'s due run, not started yet, one asked for by hand (`ctl
    /// run` of a job held for its conditions): no starting deadline drops it.
    public mutating func takeByHand(job: String) {
        guard var entry = entries[job], entry.isRunning, !entry.hasStarted else { return }
        entry.byHand = true
        put(job, entry)
    }

    /// Starts `job` now whatever its schedule (`curfew ctl run`), unless it
    /// is running: returns whether it started.
    public mutating func startNow(job: String, now: WallTime) -> Bool {
        guard var entry = entries[job], !entry.isRunning else { return false }
        // A run asked for by hand carries no one-off run: that one waits.
        entry.carriesRequest = false
        entry.byHand = true
        entry.isRunning = true
        entry.runningSince = now
        if entry.slot == nil { entry.nextRun = nil }
        put(job, entry)
        return true
    }

    /// Records a run's end and returns the job's next run:
    /// - a continuous job expired because a condition stopped holding
    ///   (`lostConditions`): again now, held until they hold, no failure;
    /// - failed (unless `retry` is false: the job said another run cannot
    ///   help), crashed or terminated: retried with backoff while the
    ///   policy's attempts last, then back on its schedule;
    /// - completed or expired (not a failure: the next run resumes from the
    ///   checkpoint): the later of its next `every` slot and the time the
    ///   job asked for (`request_next_run`), whichever it has;
    /// - a continuous job that ends for any reason but a stop is restarted
    ///   with backoff, its failures forgotten once it ran a `maximumDelay`;
    /// - refused (the host was stopping), or a stop: as completed.
    @discardableResult
    public mutating func finished(
        job: String, outcome: Outcome, requested: Duration?, stopped: Bool = false, retry retriable: Bool = true,
        lostConditions: Bool = false, now: WallTime
    ) -> WallTime? {
        guard var entry = entries[job] else { return nil }
        entry.isRunning = false
        entry.hasStarted = false
        entry.carriesRequest = false
        entry.byHand = false
        entry.lastOutcome = outcome
        entry.lastEnded = now
        if entry.runsAgain && !stopped {
            // Queued, or replacing this run: the next comes now, and the
            // slots go on as they were.
            entry.runsAgain = false
            entry.failures = 0
            entry.runningSince = nil
            if let slot = entry.slot, slot <= now { advanceSlot(&entry, now: now) }
            entry.nextRun = now
            put(job, entry)
            return now
        }
        entry.runsAgain = false
        let retry = entry.policy.retry ?? .standard
        defer {
            entry.runningSince = nil
            put(job, entry)
        }
        if entry.isContinuous && !stopped && lostConditions {
            // Expired for a condition, not a fault: it starts again once they hold, no backoff.
            entry.failures = 0
            entry.nextRun = now
            return now
        }
        if entry.isContinuous && !stopped && !retriable {
            // It said another run cannot help: it waits to be asked.
            entry.failures = 0
            entry.nextRun = nil
            return nil
        }
        if entry.isContinuous && !stopped {
            let ranLong = entry.runningSince.map { now.milliseconds &- $0.milliseconds >= retry.maximumDelay.milliseconds } ?? false
            entry.failures = ranLong ? 1 : entry.failures + 1
            entry.nextRun = now.later(by: backoff(retry, attempt: entry.failures))
            return entry.nextRun
        }
        let isFailure = outcome == .failed || outcome == .crashed || outcome == .terminated
        if isFailure && retriable && !stopped && entry.failures < retry.attempts {
            entry.failures += 1
            entry.nextRun = now.later(by: backoff(retry, attempt: entry.failures))
            return entry.nextRun
        }
        entry.failures = 0
        if let slot = entry.slot, slot <= now { advanceSlot(&entry, now: now) }
        let scheduled = entry.slot == nil ? nil : entry.nextRun
        // A job's own request is held to the floor `every` has: one asking
        // for 0 s was seen to respawn 65 times a second.
        let asked = requested.map { now.later(by: max($0, Self.minimumGap)).later(by: jitter(entry.policy)) }
        entry.nextRun =
            switch (asked, scheduled) {
            case (let asked?, let scheduled?): max(asked, scheduled)
            case (let asked?, nil): asked
            case (nil, let scheduled): scheduled
            }
        return entry.nextRun
    }

    /// When `job`'s next one-off run (`curfew ctl run --at`) is due, or
    /// that none is: it starts then, paused or not; one that is running
    /// takes it when it ends. The server, which keeps the requests, says.
    public mutating func setRequest(job: String, at time: WallTime?) {
        guard var entry = entries[job] else { return }
        entry.requested = time
        put(job, entry)
    }

    public mutating func setPaused(job: String, _ paused: Bool) -> Bool {
        guard var entry = entries[job] else { return false }
        entry.isPaused = paused
        put(job, entry)
        return true
    }

    /// A wait between half of retry `attempt`'s ceiling and all of it.
    private mutating func backoff(_ retry: RetryPolicy, attempt: Int) -> Duration {
        let ceiling = retry.ceiling(attempt: attempt).milliseconds
        let half = ceiling / 2
        return .milliseconds(half + Int64(random.next(upTo: UInt64(ceiling - half))))
    }

    /// From zero to the policy's jitter.
    private mutating func jitter(_ policy: JobPolicy) -> Duration {
        guard let jitter = policy.jitter, jitter > .zero else { return .zero }
        return .milliseconds(Int64(random.next(upTo: UInt64(jitter.milliseconds))))
    }
}

/// A binary min-heap of (time, job name): the schedule's queue of next runs.
struct DueQueue: Sendable {
    private var items: [(time: WallTime, name: String)] = []

    var count: Int { items.count }
    var first: (time: WallTime, name: String)? { items.first }

    private static func precedes(_ a: (time: WallTime, name: String), _ b: (time: WallTime, name: String)) -> Bool {
        a.time != b.time ? a.time < b.time : a.name < b.name
    }

    mutating func push(_ time: WallTime, _ name: String) {
        items.append((time, name))
        var child = items.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard Self.precedes(items[child], items[parent]) else { break }
            items.swapAt(child, parent)
            child = parent
        }
    }

    mutating func pop() {
        guard !items.isEmpty else { return }
        items.swapAt(0, items.count - 1)
        items.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1
            guard left < items.count else { return }
            let right = left + 1
            let child = right < items.count && Self.precedes(items[right], items[left]) ? right : left
            guard Self.precedes(items[child], items[parent]) else { return }
            items.swapAt(child, parent)
            parent = child
        }
    }
}

/// A small, fast, seedable generator (Steele, Lea and Flood's SplitMix64):
/// jitter needs spread, not secrecy, and tests need it repeatable.
struct SplitMix64: Sendable {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A value from 0 to `bound`, both included.
    mutating func next(upTo bound: UInt64) -> UInt64 {
        guard bound > 0 else { return 0 }
        guard bound < .max else { return next() }
        return next() % (bound + 1)
    }
}
