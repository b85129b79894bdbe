/// The one error type of the Curfew host library.
///
/// A job that fails or expires is a result, not an error; this type is for
/// the host's own failures: a plugin it must reject, a grant it must refuse,
/// a path it cannot read. ``description`` is a whole sentence a user can act
/// on; ``code`` lets callers branch without parsing text.
public struct CurfewError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, as a value that can grow.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        // Paths.
        public static let notFound = Code(rawValue: "not-found")
        public static let unreadable = Code(rawValue: "unreadable")
        // Plugin files.
        public static let insecure = Code(rawValue: "insecure")
        public static let emptyFile = Code(rawValue: "empty-file")
        public static let notELF = Code(rawValue: "not-elf")
        public static let loadFailed = Code(rawValue: "load-failed")
        public static let missingEntry = Code(rawValue: "missing-entry")
        public static let entryDeclined = Code(rawValue: "entry-declined")
        // Descriptors.
        public static let abiVersionMismatch = Code(rawValue: "abi-version-mismatch")
        public static let structTooSmall = Code(rawValue: "struct-too-small")
        public static let invalidDescriptor = Code(rawValue: "invalid-descriptor")
        public static let invalidJobCount = Code(rawValue: "invalid-job-count")
        public static let missingHook = Code(rawValue: "missing-hook")
        public static let invalidJobName = Code(rawValue: "invalid-job-name")
        public static let duplicateJobName = Code(rawValue: "duplicate-job-name")
        public static let invalidSummary = Code(rawValue: "invalid-summary")
        public static let unknownFlags = Code(rawValue: "unknown-flags")
        // Isolation.
        public static let sandboxFailed = Code(rawValue: "sandbox-failed")
        // Foreign-job manifests.
        public static let invalidManifest = Code(rawValue: "invalid-manifest")
        public static let missingSymbol = Code(rawValue: "missing-symbol")
        public static let invalidParameter = Code(rawValue: "invalid-parameter")
        // Grants.
        public static let continuousNotAllowed = Code(rawValue: "continuous-not-allowed")
        public static let invalidGrant = Code(rawValue: "invalid-grant")
        // The state store.
        public static let stateUnavailable = Code(rawValue: "state-unavailable")
        public static let stateBusy = Code(rawValue: "state-busy")
        public static let stateLocked = Code(rawValue: "state-locked")
        public static let stateTooNew = Code(rawValue: "state-too-new")
        public static let checkpointTooLarge = Code(rawValue: "checkpoint-too-large")
        // `curfew serve`.
        public static let badConfig = Code(rawValue: "bad-config")
    }

    public let code: Code
    /// A whole sentence naming what went wrong and, where it helps, what to do.
    public let description: String
    /// The text of the underlying failure (`dlerror()`, `strerror`), if any.
    public let underlying: String?

    public init(_ code: Code, _ description: String, underlying: String? = nil) {
        self.code = code
        self.description = description
        self.underlying = underlying
    }
}
