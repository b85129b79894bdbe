import Curfew
import CurfewCLI
import Glibc

// No top-level `await` here, on purpose: with one, the main thread parks in
// `dispatch_main` and the code after each `await` resumes on the main queue.
// A plugin that loads Foundation hands the main queue to a CFRunLoop that
// nobody runs, and the host would never get back to exit. `exitAfter` runs
// the tool on the cooperative pool and keeps the main thread out of it.
let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == IsolationWorker.forkServerArgument {
    // The fork server, started by a host running isolated: each child it
    // forks goes on as a worker; the server itself leaves when the host is done.
    guard IsolationWorker.serveForks() else { exit(0) }
    exitAfter { await IsolationWorker.main() }
}
if arguments.first == IsolationWorker.argument {
    // A worker, started by a host running isolated.
    exitAfter { await IsolationWorker.main() }
}
exitAfter { await CurfewMain.main(arguments) }
