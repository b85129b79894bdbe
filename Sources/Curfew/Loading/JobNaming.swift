import CCurfew
import Synchronization

/// The rules for job names and summaries, for plugins and manifests alike.
public enum JobNaming {
    /// Whether `name` is a valid job name: 1 to 64 bytes of `[a-z0-9._-]`,
    /// starting with a letter or digit.
    public static func isValidName(_ name: String) -> Bool {
        nameProblem(Array(name.utf8)) == nil
    }

    /// What is wrong with a name, as the end of a sentence ("has an empty name."), or `nil`.
    static func nameProblem(_ bytes: [UInt8]) -> String? {
        let limit = Int(CURFEW_MAX_JOB_NAME)
        guard !bytes.isEmpty else { return "has an empty name." }
        guard bytes.count <= limit else { return "has a name longer than \(limit) bytes." }
        let isLowerOrDigit = { (byte: UInt8) in (0x61...0x7A).contains(byte) || (0x30...0x39).contains(byte) }
        let valid = bytes.allSatisfy { isLowerOrDigit($0) || $0 == 0x2E || $0 == 0x5F || $0 == 0x2D }
        guard valid && isLowerOrDigit(bytes[0]) else {
            let text = String(decoding: bytes, as: UTF8.self).debugEscaped
            return "has an invalid name '\(text)': use [a-z0-9._-], starting with a letter or digit."
        }
        return nil
    }

    /// What is wrong with a summary, as the end of a sentence, or `nil`.
    static func summaryProblem(_ bytes: [UInt8]) -> String? {
        let limit = Int(CURFEW_MAX_SUMMARY)
        guard bytes.count <= limit else { return "has a summary longer than \(limit) bytes." }
        guard String(validating: bytes, as: UTF8.self) != nil else { return "has a summary that is not valid UTF-8." }
        guard !bytes.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
            return "has a summary with a line break or control character; keep it to one line."
        }
        return nil
    }
}
