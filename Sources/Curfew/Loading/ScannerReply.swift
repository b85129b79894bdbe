import CCurfew
import CurfewFormats
import _CurfewShims

/// What a scanner process has said about its file so far.
enum ScanEvent: Equatable {
    /// It is about to open the file: before this, no code of the file's has run in it.
    case loading
    /// Its verdict on the file.
    case answer(FileResult)
    /// It has nothing more to say.
    case done
    /// It said something no scanner says: plugin code wrote on its channel.
    case problem(String)
}

/// What a scanner has said of its file, event by event, and the verdict it
/// comes to once the scanner has ended.
struct ScannerSaid {
    private(set) var answer: FileResult?
    private(set) var problem: String?
    private(set) var finished = false
    private(set) var loading = false

    /// Takes in `events`; false once there is nothing more to hear (it is
    /// done, or said something no scanner says: the first such thing counts).
    mutating func hear(_ events: [ScanEvent]) -> Bool {
        for event in events {
            switch event {
            case .problem(let what):
                problem = what
                return false
            case .done:
                finished = true
                return false
            case .loading:
                loading = true
            case .answer(let result):
                guard answer == nil else {
                    problem = "two answers"
                    return false
                }
                // The scanner says it before it opens the file; after, it is plugin code's.
                guard !(loading && result.isUnconfined) else {
                    problem = "an unconfined scanner's answer once the file was loading"
                    return false
                }
                answer = result
            }
        }
        return true
    }

    /// Marks what it said as cut short by plugin code (past the size a
    /// scanner may say), unless something else already was.
    mutating func cutShort(_ what: String) {
        if problem == nil { problem = what }
    }

    /// It ended before it loaded anything and said nothing: it gives no
    /// verdict on the file. (What it answers before loading is its own: that
    /// it could not be confined.)
    var endedBeforeLoading: Bool { problem == nil && !loading && answer == nil }

    /// The file's verdict once the scanner ended with wait status `status`
    /// (`nil` when unknown), and whether the file alone decided it: its
    /// word counts only if it is about this file, said once, and followed
    /// by a clean exit.
    func verdict(status: Int32?) -> (result: FileResult, cacheable: Bool) {
        func rejected(_ reason: String) -> FileResult { .rejected(code: CurfewError.Code.loadFailed.rawValue, reason: reason) }
        if let problem {
            return (rejected("Its scanner worker sent \(problem), so plugin code wrote on its channel while it loaded."), true)
        }
        guard let status else {
            // Its server died (plugin code, maybe a sibling's, killed it)
            // before it told how the scanner ended. A whole answer stands, not
            // cached: only a crash at exit could have undone it. (Scanning the
            // file again would make this process the scanner's parent, and the
            // file may be the one that kills its parent.)
            if finished, let answer { return (answer, false) }
            return (rejected("Crashed while loading: the scanner worker's fork server died before the worker's end was known (plugin code may have killed it)."), false)
        }
        let signaled = status & 0x7F != 0 && status & 0x7F != 0x7F
        let how = signaled ? "died of \(SignalMonitor.name(of: status & 0x7F))" : "exited with status \((status >> 8) & 0xFF)"
        guard finished, let answer, !signaled, (status >> 8) & 0xFF == 0 else {
            // A crash is the file's own; a SIGKILL can come from outside (a
            // sibling plugin's scanner, the OOM killer): not remembered.
            return (rejected("Crashed while loading: the scanner worker \(how) in its constructor or entry function."), status & 0x7F != Signal.kill)
        }
        // The scanner's own failure says nothing lasting of the file.
        return (answer, !answer.isUnconfined)
    }
}

extension FileResult {
    /// Its scanner could not confine itself, and so loaded nothing.
    var isUnconfined: Bool {
        if case .rejected(let code, _) = self { return code == CurfewError.Code.sandboxFailed.rawValue }
        return false
    }

    /// The file's rejection by a scanner that could not confine itself
    /// (`why`: the step and the system's error), C or Swift.
    static func unconfined(_ why: String) -> FileResult {
        .rejected(code: CurfewError.Code.sandboxFailed.rawValue, reason: "Its scanner could not be sandboxed (\(why)), so the file was not loaded.")
    }
}

