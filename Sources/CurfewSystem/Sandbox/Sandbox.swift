import Glibc
import CurfewFormats
import _CurfewShims

/// The kernel's confinement of one process: what a worker applies to itself,
/// once, with one thread, before any plugin code runs (see `sandbox.c`).
///
/// Landlock and a new user namespace bind only the calling thread and what
/// it starts later (this kernel has no Landlock TSYNC), hence one thread.
package enum Sandbox {
    package typealias Network = SandboxNetwork

    /// What a path is granted.
    package enum Access: Sendable, Equatable {
        /// Read files and list folders beneath it.
        case read
        /// Read, write and ioctl a device file (`/dev/null`).
        case device
        /// Everything a file tree allows beneath it: make, change, remove.
        case write
    }

    /// The rules to apply.
    package struct Rules: Sendable, Equatable {
        package var paths: [(path: String, access: Access)]
        package var network: Network
        package var allowsExec: Bool

        package init(paths: [(path: String, access: Access)], network: Network, allowsExec: Bool) {
            self.paths = paths
            self.network = network
            self.allowsExec = allowsExec
        }

        package static func == (a: Rules, b: Rules) -> Bool {
            a.network == b.network && a.allowsExec == b.allowsExec && a.paths.elementsEqual(b.paths) { $0.path == $1.path && $0.access == $1.access }
        }
    }

    /// The layers that took hold.
    package struct Layers: OptionSet, Sendable {
        package let rawValue: Int32
        package init(rawValue: Int32) { self.rawValue = rawValue }
        package static let noCapabilities = Layers(rawValue: Int32(CURFEW_SANDBOX_NO_CAPABILITIES))
        package static let files = Layers(rawValue: Int32(CURFEW_SANDBOX_FILES))
        package static let tcpRules = Layers(rawValue: Int32(CURFEW_SANDBOX_TCP_RULES))
        package static let scopes = Layers(rawValue: Int32(CURFEW_SANDBOX_SCOPES))
        package static let ownNamespaces = Layers(rawValue: Int32(CURFEW_SANDBOX_OWN_NAMESPACES))
        package static let socketFilter = Layers(rawValue: Int32(CURFEW_SANDBOX_SOCKET_FILTER))
        package static let systemCalls = Layers(rawValue: Int32(CURFEW_SANDBOX_SYSCALLS))
        package static let loopbackSockets = Layers(rawValue: Int32(CURFEW_SANDBOX_LOOPBACK_SOCKETS))
    }

    /// What was applied, and what of the rules the kernel could not enforce.
    package struct Applied: Sendable, Equatable {
        package var layers: Layers
        package var landlockABI: Int

        package init(layers: Layers, landlockABI: Int) {
            self.layers = layers
            self.landlockABI = landlockABI
        }

        /// What the rules asked that does not hold, in words; empty when all does.
        package func missing(for rules: Rules) -> [String] {
            var missing: [String] = []
            if !layers.contains(.files) { missing.append("files (this kernel has no Landlock)") }
            if layers.contains(.files) && !layers.contains(.scopes) {
                missing.append("signals and abstract sockets (Landlock ABI \(landlockABI) < 6)")
            }
            if rules.network == .off && !layers.contains(.socketFilter) { missing.append("network") }
            if rules.network == .loopback && !layers.contains(.loopbackSockets) {
                missing.append("the loopback network (this kernel cannot hand a job its sockets, so it has no network at all)")
            }
            if !layers.contains(.files) && !layers.contains(.ownNamespaces) {
                missing.append("other processes' memory (no Landlock and no user namespace)")
            }
            if !layers.contains(.systemCalls) { missing.append("system calls (no seccomp)") }
            return missing
        }
    }

    /// Why a sandbox could not be applied.
    package struct Failure: Error, Equatable {
        package let step: String
        package let error: SystemError
        package let path: String?

        package var message: String {
            "\(step)\(path.map { " (\($0))" } ?? ""): \(error.message)"
        }

        /// The failure `sandbox.c` reported with `status`.
        init(_ status: Int32, _ report: curfew_sandbox_report) {
            step = report.step.map { String(cString: $0) } ?? "sandbox"
            error = SystemError(errno: status)
            path = report.failed_path.map { String(cString: $0) }
        }
    }

    /// Applies `rules` to this process. Throws when a layer the kernel has
    /// fails; a layer it lacks is no failure (see ``Applied/missing(for:)``).
    package static func apply(_ rules: Rules) throws(Failure) -> Applied {
        var report = curfew_sandbox_report()
        var failure: Failure?
        withSpec(rules) { spec in
            let status = curfew_sandbox_apply(&spec, &report)
            // Here: the report's failed path points into the spec's copies.
            if status != 0 { failure = Failure(status, report) }
        }
        if let failure { throw failure }
        return Applied(layers: Layers(rawValue: report.applied), landlockABI: Int(report.landlock_abi))
    }

    /// Calls `body` with `rules` as `sandbox.c` reads them: the spec, and any
    /// path a report of it names, are valid only during the call. (A fork
    /// server calls it once with nothing to apply, so its workers inherit
    /// the array types it makes.)
    package static func withSpec(_ rules: Rules, _ body: (inout curfew_sandbox_spec) -> Void) {
        let paths = rules.paths.map { strdup($0.path) }
        defer { paths.forEach { free($0) } }
        let entries = zip(paths, rules.paths).map { copy, rule in
            curfew_sandbox_path(path: copy, access: rule.access.cValue)
        }
        entries.withUnsafeBufferPointer { buffer in
            var spec = curfew_sandbox_spec(
                paths: buffer.baseAddress, path_count: UInt(buffer.count), network: rules.network.cValue, allow_exec: rules.allowsExec ? 1 : 0)
            body(&spec)
        }
    }

    /// Applies, ahead of a job, what every sandbox with `network` and
    /// `allowsExec` holds but its paths (see `curfew_sandbox_prepare`): a
    /// later ``apply(_:)`` adds Landlock, and fails for rules wider than these.
    package static func prepare(network: Network, allowsExec: Bool) throws(Failure) {
        var report = curfew_sandbox_report()
        let status = curfew_sandbox_prepare(network.cValue, allowsExec ? 1 : 0, &report)
        guard status == 0 else { throw Failure(status, report) }
    }

    /// In a fork server whose workers ``prepare(network:allowsExec:)``:
    /// opens, once, the paths every sandbox grants, which each worker it
    /// forks makes its rules from and closes; before each fork it looks its
    /// files up again and opens one again that names another inode (see
    /// `curfew_sandbox_open_common`). Where they cannot be opened, each
    /// worker looks them up itself; so it does a file behind a link.
    package static func openCommonPaths() {
        _ = curfew_sandbox_open_common()
    }

    /// In a fork server whose workers prepare a sandbox for `network` and
    /// `allowsExec`: installs its call filter once, for them to inherit
    /// (see `curfew_sandbox_prepare_server`). Where it cannot, each worker
    /// installs its own.
    package static func prepareServer(network: Network, allowsExec: Bool) {
        _ = curfew_sandbox_prepare_server(network.cValue, allowsExec ? 1 : 0)
    }

    /// Confines this process as a scanner: it reads every file, writes
    /// nothing but the devices, reaches no network and execs nothing.
    package static func applyForScan() throws(Failure) {
        var report = curfew_sandbox_report()
        let status = curfew_sandbox_apply_for_scan(&report)
        guard status == 0 else { throw Failure(status, report) }
    }

    /// Whether this process can make a user namespace and map itself into
    /// it: asked once, in a throwaway child, and kept (a fork inherits it).
    package static var namespacesUsable: Bool { curfew_sandbox_probe_namespaces() == 1 }

    /// What every sandbox reads beneath: the system's libraries, the files
    /// libc and the runtime read, `/proc` (see `sandbox.c`).
    package static let systemPaths = strings(curfew_sandbox_system_paths())
    /// The devices every sandbox reads and writes.
    package static let devicePaths = strings(curfew_sandbox_device_paths())

    private static func strings(_ list: UnsafePointer<UnsafePointer<CChar>?>) -> [String] {
        var strings: [String] = []
        var index = 0
        while let string = list[index] {
            strings.append(String(cString: string))
            index += 1
        }
        return strings
    }

    /// The Landlock ABI this kernel has; 0 for none.
    package static var landlockABI: Int { Int(curfew_sandbox_landlock_abi()) }

    /// From now on Landlock reads as missing in this process: a test seam
    /// for kernels without it.
    package static func refuseLandlock() { curfew_sandbox_refuse_landlock() }

    /// A call the seccomp filter denied: the job whose hook made it (`nil`
    /// when none was running), the call, and why it is denied.
    package struct Denial: Sendable, Equatable {
        package let job: String?
        package let call: String
        package let why: String
    }

    /// The denials noted since the last call, oldest first, and how many
    /// more were dropped because the notes were full.
    package static func takeDenials() -> (denials: [Denial], dropped: Int) {
        var denials: [Denial] = []
        var job: UnsafePointer<CChar>?
        var call: UnsafePointer<CChar>?
        var why: UnsafePointer<CChar>?
        while curfew_sandbox_next_denial(&job, &call, &why) == 1, let call, let why {
            denials.append(Denial(job: job.map { String(cString: $0) }, call: String(cString: call), why: String(cString: why)))
        }
        return (denials, Int(curfew_sandbox_dropped_denials()))
    }

    /// The folder the Swift runtime was loaded from, when it is a library of
    /// its own (a debug build): Swift plugins load their libraries from there.
    package static var swiftRuntimeFolder: String? {
        guard let file = curfew_sandbox_swift_runtime_file() else { return nil }
        let path = String(cString: file)
        guard path.hasSuffix(".so") || path.contains(".so."), let slash = path.lastIndex(of: "/") else { return nil }
        return String(path[..<slash])
    }
}

