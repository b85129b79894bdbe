import CCurfew
import Synchronization

/// The `--param` values, as C strings that live as long as the table.
final class ParameterTable: @unchecked Sendable {
    // Safe because the dictionary is built in init and only read after;
    // the C strings are freed in deinit, after every job has ended.
    private let values: [String: UnsafeMutablePointer<CChar>]

    init(_ parameters: [String: String]) {
        values = parameters.mapValues { CStrings.copy($0) }
    }

    deinit {
        values.values.forEach { CStrings.free($0) }
    }

    func value(for key: String) -> UnsafePointer<CChar>? {
        values[key].map { UnsafePointer($0) }
    }
}