/// Reads what a scanner says as it arrives, whatever it says: plugin code
/// runs in the scanner and can write on its channel too.
protocol ScannerReply {
    /// The events `bytes`, the next bytes read, complete.
    mutating func read(_ bytes: UnsafeRawBufferPointer) -> [ScanEvent]
}

/// The replies of the C scanner (`scanner.c`, in the batch role of
/// `curfew-scanner` or `curfew`, or under `curfew __scanserver`): frames, the answer a copy of the file's descriptor, checked here by the
/// ``DescriptorValidator`` a descriptor in this process's memory goes
/// through.
struct ScannerFrames: ScannerReply {
    /// The file the scanner was asked about.
    let file: String
    private var pending: [UInt8] = []
    private var answered = false
    /// The bytes read so far.
    private var heard = 0

    /// What a scanner that said more than it may is said to have sent.
    static let tooMuch = "a message of more than \(maximumFrameBytes >> 20) MiB"

    /// The largest frame read: ten times what the largest descriptor copy
    /// takes (256 jobs, each with its strings: about 370 KB).
    static let maximumFrameBytes = 4 << 20
    /// The most regions a copy holds: the descriptor, its table, and per job
    /// the job, its name, summary and modes.
    static let maximumRegions = 2 + 4 * Int(CURFEW_MAX_JOBS)

    init(file: String) {
        self.file = file
    }

    /// The request that asks a scanner about `file`: its length and bytes,
    /// or `nil` when the path is too long to ask about.
    static func request(_ file: String) -> [UInt8]? {
        let path = Array(file.utf8)
        guard !path.isEmpty, path.count <= Int(CURFEW_SCAN_MAX_PATH), !path.contains(0) else { return nil }
        return withUnsafeBytes(of: UInt32(path.count)) { Array($0) } + path
    }

    mutating func read(_ bytes: UnsafeRawBufferPointer) -> [ScanEvent] {
        // All a scanner may say, whoever reads it: the batch server stops
        // reading there too, and flags it (``ScannerSaid/cutShort(_:)``).
        heard += bytes.count
        guard heard <= Int(CURFEW_SCAN_MAX_REPLY) else { return [.problem(Self.tooMuch)] }
        pending.append(contentsOf: bytes)
        var events: [ScanEvent] = []
        var start = 0
        defer { pending.removeFirst(start) }
        while pending.count - start >= 12 {
            var header = ByteReader(pending[start..<start + 12])
            guard header.u32() == CURFEW_SCAN_MAGIC, let kind = header.u32(), let length = header.u32() else {
                return events + [.problem("bytes that are not a message")]
            }
            guard Int(length) <= Self.maximumFrameBytes else { return events + [.problem(Self.tooMuch)] }
            guard pending.count - start - 12 >= Int(length) else { break }
            let payload = pending[start + 12..<start + 12 + Int(length)]
            start += 12 + Int(length)
            switch kind {
            case CURFEW_SCAN_LOADING where length == 0: events.append(.loading)
            case CURFEW_SCAN_DONE where length == 0:
                events.append(.done)
                return events
            case CURFEW_SCAN_ANSWER:
                // A second answer is not read, only refused.
                guard !answered else { return events + [.problem("two answers")] }
                answered = true
                guard let result = Self.result(payload, file: file) else { return events + [.problem("an answer that does not read right")] }
                events.append(.answer(result))
            default:
                return events + [.problem("a message of unknown type")]
            }
        }
        return events
    }