extension SandboxNetwork {
    fileprivate var cValue: Int32 {
        switch self {
        case .off: Int32(CURFEW_SANDBOX_NETWORK_OFF)
        case .loopback: Int32(CURFEW_SANDBOX_NETWORK_LOOPBACK)
        case .on: Int32(CURFEW_SANDBOX_NETWORK_ON)
        }
    }
}

extension Sandbox.Access {
    fileprivate var cValue: curfew_sandbox_access {
        switch self {
        case .read: CURFEW_SANDBOX_READ
        case .device: CURFEW_SANDBOX_DEVICE
        case .write: CURFEW_SANDBOX_WRITE
        }
    }
}

extension Syscalls {
    /// Removes the folder `path` and all it holds, following no link: a link
    /// inside goes, not what it names. A missing folder is no error.
    package static func removeTree(_ path: String) throws(SystemError) {
        let status = curfew_shim_remove_tree(path)
        guard status == 0 else { throw SystemError(errno: status) }
    }

    /// Empties the folder `path` for another job: what it holds goes, its
    /// mode is 0700 again and its ACLs go. Throws when it holds what cannot
    /// go, or is not this user's, or keeps an extended attribute.
    package static func emptyFolder(_ path: String) throws(SystemError) {
        let status = curfew_shim_empty_folder(path)
        guard status == 0 else { throw SystemError(errno: status) }
    }
}
