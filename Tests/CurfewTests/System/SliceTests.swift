import Dispatch
import Glibc
import Synchronization
import Testing
import _CurfewShims

@testable import Curfew

enum SliceProbe {
    /// Runs `body` on a thread of its own (what it sets about its thread
    /// stays there) and returns its result.
    static func onOwnThread(_ body: @escaping @Sendable () -> [Int32]) -> [Int32]? {
        let result = Mutex<[Int32]?>(nil)
        let done = DispatchSemaphore(value: 0)
        guard Thread.detach({
            let value = body()
            result.withLock { $0 = value }
            done.signal()
        }) else { return nil }
        done.wait()
        return result.withLock { $0 }
    }

    /// Whether `curfew_shim_set_slice` works at all here.
    static let callWorks = onOwnThread { [curfew_shim_set_slice(0)] } == [0]
}

/// `curfew_shim_set_slice`, which gives a worker's main thread a fresh
/// slice before it runs its job's code: it changes the slice and nothing
/// else about the thread.
@Suite(.timeLimit(.minutes(1)), .enabled(if: SliceProbe.callWorks, "sched_setattr is not allowed here (a sandbox's seccomp)"))
struct SliceTests {
    /// SCHED_IDLE, which the Glibc module does not export.
    let schedIdle: Int32 = 5

    @Test func theThreadKeepsItsNiceValueAndPolicy() throws {
        let after = SliceProbe.onOwnThread { () -> [Int32] in
            // On Linux, the nice value of "process 0" is the calling
            // thread's; one step nicer than now needs no privilege.
            let which = __priority_which_t(PRIO_PROCESS.rawValue)
            errno = 0
            let nicer = min(getpriority(which, 0) + 1, 19)
            guard setpriority(which, 0, nicer) == 0 else { return [] }
            let policy = sched_getscheduler(0)
            let status = curfew_shim_set_slice(0)
            errno = 0
            return [status, getpriority(which, 0) - nicer, sched_getscheduler(0) - policy]
        }
        #expect(after == [0, 0, 0], "the call worked, and the thread kept its new nice value and its policy")
    }

    /// A thread that asked for its children to start with the default
    /// policy (`SCHED_RESET_ON_FORK`) still has that asked after the call.
    @Test func theThreadKeepsItsResetOnForkFlag() throws {
        let resetOnFork: Int32 = 0x4000_0000  // SCHED_RESET_ON_FORK, which the Glibc module does not export
        let after = SliceProbe.onOwnThread { () -> [Int32] in
            var parameters = sched_param(sched_priority: 0)
            guard sched_setscheduler(0, SCHED_OTHER | resetOnFork, &parameters) == 0 else { return [] }
            return [curfew_shim_set_slice(0), sched_getscheduler(0)]
        }
        #expect(after == [0, SCHED_OTHER | resetOnFork])
    }

    @Test func anIdleThreadIsLeftAlone() throws {
        let idle = schedIdle
        let after = SliceProbe.onOwnThread { () -> [Int32] in
            var parameters = sched_param(sched_priority: 0)
            guard sched_setscheduler(0, idle, &parameters) == 0 else { return [] }
            return [curfew_shim_set_slice(0), sched_getscheduler(0)]
        }
        #expect(after == [EPERM, schedIdle])
    }
}