    /// The verdict an answer's payload gives, or `nil` when it does not read right.
    static func result(_ payload: ArraySlice<UInt8>, file: String) -> FileResult? {
        var reader = ByteReader(payload)
        guard let outcome = reader.u32() else { return nil }
        let verdict: Result<LoadedPlugin, CurfewError>
        switch outcome {
        case CURFEW_SCAN_DESCRIPTOR:
            guard let address = reader.u64(), let count = reader.u32(), Int(count) <= maximumRegions else { return nil }
            var regions: [SnapshotMemory.Region] = []
            regions.reserveCapacity(Int(count))
            for _ in 0..<count {
                guard let at = reader.u64(), let asked = reader.u32(), let readable = reader.u32(), readable <= asked,
                    let bytes = reader.bytes(Int(readable))
                else { return nil }
                regions.append(SnapshotMemory.Region(address: UInt(at), bytes: Array(bytes)))
            }
            guard reader.isAtEnd else { return nil }
            do throws(CurfewError) {
                verdict = .success(try DescriptorValidator(path: file).validate(SnapshotMemory(regions), at: UInt(address)))
            } catch {
                verdict = .failure(error)
            }
        case CURFEW_SCAN_STAT_FAILED:
            guard let number = reader.u32(), reader.isAtEnd, let code = Int32(exactly: number) else { return nil }
            verdict = .failure(PluginLoader.statError(SystemError(errno: code)))
        case CURFEW_SCAN_NOT_REGULAR:
            guard reader.isAtEnd else { return nil }
            verdict = .failure(PluginLoader.notRegularError)
        case CURFEW_SCAN_DLOPEN_FAILED:
            guard let code = reader.u32() else { return nil }
            let cause: PluginLoader.DynamicLoaderCause
            switch code {
            case CURFEW_SCAN_EMPTY: cause = .empty
            case CURFEW_SCAN_NOT_ELF: cause = .notELF
            case CURFEW_SCAN_CANNOT_LOAD: cause = .other
            default: return nil
            }
            // The scanner cuts dlerror's text there: longer is plugin code's.
            let said = reader.rest()
            guard said.count <= Int(CURFEW_SCAN_MAX_DLERROR_BYTES) else { return nil }
            let text = String(decoding: said, as: UTF8.self)
            verdict = .failure(PluginLoader.dlopenError(cause, DynamicLoaderError(message: text.isEmpty ? "unknown dynamic loader error" : text)))
        case CURFEW_SCAN_NO_ENTRY:
            guard reader.isAtEnd else { return nil }
            verdict = .failure(PluginLoader.missingEntryError)
        case CURFEW_SCAN_DECLINED:
            guard let count = reader.u32(), count <= CURFEW_SCAN_MAX_MESSAGES else { return nil }
            var messages: [String] = []
            for _ in 0..<count {
                // The scanner cuts each message there: longer is plugin code's.
                guard let length = reader.u32(), length <= CURFEW_SCAN_MAX_MESSAGE_BYTES, let bytes = reader.bytes(Int(length))
                else { return nil }
                messages.append(String(decoding: bytes, as: UTF8.self))
            }
            guard reader.isAtEnd else { return nil }
            verdict = .failure(PluginLoader.declinedError(messages))
        case CURFEW_SCAN_UNCONFINED:
            // Said before the file was opened: no plugin code has run.
            guard let number = reader.u32(), let code = Int32(exactly: number), case let step = reader.rest(), step.count <= 256 else {
                return nil
            }
            return .unconfined("\(String(decoding: step, as: UTF8.self)): \(SystemError(errno: code).message)")
        default:
            return nil
        }
        switch verdict {
        case .success(let plugin): return .jobs(plugin.jobs.map(ScannedJob.init))
        case .failure(let error): return .rejected(code: error.code.rawValue, reason: error.description)
        }
    }
}

/// Reads native-order integers and byte runs off a payload, never past its end.
private struct ByteReader {
    private let bytes: ArraySlice<UInt8>
    private var index: Int

    init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        index = bytes.startIndex
    }

    var isAtEnd: Bool { index == bytes.endIndex }

    mutating func bytes(_ count: Int) -> ArraySlice<UInt8>? {
        guard count >= 0, bytes.endIndex - index >= count else { return nil }
        defer { index += count }
        return bytes[index..<index + count]
    }

    mutating func rest() -> ArraySlice<UInt8> {
        defer { index = bytes.endIndex }
        return bytes[index...]
    }

    mutating func u32() -> UInt32? {
        bytes(4).map { $0.withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) } }
    }

    mutating func u64() -> UInt64? {
        bytes(8).map { $0.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) } }
    }
}

/// A scanner's copy of a descriptor and what it points at: a read of
/// anything it did not copy is a read the scanner could not make either.
struct SnapshotMemory: DescriptorMemory {
    /// Bytes copied from `address` on: the readable part of what was asked for.
    struct Region {
        let address: UInt
        let bytes: [UInt8]
    }

