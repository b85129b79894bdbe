import Testing

/// The suites whose tests start `curfew` (or a scanner, a compiler, a build)
/// as processes of their own, nested here so that they run one at a time.
///
/// In parallel on two cores they starve each other and the in-process tests
/// of time, and a pipe one test made was seen to stay open in a process
/// another test started at that moment, so a reader the test closed did not
/// go away. In-process tests still run beside them.
@Suite(.serialized) enum ProcessTests {}
