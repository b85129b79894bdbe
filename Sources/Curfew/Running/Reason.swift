/// The words of an outcome's reason, bounded: a reason goes into every
/// event, table and log, and its parts (task names, logged errors) come
/// from plugin code.
package enum Reason {
    /// How a run that returned CURFEW_CHUNK_FAILED_FINAL ends: the words
    /// that tell a scheduler not to retry it, in process or from a worker.
    package static let failedForGood = "chunk returned failed, not to be retried"

    /// The most bytes of UTF-8 a reason has.
    static let maximumBytes = 1024
    /// The most bytes of one name quoted in a reason.
    static let maximumNameBytes = 64
    /// How many names a list shows before "and N more".
    static let namesShown = 3

    /// `"background task 'a' was never ended"`, or for several the first
    /// few and how many more.
    static func neverEnded(_ names: [String]) -> String {
        names.count == 1
            ? "background task \(quoted(names)) was never ended"
            : "background tasks \(quoted(names)) were never ended"
    }

    /// `'a', 'b', 'c' and 4 more`.
    static func quoted(_ names: [String]) -> String {
        let shown = names.prefix(namesShown).map { "'\(shortened($0))'" }
        let rest = names.count - shown.count
        return shown.joined(separator: ", ") + (rest > 0 ? " and \(rest) more" : "")
    }

    /// `name`, cut to ``maximumNameBytes`` with an ellipsis.
    static func shortened(_ name: String) -> String {
        cut(name, to: maximumNameBytes)
    }

    /// Why a job expired: `reason`, and for a timeout begun early because
    /// the next chunk (predicted to take `declined` nanoseconds) would have
    /// overrun, that chunk.
    static func expired(_ reason: ExpirationReason, declined: Int64?) -> String {
        guard reason == .timeout, let declined else { return reason.description }
        return "\(reason): the next chunk, about \(JobRun.milliseconds(declined)), would overrun"
    }

    /// `reason`, cut to ``maximumBytes`` with an ellipsis.
    static func bounded(_ reason: String) -> String {
        cut(reason, to: maximumBytes)
    }

    /// At most `limit` bytes of UTF-8, cut at a character with "…" (3 bytes) when cut.
    package static func cut(_ text: String, to limit: Int) -> String {
        guard text.utf8.count > limit else { return text }
        var end = text.startIndex
        var bytes = 0
        while end < text.endIndex {
            let next = text.index(after: end)
            let size = text.utf8.distance(from: end, to: next)
            guard bytes + size <= limit - 3 else { break }
            bytes += size
            end = next
        }
        return text[..<end] + "…"
    }
}
