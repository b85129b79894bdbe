import CurfewFormats
import _CurfewShims

/// Reads a foreign-job manifest (`NAME.curfew.json`) and prepares its jobs:
/// every symbol looked up and every call interface prepared before a job runs.
///
/// ```json
/// {
///   "library": "libstep.so",
///   "jobs": [{
///     "name": "count", "summary": "Steps a counter.",
///     "state": { "size": 64 },
///     "chunk": { "symbol": "step", "returns": "int32", "result": "items-left",
///                "args": [{ "type": "int64", "from": "chunk-index" },
///                         { "type": "pointer", "from": "state" }] }
///   }]
/// }
/// ```
package struct ForeignManifestReader {
    /// The suffix that marks a manifest in a plugin folder.
    static let suffix = ".curfew.json"
    /// At most this many arguments per function.
    static let maximumArguments = 16
    /// At most this many bytes of state per job run.
    static let maximumStateSize = 1 << 20

    let path: String
    let parameters: [String: String]

    package init(path: String, parameters: [String: String]) {
        self.path = path
        self.parameters = parameters
    }

    /// The library a manifest names in `"library"`: a path relative to the
    /// manifest's folder (a bare name too: never the dynamic loader's search
    /// path, which could find another library of that name) or absolute.
    /// Without a name, `NAME.so` beside `NAME.curfew.json`.
    static func libraryPath(forManifest path: String, declared: String?) -> String {
        let folder = path.lastIndex(of: "/").map { String(path[...$0]) } ?? ""
        guard let declared else { return String(path.dropLast(suffix.count)) + ".so" }
        if declared.hasPrefix("/") { return declared }
        return folder + declared
    }

    /// The library file a manifest file points at, if the file can be read
    /// as one; `nil` for a system library (`"system-library"`), which the
    /// dynamic loader finds.
    static func declaredLibrary(ofManifest path: String) -> String? {
        let root = (try? Syscalls.readFile(path)).flatMap { try? JSONReader.parse($0) }
        if root?["system-library"] != nil { return nil }
        return libraryPath(forManifest: path, declared: root?["library"]?.stringValue)
    }

    /// Why a library name cannot be used, or `nil`.
    static func libraryNameProblem(_ name: String, system: Bool) -> String? {
        if name.isEmpty { return "is empty" }
        if name.utf8.contains(0) { return "contains a NUL byte, which would cut the name short" }
        if system && name.contains("/") { return "must be a bare file name (such as libz.so.1), not a path" }
        if name.hasSuffix("/") { return "names a folder, not a file" }
        if name.split(separator: "/", omittingEmptySubsequences: false).contains("..") {
            return "climbs out of a folder with '..'; name the library's own path"
        }
        return nil
    }

    func load() throws(CurfewError) -> LoadedPlugin {
        let bytes: [UInt8]
        do throws(SystemError) {
            bytes = try Syscalls.readFile(path)
        } catch {
            throw CurfewError(.unreadable, "Cannot be read: \(error.message).", underlying: error.message)
        }
        return try load(bytes)
    }

    /// Reads a manifest's text (as if from ``path``) and prepares its jobs.
    package func load(_ bytes: [UInt8]) throws(CurfewError) -> LoadedPlugin {
        let root: JSONValue
        do throws(JSONSyntaxError) {
            root = try JSONReader.parse(bytes)
        } catch {
            throw CurfewError(.invalidManifest, "Not valid JSON at line \(error.line), column \(error.column): \(error.message).")
        }
        let top = try members(root, allowed: ["library", "system-library", "jobs"], what: "The manifest")
        var declared: (name: String, system: Bool)?
        for (key, system) in [("library", false), ("system-library", true)] {
            guard let library = top[key] else { continue }
            guard declared == nil else {
                throw CurfewError(.invalidManifest, "The manifest names both a \"library\" and a \"system-library\"; give one.")
            }
            guard case .string(let text) = library else {
                throw CurfewError(.invalidManifest, "The manifest's \"\(key)\" must be a string, not \(library.kind).")
            }
            if let problem = Self.libraryNameProblem(text, system: system) {
                throw CurfewError(.invalidManifest, "The manifest's \"\(key)\" \(problem).")
            }
            declared = (text, system)
        }
        guard case .array(let jobValues)? = top["jobs"] else {
            throw CurfewError(.invalidManifest, "The manifest needs a \"jobs\" array.")
        }
        guard (1...Int(PluginLoader.maximumJobs)).contains(jobValues.count) else {
            throw CurfewError(.invalidJobCount, "The manifest declares \(jobValues.count) jobs; declare 1 to \(PluginLoader.maximumJobs).")
        }
        let library: String
        let loadPath: String
        if let declared, declared.system {
            // Found by the dynamic loader in the system's library folders, as the author asked.
            (library, loadPath) = (declared.name, declared.name)
        } else {
            library = Self.libraryPath(forManifest: path, declared: declared?.name)
            loadPath = Syscalls.realPath(library) ?? library
            // dlopen would block on a FIFO and read a device: only regular files go to it.
            if let status = try? Syscalls.fileStatus(loadPath), !status.isRegular {
                throw CurfewError(.loadFailed, "Its library \(library) is not a regular file, so not a shared object.")
            }
        }
        let handle: UnsafeMutableRawPointer
        switch Syscalls.dlopenPlugin(loadPath) {
        case .success(let opened): handle = opened
        case .failure(let error):
            throw CurfewError(.loadFailed, "Its library \(library) cannot be loaded: \(error.message)", underlying: error.message)
        }
        var names = Set<String>()
        var jobs: [PluginJob] = []
        for (index, value) in jobValues.enumerated() {
            let job = try readJob(value, index: index, library: library, handle: handle)
            guard names.insert(job.name).inserted else {
                throw CurfewError(.duplicateJobName, "Job name '\(job.name)' is declared twice; job names must be unique.")
            }
            jobs.append(job)
        }
        return LoadedPlugin(path: path, jobs: jobs)
    }

    private func readJob(_ value: JSONValue, index: Int, library: String, handle: UnsafeMutableRawPointer) throws(CurfewError) -> PluginJob {
        let fields = try members(value, allowed: ["name", "summary", "continuous", "resume", "state", "setup", "chunk", "cleanup", "teardown"], what: "Job #\(index)")
        guard case .string(let name)? = fields["name"] else {
            throw CurfewError(.invalidJobName, "Job #\(index) needs a \"name\" string.")
        }
        if let problem = JobNaming.nameProblem(Array(name.utf8)) {
            throw CurfewError(.invalidJobName, "Job #\(index) \(problem)")
        }
        let job = "Job '\(name)'"
        guard case .string(let summary)? = fields["summary"] else {
            throw CurfewError(.invalidSummary, "\(job) needs a \"summary\" string.")
        }
        if let problem = JobNaming.summaryProblem(Array(summary.utf8)) {
            throw CurfewError(.invalidSummary, "\(job) \(problem)")
        }
        var continuous = false
        if let flag = fields["continuous"] {
            guard case .bool(let value) = flag else {
                throw CurfewError(.invalidManifest, "\(job): \"continuous\" must be true or false, not \(flag.kind).")
            }
            continuous = value
        }
        var resume = true
        if let flag = fields["resume"] {
            guard case .bool(let value) = flag else {
                throw CurfewError(.invalidManifest, "\(job): \"resume\" must be true or false, not \(flag.kind).")
            }
            resume = value
        }
        var stateSize = 0
        if let state = fields["state"] {
            let stateFields = try members(state, allowed: ["size"], what: "\(job): \"state\"")
            guard case .number(let text)? = stateFields["size"], let size = Int(text),
                  (1...Self.maximumStateSize).contains(size) else {
                throw CurfewError(.invalidManifest, "\(job): \"state\" needs a \"size\" in bytes from 1 to \(Self.maximumStateSize).")
            }
            stateSize = size
        }
        guard let chunkValue = fields["chunk"] else {
            throw CurfewError(.missingHook, "\(job) needs a \"chunk\" function.")
        }
        let setup = try fields["setup"].map { value throws(CurfewError) in
            try readFunction(value, role: "setup", job: job, handle: handle, library: library)
        }
        let (chunk, rule) = try readChunk(chunkValue, job: job, handle: handle, library: library)
        let cleanup = try fields["cleanup"].map { value throws(CurfewError) in
            try readFunction(value, role: "cleanup", job: job, handle: handle, library: library)
        }
        let teardown = try fields["teardown"].map { value throws(CurfewError) in
            try readFunction(value, role: "teardown", job: job, handle: handle, library: library)
        }
        if let setup, setup.returnType == .pointer, stateSize > 0 {
            throw CurfewError(
                .invalidManifest,
                "\(job): setup '\(setup.symbol)' returns the state pointer, so the job cannot also declare a \"state\" buffer.")
        }
        let hasState = stateSize > 0 || setup?.returnType == .pointer
        for function in [setup, chunk, cleanup, teardown].compactMap({ $0 }) where !hasState {
            if function.sources.contains(where: { if case .state = $0 { return true } else { return false } }) {
                throw CurfewError(
                    .invalidManifest,
                    "\(job): '\(function.symbol)' takes the state, but the job has none: declare \"state\": {\"size\": N} or a setup that returns a pointer.")
            }
        }
        let foreign = ForeignJob(
            libraryPath: library, setup: setup, chunk: chunk, cleanup: cleanup, teardown: teardown, resultRule: rule,
            stateSize: stateSize, resumes: resume && ForeignJob.takesTheIndex([setup, chunk, cleanup, teardown]))
        return PluginJob(name: name, summary: summary, pluginPath: path, isContinuous: continuous,
                         hooks: foreign.hooks, foreign: foreign, index: index)
    }

    private func readChunk(_ value: JSONValue, job: String, handle: UnsafeMutableRawPointer, library: String)
        throws(CurfewError) -> (ForeignFunction, ForeignResultRule)
    {
        let function = try readFunction(value, role: "chunk", job: job, handle: handle, library: library)
        let declared = value["result"]
        if function.returnType == .void {
            guard declared == nil else {
                throw CurfewError(.invalidManifest, "\(job): chunk '\(function.symbol)' returns void, so it takes no \"result\" rule.")
            }
            return (function, .void)
        }
        guard case .string(let name)? = declared, let rule = ForeignResultRule(rawValue: name), rule != .void else {
            let given = declared.map { value -> String in
                if case .string(let text) = value { return " '\(text)'" }
                return " (\(value.kind))"
            } ?? ""
            throw CurfewError(
                .invalidManifest,
                "\(job): chunk '\(function.symbol)' needs a \"result\" rule\(given.isEmpty ? "" : ", not\(given)"): \(ForeignResultRule.names).")
        }
        if (rule == .curfewResult || rule == .negativeDone) && !function.returnType.isSignedInteger {
            throw CurfewError(
                .invalidManifest,
                "\(job): the \(rule.rawValue) rule needs a signed integer return type, not \(function.returnType.rawValue).")
        }
        return (function, rule)
    }

    private func readFunction(_ value: JSONValue, role: String, job: String, handle: UnsafeMutableRawPointer, library: String)
        throws(CurfewError) -> ForeignFunction
    {
        let allowed = role == "chunk" ? ["symbol", "returns", "args", "result"] : ["symbol", "returns", "args"]
        let fields = try members(value, allowed: Set(allowed), what: "\(job): \"\(role)\"")
        guard case .string(let symbol)? = fields["symbol"], !symbol.isEmpty else {
            throw CurfewError(.invalidManifest, "\(job): \"\(role)\" needs a \"symbol\" string.")
        }
        guard !symbol.utf8.contains(0) else {
            throw CurfewError(.invalidManifest, "\(job): the symbol of \(role) contains a NUL byte, which would cut its name short.")
        }
        var returnType = ForeignType.void
        if let returns = fields["returns"] {
            guard case .string(let name) = returns, let type = ForeignType(rawValue: name) else {
                throw CurfewError(
                    .invalidManifest,
                    "\(job): \(role) '\(symbol)' has unknown return type \(describe(returns)); use void, \(ForeignType.argumentTypeList).")
            }
            returnType = type
        }
        if returnType == .string {
            throw CurfewError(.invalidManifest, "\(job): \(role) '\(symbol)' cannot return a string; declare it as pointer.")
        }
        var arguments: [(ForeignType, ForeignArgumentSource)] = []
        if let args = fields["args"] {
            guard case .array(let list) = args else {
                throw CurfewError(.invalidManifest, "\(job): \"args\" of \(role) '\(symbol)' must be an array, not \(args.kind).")
            }
            guard list.count <= Self.maximumArguments else {
                throw CurfewError(
                    .invalidManifest,
                    "\(job): \(role) '\(symbol)' declares \(list.count) arguments, more than the limit of \(Self.maximumArguments).")
            }
            for (index, argument) in list.enumerated() {
                arguments.append(try readArgument(argument, position: index + 1, function: "\(role) '\(symbol)'", job: job))
            }
        }
        guard let address = Syscalls.dlsym(handle, symbol) else {
            throw CurfewError(.missingSymbol, "\(job): symbol '\(symbol)' (its \(role)) is not in \(library).")
        }
        // Only the library's own functions: not its data (calling it would
        // jump into data), nor what it takes from others (fork, exit, …).
        switch curfew_shim_symbol_kind(handle, address) {
        case 0: break
        case 1: throw CurfewError(.invalidManifest, "\(job): symbol '\(symbol)' (its \(role)) is not a function of \(library), so it cannot be called.")
        case 2: throw CurfewError(.missingSymbol, "\(job): symbol '\(symbol)' (its \(role)) is not defined in \(library) but in a library it uses; only its own functions can be called.")
        default: throw CurfewError(.missingSymbol, "\(job): symbol '\(symbol)' (its \(role)) cannot be told to be a function of \(library).")
        }
        guard let function = ForeignFunction(symbol: symbol, address: address, returnType: returnType, arguments: arguments) else {
            throw CurfewError(.invalidManifest, "\(job): libffi cannot prepare a call to '\(symbol)'.")
        }
        return function
    }

    private func readArgument(_ value: JSONValue, position: Int, function: String, job: String)
        throws(CurfewError) -> (ForeignType, ForeignArgumentSource)
    {
        let what = "\(job): argument \(position) of \(function)"
        let fields = try members(value, allowed: ["type", "value", "param", "default", "from"], what: what)
        guard let typeValue = fields["type"] else {
            throw CurfewError(.invalidManifest, "\(what) needs a \"type\": \(ForeignType.argumentTypeList).")
        }
        guard case .string(let typeName) = typeValue, let type = ForeignType(rawValue: typeName), type != .void else {
            throw CurfewError(.invalidManifest, "\(what) has unknown type \(describe(typeValue)); use \(ForeignType.argumentTypeList).")
        }
        let sources = ["value", "param", "from"].filter { fields[$0] != nil }
        guard sources.count == 1 else {
            throw CurfewError(
                .invalidManifest,
                sources.isEmpty
                    ? "\(what) needs a source: \"value\", \"param\" or \"from\"."
                    : "\(what) has \(sources.count) sources (\(sources.joined(separator: ", "))); give exactly one.")
        }
        if fields["default"] != nil && sources[0] != "param" {
            throw CurfewError(.invalidManifest, "\(what): \"default\" goes only with \"param\".")
        }
        switch sources[0] {
        case "value":
            return (type, .constant(try constant(fields["value"]!, type: type, what: what)))
        case "param":
            guard case .string(let key)? = fields["param"], !key.isEmpty else {
                throw CurfewError(.invalidManifest, "\(what): \"param\" must name a parameter.")
            }
            if type == .pointer {
                throw CurfewError(.invalidManifest, "\(what): a pointer cannot come from a --param; use string.")
            }
            if let text = parameters[key] {
                return (type, .constant(try parameterConstant(text, key: key, type: type, what: what)))
            }
            if let fallback = fields["default"] {
                return (type, .constant(try constant(fallback, type: type, what: what)))
            }
            return (type, .missingParameter(key))
        default:
            guard case .string(let name)? = fields["from"] else {
                throw CurfewError(.invalidManifest, "\(what): \"from\" must be chunk-index, time-remaining or state.")
            }
            switch name {
            case "chunk-index":
                guard type.isInteger || type.isFloatingPoint else {
                    throw CurfewError(.invalidManifest, "\(what): chunk-index needs a number type, not \(type.rawValue).")
                }
                return (type, .chunkIndex)
            case "time-remaining":
                guard type.isInteger || type.isFloatingPoint else {
                    throw CurfewError(.invalidManifest, "\(what): time-remaining needs a number type, not \(type.rawValue).")
                }
                return (type, .timeRemaining)
            case "state":
                guard type == .pointer else {
                    throw CurfewError(.invalidManifest, "\(what): state needs type pointer, not \(type.rawValue).")
                }
                return (type, .state)
            default:
                throw CurfewError(.invalidManifest, "\(what) has unknown source '\(name)'; use chunk-index, time-remaining or state.")
            }
        }
    }

    /// A literal from the manifest, checked against the argument's type.
    private func constant(_ value: JSONValue, type: ForeignType, what: String) throws(CurfewError) -> ForeignConstant {
        switch (value, type) {
        case (.string(let text), .string): return .pointer(Self.immortalCString(text))
        case (.null, .pointer), (.null, .string): return .pointer(0)
        case (.number(let text), _) where type.isInteger:
            guard let integer = Int128(text) else {
                throw CurfewError(.invalidManifest, "\(what): value \(text) is not an integer, as \(type.rawValue) needs.")
            }
            guard type.integerRange!.contains(integer) else {
                throw CurfewError(.invalidManifest, "\(what): value \(text) does not fit \(type.rawValue).")
            }
            return .integer(integer)
        case (.number(let text), _) where type.isFloatingPoint:
            return .floatingPoint(Double(text)!)
        default:
            throw CurfewError(.invalidManifest, "\(what): value \(describe(value)) does not suit type \(type.rawValue).")
        }
    }

    /// A `--param` value converted to the argument's type.
    private func parameterConstant(_ text: String, key: String, type: ForeignType, what: String) throws(CurfewError) -> ForeignConstant {
        if type == .string { return .pointer(Self.immortalCString(text)) }
        if type.isInteger {
            guard let integer = Int128(text) else {
                throw CurfewError(.invalidParameter, "\(what): --param \(key)=\(text) is not an integer, as \(type.rawValue) needs.")
            }
            guard type.integerRange!.contains(integer) else {
                throw CurfewError(.invalidParameter, "\(what): --param \(key)=\(text) does not fit \(type.rawValue).")
            }
            return .integer(integer)
        }
        guard let number = Double(text), number.isFinite else {
            throw CurfewError(.invalidParameter, "\(what): --param \(key)=\(text) is not a \(type.rawValue).")
        }
        return .floatingPoint(number)
    }

    /// The object's members, after checking it is an object with only known keys.
    private func members(_ value: JSONValue, allowed: Set<String>, what: String) throws(CurfewError) -> JSONValue {
        guard case .object(let members) = value else {
            throw CurfewError(.invalidManifest, "\(what) must be an object, not \(value.kind).")
        }
        if let unknown = members.first(where: { !allowed.contains($0.key) }) {
            throw CurfewError(.invalidManifest, "\(what) has unknown key \"\(unknown.key)\"; known: \(allowed.sorted().joined(separator: ", ")).")
        }
        return value
    }

    private func describe(_ value: JSONValue) -> String {
        switch value {
        case .string(let text): "'\(text)'"
        case .number(let text): text
        default: value.kind
        }
    }

    /// A C copy of `text` that lives as long as the process (plugins never unload).
    private static func immortalCString(_ text: String) -> UInt {
        UInt(bitPattern: CStrings.copy(text))
    }
}
