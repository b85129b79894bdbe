import Glibc
import Testing
import _CurfewShims

@testable import Curfew

/// The processors Curfew sizes itself by (`--jobs`' default, the hook
/// threads, the scanners) are the ones it may run on, not every one online:
/// in a container given two CPUs of sixty-four, `--jobs` defaults to two.
struct ProcessorCountTests {
    @Test(.enabled(if: sysconf(Int32(_SC_NPROCESSORS_ONLN)) > 1, "needs a machine with two processors or more"))
    func theCountFollowsTheCPUsThisThreadMayRunOn() throws {
        #expect(RunConfiguration.activeProcessorCount > 1)
        // Bound for the length of this synchronous test only.
        try #require(curfew_shim_bind_for_sleep(nil, 0) >= 0)
        let bound = RunConfiguration.activeProcessorCount
        #expect(curfew_shim_unbind() == 0)
        #expect(bound == 1)
    }
}
