import Synchronization
import Testing

@testable import Curfew
@testable import CurfewHost

/// The schedules' clock runs on the boot-time clock from the wall time at
/// start: both clocks here are stepped by hand.
@Suite struct ScheduleClockTests {
    final class Clocks: Sendable {
        let wall = Mutex<Int64>(1_000_000)
        let boot = Mutex<Int64>(50)
        func step(_ milliseconds: Int64) {
            wall.withLock { $0 += milliseconds }
            boot.withLock { $0 += milliseconds }
        }
        func clock() -> ScheduleClock {
            ScheduleClock(wall: { WallTime(milliseconds: self.wall.withLock { $0 }) }, boot: { self.boot.withLock { $0 } })
        }
    }

    @Test func aWallClockJumpMovesNoScheduleAndIsSaidOnce() {
        let clocks = Clocks()
        var clock = clocks.clock()
        #expect(clock.now().milliseconds == 1_000_000)
        clocks.step(2_000)
        #expect(clock.now().milliseconds == 1_002_000)
        #expect(clock.jump() == nil)
        // An hour back: the schedules' time goes on; shown and stored times follow the wall.
        clocks.wall.withLock { $0 -= 3_600_000 }
        clocks.step(500)
        #expect(clock.now().milliseconds == 1_002_500)
        #expect(clock.jump() == .milliseconds(-3_600_000))
        #expect(clock.jump() == nil, "said once")
        #expect(clock.wallTime(WallTime(milliseconds: 1_003_000)).milliseconds == 1_003_000 - 3_600_000)
        #expect(clock.scheduleTime(WallTime(milliseconds: 1_003_000 - 3_600_000)).milliseconds == 1_003_000)
        // Less than a second of drift is no jump.
        clocks.wall.withLock { $0 += 999 }
        #expect(clock.jump() == nil)
        clocks.wall.withLock { $0 += 3_600_000 }
        #expect(clock.jump() == .milliseconds(3_600_000))
    }

    @Test func timesAtTheEdgesSaturate() {
        let clocks = Clocks()
        let clock = clocks.clock()
        clocks.wall.withLock { $0 = .min }
        #expect(clock.wallTime(WallTime(milliseconds: .min)).milliseconds == .min)
        #expect(clock.scheduleTime(WallTime(milliseconds: .max)).milliseconds == .max)
    }
}
