import Dispatch
import Synchronization

/// Fork servers kept from one run to the next: a serving host's, whose
/// runs are one job each. Without them each run started a server of its
/// own, inside its job's grant: an `exec` of `curfew` and its warm-up
/// before the job's worker could be forked.
///
/// One server per worker executable and environment (the sandbox made
/// ahead and the limits set it apart). A run holds its server from its
/// start to its end (``server(executable:environment:)``, ``release(_:)``):
/// closing a server kills every worker it forked, so one is closed only
/// once no run holds it. Beyond ``limit`` the idle servers used longest
/// ago are closed; one that stopped forking (a plugin killed it, or it
/// refused a fork) is replaced for the next run and closed once its runs
/// end. ``close()`` ends them all, as the host stops with no run left.
package final class WorkerForkServers: Sendable {
    /// How many idle servers are kept at most.
    static let limit = 4

    private struct Key: Hashable {
        let executable: String
        let environment: [String]
    }

    private struct Entry {
        let key: Key
        let forks: LazyForkServer
        /// The runs that hold it.
        var users: Int
    }

    private struct State {
        /// Used longest ago first.
        var kept: [Entry] = []
        /// Replaced while runs held them: closed as the last ends.
        var retired: [Entry] = []
        var started = 0
        var closed = false
    }

    private let state = Mutex(State())

    package init() {}

    /// The server for workers of `executable` with `environment`, held for
    /// the caller until ``release(_:)``: one kept, or one started now (off
    /// the caller's thread); `nil` once closed.
    func server(executable: String, environment: [String]) -> LazyForkServer? {
        let key = Key(executable: executable, environment: environment)
        var ending: [LazyForkServer] = []
        let taken = state.withLock { state -> (forks: LazyForkServer, isNew: Bool)? in
            guard !state.closed else { return nil }
            if let index = state.kept.firstIndex(where: { $0.key == key }) {
                var entry = state.kept.remove(at: index)
                if entry.forks.isServing {
                    entry.users += 1
                    state.kept.append(entry)
                    return (entry.forks, false)
                }
                if entry.users == 0 { ending.append(entry.forks) } else { state.retired.append(entry) }
            }
            let made = LazyForkServer(executable: executable, environment: environment, enabled: true)
            state.kept.append(Entry(key: key, forks: made, users: 1))
            state.started += 1
            ending += Self.trim(&state)
            return (made, true)
        }
        if let taken, taken.isNew { taken.forks.startSoon() }
        Self.end(ending)
        return taken?.forks
    }

    /// A run that held `forks` has ended.
    func release(_ forks: LazyForkServer) {
        let ending = state.withLock { state -> [LazyForkServer] in
            if let index = state.kept.firstIndex(where: { $0.forks === forks }) {
                state.kept[index].users -= 1
                return Self.trim(&state)
            }
            guard let index = state.retired.firstIndex(where: { $0.forks === forks }) else { return [] }
            state.retired[index].users -= 1
            return state.retired[index].users > 0 ? [] : [state.retired.remove(at: index).forks]
        }
        Self.end(ending)
    }

    /// Takes out the idle servers beyond ``limit``, used longest ago first.
    private static func trim(_ state: inout State) -> [LazyForkServer] {
        var ending: [LazyForkServer] = []
        while state.kept.count > limit, let idle = state.kept.firstIndex(where: { $0.users == 0 }) {
            ending.append(state.kept.remove(at: idle).forks)
        }
        return ending
    }

    /// Closes servers off the caller's thread (a run's end, the serving
    /// host's queue): a close waits for the server to end.
    private static func end(_ servers: [LazyForkServer]) {
        guard !servers.isEmpty else { return }
        DispatchQueue.global(qos: .utility).async { servers.forEach { $0.close() } }
    }

    /// How many servers were started, and the pids of those kept that have started (for tests).
    package var started: Int { state.withLock { $0.started } }
    package var pids: [Int32] { state.withLock { $0.kept.map(\.forks) }.compactMap(\.serverPid) }

    /// Ends every server, and waits for each: the host calls it once no
    /// run is left. A run that asks later starts its own.
    package func close() {
        state.withLock { state -> [LazyForkServer] in
            state.closed = true
            defer {
                state.kept.removeAll()
                state.retired.removeAll()
            }
            return (state.kept + state.retired).map(\.forks)
        }.forEach { $0.close() }
    }
}
