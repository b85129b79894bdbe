import CCurfew

/// Background modes, after iOS's `UIBackgroundModes`: a continuous job
/// declares the modes it runs in, and the operator allows modes by name.
public enum BackgroundMode {
    /// The modes of iOS the seeds name.
    public static let known: [String] = [
        "audio", "voip", "location", "newsstand-content", "external-accessory", "bluetooth-central", "bluetooth-peripheral",
    ]
    /// The most modes one job may declare.
    public static let maximumCount = Int(CURFEW_MAX_MODES)
    /// The longest `background_modes` text read, in bytes.
    public static let maximumTextBytes = 512

    /// Whether `name` is a mode: one of ``known``, or `x-` and 1 to 62 of [a-z0-9-].
    public static func isValidName(_ name: String) -> Bool {
        if known.contains(name) { return true }
        let bytes = Array(name.utf8)
        guard bytes.count > 2, bytes.count <= 64, name.hasPrefix("x-") else { return false }
        return bytes.dropFirst(2).allSatisfy { (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2D }
    }

    /// Why a `background_modes` text is not a list of modes.
    struct Problem: Error {
        let message: String
        init(_ message: String) { self.message = message }
    }

    /// The modes in a descriptor's `background_modes` text, or why it is not a list of them.
    static func parse(_ bytes: [UInt8]) -> Result<[String], Problem> {
        guard bytes.count <= maximumTextBytes else { return .failure(Problem("more than \(maximumTextBytes) bytes of background modes")) }
        var modes: [String] = []
        for part in bytes.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false) {
            let name = String(decoding: part, as: UTF8.self)
            guard isValidName(name) else {
                let shown = String(reflecting: Reason.cut(name, to: 64))
                return .failure(Problem(
                    "background mode \(shown) is none of \(known.joined(separator: ", ")), nor a mode of its own named x-…"))
            }
            guard !modes.contains(name) else { return .failure(Problem("background mode '\(name)' is given twice")) }
            modes.append(name)
        }
        guard modes.count <= maximumCount else { return .failure(Problem("more than \(maximumCount) background modes")) }
        return .success(modes)
    }
}
