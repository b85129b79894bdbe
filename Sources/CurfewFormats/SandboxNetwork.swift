/// Which networks a sandboxed job reaches: one word from a policy (the
/// serve config, `--network`) through the worker's message to the kernel's
/// rules (see `sandbox.c`).
public enum SandboxNetwork: String, Sendable, CaseIterable {
    /// None: the job can open no socket but a socket pair.
    case off
    /// The addresses on this machine's loopback device (127.0.0.0/8,
    /// `::1`), by TCP only, and nothing else.
    case loopback
    /// Any the host reaches.
    case on
}
