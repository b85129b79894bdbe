// A task-driven job written in Swift with the CurfewJob SDK, the way the
// seeds' second example is written: it begins a background task with an
// expiration handler, does its work on a Dispatch queue of its own, and ends
// the task when the work is done, or in the handler if time runs out first.
//
// Parameters: --param files=N (default 6), --param file-ms=N (default 150).
import CurfewJob
import Dispatch
import Synchronization

final class Upload: Sendable {
    let task = Mutex(BackgroundTaskIdentifier.invalid)

    /// Ends the task once, from whichever side gets there first.
    func end(_ context: JobContext) {
        let id = task.withLock { task in
            defer { task = .invalid }
            return task
        }
        if id != .invalid { context.endBackgroundTask(id) }
    }

    var isOpen: Bool { task.withLock { $0 != .invalid } }
}

struct Uploader: TaskDrivenJob {
    static let name = "swift-uploader"
    static let summary = "Uploads files on its own queue under a background task (written in Swift)."

    init(context: JobContext) throws {
        let files = context.parameter("files").flatMap { Int($0) } ?? 6
        let pause = context.parameter("file-ms").flatMap { Int($0) } ?? 150
        let upload = Upload()
        let id = context.beginBackgroundTask(name: "upload") { _ in
            context.log("expiring: stopping the upload early", level: .warning)
            upload.end(context)
        }
        guard id != .invalid else { throw UploaderError.noBackgroundTime }
        upload.task.withLock { $0 = id }
        DispatchQueue(label: "swift-uploader").async {
            var sent = 0
            while sent < files && upload.isOpen && context.timeRemaining > .zero {
                // Stands for sending one file.
                let until = ContinuousClock.now + .milliseconds(pause)
                while ContinuousClock.now < until && upload.isOpen {}
                sent += 1
                context.reportProgress(completed: Int64(sent), total: Int64(files))
            }
            if upload.isOpen { context.log("uploaded \(sent) of \(files) files") }
            upload.end(context)
        }
    }
}

enum UploaderError: Error, CustomStringConvertible {
    case noBackgroundTime
    var description: String { "no background time: the grant is already expiring" }
}

@_cdecl("curfew_plugin_entry")
public func curfewPluginEntry(_ host: CurfewHostTable?) -> CurfewPluginDescriptor? {
    CurfewPlugin.export(host: host, jobs: [Uploader.self])
}
