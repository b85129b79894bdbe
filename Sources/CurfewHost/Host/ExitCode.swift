import Curfew

/// The exit statuses of `curfew`, as `curfew run --help` documents them,
/// and of a process that is one ``RunHost`` run.
public enum ExitCode {
    public static let success: Int32 = 0
    public static let failure: Int32 = 1
    public static let jobNotClean: Int32 = 2
    public static let pluginRejected: Int32 = 3
    public static let usage: Int32 = 64
    /// Stdout or stderr was closed by its reader (`| head`): the jobs were
    /// expired and cleaned up. 128 + SIGPIPE, as the shell expects.
    public static let outputClosed: Int32 = 141
    /// In process, plugin code called `exit()`: the run was cut short.
    public static let jobEndedHost: Int32 = 4
    /// In process, plugin code crashed (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
    /// SIGABRT): the run was cut short, and the host said which job.
    public static let jobCrashedHost: Int32 = 5

    /// The code for a finished run: a stop (a signal's 128 + N, or
    /// ``outputClosed``) outranks a job's failure, which outranks a rejected file.
    public static func forRun(_ results: [JobResult], rejected: Int, stop: Int32?) -> Int32 {
        if let stop { return stop }
        if results.contains(where: { !$0.outcome.isClean }) { return jobNotClean }
        if rejected > 0 { return pluginRejected }
        return success
    }
}