    /// By address, so a lookup starts with a binary search.
    private let regions: [Region]
    /// For each region, the end of the furthest-reaching region up to it:
    /// where a search going back from an address may stop.
    private let reach: [UInt]

    init(_ regions: [Region]) {
        self.regions = regions.sorted { $0.address < $1.address }
        var furthest: UInt = 0
        reach = self.regions.map { region in
            let (end, overflow) = region.address.addingReportingOverflow(UInt(region.bytes.count))
            furthest = max(furthest, overflow ? .max : end)
            return furthest
        }
    }

    func load<T: BitwiseCopyable>(_ address: UInt, as type: T.Type) throws(CurfewError) -> T {
        let size = MemoryLayout<T>.size
        let value = first(holding: address) { region, offset -> T? in
            guard region.bytes.count - offset >= size else { return nil }
            return region.bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: T.self) }
        }
        guard let value else { throw Self.unreadable(address) }
        return value
    }

    func text(_ address: UInt, limit: Int) throws(CurfewError) -> [UInt8] {
        let text = first(holding: address) { region, offset -> [UInt8]? in
            let available = region.bytes[offset...].prefix(limit)
            if let end = available.firstIndex(of: 0) { return Array(region.bytes[offset..<end]) }
            return available.count == limit ? Array(available) : nil
        }
        guard let text else { throw Self.unreadable(address) }
        return text
    }

    /// What `body` makes of the first region holding `address` (with the
    /// offset there) for which it makes something.
    private func first<Value>(holding address: UInt, _ body: (Region, Int) -> Value?) -> Value? {
        // The last region that starts at or before it, then those before
        // that, while any of them reaches it.
        var low = 0
        var high = regions.count
        while low < high {
            let middle = (low + high) / 2
            if regions[middle].address <= address { low = middle + 1 } else { high = middle }
        }
        // A few tries at most: an honest copy has at most a couple of
        // regions over one address (a string two jobs share), and a forged
        // one must not make each read cost the whole copy.
        var index = low - 1
        var tries = 0
        var steps = 0
        while index >= 0 && reach[index] > address && tries < 4 && steps < 64 {
            steps += 1
            let region = regions[index]
            let offset = address - region.address
            if offset < UInt(region.bytes.count) {
                tries += 1
                if let value = body(region, Int(offset)) { return value }
            }
            index -= 1
        }
        return nil
    }

    private static func unreadable(_ address: UInt) -> CurfewError {
        CurfewError(
            .invalidDescriptor,
            "The descriptor, or something it points at, lies in memory that cannot be read (at 0x\(String(address, radix: 16))).")
    }
}

/// The replies of a Swift scanner (`curfew __worker`, which scans a
/// foreign-job manifest): one JSON message a line.
struct ScannerLines: ScannerReply {
    /// The file the scanner was asked about.
    let file: String
    private var buffer = LineBuffer(maximumLength: WorkerProtocol.maximumMessageBytes, dropsOverlongLines: true)

    init(file: String) {
        self.file = file
    }

    /// The request that asks a scanner about `file`.
    static func request(_ file: String) -> String {
        HostMessage.scan(files: [file]).line
    }

    mutating func read(_ bytes: UnsafeRawBufferPointer) -> [ScanEvent] {
        let dropped = buffer.droppedLines
        let lines = buffer.append(bytes)
        if buffer.droppedLines > dropped { return [.problem("a message of more than \(WorkerProtocol.maximumMessageBytes >> 20) MiB")] }
        var events: [ScanEvent] = []
        for line in lines {
            // One reading of the line: its type, its file and the verdict.
            var reader = JSONReader(Array(line.utf8))
            let read = { () throws(JSONSyntaxError) -> (result: FileResult, type: String?, file: String?) in
                let message = try FileResult.read(&reader)
                try reader.finish()
                return message
            }
            guard let message = try? read(), let type = message.type else {
                return events + [.problem("a line that is not a message")]
            }
            if type == "done" { return events + [.done] }
            guard type == "scanning" || type == "scanned" || type == "rejected" else {
                return events + [.problem("a message of unknown type")]
            }
            guard message.file == file else { return events + [.problem("a message about another file")] }
            events.append(type == "scanning" ? .loading : .answer(message.result))
        }
        return events
    }
}
