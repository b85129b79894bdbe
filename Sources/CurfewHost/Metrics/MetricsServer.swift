import Curfew
import Synchronization
import _CurfewHTTP

/// Where `serve --metrics` listens: a TCP address (an IP literal and a
/// port; a port alone is loopback's) or a Unix socket's path.
public enum MetricsAddress: Sendable, Equatable, CustomStringConvertible {
    case tcp(host: String, port: UInt16)
    case local(path: String)

    /// `127.0.0.1:9464`, `[::1]:9464`, `9464` (on 127.0.0.1), `0.0.0.0:9464`
    /// (every address: said so), or an absolute path; `nil` for anything else.
    public init?(_ text: String) {
        if text.hasPrefix("/") {
            guard !text.utf8.contains(0), text.utf8.count <= Syscalls.maximumSocketPathBytes else { return nil }
            self = .local(path: text)
            return
        }
        let host: Substring
        let port: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            port = text[text.index(close, offsetBy: 2)...]
        } else if let colon = text.lastIndex(of: ":") {
            host = text[..<colon]
            port = text[text.index(after: colon)...]
            guard !host.contains(":") else { return nil }  // IPv6 takes brackets
        } else {
            host = "127.0.0.1"
            port = Substring(text)
        }
        guard !host.isEmpty, host.utf8.count <= 64, Syscalls.isIPAddress(String(host)), !port.isEmpty, port.utf8.count <= 5, port.utf8.allSatisfy({ (0x30...0x39).contains($0) }),
            let number = UInt16(port)
        else { return nil }
        self = .tcp(host: String(host), port: number)
    }

    public var description: String {
        switch self {
        case .tcp(let host, let port): host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        case .local(let path): path
        }
    }

    /// Whether it is reachable from other machines (not loopback, not a path).
    public var isExposed: Bool {
        guard case .tcp(let host, _) = self else { return false }
        return !(host.hasPrefix("127.") || host == "::1")
    }
}

/// `curfew serve --metrics`: a read-only HTTP server (libmicrohttpd, loaded
/// when one starts, on a thread of its own) that answers `GET /metrics`
/// with the host's metrics. Bounded: at most ``maximumConnections`` at
/// once and ``maximumPerAddress`` from one address, each cut off after
/// ``idleTimeoutSeconds`` without progress, a request's line and headers
/// held to ``maximumRequestBytes``; a body is never read.
public final class MetricsServer: @unchecked Sendable {
    // Safe because `handle` is used by `stop` only, once (`stopped`).
    public static let maximumConnections: UInt32 = 32
    public static let maximumPerAddress: UInt32 = 8
    public static let idleTimeoutSeconds: UInt32 = 10
    public static let maximumRequestBytes = 16 << 10

    /// What was asked: a path (no query), and the formats the client takes
    /// (its `Accept` header, if it sent one).
    public struct Request: Sendable {
        public var path: String
        public var accept: String?

        public init(path: String, accept: String? = nil) {
            self.path = path
            self.accept = accept
        }
    }

    /// What one path answers: a status, a content type and a body.
    public struct Page: Sendable {
        public var status: UInt32
        public var contentType: String
        public var body: String

        public init(status: UInt32, contentType: String, body: String) {
            self.status = status
            self.contentType = contentType
            self.body = body
        }
    }

    private final class Pages: Sendable {
        let page: @Sendable (Request) -> Page
        init(_ page: @escaping @Sendable (Request) -> Page) { self.page = page }
    }

    private let handle: UnsafeMutableRawPointer
    private let pages: Unmanaged<Pages>
    /// The TCP port it listens on (the one the system chose for port 0).
    public let port: UInt16?
    /// The Unix socket it made, to remove at the stop while it is still that file.
    private let socketFile: (path: String, device: UInt64, inode: UInt64)?
    private let stopped = Atomic<Bool>(false)

    public init(address: MetricsAddress, page: @escaping @Sendable (Request) -> Page) throws(CurfewError) {
        if let problem = curfew_http_load() {
            throw CurfewError(.unreadable, "cannot serve metrics: \(String(cString: problem))")
        }
        let fd = try Self.listen(address)
        port = Syscalls.localPort(fd)
        if case .local(let path) = address, let status = try? Syscalls.linkStatus(path) {
            socketFile = (path, status.device, status.inode)
        } else {
            socketFile = nil
        }
        let pages = Unmanaged.passRetained(Pages(page))
        let started = curfew_http_start(
            fd, Self.maximumConnections, Self.maximumPerAddress, Self.idleTimeoutSeconds, Self.maximumRequestBytes,
            { context, path, accept, reply in
                let pages = Unmanaged<Pages>.fromOpaque(context!).takeUnretainedValue()
                let page = pages.page(Request(path: path.map { String(cString: $0) } ?? "/", accept: accept.map { String(cString: $0) }))
                var body = Array(page.body.utf8)
                body.withUnsafeMutableBytes { bytes in
                    curfew_http_reply_set(reply, page.status, page.contentType, bytes.baseAddress, bytes.count)
                }
            }, pages.toOpaque())
        guard let started else {
            // Not closed here: libmicrohttpd may have closed it as it failed,
            // and a second close could close another thread's new descriptor.
            pages.release()
            throw CurfewError(.unreadable, "cannot serve metrics on \(address): libmicrohttpd did not start")
        }
        handle = started
        self.pages = pages
    }

    /// A listening socket at `address`. A Unix socket's path may hold only
    /// a socket no server answers on (one a stopped host left), which is replaced.
    private static func listen(_ address: MetricsAddress) throws(CurfewError) -> Int32 {
        if case .local(let path) = address, let status = try? Syscalls.linkStatus(path) {
            guard status.isSocket else { throw CurfewError(.unreadable, "\(path) exists and is not a socket; it was left as it is") }
            if let live = try? Syscalls.connectLocal(to: path, by: nil) {
                Syscalls.close(live)
                throw CurfewError(.unreadable, "another server answers on \(path); choose another --metrics path")
            }
            try? Syscalls.unlink(path)
        }
        do throws(SystemError) {
            switch address {
            case .tcp(let host, let port): return try Syscalls.listenTCP(host: host, port: port, backlog: 128)
            case .local(let path): return try Syscalls.listenLocal(at: path, backlog: 128)
            }
        } catch {
            throw CurfewError(.unreadable, "cannot listen for metrics on \(address): \(error.message)")
        }
    }

    /// Stops serving; no page is asked for after it returns.
    public func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        curfew_http_stop(handle)
        pages.release()
        // Only the socket this server made: a file put there since is not its own.
        if let socketFile, let status = try? Syscalls.linkStatus(socketFile.path), status.device == socketFile.device,
            status.inode == socketFile.inode
        {
            try? Syscalls.unlink(socketFile.path)
        }
    }
}

extension MetricsServer {
    /// What `serve --metrics` answers: `/metrics`, the host's metrics (in
    /// OpenMetrics when the client prefers it, as Prometheus does); `/`,
    /// the status page; any other path, 404.
    public static func page(_ request: Request, of server: Server) -> Page {
        switch request.path {
        case "/metrics":
            let format = Exposition.Format(accept: request.accept)
            return Page(status: 200, contentType: format.contentType, body: server.metricsText(format))
        case "/": return Page(status: 200, contentType: "text/html; charset=utf-8", body: server.statusPage())
        default: return Page(status: 404, contentType: "text/plain; charset=utf-8", body: "Not found: the status page is at /, the metrics at /metrics.\n")
        }
    }
}
