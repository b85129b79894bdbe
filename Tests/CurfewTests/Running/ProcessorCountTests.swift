import Glibc
import Testing

@testable import Curfew

/// The processors Curfew sizes itself by (`--jobs`' default, the hook
/// threads, the scanners) are the ones it may run on, not every one online:
/// in a container given two CPUs of sixty-four, `--jobs` defaults to two.
struct ProcessorCountTests {
    @Test(.enabled(if: sysconf(Int32(_SC_NPROCESSORS_ONLN)) > 1, "needs a machine with two processors or more"))
    func theCountFollowsTheCPUsThisThreadMayRunOn() throws {
        typealias Call = @convention(c) () -> Int32
        let helpers = try #require(dlopen(try Fixtures.compile("affinity.c"), RTLD_NOW | RTLD_LOCAL))
        let bind = unsafeBitCast(try #require(dlsym(helpers, "fixture_bind_to_first_cpu")), to: Call.self)
        let unbind = unsafeBitCast(try #require(dlsym(helpers, "fixture_unbind")), to: Call.self)
        #expect(RunConfiguration.activeProcessorCount > 1)
        // Bound for the length of this synchronous test only.
        try #require(bind() == 0)
        let bound = RunConfiguration.activeProcessorCount
        #expect(unbind() == 0)
        #expect(bound == 1)
    }
}
