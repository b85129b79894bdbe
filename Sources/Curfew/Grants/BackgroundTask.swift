import Dispatch
import Synchronization

/// Identifies a background task, like `UIBackgroundTaskIdentifier`.
public struct BackgroundTaskIdentifier: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }

    /// No task: what `beginTask` returns when it cannot begin one.
    public static let invalid = BackgroundTaskIdentifier(rawValue: 0)

    public var description: String { self == .invalid ? "invalid" : "task-\(rawValue)" }
}

/// Why a grant expires.
public enum ExpirationReason: String, Sendable, CustomStringConvertible {
    /// The expiration point was reached: the budget is about to run out.
    case timeout
    /// The host is shutting down.
    case shutdown
    /// The job was cancelled.
    case cancelled

    public var description: String {
        switch self {
        case .timeout: "time ran out"
        case .shutdown: "host shutting down"
        case .cancelled: "cancelled"
        }
    }
}
