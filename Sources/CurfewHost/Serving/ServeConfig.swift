import Curfew
import CurfewFormats

/// How `curfew serve` runs one job: its schedule, its grant, its worker and
/// what to do when it fails. Every field is optional in the config file; a
/// field left out takes the `defaults` entry's value, then the host's.
public struct JobPolicy: Sendable, Equatable {
    /// Run again this long after each run ends (the later of this and the
    /// job's own `request_next_run`, when it asks); `nil`: only when asked.
    public var every: Duration?
    /// Run at each elapse of these calendar expressions (`on`), as a
    /// systemd timer's `OnCalendar=`; never together with `every`.
    public var calendar: [CalendarEvent]?
    /// The first run comes no sooner than this after the host starts (or
    /// the job appears in the folder).
    public var earliestBegin: Duration?
    /// What a run that comes due while the last is still going does
    /// (Kubernetes' `concurrencyPolicy`); `nil`: skip.
    public var overlap: Overlap?
    /// A due run that cannot start within this long of its time (the host
    /// was down, or every `--jobs` slot was taken) is skipped, not run late
    /// (Kubernetes' `startingDeadlineSeconds`); `nil`: run however late.
    public var startingDeadline: Duration?
    /// Each scheduled run moves a random amount from zero to this later, so
    /// that jobs of many hosts do not all start at once.
    public var jitter: Duration?
    public var budget: Duration?
    public var grace: Duration?
    /// Expire a run whose progress does not move for this long (`stalled`);
    /// zero (`false` in the config): never, whatever the defaults say.
    public var stall: Duration?
    /// Parameters for this job only, over the host's `--param` values.
    public var parameters: [String: String] = [:]
    public var isolation: Isolation?
    public var limits = ResourceLimits()
    public var retry: RetryPolicy?
    public var enabled: Bool?
    /// Background modes this job may run in, besides those of `--allow-mode`.
    public var allowedModes: Set<String> = []
    /// The jobs this one may ask to run (`submit_run`), besides the defaults'.
    public var submits: Set<String> = []
    /// The job's sandbox; `nil`: as the defaults, then `serve`'s options, say.
    public var sandbox: SandboxSetting?
    /// What its runs wait for, and are expired (`conditions`) when it stops holding.
    public var conditions = JobConditions()

    public init() {}

    /// This policy with every field it leaves out taken from `base`.
    public func over(_ base: JobPolicy) -> JobPolicy {
        var merged = self
        // One way to say when: a job's own `every` or `on` replaces both of the defaults'.
        if every == nil && calendar == nil {
            merged.every = base.every
            merged.calendar = base.calendar
        }
        merged.earliestBegin = earliestBegin ?? base.earliestBegin
        merged.jitter = jitter ?? base.jitter
        merged.overlap = overlap ?? base.overlap
        merged.startingDeadline = startingDeadline ?? base.startingDeadline
        merged.budget = budget ?? base.budget
        merged.grace = grace ?? base.grace
        merged.stall = stall ?? base.stall
        merged.parameters = base.parameters.merging(parameters) { _, own in own }
        merged.isolation = isolation ?? base.isolation
        merged.limits = ResourceLimits(
            memoryBytes: limits.memoryBytes ?? base.limits.memoryBytes, cpuSeconds: limits.cpuSeconds ?? base.limits.cpuSeconds,
            openFiles: limits.openFiles ?? base.limits.openFiles)
        merged.retry = retry ?? base.retry
        merged.enabled = enabled ?? base.enabled
        merged.allowedModes = allowedModes.union(base.allowedModes)
        merged.submits = submits.union(base.submits)
        merged.sandbox = sandbox ?? base.sandbox
        merged.conditions = conditions.over(base.conditions)
        return merged
    }
}

/// What a run that comes due while the job's last run is still going does.
public enum Overlap: String, Sendable, Equatable {
    /// It is skipped (counted in `status`).
    case skip
    /// It runs once the last run ends (one such run waits at most).
    case queue
    /// The last run is cancelled (expired, reason cancelled), and it runs once that one ends.
    case replace
}

