// Sockets and readiness through the seam. Sends never raise SIGPIPE
// (MSG_NOSIGNAL): a peer that went away is an error to handle, not a death.
import Glibc
import _CurfewShims

extension Syscalls {
    /// A descriptor to wait on with ``poll(_:milliseconds:)``.
    package struct PollEntry: Sendable {
        package var fd: Int32
        package var wantsInput: Bool
        package var wantsOutput: Bool
        /// Set by `poll`: readable (or at its end), writable, or broken.
        package internal(set) var isReadable = false
        package internal(set) var isWritable = false
        /// Hung up or in error: nothing more will come.
        package internal(set) var isClosed = false

        package init(_ fd: Int32, input: Bool = true, output: Bool = false) {
            self.fd = fd
            wantsInput = input
            wantsOutput = output
        }

        /// Anything happened.
        package var hasEvent: Bool { isReadable || isWritable || isClosed }

        /// Anything happened besides the descriptor becoming writable.
        package var hasInputOrEnd: Bool { isReadable || isClosed }
    }

    /// ``poll(_:milliseconds:)`` over ``PollEntry`` values.
    package static func poll(_ entries: inout [PollEntry], milliseconds: Int32) -> Int32 {
        var raw = entries.map {
            pollfd(fd: $0.fd, events: ($0.wantsInput ? Int16(POLLIN) : 0) | ($0.wantsOutput ? Int16(POLLOUT) : 0), revents: 0)
        }
        let ready = poll(&raw, milliseconds: milliseconds)
        for index in entries.indices {
            let events = raw[index].revents
            entries[index].isReadable = events & Int16(POLLIN) != 0
            entries[index].isWritable = events & Int16(POLLOUT) != 0
            entries[index].isClosed = events & Int16(POLLHUP | POLLERR | POLLNVAL) != 0
        }
        return ready
    }

    /// Waits up to `milliseconds` (-1: no limit) for `fd` to have input or
    /// reach its end: whether it did. False when the time ran out or the wait
    /// failed, so a blocking read after a true never waits.
    package static func waitForInput(_ fd: Int32, milliseconds: Int32) -> Bool {
        var entry = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0)]
        return poll(&entry, milliseconds: milliseconds) > 0
    }

    /// The kinds of local socket the host uses.
    package enum SocketKind: Sendable {
        case stream, seqpacket, datagram

        var type: Int32 {
            switch self {
            case .stream: Int32(SOCK_STREAM.rawValue)
            case .seqpacket: Int32(SOCK_SEQPACKET.rawValue)
            case .datagram: Int32(SOCK_DGRAM.rawValue)
            }
        }
    }

    /// A connected pair of local sockets of `kind`, close-on-exec.
    package static func socketPair(_ kind: SocketKind) throws(SystemError) -> [Int32] {
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, kind.type | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else { throw .last }
        return pair
    }

    /// One `send`: how many bytes were taken. `nonBlocking` fails with
    /// ``SystemError/wouldBlock`` where it would wait.
    package static func send(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, nonBlocking: Bool = false) throws(SystemError) -> Int {
        let flags = Int32(MSG_NOSIGNAL) | (nonBlocking ? Int32(MSG_DONTWAIT) : 0)
        let count = retryingEINTR { Glibc.send(fd, bytes.baseAddress, bytes.count, flags) }
        guard count >= 0 else { throw .last }
        return count
    }

    /// One `send` of `bytes`, as ``send(_:_:nonBlocking:)``.
    package static func send(_ fd: Int32, _ bytes: [UInt8], nonBlocking: Bool = false) throws(SystemError) -> Int {
        try bytes.withUnsafeBytes { raw in Result { () throws(SystemError) in try send(fd, raw, nonBlocking: nonBlocking) } }.get()
    }

    /// Sends all of `bytes`, through short sends: how many were sent, fewer
    /// only when a send failed.
    package static func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Int {
        bytes.withUnsafeBytes { buffer in
            var sent = 0
            while sent < buffer.count {
                guard let step = try? send(fd, UnsafeRawBufferPointer(rebasing: buffer[sent...])), step > 0 else { break }
                sent += step
            }
            return sent
        }
    }

    /// One `recv`: how many bytes, 0 when the peer has shut down.
    package static func receive(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, nonBlocking: Bool = false) throws(SystemError) -> Int {
        let count = retryingEINTR { recv(fd, buffer.baseAddress, buffer.count, nonBlocking ? Int32(MSG_DONTWAIT) : 0) }
        guard count >= 0 else { throw .last }
        return count
    }

    /// One `recv` into `buffer`, from its start, as ``receive(_:into:nonBlocking:)``.
    package static func receive(_ fd: Int32, into buffer: inout [UInt8], nonBlocking: Bool = false) throws(SystemError) -> Int {
        try buffer.withUnsafeMutableBytes { bytes in Result { () throws(SystemError) in try receive(fd, into: bytes, nonBlocking: nonBlocking) } }.get()
    }

    /// Tells the peer nothing more will be sent.
    package static func shutdownSending(_ fd: Int32) {
        _ = shutdown(fd, Int32(SHUT_WR))
    }

    /// Tells the peer nothing more will be sent or read.
    package static func shutdownBoth(_ fd: Int32) {
        _ = shutdown(fd, Int32(SHUT_RDWR))
    }

    /// Makes reads and writes on `fd` fail with ``SystemError/wouldBlock``
    /// rather than wait.
    package static func setNonBlocking(_ fd: Int32) {
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    }

    /// Makes `fd` close-on-exec (a descriptor inherited through `exec`).
    package static func setCloseOnExec(_ fd: Int32) {
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
    }
}

