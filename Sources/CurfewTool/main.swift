import Curfew
import CurfewCLI
import Glibc

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == IsolationWorker.forkServerArgument {
    // The fork server, started by a host running isolated: each child it
    // forks goes on as a worker; the server itself leaves when the host is done.
    guard IsolationWorker.serveForks() else { exit(0) }
    exit(await IsolationWorker.main())
}
if arguments.first == IsolationWorker.argument {
    // A worker, started by a host running isolated.
    exit(await IsolationWorker.main())
}
exit(await CurfewMain.main(arguments))
