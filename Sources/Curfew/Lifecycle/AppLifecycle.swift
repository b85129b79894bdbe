import CCurfew
import Synchronization

extension AppState {
    /// Whether grants' clocks run in this state: only in the background.
    public var runsGrantClocks: Bool { self == .background }

    /// The events that take the host from this state to `target`, one step
    /// at a time (background ↔ inactive ↔ active), each with the state it
    /// leads to; none when already there.
    public func path(to target: AppState) -> [(event: AppEvent, state: AppState)] {
        switch (self, target) {
        case (.background, .inactive): [(.willEnterForeground, .inactive)]
        case (.background, .active): [(.willEnterForeground, .inactive), (.didBecomeActive, .active)]
        case (.inactive, .active): [(.didBecomeActive, .active)]
        case (.inactive, .background): [(.didEnterBackground, .background)]
        case (.active, .inactive): [(.willResignActive, .inactive)]
        case (.active, .background): [(.willResignActive, .inactive), (.didEnterBackground, .background)]
        default: []
        }
    }
}

/// The app state of a host and the events that change it: what an
/// embedding app drives, as UIKit drives an app's delegate.
///
/// Give it to runners (``RunConfiguration/lifecycle``): each job they run
/// sees its state through `app_state`, gets its events through its
/// `app_event` hook, and has its grant's clock stopped in the foreground
/// and started, with the whole budget, on entering the background.
///
/// ```swift
/// let app = AppLifecycle(state: .active)
/// var configuration = RunConfiguration()
/// configuration.lifecycle = app
/// let runner = Runner(jobs: jobs, configuration: configuration)
/// runner.start { results in … }
/// app.move(to: .background)   // will-resign-active, did-enter-background
/// ```
///
/// - Important: Transitions are delivered one at a time, in order, to
///   every subscriber; a subscriber that joins reads the state it joins in.
public final class AppLifecycle: Sendable {
    /// A subscriber's callback: the event and the state it led to.
    typealias Observer = @Sendable (AppEvent, AppState) -> Void

    private struct State {
        var state: AppState
        var observers: [UInt64: Observer] = [:]
        var nextToken: UInt64 = 0
        var terminated = false
    }

    private let state: Mutex<State>
    /// Held while a transition is delivered: transitions never interleave.
    private let delivery = Mutex(())

    /// A lifecycle in `state`: `.background` for a host of background jobs.
    public init(state: AppState = .background) {
        self.state = Mutex(State(state: state))
    }

    /// The state now.
    public var current: AppState {
        state.withLock { $0.state }
    }

    /// Moves to `target` through the states between, delivering each
    /// event in turn; nothing when already there, or after ``terminate()``.
    ///
    /// - Returns: The events delivered.
    @discardableResult
    public func move(to target: AppState) -> [AppEvent] {
        delivery.withLock { _ in
            var delivered: [AppEvent] = []
            while true {
                let step = state.withLock { s -> (AppEvent, AppState, [Observer])? in
                    guard !s.terminated, let (event, next) = s.state.path(to: target).first else { return nil }
                    s.state = next
                    return (event, next, s.observers.sorted { $0.key < $1.key }.map(\.value))
                }
                guard let (event, next, observers) = step else { return delivered }
                observers.forEach { $0(event, next) }
                delivered.append(event)
            }
        }
    }

    /// Tells every subscriber the host will terminate (`will-terminate`),
    /// once; later moves do nothing. Whoever stops the jobs does so after.
    /// A runner starts no job after it: its waiting jobs, and every job of
    /// a runner started later, are refused as after ``Runner/shutdown()``.
    public func terminate() {
        delivery.withLock { _ in
            let observers = state.withLock { s -> [Observer] in
                guard !s.terminated else { return [] }
                s.terminated = true
                return s.observers.sorted { $0.key < $1.key }.map(\.value)
            }
            observers.forEach { $0(.willTerminate, current) }
        }
    }

    /// Whether ``terminate()`` was called.
    public var isTerminated: Bool {
        state.withLock { $0.terminated }
    }

    /// Subscribes `observer` to later transitions, and returns the state now
    /// with the token that unsubscribes it.
    ///
    /// - Important: An observer must not call ``move(to:)`` or
    ///   ``terminate()``: a transition holds the delivery lock while it calls them.
    func subscribe(_ observer: @escaping Observer) -> (token: UInt64, state: AppState, terminated: Bool) {
        state.withLock { s in
            let token = s.nextToken
            s.nextToken += 1
            s.observers[token] = observer
            return (token, s.state, s.terminated)
        }
    }

    func unsubscribe(_ token: UInt64) {
        state.withLock { _ = $0.observers.removeValue(forKey: token) }
    }
}
