import Testing
import _CurfewShims

@testable import Curfew

/// A scanner's answer is a claim made by a process that ran plugin code:
/// it is believed only as far as the real scanner could have said it.
@Suite struct ScannerFramesTests {
    /// Words in the protocol's byte order (the machine's), then `bytes`.
    func payload(_ words: [UInt32], _ bytes: [UInt8] = []) -> ArraySlice<UInt8> {
        var payload: [UInt8] = []
        for word in words {
            withUnsafeBytes(of: word) { payload += $0 }
        }
        return ArraySlice(payload + bytes)
    }

    func dlopenFailed(_ text: [UInt8]) -> ArraySlice<UInt8> {
        payload([CURFEW_SCAN_DLOPEN_FAILED, CURFEW_SCAN_CANNOT_LOAD], text)
    }

    /// Before: plugin code could forge a dynamic loader's refusal of up to
    /// 4 MiB, which became the file's reason in every list and in the cache.
    @Test func aLoaderRefusalLongerThanTheScannerSendsIsNotBelieved() {
        let longest = [UInt8](repeating: UInt8(ascii: "x"), count: Int(CURFEW_SCAN_MAX_DLERROR_BYTES))
        let result = ScannerFrames.result(dlopenFailed(longest), file: "/p/a.so")
        #expect(result == .rejected(code: CurfewError.Code.loadFailed.rawValue, reason: "Cannot be loaded: " + String(repeating: "x", count: longest.count)))
        #expect(ScannerFrames.result(dlopenFailed(longest + [UInt8(ascii: "x")]), file: "/p/a.so") == nil)
    }

    /// Before: the same, through a message the entry logged before it
    /// declined, which the scanner cuts at CURFEW_SCAN_MAX_MESSAGE_BYTES.
    @Test func aDeclinedEntrysMessageLongerThanTheScannerSendsIsNotBelieved() {
        let longest = Int(CURFEW_SCAN_MAX_MESSAGE_BYTES)
        let fits = ScannerFrames.result(
            payload([CURFEW_SCAN_DECLINED, 1, UInt32(longest)], [UInt8](repeating: UInt8(ascii: "m"), count: longest)), file: "/p/a.so")
        guard case .rejected(_, let reason) = fits else {
            Issue.record("a message the scanner could send was refused: \(String(describing: fits))")
            return
        }
        #expect(reason.contains(String(repeating: "m", count: 100)))
        let forged = payload([CURFEW_SCAN_DECLINED, 1, UInt32(longest + 1)], [UInt8](repeating: UInt8(ascii: "m"), count: longest + 1))
        #expect(ScannerFrames.result(forged, file: "/p/a.so") == nil)
    }

    /// A scanner whose server died before telling how it ended (plugin code,
    /// maybe a sibling's, killed the server): a whole answer stands, not
    /// cached; one cut short is no verdict of the file's. Before, a good
    /// file's whole answer was rejected (seen once in CI, for a scanner the
    /// server reaped just before a sibling killed it).
    @Test func anAnswerWhoseScannersEndIsUnknownStandsUncached() {
        let answer = FileResult.rejected(code: "entry-declined", reason: "declined")
        var whole = ScannerSaid()
        _ = whole.hear([.loading, .answer(answer), .done])
        #expect(whole.verdict(status: nil) == (answer, false))
        var cut = ScannerSaid()
        _ = cut.hear([.loading])
        #expect(cut.verdict(status: nil).cacheable == false)
        #expect(cut.verdict(status: nil).result != answer)
        #expect(whole.verdict(status: 0) == (answer, true), "a clean exit: cached")
    }

    /// A scanner that could not confine itself says so before it opens its
    /// file: a final verdict, never cached (it says nothing of the file), and
    /// no reason to scan the file again alone. Said once the file was
    /// loading, it is plugin code's, and refused.
    @Test func anUnconfinedScannersAnswerCountsOnlyBeforeItsFileLoads() throws {
        let said = ScannerFrames.result(payload([CURFEW_SCAN_UNCONFINED, 1], Array("Landlock".utf8)), file: "/p/a.so")
        let answer = try #require(said)
        #expect(answer == .rejected(
            code: CurfewError.Code.sandboxFailed.rawValue,
            reason: "Its scanner could not be sandboxed (Landlock: Operation not permitted), so the file was not loaded."))
        #expect(ScannerFrames.result(payload([CURFEW_SCAN_UNCONFINED, 1], Array(repeating: 0x41, count: 257)), file: "/p/a.so") == nil)
        var before = ScannerSaid()
        _ = before.hear([.answer(answer), .done])
        #expect(!before.endedBeforeLoading)
        #expect(before.verdict(status: 0) == (answer, false))
        var after = ScannerSaid()
        _ = after.hear([.loading, .answer(answer), .done])
        #expect(after.verdict(status: 0).result != answer)
        #expect(after.verdict(status: 0).cacheable, "a forged word is the file's own doing")
    }
}
