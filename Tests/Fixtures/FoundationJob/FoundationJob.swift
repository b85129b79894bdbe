// A Swift job that imports Foundation, as almost every real Swift job does,
// and uses Date, FileManager and JSONEncoder in its chunks. Loading
// Foundation into the host must change nothing about how the host ends.
import CurfewJob
import Foundation

struct FoundationJob: Job {
    static let name = "foundation-job"
    static let summary = "Uses Date, FileManager and JSONEncoder (a test fixture)."

    struct Record: Codable {
        var chunk: Int
        var seconds: Double
        var files: Int
    }

    let started = Date()
    var chunks = 0

    init(context: JobContext) throws {}

    mutating func chunk(_ context: JobContext) -> ChunkResult {
        chunks += 1
        let files = (try? FileManager.default.contentsOfDirectory(atPath: NSTemporaryDirectory()).count) ?? -1
        let record = Record(chunk: chunks, seconds: Date().timeIntervalSince(started), files: files)
        guard let data = try? JSONEncoder().encode(record) else { return .failed }
        guard chunks < 3 else {
            context.log("encoded \(data.count) bytes in chunk \(chunks)")
            return .done
        }
        return .continue
    }

    mutating func expire(reason: ExpirationReason, context: JobContext) {
        context.log("expired after \(Date().timeIntervalSince(started)) seconds")
    }
}

@_cdecl("curfew_plugin_entry")
public func curfewPluginEntry(_ host: CurfewHostTable?) -> CurfewPluginDescriptor? {
    CurfewPlugin.export(host: host, jobs: [FoundationJob.self, ContendedGlobalJob.self])
}
