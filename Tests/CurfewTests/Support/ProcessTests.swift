import Testing

/// The suites whose tests start `curfew` (or a scanner, a compiler, a build)
/// as processes of their own, in two lanes, each running its suites one at
/// a time: in parallel on two cores, more would starve each other and the
/// in-process tests, which still run beside them. Two lanes, not one,
/// because every descriptor the host and the tests open is close-on-exec
/// and every spawn closes the rest, so no test's process holds another's
/// pipe. A suite joins the lane whose suites take less time (balanced from
/// a run's timings). Under a sanitizer, which multiplies what every process
/// costs, the lanes run one after the other, as one.
@Suite(processLanes) enum ProcessTests {
    @Suite(.serialized) enum First {}
    @Suite(.serialized) enum Second {}
}

/// ``ProcessTests``' own trait: its lanes one after the other under a sanitizer.
let processLanes: any SuiteTrait = Fixtures.sanitized ? ParallelizationTrait.serialized : ConditionTrait.enabled(if: true)
