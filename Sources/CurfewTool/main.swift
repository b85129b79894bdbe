import Curfew
import CurfewHost
import CurfewCLI
import _CurfewShims

// A plugin scanner (`__scanbatch.N`, `__scanserver`, `__scanfile`) runs no
// Swift: it goes from here into C and exits, so its forks copy next to nothing.
curfew_shim_scanner_main(CommandLine.argc, CommandLine.unsafeArgv)

// No top-level `await` here, on purpose: with one, the main thread parks in
// `dispatch_main` and the code after each `await` resumes on the main queue.
// A plugin that loads Foundation hands the main queue to a CFRunLoop that
// nobody runs, and the host would never get back to exit. `exitAfter` runs
// the tool on the cooperative pool and keeps the main thread out of it.
let arguments = Array(CommandLine.arguments.dropFirst())
if [IsolationWorker.forkServerArgument, IsolationWorker.argument].contains(arguments.first) {
    // A helper dies with the host that started it (a scanner may be stuck in
    // a plugin's constructor, deaf to its channel). Before any other work.
    guard IsolationWorker.bindToHost() else { Syscalls.exit(1) }
}
if arguments.first == IsolationWorker.forkServerArgument {
    // The fork server, started by a host running isolated: each child it
    // forks goes on as a worker; the server itself leaves when the host is done.
    IsolationWorker.serveForks()
    Syscalls.exit(0)
}
if arguments.first == IsolationWorker.argument {
    // A worker, started by a host running isolated.
    Syscalls.exit(IsolationWorker.main())
}
// An argument that is not UTF-8 would be read with U+FFFD in place of each
// bad sequence: a path that names no file, reported as missing.
for index in 1..<max(1, Int(CommandLine.argc)) where String(validatingCString: CommandLine.unsafeArgv[index]!) == nil {
    let error = "Error: argument \(index) is not UTF-8; Curfew takes paths and names as UTF-8 text (rename the file).\n"
    try? Syscalls.writeAll(Syscalls.standardError, Array(error.utf8))
    Syscalls.exit(ExitCode.usage)
}
// A listing, help and the like run here, on the main thread: no plugin code
// is loaded in this process for them, and nothing is awaited.
_ = SignalMask.unblockAll()
if let status = CurfewMain.mainAtOnce(arguments) { Syscalls.exit(status) }
exitAfter { await CurfewMain.main(arguments) }