/// A job's `sandbox` in the config.
public enum SandboxSetting: Sendable, Equatable {
    /// `false`: none, whatever `--sandbox` says.
    case off
    /// `true`: `serve`'s own (`--sandbox` and its grants), else the default policy.
    case on
    /// An object: this policy, in place of `serve`'s.
    case policy(SandboxPolicy)

    /// The sandbox a run gets, given `serve`'s own.
    public func over(_ host: SandboxPolicy?) -> SandboxPolicy? {
        switch self {
        case .off: nil
        case .on: host ?? SandboxPolicy()
        case .policy(let policy): policy
        }
    }
}

/// How a job that fails, crashes or is terminated is tried again: after
/// `delay`, doubling each time up to `maximumDelay`, at most `attempts`
/// times in a row; each wait is drawn between half of that and all of it
/// (jitter, so that many failing jobs do not retry in step).
public struct RetryPolicy: Sendable, Equatable {
    public var attempts: Int
    public var delay: Duration
    public var maximumDelay: Duration

    public static let standard = RetryPolicy(attempts: 3, delay: .seconds(1), maximumDelay: .seconds(300))

    public init(attempts: Int, delay: Duration, maximumDelay: Duration) {
        self.attempts = attempts
        self.delay = delay
        self.maximumDelay = maximumDelay
    }

    /// The longest wait before retry number `attempt` (1 for the first).
    public func ceiling(attempt: Int) -> Duration {
        var wait = delay
        var step = 1
        while step < attempt && wait < maximumDelay {
            wait = wait * 2
            step += 1
        }
        return min(wait, maximumDelay)
    }
}

/// The operator's `--config` file: JSON, an object with `defaults` (a
/// policy for every job) and `jobs` (a policy per job name), both optional.
///
/// ```json
/// {"defaults": {"budget": "30s"},
///  "jobs": {"tally": {"every": "5s", "jitter": "1s", "params": {"next": "3"},
///                     "retry": {"attempts": 5, "delay": "2s", "max_delay": "1m"}}}}
/// ```
///
/// Every key is checked: an unknown one is an error that names the file,
/// the job and the key, so a misspelt `evry` does not silently do nothing.
public struct ServeConfig: Sendable, Equatable {
    public var defaults = JobPolicy()
    public var jobs: [String: JobPolicy] = [:]

    /// The largest config file read, in bytes.
    public static let maximumBytes = 1 << 20

    public init() {}

    /// The policy for `job`: its entry over the defaults.
    public func policy(for job: String) -> JobPolicy {
        (jobs[job] ?? JobPolicy()).over(defaults)
    }

    /// Reads and checks the file at `path`.
    public static func load(path: String) throws(CurfewError) -> ServeConfig {
        let bytes: [UInt8]
        do throws(SystemError) {
            bytes = try Syscalls.readFile(path, limit: maximumBytes)
        } catch {
            throw CurfewError(.unreadable, "\(path): cannot be read: \(error.message)")
        }
        return try parse(bytes, file: path)
    }

    /// Checks `bytes` as a config file named `file` in errors.
    public static func parse(_ bytes: [UInt8], file: String) throws(CurfewError) -> ServeConfig {
        let value: JSONValue
        do throws(JSONSyntaxError) {
            value = try JSONReader.parse(bytes)
        } catch {
            throw CurfewError(.badConfig, "\(file): line \(error.line), column \(error.column): \(error.message)")
        }
        guard case .object(let members) = value else {
            throw CurfewError(.badConfig, "\(file): the config must be a JSON object, not \(value.kind)")
        }
        var config = ServeConfig()
        for (key, member) in members {
            switch key {
            case "defaults":
                config.defaults = try JobPolicy(member, at: PolicyPlace(file: file, job: nil))
            case "jobs":
                guard case .object(let entries) = member else {
                    throw CurfewError(.badConfig, "\(file): \"jobs\" must be an object of job names, not \(member.kind)")
                }
                for (name, entry) in entries {
                    guard JobNaming.isValidName(name) else {
                        throw CurfewError(.badConfig, "\(file): \(quote(name)) in \"jobs\" is not a job name (1 to 64 of a-z, 0-9, '.', '_', '-')")
                    }
                    config.jobs[name] = try JobPolicy(entry, at: PolicyPlace(file: file, job: name))
                }
            default:
                throw CurfewError(.badConfig, "\(file): unknown key \(quote(key)) (the config has \"defaults\" and \"jobs\")")
            }
        }
        return config
    }
}

