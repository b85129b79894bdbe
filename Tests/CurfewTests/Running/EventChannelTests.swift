import Dispatch
import Synchronization
import Testing

@testable import Curfew

/// The run's event channel: every event reaches the handler once, in the
/// order it was posted, one at a time, each `then` right after its event.
struct EventChannelTests {
    /// What the handler and the `then`s saw, in the order they ran.
    final class Seen: Sendable {
        let lines = Mutex<[String]>([])
        let running = Atomic<Int>(0)
        let overlapped = Atomic<Bool>(false)
        func note(_ line: String) { lines.withLock { $0.append(line) } }
    }

    @Test func eventsFromManyThreadsArriveOnceEachInTheOrderEachThreadPostedThem() {
        let seen = Seen()
        let threads = 4
        let perThread = 500
        let done = DispatchSemaphore(value: 0)
        let channel = EventChannel(clock: MonotonicClock()) { event, _ in
            if seen.running.add(1, ordering: .relaxed).newValue > 1 { seen.overlapped.store(true, ordering: .relaxed) }
            if case .log(_, _, let message) = event { seen.note(message) }
            seen.running.subtract(1, ordering: .relaxed)
        }
        let finished = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            for index in 0..<perThread {
                channel.post(.log(job: "j", level: .info, message: "\(thread) \(index)")) {
                    seen.note("then \(thread) \(index)")
                    if finished.add(1, ordering: .relaxed).newValue == threads * perThread { done.signal() }
                }
            }
        }
        #expect(done.wait(timeout: .now() + 30) == .success)
        let lines = seen.lines.withLock { $0 }
        let overlapped = seen.overlapped.load(ordering: .relaxed)
        #expect(!overlapped, "the handler never runs twice at once")
        #expect(lines.count == 2 * threads * perThread)
        // Each event's then comes right after it; each thread's events in its order.
        var next = [Int](repeating: 0, count: threads)
        for pair in stride(from: 0, to: lines.count - 1, by: 2) {
            let event = lines[pair].split(separator: " ").compactMap { Int($0) }
            #expect(lines[pair + 1] == "then \(lines[pair])")
            guard event.count == 2 else {
                Issue.record("not an event: \(lines[pair])")
                return
            }
            #expect(event[1] == next[event[0]], "thread \(event[0])'s events in order")
            next[event[0]] = event[1] + 1
        }
        #expect(next == [Int](repeating: perThread, count: threads))
    }

    /// Thousands wait while the handler is held up (the channel's list
    /// compacts as they are handed over), and a `then` that posts puts its
    /// event behind every one posted before it.
    @Test func aBacklogAndEventsPostedFromThensKeepTheirOrder() {
        let seen = Seen()
        let release = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        let count = 3000
        let channel = Mutex<EventChannel?>(nil)
        let made = EventChannel(clock: MonotonicClock()) { event, _ in
            guard case .log(_, _, let message) = event else { return }
            if message == "0" { release.wait() }
            seen.note(message)
            if message == "last" { done.signal() }
        }
        channel.withLock { $0 = made }
        for index in 0..<count {
            made.post(.log(job: "j", level: .info, message: "\(index)")) {
                // Every hundredth posts one more from its then.
                guard index % 100 == 0 else { return }
                channel.withLock { $0 }?.post(.log(job: "j", level: .info, message: "after \(index)"))
            }
        }
        release.signal()
        // Posted once every then above has run: the last thing handed over.
        let last = DispatchSemaphore(value: 0)
        made.post(.log(job: "j", level: .info, message: "marker")) { last.signal() }
        #expect(last.wait(timeout: .now() + 30) == .success)
        made.post(.log(job: "j", level: .info, message: "last"))
        #expect(done.wait(timeout: .now() + 30) == .success)
        let lines = seen.lines.withLock { $0 }
        #expect(lines.count == count + count / 100 + 2)
        #expect(lines.filter { !$0.hasPrefix("after") && $0 != "marker" && $0 != "last" } == (0..<count).map { "\($0)" })
        for index in stride(from: 0, to: count, by: 100) {
            let event = lines.firstIndex(of: "\(index)")
            let after = lines.firstIndex(of: "after \(index)")
            #expect(event != nil && after != nil && event! < after!, "after \(index) comes after \(index)")
        }
    }

    /// A flood's storage goes once it has been handed over: a run that once
    /// had thousands of events waiting does not keep room for them to its end.
    @Test func theListLetsGoOfAFloodOnceItIsHandedOver() {
        let release = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        let channel = EventChannel(clock: MonotonicClock()) { event, _ in
            guard case .log(_, _, let message) = event else { return }
            if message == "0" { release.wait() }
            if message == "last" { done.signal() }
        }
        for index in 0..<5000 { channel.post(.log(job: "j", level: .info, message: "\(index)")) }
        channel.post(.log(job: "j", level: .info, message: "last"))
        #expect(channel.waitingCapacity >= 4000, "the flood waits")
        release.signal()
        #expect(done.wait(timeout: .now() + 30) == .success)
        #expect(channel.waitingCapacity <= 1024)
    }
}

