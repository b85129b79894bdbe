import _CurfewShims

// MARK: Measuring

func now() -> UInt64 { curfew_shim_monotonic_nanoseconds() }

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .nan }
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

func percentile(_ values: [Double], _ p: Double) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .nan }
    let rank = Int((p / 100 * Double(sorted.count - 1)).rounded())
    return sorted[min(max(rank, 0), sorted.count - 1)]
}

/// Heap bytes in use: what grants and timers allocate, without the page
/// reuse that makes resident-size deltas read zero after a first round.
func heapBytes() -> Double {
    Double(curfew_shim_heap_bytes_in_use())
}

/// One row of the report: a measure of Curfew and of its baseline, per repetition.
struct Row {
    let name: String
    let measure: String
    let unit: String
    var values: [Double] = []
    let baselineName: String
    var baseline: [Double] = []
    /// The target for value ÷ baseline, when there is one: "≤ 1.5", "≥ 1.8".
    var target: Target?
    var note: String?

    enum Target {
        case atMost(Double)
        case atLeast(Double)
        case absoluteAtMost(Double, String)
        case absoluteAtLeast(Double, String)

        var text: String {
            switch self {
            case .atMost(let ratio): "ratio ≤ \(ratio)"
            case .atLeast(let ratio): "ratio ≥ \(ratio)"
            case .absoluteAtMost(_, let text), .absoluteAtLeast(_, let text): text
            }
        }
    }

    /// The median of the paired ratios, value ÷ baseline of the same
    /// repetition (the two were measured interleaved, so both saw the same
    /// machine); the ratio of the medians when the counts differ.
    var ratio: Double? {
        guard !values.isEmpty, !baseline.isEmpty else { return nil }
        guard values.count == baseline.count else { return median(values) / median(baseline) }
        return median(zip(values, baseline).map { $0 / $1 })
    }

    var met: Bool? {
        guard let target else { return nil }
        switch target {
        case .atMost(let limit): return ratio.map { $0 <= limit }
        case .atLeast(let limit): return ratio.map { $0 >= limit }
        case .absoluteAtMost(let limit, _): return values.isEmpty ? nil : median(values) <= limit
        case .absoluteAtLeast(let limit, _): return values.isEmpty ? nil : median(values) >= limit
        }
    }
}

// MARK: Report

func format(_ value: Double) -> String {
    if value.isNaN { return "-" }
    if abs(value) >= 100 { return String(Int64(value.rounded())) }
    if abs(value) >= 10 { return String(Double(Int64((value * 10).rounded())) / 10) }
    return String(Double(Int64((value * 1000).rounded())) / 1000)
}

func pad(_ text: String, _ width: Int, right: Bool = false) -> String {
    let padding = String(repeating: " ", count: max(0, width - text.count))
    return right ? padding + text : text + padding
}

func table(_ rows: [Row]) -> String {
    let header = ["case", "measure", "median", "min", "max", "baseline", "baseline median", "ratio", "target", "met"]
    let cells = rows.map { row -> [String] in
        let unit = row.unit.isEmpty ? "" : " \(row.unit)"
        return [
            row.name, row.measure,
            row.values.isEmpty ? "-" : format(median(row.values)) + unit,
            row.values.isEmpty ? "-" : format(row.values.min()!),
            row.values.isEmpty ? "-" : format(row.values.max()!),
            row.baselineName,
            row.baseline.isEmpty ? "-" : format(median(row.baseline)) + unit,
            row.ratio.map { format($0) + "×" } ?? "-",
            row.target?.text ?? "-",
            row.met.map { $0 ? "yes" : "NO" } ?? "-",
        ]
    }
    let widths = header.indices.map { column in ([header] + cells).map { $0[column].count }.max()! }
    let render = { (line: [String]) in
        line.indices.map { pad(line[$0], widths[$0], right: [2, 3, 4, 6, 7].contains($0)) }.joined(separator: "  ")
    }
    return ([render(header)] + cells.map(render)).joined(separator: "\n")
}

func jsonText(_ rows: [Row], options: Options) -> String {
    func number(_ value: Double?) -> String {
        guard let value, value.isFinite else { return "null" }
        return "\(value)"
    }
    func string(_ text: String?) -> String {
        guard let text else { return "null" }
        var out = "\""
        for character in text {
            switch character {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            default: out.append(character)
            }
        }
        return out + "\""
    }
    let objects = rows.map { row in
        """
        {"case":\(string(row.name)),"measure":\(string(row.measure)),"unit":\(string(row.unit)),\
        "values":[\(row.values.map { number($0) }.joined(separator: ","))],\
        "median":\(number(row.values.isEmpty ? nil : median(row.values))),\
        "baseline":\(string(row.baselineName)),"baseline_values":[\(row.baseline.map { number($0) }.joined(separator: ","))],\
        "baseline_median":\(number(row.baseline.isEmpty ? nil : median(row.baseline))),\
        "ratio":\(number(row.ratio)),"target":\(string(row.target?.text)),\
        "met":\(row.met.map { $0 ? "true" : "false" } ?? "null"),"note":\(string(row.note))}
        """
    }
    return "{\"repetitions\":\(options.repetitions),\"tiny\":\(options.tiny),\"rows\":[\n" + objects.joined(separator: ",\n") + "\n]}"
}
