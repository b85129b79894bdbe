import Glibc
import _CurfewShims

/// A program to run to its end, as a user would start it: a fresh process
/// with stdin and stderr on /dev/null, stdout to a file, no signal blocked
/// and each at its default (a thread of Dispatch's blocks them all, and a
/// child inherits its spawner's mask and ignored signals), and no
/// descriptor but 0, 1 and 2 (one another thread left inheritable would
/// keep a pipe's end open for as long as the program ran). Its arguments,
/// environment and descriptors are prepared once, so each ``run()`` costs a
/// `posix_spawn` and a `waitpid`, no more (a benchmark's baseline loop).
package final class Program {
    private let path: String
    private let searchesPath: Bool
    private let argv: [UnsafeMutablePointer<CChar>?]
    private let envp: [UnsafeMutablePointer<CChar>?]
    private var actions = posix_spawn_file_actions_t()
    private var attributes = posix_spawnattr_t()

    /// - Parameters:
    ///   - arguments: The program (a path, or a name looked up in `PATH`
    ///     when `searchesPath`) and its arguments.
    ///   - environment: `NAME=value` entries; `nil` for this process's own.
    ///   - output: Where its stdout goes, created or truncated, mode 0644.
    ///   - onlyOutput: Redirect stdout alone; stdin and stderr are this
    ///     process's (a baseline that measures the spawn, nothing more).
    package init(
        _ arguments: [String], environment: [String]? = nil, output: String = "/dev/null", onlyOutput: Bool = false, searchesPath: Bool = true
    ) {
        precondition(!arguments.isEmpty, "a program needs at least its own name")
        path = arguments[0]
        self.searchesPath = searchesPath
        argv = arguments.map { strdup($0) } + [nil]
        envp = (environment ?? Syscalls.environment()).map { strdup($0) } + [nil]
        posix_spawn_file_actions_init(&actions)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        curfew_shim_spawn_close_from(&actions, 3)
        if !onlyOutput {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        }
        posix_spawnattr_init(&attributes)
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    }

    deinit {
        posix_spawn_file_actions_destroy(&actions)
        posix_spawnattr_destroy(&attributes)
        (argv + envp).forEach { free($0) }
    }

    /// Runs it and waits for its end: its exit status, or 128 plus the
    /// signal that killed it.
    package func run() throws(SystemError) -> Int32 {
        var pid: Int32 = 0
        let spawned = argv.withUnsafeBufferPointer { argv in
            envp.withUnsafeBufferPointer { envp in
                searchesPath
                    ? posix_spawnp(&pid, path, &actions, &attributes, argv.baseAddress!, envp.baseAddress!)
                    : posix_spawn(&pid, path, &actions, &attributes, argv.baseAddress!, envp.baseAddress!)
            }
        }
        guard spawned == 0 else { throw SystemError(errno: spawned) }
        var status: Int32 = 0
        guard Syscalls.retryingEINTR({ waitpid(pid, &status, 0) }) == pid else { throw .last }
        return status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }
}
