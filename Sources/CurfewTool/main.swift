import Curfew
import CurfewCLI
import Glibc

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == IsolationWorker.argument {
    // The worker role, started by a host running with --isolate job.
    exit(await IsolationWorker.main())
}
exit(await CurfewMain.main(arguments))
