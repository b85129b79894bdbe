// A task-driven job written in Swift with the CurfewJob SDK, the way the
// seeds' second example is written: it begins a background task with an
// expiration handler and does its work on a Dispatch queue of its own. If
// time runs out first, the handler tells the queue to stop; either way the
// queue ends the task, as its last call to the host: once a job's last task
// ends, the host may destroy the job, and its context with it.
//
// Parameters: --param files=N (default 6), --param file-ms=N (default 150).
import CurfewJob
import Dispatch
import Synchronization

final class Upload: Sendable {
    /// Set by the expiration handler: the queue stops at its next check.
    let stop = Atomic(false)
    var isStopping: Bool { stop.load(ordering: .acquiring) }
}

struct Uploader: TaskDrivenJob {
    static let name = "swift-uploader"
    static let summary = "Uploads files on its own queue under a background task (written in Swift)."

    init(context: JobContext) throws {
        let files = context.parameter("files").flatMap { Int($0) } ?? 6
        let pause = context.parameter("file-ms").flatMap { Int($0) } ?? 150
        let upload = Upload()
        let id = try context.beginBackgroundTask(name: "upload") { _ in
            context.log("expiring: stopping the upload early", level: .warning)
            upload.stop.store(true, ordering: .releasing)
        }
        DispatchQueue(label: "swift-uploader").async {
            var sent = 0
            while sent < files && !upload.isStopping && context.timeRemaining > .zero {
                // Stands for sending one file.
                let until = ContinuousClock.now + .milliseconds(pause)
                while ContinuousClock.now < until && !upload.isStopping {}
                sent += 1
                context.reportProgress(completed: Int64(sent), total: Int64(files))
            }
            if !upload.isStopping { context.log("uploaded \(sent) of \(files) files") }
            context.endBackgroundTask(id)  // last: the context may be gone after it
        }
    }
}

@_cdecl("curfew_plugin_entry")
public func curfewPluginEntry(_ host: CurfewHostTable?) -> CurfewPluginDescriptor? {
    CurfewPlugin.export(host: host, jobs: [Uploader.self])
}
