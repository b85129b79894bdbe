// Built two ways. With `-DFUZZING` and `--sanitize=fuzzer`, libFuzzer
// drives the target that `CURFEW_FUZZ_TARGET` names (see `.ci/fuzz`).
// Otherwise this is `curfew-fuzz TARGET FILE...`: it feeds each file to the
// target once, to replay a corpus or a finding under a debugger.
import Glibc

/// A line on stderr.
func complain(_ text: String) {
    let bytes = Array((text + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
}

#if FUZZING
private let target: FuzzTarget = {
    guard let target = FuzzTarget.fromEnvironment(getenv("CURFEW_FUZZ_TARGET").map { String(cString: $0) }) else {
        let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: ", ")
        complain("curfew-fuzz: set CURFEW_FUZZ_TARGET to one of: \(names)")
        exit(2)
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
            exit(64)
        }
        for path in arguments.dropFirst() {
            guard let file = fopen(path, "rb") else {
                complain("curfew-fuzz: cannot read \(path)")
                exit(66)
            }
            var bytes: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = fread(&buffer, 1, buffer.count, file)
                if count <= 0 { break }
                bytes += buffer[..<count]
            }
            fclose(file)
            target.run(bytes)
        }
        print("\(arguments.count - 1) inputs ran through \(name)")
    }
}
#endif
