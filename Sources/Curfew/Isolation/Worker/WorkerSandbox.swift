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
    /// the kernel could not enforce, in words; throws why it could not be
    /// applied. (No `Result`: a generic type's first use in a worker costs
    /// its forked process a conformance search, about 45 µs.)
    @discardableResult
    static func apply(_ sandbox: HostMessage.Sandbox) throws(Sandbox.Failure) -> [String] {
        // Before the sandbox, while one thread can change the environment.
        Syscalls.setEnvironment("CURFEW_SCRATCH", sandbox.scratch)
        Syscalls.setEnvironment("TMPDIR", sandbox.scratch)
        HostServices.setScratchFolder(sandbox.scratch)
        actAsWithoutLandlockIfAsked()
        let rules = rules(for: sandbox)
        return try Sandbox.apply(rules).missing(for: rules)
    }

    /// Set in a sandboxed run's workers' environment (the network, `off` or
    /// `on`, then ` exec` when exec is allowed): what every job of the run
    /// gets but its paths is applied while a worker waits for its job
    /// (``prepareAhead()``), so the job waits only for Landlock.
    static let aheadVariable = "CURFEW_WORKER_SANDBOX"

    /// The value of ``aheadVariable`` for a run sandboxed by `policy`; `nil`
    /// for none, for the loopback network (its helper comes first), and
    /// under `limits` (set with the job, with the capabilities a root host
    /// may need to set them still there).
    static func aheadValue(for policy: SandboxPolicy?, limits: ResourceLimits) -> String? {
        guard let policy, policy.network != .loopback, limits == ResourceLimits() else { return nil }
        return policy.network.rawValue + (policy.allowsExec ? " exec" : "")
    }

    /// Applies, with one thread, what ``aheadVariable`` says every job of
    /// this worker's run gets but its paths. A value it cannot read, or a
    /// layer that fails, leaves it all to ``apply(_:)``, which says why.
    static func prepareAhead() {
        let spec = aheadSpec()
        // Not for what the job starts (a host of its own would prepare too).
        Syscalls.unsetEnvironment(aheadVariable)
        guard let spec else { return }
        actAsWithoutLandlockIfAsked()
        try? Sandbox.prepare(network: spec.network, allowsExec: spec.allowsExec)
    }

    /// What ``aheadVariable`` says this process's workers prepare; `nil`
    /// for none, or a value it cannot read.
    static func aheadSpec() -> (network: SandboxNetwork, allowsExec: Bool)? {
        guard let value = Syscalls.environmentValue(aheadVariable) else { return nil }
        let words = value.split(separator: " ", omittingEmptySubsequences: false)
        guard words.count <= 2, let network = SandboxNetwork(rawValue: String(words[0])), network != .loopback,
            words.count == 1 || words[1] == "exec"
        else { return nil }
        return (network, words.count == 2)
    }

    /// Set to `1` in a host's environment, its workers act as if the kernel
    /// had no Landlock: the test of what an older kernel does.
    static let refuseLandlockVariable = "CURFEW_TEST_REFUSE_LANDLOCK"

    /// In a worker, or the fork server that decides for its workers whether
    /// they make namespaces: acts as ``refuseLandlockVariable`` says.
    static func actAsWithoutLandlockIfAsked() {
        if Syscalls.environmentValue(refuseLandlockVariable) == "1" { Sandbox.refuseLandlock() }
    }
}
