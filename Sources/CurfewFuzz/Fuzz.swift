// Built two ways. With `-DFUZZING` and `--sanitize=fuzzer`, libFuzzer
// drives the target that `CURFEW_FUZZ_TARGET` names (see `.ci/fuzz`).
// Otherwise this is `curfew-fuzz TARGET FILE...`: it feeds each file to the
// target once, to replay a corpus or a finding under a debugger.
import Curfew

/// A line on stderr.
func complain(_ text: String) {
    try? Syscalls.writeAll(Syscalls.standardError, Array((text + "\n").utf8))
}

#if FUZZING
private let target: FuzzTarget = {
    guard let target = FuzzTarget.fromEnvironment(Syscalls.environmentValue("CURFEW_FUZZ_TARGET")) else {
        let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: ", ")
        complain("curfew-fuzz: set CURFEW_FUZZ_TARGET to one of: \(names)")
        Syscalls.exit(2)
    }
    return target
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    target.run(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
    return 0
}
#else
@main
struct FuzzReplay {
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        guard let name = arguments.first, let target = FuzzTarget(rawValue: name) else {
            let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: "|")
            complain("usage: curfew-fuzz \(names) FILE...")
            Syscalls.exit(64)
        }
        for path in arguments.dropFirst() {
            guard let bytes = try? Syscalls.readToEnd(path, limit: 1 << 30) else {
                complain("curfew-fuzz: cannot read \(path)")
                Syscalls.exit(66)
            }
            target.run(bytes)
        }
        print("\(arguments.count - 1) inputs ran through \(name)")
    }
}
#endif
