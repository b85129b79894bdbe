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

    @Test func eventsFromManyThreadsArriveOnceEachInTheOrderEachThreadPostedThem() async {
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
}
