import Dispatch
import Synchronization
import Testing

@testable import Curfew

@Suite struct ManualClockTests {
    @Test func timersFireInDeadlineOrderWithTheClockAtTheirDeadline() {
        let clock = ManualClock(start: CurfewInstant(nanoseconds: 0))
        let fired = Mutex<[UInt64]>([])
        for delay in [30, 10, 20] as [UInt64] {
            _ = clock.schedule(at: CurfewInstant(nanoseconds: delay)) {
                fired.withLock { $0.append(clock.now().nanoseconds) }
            }
        }
        let cancelled = clock.schedule(at: CurfewInstant(nanoseconds: 15)) {
            fired.withLock { $0.append(999) }
        }
        cancelled.cancel()
        clock.advance(by: .nanoseconds(25))
        #expect(fired.withLock { $0 } == [10, 20])
        #expect(clock.now().nanoseconds == 25)
        clock.advance(by: .nanoseconds(5))
        #expect(fired.withLock { $0 } == [10, 20, 30])
    }
}
