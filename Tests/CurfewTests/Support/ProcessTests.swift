import Testing

/// The suites whose tests start `curfew` (or a scanner, a compiler, a build)
/// as processes of their own, in two lanes, each running its suites one at
/// a time: in parallel on two cores, more would starve each other and the
/// in-process tests, which still run beside them. Two lanes, not one,
/// because every descriptor the host and the tests open is close-on-exec,
/// so no test's process inherits another's pipe. A suite joins the lane
/// whose suites take less time (balanced from a run's timings).
enum ProcessTests {
    @Suite(.serialized) enum First {}
    @Suite(.serialized) enum Second {}
}
