import Synchronization

/// Fork servers kept from one run to the next: a serving host's, whose
/// runs are one job each. Without them each run started a server of its
/// own, inside its job's grant: an `exec` of `curfew` and its warm-up
/// before the job's worker could be forked.
///
/// One server per worker executable and environment (the sandbox made
/// ahead and the limits set it apart), at most ``limit``; a server that
/// stopped forking (a plugin killed it, say) is replaced at the next run.
/// ``close()`` ends them all, once no run uses them.
package final class WorkerForkServers: Sendable {
    /// How many servers are kept at most: the oldest goes first.
    static let limit = 4

    private struct Key: Hashable {
        let executable: String
        let environment: [String]
    }

    private let state = Mutex<(servers: [(key: Key, forks: LazyForkServer)], started: Int, closed: Bool)>(([], 0, false))

    package init() {}

    /// The server for workers of `executable` with `environment`, started
    /// now (off the caller's thread) where there was none that still
    /// forks; `nil` once closed.
    func server(executable: String, environment: [String]) -> LazyForkServer? {
        let key = Key(executable: executable, environment: environment)
        var ended: [LazyForkServer] = []
        let server = state.withLock { state -> LazyForkServer? in
            guard !state.closed else { return nil }
            if let index = state.servers.firstIndex(where: { $0.key == key }) {
                let kept = state.servers.remove(at: index).forks
                guard !kept.isServing else {
                    state.servers.append((key, kept))
                    return kept
                }
                ended.append(kept)
            }
            let made = LazyForkServer(executable: executable, environment: environment, enabled: true)
            state.servers.append((key, made))
            state.started += 1
            if state.servers.count > Self.limit { ended.append(state.servers.removeFirst().forks) }
            made.startSoon()
            return made
        }
        ended.forEach { $0.close() }
        return server
    }

    /// How many servers were started, and the pids of those kept that have started (for tests).
    package var started: Int { state.withLock { $0.started } }
    package var pids: [Int32] { state.withLock { $0.servers.map(\.forks) }.compactMap(\.serverPid) }

    /// Ends every server; a run that asks later starts its own.
    package func close() {
        state.withLock { state -> [LazyForkServer] in
            state.closed = true
            defer { state.servers.removeAll() }
            return state.servers.map(\.forks)
        }.forEach { $0.close() }
    }
}
