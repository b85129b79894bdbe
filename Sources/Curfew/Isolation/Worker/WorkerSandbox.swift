import CurfewFormats

/// The sandbox a worker applies to itself: what the host's message grants
/// the job, plus what any worker's code needs to run (the system's
/// libraries and a few of its files, a few devices, `/proc`).
enum WorkerSandbox {
    /// Read beneath, in every sandbox: the system's libraries, the files
    /// libc and the runtime read, and `/proc` (see `sandbox.c`, whose list
    /// the scanners use too).
    static let systemPaths = Sandbox.systemPaths
    /// Read beneath when the job may reach a network: names and certificates.
    static let networkPaths = ["/etc/resolv.conf", "/etc/services", "/etc/protocols", "/etc/ssl", "/etc/ca-certificates", "/etc/pki"]
    /// Read and written: the devices every program may use.
    static let devices = Sandbox.devicePaths

    /// The rules for a sandbox the host sent.
    static func rules(for sandbox: HostMessage.Sandbox, runtime: String? = Sandbox.swiftRuntimeFolder) -> Sandbox.Rules {
        var read = systemPaths
        if sandbox.network != .off { read += networkPaths }
        if let runtime { read.append(runtime) }
        read += sandbox.read
        let paths = read.map { (path: $0, access: Sandbox.Access.read) }
            + devices.map { (path: $0, access: Sandbox.Access.device) }
            + ([sandbox.scratch] + sandbox.write).map { (path: $0, access: Sandbox.Access.write) }
        return Sandbox.Rules(paths: paths, network: sandbox.network, allowsExec: sandbox.exec)
    }

    /// Applies the sandbox to this process, which has one thread, and
    /// points the job's temporary files at its scratch folder. Returns what
    /// the kernel could not enforce, in words, or why it could not be applied.
    static func apply(_ sandbox: HostMessage.Sandbox) -> Result<[String], Sandbox.Failure> {
        // Before the sandbox, while one thread can change the environment.
        Syscalls.setEnvironment("CURFEW_SCRATCH", sandbox.scratch)
        Syscalls.setEnvironment("TMPDIR", sandbox.scratch)
        HostServices.setScratchFolder(sandbox.scratch)
        if Syscalls.environmentValue(refuseLandlockVariable) == "1" { Sandbox.refuseLandlock() }
        let rules = rules(for: sandbox)
        return Result { () throws(Sandbox.Failure) in try Sandbox.apply(rules).missing(for: rules) }
    }

    /// Set to `1` in a host's environment, its workers act as if the kernel
    /// had no Landlock: the test of what an older kernel does.
    static let refuseLandlockVariable = "CURFEW_TEST_REFUSE_LANDLOCK"
}
