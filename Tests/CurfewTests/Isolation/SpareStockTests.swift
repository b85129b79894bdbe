import Testing

@testable import Curfew

/// The workers forked ahead of need never outnumber the requests left, and
/// a request never forks behind a fork it could have had.
@Suite struct SpareStockTests {
    typealias Stock<Spare> = SpareStock<Spare, String>

    /// The spare a request got, if it got one waiting.
    func spare<Spare>(_ taken: Stock<Spare>.Taken) -> Spare? {
        if case .spare(let spare) = taken { return spare }
        return nil
    }

    /// Whether a request forks one of its own.
    func forksItsOwn<Spare>(_ taken: Stock<Spare>.Taken) -> Bool {
        if case .none = taken { return true }
        return false
    }

    /// The spare to release, if an ended fork is to be released.
    func released<Spare>(_ ended: Stock<Spare>.Ended) -> Spare? {
        if case .release(let spare) = ended { return spare }
        return nil
    }

    func kept<Spare>(_ ended: Stock<Spare>.Ended) -> Bool {
        if case .kept = ended { return true }
        return false
    }

    /// Before: a spare whose fork ended after the requests it was forked for
    /// had started workers of their own was kept, and waited, a process
    /// doing nothing, until the run ended (under `--isolate plugin`, the last
    /// plugin's job saw it as a sibling).
    @Test func aSpareForkedPastTheRequestsLeftIsReleased() {
        var stock = Stock<String>(wanted: 3, limit: 2)
        #expect(forksItsOwn(stock.take(waiter: "a")))  // the first worker: none waits or comes, it is forked at once
        #expect(stock.startForks() == 2)
        #expect(stock.forget().isEmpty)  // a refused job's request: one is left
        #expect(kept(stock.forked("first")))  // kept: one request is left
        #expect(released(stock.forked("second")) == "second")  // released: no request will take it
        #expect(spare(stock.take(waiter: "b")) == "first")
        #expect(stock.ready.isEmpty && stock.forking == 0 && stock.wanted == 0)
    }

    /// Before: a request that found no spare waiting asked the server for a
    /// fork of its own, queued behind the spares under way, so it waited
    /// for up to three forks, and the spare that came first was released.
    @Test func aRequestWaitsForAForkUnderWayInTheOrderTheyCame() {
        var stock = Stock<Int>(wanted: 4, limit: 2)
        #expect(stock.startForks() == 2)
        guard case .coming(let first) = stock.take(waiter: "first") else {
            Issue.record("the first request did not wait for a fork under way")
            return
        }
        guard case .coming(let second) = stock.take(waiter: "second") else {
            Issue.record("the second request did not wait for the other fork under way")
            return
        }
        #expect([first, second] == ["first", "second"])
        #expect(forksItsOwn(stock.take(waiter: "third")), "each fork under way is promised once")
        // The forks promised are not spares: the one request left gets one.
        #expect(stock.startForks() == 1)
        guard case .handOver(let one, let to) = stock.forked(1) else {
            Issue.record("the first fork to end was not handed over")
            return
        }
        #expect(one == 1 && to == "first")
        guard case .handOver(let none, let toSecond) = stock.forked(nil) else {
            Issue.record("a failed fork was not handed over")
            return
        }
        #expect(none == nil && toSecond == "second", "it starts its worker another way")
        #expect(kept(stock.forked(3)))
        #expect(spare(stock.take(waiter: "fourth")) == 3)
        #expect(stock.forking == 0 && stock.waiters.isEmpty && stock.ready.isEmpty)
    }

    @Test func sparesWaitUpToTheLimitAndTheRequestsLeft() {
        var stock = Stock<Int>(wanted: 5, limit: 2)
        #expect(stock.startForks() == 2)
        #expect(kept(stock.forked(1)))
        #expect(kept(stock.forked(2)))
        #expect(stock.startForks() == 0)
        #expect(spare(stock.take(waiter: "a")) == 2)
        #expect(stock.startForks() == 1)
        #expect(kept(stock.forked(nil)))  // a fork that failed is no longer under way
        #expect(stock.forking == 0)
        #expect(stock.startForks() == 1)
    }

    @Test func afterTheRunNoForkStartsAndAForkThatEndsIsReleased() {
        var stock = Stock<Int>(wanted: 4, limit: 2)
        #expect(stock.startForks() == 2)
        #expect(kept(stock.forked(1)))
        #expect(stock.close() == [1])
        #expect(released(stock.forked(2)) == 2)
        #expect(stock.startForks() == 0)
        #expect(stock.ready.isEmpty)
    }

    /// A request that will not come (a refused job's) lowers what waits; a
    /// replacement (a plugin's worker died) takes a spare without counting.
    @Test func refusedAndReplacedRequestsKeepTheCountTrue() {
        var stock = Stock<Int>(wanted: 3, limit: 2)
        #expect(stock.startForks() == 2)
        #expect(kept(stock.forked(1)))
        #expect(kept(stock.forked(2)))
        #expect(spare(stock.take(counted: false, waiter: "r")) == 2)  // a replacement
        #expect(stock.wanted == 3)
        #expect(stock.forget().isEmpty)  // 2 requests left, 1 spare waits
        #expect(stock.forget().isEmpty)  // 1 left, 1 waits
        #expect(stock.forget() == [1])  // none left: the spare goes
        #expect(stock.ready.isEmpty && stock.wanted == 0)
        #expect(stock.startForks() == 0)
    }
}
