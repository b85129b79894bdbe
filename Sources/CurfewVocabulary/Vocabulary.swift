import CCurfew

// The words a job and its host share: defined once, here, so the Swift SDK
// (CurfewJob, linked into plugins) and the host (Curfew) cannot drift
// apart. Each converts to and from its C spelling in curfew.h; a value
// from the other side that this build does not know reads as the
// documented default, never as a trap.

/// A word with a C spelling for each case.
package protocol SpeltInC: CaseIterable {
    associatedtype Spelling: Equatable
    var cValue: Spelling { get }
}

extension SpeltInC {
    /// The case spelt `spelling`; `nil` for a spelling this build does not know.
    package static func known(_ spelling: Spelling) -> Self? {
        allCases.first { $0.cValue == spelling }
    }
}

/// Identifies a background task, like `UIBackgroundTaskIdentifier`.
public struct BackgroundTaskIdentifier: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }

    /// No task (`CURFEW_TASK_INVALID`): what beginning one returns when it
    /// cannot begin, and ending it is harmless.
    public static let invalid = BackgroundTaskIdentifier(rawValue: 0)

    public var description: String { self == .invalid ? "invalid" : "task-\(rawValue)" }
}

/// Why a grant expires.
public enum ExpirationReason: String, Sendable, SpeltInC, CustomStringConvertible {
    /// The expiration point was reached: the budget is about to run out.
    case timeout
    /// The host is shutting down.
    case shutdown
    /// The job was cancelled.
    case cancelled
    /// Its progress stopped moving for its policy's stall time.
    case stalled
    /// A condition its runs wait for stopped holding.
    case conditions

    public var description: String {
        switch self {
        case .timeout: "time ran out"
        case .shutdown: "host shutting down"
        case .cancelled: "cancelled"
        case .stalled: "stalled: its progress stopped moving"
        case .conditions: "a condition it runs under stopped holding"
        }
    }

    /// The reason as the C ABI spells it.
    package var cValue: curfew_expire_reason {
        switch self {
        case .timeout: CURFEW_EXPIRE_TIMEOUT
        case .shutdown: CURFEW_EXPIRE_SHUTDOWN
        case .cancelled: CURFEW_EXPIRE_CANCELLED
        case .stalled: CURFEW_EXPIRE_STALLED
        case .conditions: CURFEW_EXPIRE_CONDITIONS
        }
    }

    /// A reason this build does not know reads as ``timeout``.
    package init(_ reason: curfew_expire_reason) {
        self = .known(reason) ?? .timeout
    }
}

/// What a job's runs may wait for (`curfew_condition`): a run waits until
/// each holds, and is expired (``ExpirationReason/conditions``) when one
/// stops holding.
public enum Condition: String, Sendable, SpeltInC, CustomStringConvertible, Comparable {
    case externalPower = "power"
    case network
    case storage
    case cpu
    case memory
    case battery

    /// What a run waits for, as `status` says it.
    public var description: String {
        switch self {
        case .externalPower: "external power"
        case .network: "network"
        case .storage: "storage"
        case .cpu: "CPU not busy"
        case .memory: "memory pressure"
        case .battery: "battery"
        }
    }

    package var cValue: UInt32 {
        switch self {
        case .externalPower: CURFEW_CONDITION_EXTERNAL_POWER.rawValue
        case .network: CURFEW_CONDITION_NETWORK.rawValue
        case .storage: CURFEW_CONDITION_STORAGE.rawValue
        case .cpu: CURFEW_CONDITION_CPU.rawValue
        case .memory: CURFEW_CONDITION_MEMORY.rawValue
        case .battery: CURFEW_CONDITION_BATTERY.rawValue
        }
    }

    /// The conditions in a mask; `nil` when it holds a bit this build does not know.
    package static func set(of mask: UInt32) -> Set<Condition>? {
        let known = allCases.filter { mask & $0.cValue != 0 }
        guard known.reduce(0, { $0 | $1.cValue }) == mask else { return nil }
        return Set(known)
    }

    /// The mask of `conditions`.
    package static func mask(of conditions: some Sequence<Condition>) -> UInt32 {
        conditions.reduce(0) { $0 | $1.cValue }
    }

    /// In the order `curfew_condition` lists them.
    public static func < (a: Condition, b: Condition) -> Bool {
        a.cValue < b.cValue
    }
}

/// The host's app state, after `UIApplication.State`. Active and inactive
/// are the foreground, where grants do not run down.
public enum AppState: String, Sendable, SpeltInC {
    case active, inactive, background

    package var cValue: curfew_app_state {
        switch self {
        case .active: CURFEW_APP_STATE_ACTIVE
        case .inactive: CURFEW_APP_STATE_INACTIVE
        case .background: CURFEW_APP_STATE_BACKGROUND
        }
    }

    /// A state this build does not know reads as ``background``, where the
    /// grant's clock runs: the safe side.
    package init(_ state: curfew_app_state) {
        self = .known(state) ?? .background
    }
}

/// An app event a job's `app_event` hook receives, after
/// `UIApplicationDelegate`: `launch` first, right after the job is created,
/// then each change of the host's state while the job is alive.
public enum AppEvent: String, Sendable, SpeltInC {
    case launch = "launch"
    case willResignActive = "will-resign-active"
    case didEnterBackground = "did-enter-background"
    /// The grant's clock stops: a good time to end tasks early.
    case willEnterForeground = "will-enter-foreground"
    case didBecomeActive = "did-become-active"
    /// The host is shutting down; the grant expires right after.
    case willTerminate = "will-terminate"

    package var cValue: curfew_app_event {
        switch self {
        case .launch: CURFEW_APP_EVENT_LAUNCH
        case .willResignActive: CURFEW_APP_EVENT_WILL_RESIGN_ACTIVE
        case .didEnterBackground: CURFEW_APP_EVENT_DID_ENTER_BACKGROUND
        case .willEnterForeground: CURFEW_APP_EVENT_WILL_ENTER_FOREGROUND
        case .didBecomeActive: CURFEW_APP_EVENT_DID_BECOME_ACTIVE
        case .willTerminate: CURFEW_APP_EVENT_WILL_TERMINATE
        }
    }

    /// `nil` for an event this build does not know (from a newer host): a
    /// job is not told of it, as curfew.h asks of a job.
    package init?(_ event: curfew_app_event) {
        guard let known = Self.known(event) else { return nil }
        self = known
    }
}

/// How much a log message matters, as in `curfew_log_level`.
public enum LogLevel: Int, Sendable, SpeltInC, Comparable, CustomStringConvertible {
    case debug = 0, info, warning, error

    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String {
        switch self {
        case .debug: "debug"
        case .info: "info"
        case .warning: "warning"
        case .error: "error"
        }
    }

    package var cValue: curfew_log_level {
        switch self {
        case .debug: CURFEW_LOG_DEBUG
        case .info: CURFEW_LOG_INFO
        case .warning: CURFEW_LOG_WARNING
        case .error: CURFEW_LOG_ERROR
        }
    }

    /// A level this build does not know reads as ``info``.
    package init(_ level: curfew_log_level) {
        self = .known(level) ?? .info
    }
}
