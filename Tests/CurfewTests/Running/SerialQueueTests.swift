import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Curfew

/// A job's serial queue on Dispatch: its work in order and one at a time,
/// and a queue that keeps feeding itself does not keep the others waiting.
@Suite(.timeLimit(.minutes(1))) struct SerialQueueTests {
    /// Waits for `semaphore` at most twenty seconds; false when it never came.
    func waited(_ semaphore: DispatchSemaphore) -> Bool {
        semaphore.wait(timeout: .now() + 20) == .success
    }

    @Test func itsWorkRunsInOrderAndOneAtATime() {
        let queue = SerialQueue(label: "test")
        let seen = Mutex<(order: [Int], running: Int, most: Int)>(([], 0, 0))
        let done = DispatchSemaphore(value: 0)
        for index in 0..<500 {
            queue.enqueue {
                seen.withLock { $0.running += 1; $0.most = max($0.most, $0.running) }
                usleep(index % 50 == 0 ? 200 : 0)
                seen.withLock { $0.order.append(index); $0.running -= 1 }
                if index == 499 { done.signal() }
            }
        }
        #expect(waited(done))
        seen.withLock {
            #expect($0.order == Array(0..<500))
            #expect($0.most == 1)
        }
    }

    /// Before, with the sequel enqueued on the queue itself, libdispatch
    /// ran it on the same thread at once: four queues that each spun 5 ms
    /// and fed themselves held both cores' workers, and a fifth queue's
    /// work never ran.
    @Test func aQueueThatFeedsItselfLetsTheOthersRun() {
        let stop = Atomic<Bool>(false)
        let spinners = (0..<4).map { SerialQueue(label: "spinner \($0)") }
        for spinner in spinners {
            @Sendable func spin() {
                let end = ContinuousClock.now + .milliseconds(5)
                while ContinuousClock.now < end {}
                if !stop.load(ordering: .relaxed) { spinner.enqueueAfterOthers(spin) }
            }
            spinner.enqueue(spin)
        }
        usleep(20_000)
        let ran = DispatchSemaphore(value: 0)
        SerialQueue(label: "other").enqueue { ran.signal() }
        #expect(waited(ran))
        stop.store(true, ordering: .relaxed)
    }

    @Test func itIsBusyWhileItsWorkIsQueuedOrRunning() {
        let queue = SerialQueue(label: "test")
        #expect(!queue.isBusy)
        let go = DispatchSemaphore(value: 0)
        let ran = DispatchSemaphore(value: 0)
        queue.enqueue { go.wait() }
        queue.enqueueAfterOthers { ran.signal() }
        #expect(queue.isBusy)
        go.signal()
        #expect(waited(ran))
        let give = ContinuousClock.now + .seconds(20)
        while queue.isBusy && ContinuousClock.now < give { usleep(1000) }
        #expect(!queue.isBusy)
    }

    /// A serial target makes every queue on it share one thread.
    @Test func queuesOnASerialTargetNeverRunAtOnce() {
        let target = DispatchQueue(label: "one thread")
        let queues = (0..<8).map { SerialQueue(label: "q\($0)", target: target) }
        let seen = Mutex<(running: Int, most: Int, count: Int)>((0, 0, 0))
        let done = DispatchSemaphore(value: 0)
        for round in 0..<50 {
            for queue in queues {
                let work: @Sendable () -> Void = {
                    seen.withLock { $0.running += 1; $0.most = max($0.most, $0.running) }
                    seen.withLock {
                        $0.running -= 1
                        $0.count += 1
                        if $0.count == 400 { done.signal() }
                    }
                }
                if round % 2 == 0 { queue.enqueue(work) } else { queue.enqueueAfterOthers(work) }
            }
        }
        #expect(waited(done))
        #expect(seen.withLock { $0.most } == 1)
    }
}
