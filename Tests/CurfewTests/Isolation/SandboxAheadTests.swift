import Glibc
import Testing
import _CurfewShims

/// The layers a worker applies ahead of its job (`curfew_sandbox_prepare`):
/// the job's own sandbox then keeps them, narrows their call filter where it
/// asks for less, and is refused where it asks for more. Each case runs in a
/// child forked from a fresh thread (so it has one thread, as a worker
/// does) that calls only C until it exits with what it saw.
@Suite(.timeLimit(.minutes(1)), .enabled(if: curfew_sandbox_probe_namespaces() == 1, "the kernel or its user cannot make the namespaces"))
struct SandboxAheadTests {
    /// What the child saw: 0 as expected, else which step was not.
    enum Seen: Int32 {
        case expected = 0, prepareFailed, applyFailed, applyNotRefused, socketOpened, socketRefused
    }

    /// Forks from a new thread; the child prepares for `prepared`, applies
    /// `applied`, then opens an IPv4 socket, and exits with what it saw.
    /// `nil` when the kernel has no seccomp or user namespaces here (nothing to check).
    func child(prepared: Int32, applied: Int32, refused: Bool, socketOpens: Bool) -> Seen? {
        final class Box: @unchecked Sendable {
            var status: Int32 = -1
            let prepared: Int32, applied: Int32, refused: Bool, socketOpens: Bool
            init(_ prepared: Int32, _ applied: Int32, _ refused: Bool, _ socketOpens: Bool) {
                (self.prepared, self.applied, self.refused, self.socketOpens) = (prepared, applied, refused, socketOpens)
            }
        }
        let box = Box(prepared, applied, refused, socketOpens)
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { argument in
            let box = Unmanaged<Box>.fromOpaque(argument!).takeUnretainedValue()
            var report = curfew_sandbox_report()
            var spec = curfew_sandbox_spec(paths: nil, path_count: 0, network: box.applied, allow_exec: 0)
            let (prepared, refused, socketOpens) = (box.prepared, box.refused, box.socketOpens)
            let pid = fork()
            if pid == 0 {
                for signal in [SIGILL, SIGTRAP, SIGABRT, SIGSEGV, SIGBUS] { Glibc.signal(signal, SIG_DFL) }
                guard curfew_sandbox_prepare(prepared, 0, &report) == 0 else { _exit(Seen.prepareFailed.rawValue) }
                let status = curfew_sandbox_apply(&spec, &report)
                if refused { _exit(status == EPERM ? Seen.expected.rawValue : Seen.applyNotRefused.rawValue) }
                guard status == 0 else { _exit(Seen.applyFailed.rawValue) }
                let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                if fd >= 0 && !socketOpens { _exit(Seen.socketOpened.rawValue) }
                if fd < 0 && socketOpens { _exit(Seen.socketRefused.rawValue) }
                _exit(Seen.expected.rawValue)
            }
            var status: Int32 = 0
            if pid > 0 { waitpid(pid, &status, 0) }
            box.status = pid > 0 && status & 0x7f == 0 ? (status >> 8) & 0xff : 99
            return nil
        }, Unmanaged.passUnretained(box).toOpaque())
        guard created == 0 else { return nil }
        pthread_join(thread, nil)
        return Seen(rawValue: box.status)
    }

    /// Under a fork server's call filter (which, `withoutLandlock`, lets a
    /// worker's namespaces through): a child (one thread) whose early
    /// prepare did not run applies its sandbox whole, and can make no
    /// namespace after (the seal, or the server's filter); its exit status
    /// says what it saw: 0 as expected, 1 the server's filter refused, 2 the
    /// apply failed, 3 the unshare was not refused.
    func sealedWithoutPrepare(withoutLandlock: Bool) -> Int32 {
        final class Box: @unchecked Sendable {
            var status: Int32 = -1
            var withoutLandlock = false
            // (Glibc's module leaves unshare out.)
            let unshare = unsafeBitCast(dlsym(UnsafeMutableRawPointer(bitPattern: 0), "unshare"), to: (@convention(c) (Int32) -> Int32).self)
        }
        let box = Box()
        box.withoutLandlock = withoutLandlock
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { argument in
            let box = Unmanaged<Box>.fromOpaque(argument!).takeUnretainedValue()
            let pid = fork()
            if pid == 0 {
                for signal in [SIGILL, SIGTRAP, SIGABRT, SIGSEGV, SIGBUS] { Glibc.signal(signal, SIG_DFL) }
                if box.withoutLandlock { curfew_sandbox_refuse_landlock() }
                let off = Int32(CURFEW_SANDBOX_NETWORK_OFF)
                guard curfew_sandbox_prepare_server(off, 0) == 0 else { _exit(1) }
                var report = curfew_sandbox_report()
                var spec = curfew_sandbox_spec(paths: nil, path_count: 0, network: off, allow_exec: 0)
                guard curfew_sandbox_apply(&spec, &report) == 0 else { _exit(2) }
                // CLONE_NEWUSER | CLONE_NEWIPC, which the Glibc module leaves out too.
                _exit(box.unshare(0x1000_0000 | 0x0800_0000) == 0 ? 3 : 0)
            }
            var status: Int32 = 0
            if pid > 0 { waitpid(pid, &status, 0) }
            box.status = pid > 0 && status & 0x7f == 0 ? (status >> 8) & 0xff : 99
            return nil
        }, Unmanaged.passUnretained(box).toOpaque())
        guard created == 0 else { return -1 }
        pthread_join(thread, nil)
        return box.status
    }

    @Test(arguments: [false, true]) func aSandboxAppliedUnderTheServersFilterSealsNamespaces(withoutLandlock: Bool) {
        #expect(sealedWithoutPrepare(withoutLandlock: withoutLandlock) == 0)
    }

    /// A child that prepares for a sandbox and applies the same one keeps its network.
    @Test func theSameSandboxAppliesOverWhatWasMadeAhead() {
        let on = Int32(CURFEW_SANDBOX_NETWORK_ON)
        #expect(child(prepared: on, applied: on, refused: false, socketOpens: true) == .expected)
    }

    @Test func theJobsOwnSandboxKeepsWhatWasMadeAhead() {
        let off = Int32(CURFEW_SANDBOX_NETWORK_OFF)
        #expect(child(prepared: off, applied: off, refused: false, socketOpens: false) == .expected)
    }

    /// Before, a filter made ahead for a job with the network on would have
    /// let a scan (network off) open sockets: a narrower spec adds its own filter.
    @Test func aNarrowerSandboxNarrowsTheFilterMadeAhead() {
        #expect(child(prepared: Int32(CURFEW_SANDBOX_NETWORK_ON), applied: Int32(CURFEW_SANDBOX_NETWORK_OFF), refused: false, socketOpens: false) == .expected)
    }

    /// A filter cannot be widened: a job granted what the layers made ahead
    /// refuse is refused, never run narrower than its policy says unsaid.
    @Test func aWiderSandboxIsRefused() {
        let off = Int32(CURFEW_SANDBOX_NETWORK_OFF)
        #expect(child(prepared: off, applied: Int32(CURFEW_SANDBOX_NETWORK_ON), refused: true, socketOpens: false) == .expected)
        #expect(child(prepared: off, applied: Int32(CURFEW_SANDBOX_NETWORK_LOOPBACK), refused: true, socketOpens: false) == .expected)
    }
}