/// Where a policy is in the config, for its errors.
struct PolicyPlace {
    let file: String
    let job: String?

    func error(_ key: String, _ problem: String) -> CurfewError {
        let owner = job.map { "job '\($0)'" } ?? "defaults"
        return CurfewError(.badConfig, "\(file): \(owner): \(quote(key)): \(problem)")
    }
}

extension JobPolicy {
    /// The keys a policy may have.
    static let keys = [
        "every", "on", "earliest_begin", "jitter", "overlap", "starting_deadline", "budget", "grace", "stall", "params", "isolate", "limits", "retry", "enabled", "modes", "submits", "sandbox",
        "conditions",
    ]

    init(_ value: JSONValue, at place: PolicyPlace) throws(CurfewError) {
        self.init()
        guard case .object(let members) = value else {
            throw CurfewError(.badConfig, "\(place.file): \(place.job.map { "job '\($0)'" } ?? "defaults") must be an object, not \(value.kind)")
        }
        // The reader has refused a key given twice.
        for (key, member) in members {
            switch key {
            case "every":
                let every = try Self.duration(member, key, place)
                guard every >= Schedule.minimumGap else { throw place.error(key, "must be at least 100ms") }
                self.every = every
            case "on": calendar = try Self.calendar(member, place)
            case "earliest_begin": earliestBegin = try Self.duration(member, key, place)
            case "overlap":
                guard let text = member.stringValue, let overlap = Overlap(rawValue: text) else {
                    throw place.error(key, "must be \"skip\", \"queue\" or \"replace\"")
                }
                self.overlap = overlap
            case "starting_deadline":
                let deadline = try Self.duration(member, key, place)
                guard deadline >= .seconds(1) else { throw place.error(key, "must be at least 1s") }
                startingDeadline = deadline
            case "jitter": jitter = try Self.duration(member, key, place)
            case "budget":
                let budget = try Self.duration(member, key, place)
                guard budget >= GrantPolicy.minimumBudget else { throw place.error(key, "must be at least 1ms") }
                self.budget = budget
            case "grace":
                let grace = try Self.duration(member, key, place)
                guard grace > .zero else { throw place.error(key, "must be positive") }
                self.grace = grace
            case "stall":
                if case .bool(false) = member {
                    stall = .zero
                    continue
                }
                let stall = try Self.duration(member, key, place)
                guard stall >= GrantPolicy.minimumStall else { throw place.error(key, "must be at least 100ms") }
                self.stall = stall
            case "params":
                guard case .object(let pairs) = member else { throw place.error(key, "must be an object of strings, not \(member.kind)") }
                for (name, text) in pairs {
                    guard let text = text.stringValue else { throw place.error(key, "\(quote(name)) must be a string, not \(text.kind)") }
                    guard !name.isEmpty, !name.utf8.contains(0), !text.utf8.contains(0) else {
                        throw place.error(key, "a parameter's name must not be empty, and neither may hold a NUL byte")
                    }
                    parameters[name] = text
                }
            case "isolate":
                guard let text = member.stringValue, let isolation = Isolation(rawValue: text) else {
                    throw place.error(key, "must be \"none\", \"plugin\" or \"job\"")
                }
                self.isolation = isolation
            case "limits": limits = try Self.limits(member, place)
            case "retry": retry = try Self.retry(member, place)
            case "enabled":
                guard case .bool(let flag) = member else { throw place.error(key, "must be true or false, not \(member.kind)") }
                enabled = flag
            case "modes":
                guard case .array(let names) = member else { throw place.error(key, "must be an array of background modes, not \(member.kind)") }
                for name in names {
                    guard let name = name.stringValue, BackgroundMode.isValidName(name) else {
                        throw place.error(
                            key, "each is a background mode: \(BackgroundMode.known.joined(separator: ", ")), or x- and a name of your own")
                    }
                    allowedModes.insert(name)
                }
            case "sandbox": sandbox = try Self.sandbox(member, place)
            case "conditions": conditions = try JobConditions(member, at: place)
            case "submits":
                guard case .array(let names) = member else { throw place.error(key, "must be an array of job names, not \(member.kind)") }
                guard names.count <= 256 else { throw place.error(key, "names more than 256 jobs") }
                for name in names {
                    guard let name = name.stringValue, JobNaming.isValidName(name) else {
                        throw place.error(key, "each is a job name (1 to 64 of a-z, 0-9, '.', '_', '-')")
                    }
                    submits.insert(name)
                }
            default:
                throw place.error(key, "unknown key (a job's policy has \(Self.keys.map { "\"\($0)\"" }.joined(separator: ", ")))")
            }
        }
        if every != nil && calendar != nil {
            throw place.error("on", "a job runs on \"every\" or \"on\", not both")
        }
        if let budget, let grace {
            do throws(CurfewError) {
                _ = try GrantPolicy(budget: budget, grace: grace)
            } catch {
                throw place.error("grace", error.description)
            }
        }
    }

    /// A duration: a string such as "1m30s" or a number of seconds.
    static func duration(_ value: JSONValue, _ key: String, _ place: PolicyPlace) throws(CurfewError) -> Duration {
        let text: String
        switch value {
        case .string(let string): text = string
        case .number(let digits): text = digits
        default: throw place.error(key, "must be a duration such as \"30s\" or \"1m30s\", not \(value.kind)")
        }
        guard let duration = Quantities.duration(text) else {
            throw place.error(key, "\(quote(text)) is not a duration such as \"500ms\", \"30s\" or \"1h\"")
        }
        return duration
    }

    /// A calendar expression, or an array of them (each elapse of any).
    static func calendar(_ value: JSONValue, _ place: PolicyPlace) throws(CurfewError) -> [CalendarEvent] {
        let texts: [JSONValue]
        switch value {
        case .string: texts = [value]
        case .array(let items) where !items.isEmpty && items.count <= 64: texts = items
        default: throw place.error("on", "must be a calendar expression such as \"Mon..Fri *-*-* 02:00\", or an array of 1 to 64 of them")
        }
        var events: [CalendarEvent] = []
        for text in texts {
            guard let text = text.stringValue else { throw place.error("on", "must be a calendar expression, not \(text.kind)") }
            // One that never elapses again (a date gone by) is no error: a
            // config must not stop loading on the day after it.
            do throws(CurfewError) {
                events.append(try CalendarEvent(text))
            } catch {
                throw place.error("on", error.description)
            }
        }
        return events
    }

    static func limits(_ value: JSONValue, _ place: PolicyPlace) throws(CurfewError) -> ResourceLimits {
        guard case .object(let members) = value else { throw place.error("limits", "must be an object, not \(value.kind)") }
        var limits = ResourceLimits()
        for (key, member) in members {
            let where_ = "limits." + key
            switch key {
            case "memory":
                guard let text = member.stringValue, let bytes = Quantities.size(text), bytes >= ResourceLimits.minimumMemoryBytes else {
                    throw place.error(where_, "must be a size of at least \(ResourceLimits.minimumMemoryBytes >> 20)MiB, such as \"512MiB\"")
                }
                limits.memoryBytes = bytes
            case "cpu_time":
                let cpu = try duration(member, where_, place)
                guard cpu >= .seconds(1) else { throw place.error(where_, "must be at least 1s") }
                limits.cpuSeconds = UInt64(cpu.components.seconds) + (cpu.components.attoseconds > 0 ? 1 : 0)
            case "open_files":
                let ceiling = ResourceLimits.maximumOpenFiles
                guard let count = member.integerValue, count >= 16, UInt64(count) <= ceiling else {
                    throw place.error(where_, "must be a whole number from 16 to \(ceiling)")
                }
                limits.openFiles = UInt64(count)
            default:
                throw place.error(where_, "unknown key (limits are \"memory\", \"cpu_time\" and \"open_files\")")
            }
        }
        return limits
    }

    /// `false` (none), `true` (the default policy), or an object of
    /// `network` ("off", "on"), `read` and `write` (arrays of existing
    /// paths) and `exec` (a bool).
    static func sandbox(_ value: JSONValue, _ place: PolicyPlace) throws(CurfewError) -> SandboxSetting {
        switch value {
        case .bool(let on): return on ? .on : .off
        case .object(let members):
            var policy = SandboxPolicy()
            for (key, member) in members {
                let where_ = "sandbox." + key
                switch key {
                case "network":
                    guard let text = member.stringValue, let network = SandboxPolicy.Network(rawValue: text) else {
                        throw place.error(where_, "must be \"off\", \"loopback\" or \"on\"")
                    }
                    policy.network = network
                case "read", "write":
                    guard case .array(let items) = member else { throw place.error(where_, "must be an array of paths, not \(member.kind)") }
                    guard items.count <= SandboxPolicy.maximumPaths else { throw place.error(where_, "names more than \(SandboxPolicy.maximumPaths) paths") }
                    for item in items {
                        guard let text = item.stringValue, text.hasPrefix("/"), !text.utf8.contains(0) else {
                            throw place.error(where_, "\(item.stringValue.map(quote) ?? "a \(item.kind)") is not an absolute path")
                        }
                        guard let path = SandboxPolicy.resolve(text) else { throw place.error(where_, "\(quote(text)) names no file or folder") }
                        if key == "read" { policy.read.append(path) } else { policy.write.append(path) }
                    }
                case "exec":
                    guard case .bool(let flag) = member else { throw place.error(where_, "must be true or false, not \(member.kind)") }
                    policy.allowsExec = flag
                default:
                    throw place.error(where_, "unknown key (a sandbox has \"network\", \"read\", \"write\" and \"exec\")")
                }
            }
            return .policy(policy)
        default:
            throw place.error("sandbox", "must be true, false or an object, not \(value.kind)")
        }
    }

    static func retry(_ value: JSONValue, _ place: PolicyPlace) throws(CurfewError) -> RetryPolicy {
        guard case .object(let members) = value else { throw place.error("retry", "must be an object, not \(value.kind)") }
        var retry = RetryPolicy.standard
        for (key, member) in members {
            let where_ = "retry." + key
            switch key {
            case "attempts":
                guard let count = member.integerValue, (0...1000).contains(count) else {
                    throw place.error(where_, "must be a whole number from 0 to 1000")
                }
                retry.attempts = Int(count)
            case "delay":
                retry.delay = try duration(member, where_, place)
                guard retry.delay >= .milliseconds(10) else { throw place.error(where_, "must be at least 10ms") }
            case "max_delay":
                retry.maximumDelay = try duration(member, where_, place)
            default:
                throw place.error(where_, "unknown key (retry has \"attempts\", \"delay\" and \"max_delay\")")
            }
        }
        guard retry.maximumDelay >= retry.delay else {
            throw place.error("retry.max_delay", "must be at least the delay")
        }
        return retry
    }
}

/// `text` in double quotes, cut to 64 bytes: a config's keys and values are
/// the operator's, but may be anything.
private func quote(_ text: String) -> String {
    "\"" + Reason.cut(text, to: 64) + "\""
}
