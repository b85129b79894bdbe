import CurfewCLI
import Glibc

exit(await CurfewMain.main(Array(CommandLine.arguments.dropFirst())))
