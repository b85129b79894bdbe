import Curfew
import CurfewHost

/// `curfew calendar`: each expression's normalized form and next elapses,
/// laid out as `systemd-analyze calendar` lays them out, so the two can be
/// read side by side (and the suite checks one against the other).
enum CalendarCommand {
    static func run(_ options: CalendarOptions, now: WallTime = .now()) -> Int32 {
        let console = Console(json: false)
        let local = TimeZones.local()
        let nowMicroseconds = now.milliseconds.multipliedClamped(by: 1000)
        let base: Int64
        if let text = options.baseTime {
            do throws(CurfewError) {
                base = try baseTime(text)
            } catch {
                console.error("Error: \(Untrusted.line(error.description))")
                return ExitCode.failure
            }
        } else {
            base = nowMicroseconds
        }
        var status = ExitCode.success
        for (index, expression) in options.expressions.enumerated() {
            var lines: [String] = []
            defer {
                if index + 1 < options.expressions.count { lines.append("") }
                if !lines.isEmpty { console.machine(lines: lines) }
            }
            let spec: CalendarSpec
            let zone: ZoneRules
            do throws(CurfewError) {
                spec = try CalendarSpec(expression)
                zone = try spec.zone.map { name throws(CurfewError) in try TimeZones.zone(named: name) } ?? local
            } catch {
                console.error("Error: \(Untrusted.line(error.description))")
                status = ExitCode.failure
                continue
            }
            let normalized = spec.description
            if normalized != expression { lines.append(label("Original form") + Untrusted.line(expression)) }
            lines.append(label("Normalized form") + normalized)
            var after = base
            for iteration in 0..<options.iterations {
                guard let next = spec.next(after: after, in: zone) else {
                    if iteration == 0 { lines.append(label("Next elapse") + "never") }
                    break
                }
                lines.append(label(iteration == 0 ? "Next elapse" : "Iter. #\(iteration + 1)") + local.stamp(next))
                if !local.isUTC { lines.append(label("(in UTC)") + ZoneRules.utc.stamp(next)) }
                lines.append(label("From now") + relative(next &- nowMicroseconds))
                after = next
            }
        }
        return status
    }

    /// `name:`, right-aligned as systemd-analyze aligns its labels.
    private static func label(_ name: String) -> String {
        String(repeating: " ", count: max(0, 15 - name.count)) + name + ": "
    }

    /// How far off a time is, in systemd's words: "1 day 3h left", "8 months 7 days ago".
    static func relative(_ microseconds: Int64) -> String {
        let (span, suffix) = microseconds >= 0 ? (microseconds, "left") : (0 &- microseconds, "ago")
        let second: Int64 = 1_000_000
        let minute = 60 * second, hour = 60 * minute, day = 24 * hour, week = 7 * day
        let year: Int64 = 31_557_600 * second, month: Int64 = 2_629_800 * second
        func count(_ value: Int64, _ unit: String) -> String { "\(value) \(unit)\(value == 1 ? "" : "s")" }
        let text: String
        if span >= year {
            text = count(span / year, "year") + " " + count(span % year / month, "month")
        } else if span >= month {
            text = count(span / month, "month") + " " + count(span % month / day, "day")
        } else if span >= week {
            text = count(span / week, "week") + " " + count(span % week / day, "day")
        } else if span >= 2 * day {
            text = count(span / day, "day")
        } else if span >= 25 * hour {
            text = "1 day \((span - day) / hour)h"
        } else if span >= 6 * hour {
            text = "\(span / hour)h"
        } else if span >= hour {
            text = "\(span / hour)h \(span % hour / minute)min"
        } else if span >= 5 * minute {
            text = "\(span / minute)min"
        } else if span >= minute {
            text = "\(span / minute)min \(span % minute / second)s"
        } else if span >= second {
            text = "\(span / second)s"
        } else if span >= 1000 {
            text = "\(span / 1000)ms"
        } else if span > 0 {
            text = "\(span)us"
        } else {
            return "now"
        }
        return text + " " + suffix
    }

    /// `--base-time`: `@` and seconds since 1970, or an expression that
    /// names one moment (`2026-03-28 12:00:00 UTC`).
    static func baseTime(_ text: String) throws(CurfewError) -> Int64 {
        do throws(CurfewError) {
            return try CalendarSpec.moment(text)
        } catch {
            throw CurfewError(.badConfig, "--base-time: \(error.description)")
        }
    }
}
