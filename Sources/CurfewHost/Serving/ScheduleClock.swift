import Curfew

/// The time `curfew serve`'s schedules run on: the wall time when the server
/// started, advanced by the boot-time clock (monotonic, and counting time
/// suspended). A period is a period whatever the wall clock does: a jump of
/// the wall clock (an NTP step, `date -s`) moves no `every` slot, retry or
/// requested run. What is shown or stored is converted to the wall clock of
/// the moment, so `status` and the next server still read wall times.
struct ScheduleClock: Sendable {
    private let wall: @Sendable () -> WallTime
    private let boot: @Sendable () -> Int64
    private let origin: (wall: Int64, boot: Int64)
    /// The wall clock's lead on this one when last checked (``jump()``).
    private var lead: Duration = .zero

    /// The smallest change of the wall clock's lead that counts as a jump:
    /// reading the two clocks one after the other differs by far less.
    static let smallestJump: Duration = .seconds(1)

    /// - Parameters:
    ///   - wall: The wall clock (tests give one they move by hand).
    ///   - boot: Milliseconds on a clock that never jumps.
    init(wall: @escaping @Sendable () -> WallTime = { .now() }, boot: @escaping @Sendable () -> Int64 = Self.bootMilliseconds) {
        self.wall = wall
        self.boot = boot
        origin = (wall().milliseconds, boot())
    }

    static func bootMilliseconds() -> Int64 {
        BootTime.milliseconds()
    }

    /// Now, on the schedules' timeline.
    func now() -> WallTime {
        WallTime(milliseconds: origin.wall).later(by: .milliseconds(boot() &- origin.boot))
    }

    /// How far the wall clock is ahead of this one now.
    func currentLead() -> Duration {
        .milliseconds(wall().milliseconds) - .milliseconds(now().milliseconds)
    }

    /// A time on the schedules' timeline, on the wall clock of now.
    func wallTime(_ time: WallTime) -> WallTime {
        time.later(by: currentLead())
    }

    /// A time on the wall clock of now (from the store, or history), on the
    /// schedules' timeline.
    func scheduleTime(_ time: WallTime) -> WallTime {
        time.earlier(by: currentLead())
    }

    /// How far the wall clock jumped since the last call (forward when
    /// positive), or `nil` when it moved with this clock.
    mutating func jump() -> Duration? {
        let now = currentLead()
        defer { lead = now }
        let moved = now - lead
        return moved >= Self.smallestJump || moved <= .zero - Self.smallestJump ? moved : nil
    }
}
