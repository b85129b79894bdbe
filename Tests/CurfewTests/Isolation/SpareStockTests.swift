import Testing

@testable import Curfew

/// The workers forked ahead of need never outnumber the requests left.
@Suite struct SpareStockTests {
    /// Before: a spare whose fork ended after the requests it was forked for
    /// had started workers of their own was kept, and waited, a process
    /// doing nothing, until the run ended (under `--isolate plugin`, the last
    /// plugin's job saw it as a sibling).
    @Test func aSpareForkedPastTheRequestsLeftIsReleased() {
        var stock = SpareStock<String>(wanted: 3, limit: 2)
        #expect(stock.take() == nil)  // the first worker: none waits, it is forked at once
        #expect(stock.startForks() == 2)
        #expect(stock.take() == nil)  // the second comes before the spares are ready
        #expect(stock.startForks() == 0)
        #expect(stock.forked("first") == nil)  // kept: one request is left
        #expect(stock.forked("second") == "second")  // released: no request will take it
        #expect(stock.take() == "first")
        #expect(stock.ready.isEmpty && stock.forking == 0 && stock.wanted == 0)
    }

    @Test func sparesWaitUpToTheLimitAndTheRequestsLeft() {
        var stock = SpareStock<Int>(wanted: 5, limit: 2)
        #expect(stock.startForks() == 2)
        #expect(stock.forked(1) == nil)
        #expect(stock.forked(2) == nil)
        #expect(stock.startForks() == 0)
        #expect(stock.take() == 2)
        #expect(stock.startForks() == 1)
        #expect(stock.forked(nil) == nil)  // a fork that failed is no longer under way
        #expect(stock.forking == 0)
        #expect(stock.startForks() == 1)
    }

    @Test func afterTheRunNoForkStartsAndAForkThatEndsIsReleased() {
        var stock = SpareStock<Int>(wanted: 4, limit: 2)
        #expect(stock.startForks() == 2)
        #expect(stock.forked(1) == nil)
        #expect(stock.close() == [1])
        #expect(stock.forked(2) == 2)
        #expect(stock.startForks() == 0)
        #expect(stock.ready.isEmpty)
    }

    /// A request that will not come (a refused job's) lowers what waits; a
    /// replacement (a plugin's worker died) takes a spare without counting.
    @Test func refusedAndReplacedRequestsKeepTheCountTrue() {
        var stock = SpareStock<Int>(wanted: 3, limit: 2)
        #expect(stock.startForks() == 2)
        #expect(stock.forked(1) == nil)
        #expect(stock.forked(2) == nil)
        #expect(stock.take(counted: false) == 2)  // a replacement
        #expect(stock.wanted == 3)
        #expect(stock.forget().isEmpty)  // 2 requests left, 1 spare waits
        #expect(stock.forget().isEmpty)  // 1 left, 1 waits
        #expect(stock.forget() == [1])  // none left: the spare goes
        #expect(stock.ready.isEmpty && stock.wanted == 0)
        #expect(stock.startForks() == 0)
    }
}
