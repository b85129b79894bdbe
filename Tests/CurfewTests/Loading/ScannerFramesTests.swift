import Testing
import _CurfewShims

@testable import Curfew

/// A scanner's answer is a claim made by a process that ran plugin code:
/// it is believed only as far as the real scanner could have said it.
@Suite struct ScannerFramesTests {
    func dlopenFailed(_ text: [UInt8]) -> ArraySlice<UInt8> {
        var payload: [UInt8] = []
        for word in [CURFEW_SCAN_DLOPEN_FAILED, CURFEW_SCAN_CANNOT_LOAD] {
            withUnsafeBytes(of: word.littleEndian) { payload += $0 }
        }
        return ArraySlice(payload + text)
    }

    /// Before: plugin code could forge a dynamic loader's refusal of up to
    /// 4 MiB, which became the file's reason in every list and in the cache.
    @Test func aLoaderRefusalLongerThanTheScannerSendsIsNotBelieved() {
        let longest = [UInt8](repeating: UInt8(ascii: "x"), count: Int(CURFEW_SCAN_MAX_DLERROR_BYTES))
        let result = ScannerFrames.result(dlopenFailed(longest), file: "/p/a.so")
        #expect(result == .rejected(code: CurfewError.Code.loadFailed.rawValue, reason: "Cannot be loaded: " + String(repeating: "x", count: longest.count)))
        #expect(ScannerFrames.result(dlopenFailed(longest + [UInt8(ascii: "x")]), file: "/p/a.so") == nil)
    }
}