// Local (Unix) sockets named by a path.
extension Syscalls {
    /// The longest path a local socket's address holds, in bytes.
    package static let maximumSocketPathBytes = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    /// `body` with the address of the local socket at `path`; `nil` when the
    /// path is too long for one or holds a NUL.
    private static func withLocalAddress<T>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> T) -> T? {
        guard path.utf8.count <= maximumSocketPathBytes, !path.utf8.contains(0) else { return nil }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    /// A local stream socket bound at `path` (mode 0600) and listening:
    /// non-blocking, close-on-exec.
    package static func listenLocal(at path: String, backlog: Int32) throws(SystemError) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw .last }
        guard let bound = withLocalAddress(path, { bind(fd, $0, $1) }) else {
            Glibc.close(fd)
            throw .invalid
        }
        guard bound == 0, chmod(path, 0o600) == 0, listen(fd, backlog) == 0 else {
            let error = SystemError.last
            Glibc.close(fd)
            throw error
        }
        return fd
    }

    /// A TCP socket bound to the IPv4 or IPv6 literal `host` (no name is
    /// looked up) and `port` (0: any free one), listening: non-blocking,
    /// close-on-exec, its address reusable at once after a restart.
    package static func listenTCP(host: String, port: UInt16, backlog: Int32) throws(SystemError) -> Int32 {
        var v4 = sockaddr_in()
        var v6 = sockaddr_in6()
        let family: Int32
        if inet_pton(AF_INET, host, &v4.sin_addr) == 1 {
            family = AF_INET
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
        } else if inet_pton(AF_INET6, host, &v6.sin6_addr) == 1 {
            family = AF_INET6
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = port.bigEndian
        } else {
            throw .invalid
        }
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw .last }
        var on: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        let bound =
            family == AF_INET
            ? withUnsafePointer(to: &v4) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            : withUnsafePointer(to: &v6) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
        guard bound == 0, listen(fd, backlog) == 0 else {
            let error = SystemError.last
            Glibc.close(fd)
            throw error
        }
        return fd
    }

    /// Whether `text` is an IPv4 or IPv6 address literal (no name is looked up).
    package static func isIPAddress(_ text: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, text, &v4) == 1 || inet_pton(AF_INET6, text, &v6) == 1
    }

    /// The port a TCP socket is bound to, or `nil`.
    package static func localPort(_ fd: Int32) -> UInt16? {
        var address = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let got = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        guard got == 0 else { return nil }
        return withUnsafePointer(to: &address) { pointer -> UInt16? in
            switch Int32(pointer.pointee.ss_family) {
            case AF_INET: pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
            case AF_INET6: pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) }
            default: nil
            }
        }
    }

    /// The next connection waiting on `listening`, close-on-exec.
    package static func accept(_ listening: Int32) throws(SystemError) -> Int32 {
        let client = retryingEINTR { curfew_shim_accept(listening) }
        guard client >= 0 else { throw .last }
        return client
    }

    /// A blocking stream socket connected to the local socket at `path`.
    /// While the listener's queue is full (`EAGAIN`), tries again every
    /// 10 ms until `deadline` (`nil`: once), then fails with `ETIMEDOUT`.
    package static func connectLocal(to path: String, by deadline: ContinuousClock.Instant?) throws(SystemError) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw .last }
        while true {
            guard let connected = withLocalAddress(path, { address, length in retryingEINTR { connect(fd, address, length) } }) else {
                Glibc.close(fd)
                throw .invalid
            }
            if connected == 0 { break }
            let error = SystemError.last
            // A local socket's connect fails at once with EAGAIN when the listener's queue is full.
            guard error == .wouldBlock, let deadline else {
                Glibc.close(fd)
                throw error
            }
            guard ContinuousClock.now < deadline else {
                Glibc.close(fd)
                throw .timedOut
            }
            usleep(10_000)
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        return fd
    }

    /// The user id of the peer of the connected local socket `fd`: the
    /// kernel's record (SO_PEERCRED), not the peer's claim.
    package static func peerUserID(_ fd: Int32) -> UInt32? {
        var uid: UInt32 = 0
        return curfew_shim_peer_uid(fd, &uid) == 0 ? uid : nil
    }

    /// Makes a blocking send on `fd` give up after `timeout` (whole seconds).
    package static func setSendTimeout(_ fd: Int32, _ timeout: Duration) {
        var value = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
    }

    /// A local datagram socket, close-on-exec, to send with ``send(_:_:toAddress:)``.
    package static func datagramSocket() throws(SystemError) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .last }
        return fd
    }

    /// The bytes of a local socket address for `path`: the path and its
    /// NUL, or for `@name` a NUL and the name (the abstract namespace, no
    /// terminator); `nil` when it is neither absolute nor abstract, holds a
    /// NUL, or is too long.
    package static func localAddress(_ path: String) -> [UInt8]? {
        let bytes = Array(path.utf8)
        guard let first = bytes.first, first == UInt8(ascii: "/") || first == UInt8(ascii: "@"), !bytes.contains(0) else { return nil }
        let name: [UInt8] = first == UInt8(ascii: "@") ? [0] + bytes.dropFirst() : bytes + [0]
        guard name.count <= maximumSocketPathBytes + 1 else { return nil }
        var address = [UInt8](repeating: 0, count: MemoryLayout<sa_family_t>.size)
        withUnsafeBytes(of: sa_family_t(AF_UNIX)) { address.replaceSubrange(0..<$0.count, with: $0) }
        return address + name
    }

    /// Sends `bytes` as one datagram to the address ``localAddress(_:)``
    /// made: whether all of it went.
    package static func send(_ fd: Int32, _ bytes: [UInt8], toAddress address: [UInt8]) -> Bool {
        address.withUnsafeBytes { address in
            bytes.withUnsafeBytes { body in
                sendto(
                    fd, body.baseAddress, body.count, Int32(MSG_NOSIGNAL),
                    address.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(address.count)) == body.count
            }
        }
    }

    /// What a netlink socket of ``netlinkSocket(_:)`` listens to.
    package enum NetlinkKind {
        /// Route and link changes (rtnetlink's IPv4 and IPv6 route and link groups).
        case routes
        /// The kernel's device events (a power supply plugged in or out).
        case deviceEvents
    }

    /// A non-blocking, close-on-exec netlink socket bound to `kind`'s
    /// multicast groups: readable when the kernel says something changed.
    package static func netlinkSocket(_ kind: NetlinkKind) throws(SystemError) -> Int32 {
        let fd = switch kind {
        // NETLINK_ROUTE; RTMGRP_LINK | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE.
        case .routes: curfew_shim_netlink_socket(0, 0x1 | 0x40 | 0x400)
        // NETLINK_KOBJECT_UEVENT; the kernel's own events, not udev's.
        case .deviceEvents: curfew_shim_netlink_socket(15, 1)
        }
        guard fd >= 0 else { throw .last }
        return fd
    }

    /// Reads and drops what a non-blocking socket holds; whether it is
    /// still open (not at its end, nor failed but for want of data or room).
    package static func drain(_ fd: Int32) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 8192)
        while true {
            let count = buffer.withUnsafeMutableBytes { retryingEINTRRead(fd, $0) }
            if count > 0 { continue }
            // ENOBUFS: the kernel dropped events; the caller reads the machine anew anyway.
            return count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
        }
    }

    private static func retryingEINTRRead(_ fd: Int32, _ buffer: UnsafeMutableRawBufferPointer) -> Int {
        Syscalls.retryingEINTR { recv(fd, buffer.baseAddress, buffer.count, 0) }
    }
}
