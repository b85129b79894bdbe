import CCurfew
import CLibFFI
import _CurfewFFI

/// The argument storage for calls of one function in one job run: values
/// written once, pointers to them prepared once, so a call only refreshes the
/// few arguments that change and calls `ffi_call`.
final class ForeignFrame {
    /// An argument refreshed before every call.
    struct DynamicArgument {
        enum Kind { case chunkIndex, timeRemaining, state }
        let slot: UnsafeMutableRawPointer
        let kind: Kind
        let type: ForeignType
        /// The type's range for an integer type, the whole of Int64 else
        /// (an unsigned 64-bit type takes the non-negative half: the values
        /// it is given, an index or whole seconds, are never negative).
        let lowest: Int64
        let highest: Int64

        init(slot: UnsafeMutableRawPointer, kind: Kind, type: ForeignType) {
            self.slot = slot
            self.kind = kind
            self.type = type
            let range = type.integerRange
            lowest = range.map { Int64(clamping: $0.lowerBound) } ?? .min
            highest = range.map { Int64(clamping: $0.upperBound) } ?? .max
        }

        /// `value` saturated to the type's range.
        @inline(__always)
        func clamp(_ value: Int64) -> Int64 { min(max(value, lowest), highest) }
    }

    /// How a function of up to four integer or pointer arguments, returning
    /// an integer, a pointer or nothing, is called: directly, each argument
    /// in a 64-bit register (extended from its type, as C callers do), not
    /// through `ffi_call`. On x86-64 (System V) and arm64 (AAPCS64) such a
    /// call is the same at the machine level whatever the arity: the unused
    /// argument registers are ignored, and a narrower result is narrowed here.
    typealias Direct = @convention(c) (Int64, Int64, Int64, Int64) -> Int64

    let function: ForeignFunction
    /// The function's return type, kept here for the call path.
    private let returnType: ForeignType
    private let direct: Direct?
    private let values: UnsafeMutableRawPointer      // 8 bytes per argument (at least 4)
    private let pointers: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    private let result: UnsafeMutableRawPointer       // at least sizeof(ffi_arg)
    private let dynamic: UnsafeMutableBufferPointer<DynamicArgument>
    /// The first parameter the function needs and was not given.
    let missingParameter: String?

    init(_ function: ForeignFunction) {
        self.function = function
        returnType = function.returnType
        let count = function.argumentTypes.count
        direct = Self.callsDirectly(function) ? unsafeBitCast(function.address, to: Direct.self) : nil
        values = .allocate(byteCount: max(count, 4) * 8, alignment: 8)
        values.initializeMemory(as: UInt8.self, repeating: 0, count: max(count, 4) * 8)
        pointers = .allocate(capacity: max(count, 1))
        result = .allocate(byteCount: 16, alignment: 16)
        result.initializeMemory(as: UInt8.self, repeating: 0, count: 16)
        var dynamic: [DynamicArgument] = []
        var missing: String?
        for index in 0..<count {
            let slot = values + index * 8
            let type = function.argumentTypes[index]
            pointers[index] = slot
            switch function.sources[index] {
            case .constant(let constant):
                Self.store(constant, as: type, at: slot)
                if direct != nil { slot.storeBytes(of: Self.extend(slot.load(as: Int64.self), from: type), as: Int64.self) }
            case .missingParameter(let key): missing = missing ?? key
            case .chunkIndex: dynamic.append(DynamicArgument(slot: slot, kind: .chunkIndex, type: type))
            case .timeRemaining: dynamic.append(DynamicArgument(slot: slot, kind: .timeRemaining, type: type))
            case .state: dynamic.append(DynamicArgument(slot: slot, kind: .state, type: type))
            }
        }
        missingParameter = missing
        self.dynamic = .allocate(capacity: dynamic.count)
        _ = self.dynamic.initialize(from: dynamic)
    }

    deinit {
        values.deallocate()
        pointers.deallocate()
        result.deallocate()
        dynamic.deallocate()
    }

    /// Whether `function` is called directly (see ``Direct``).
    static func callsDirectly(_ function: ForeignFunction) -> Bool {
        #if arch(x86_64) || arch(arm64)
        function.argumentTypes.count <= 4 && function.argumentTypes.allSatisfy { !$0.isFloatingPoint && $0 != .void }
            && !function.returnType.isFloatingPoint
        #else
        false
        #endif
    }

    /// Whether no argument of `function` but the chunk index changes once
    /// the run's state is set: then a C hook calls it (`curfew_direct_chunk`
    /// or `curfew_ffi_chunk`), with no Swift in between.
    static func changesOnlyTheIndex(_ function: ForeignFunction) -> Bool {
        var indexes = 0
        for source in function.sources {
            switch source {
            case .constant, .missingParameter, .state: continue
            case .chunkIndex: indexes += 1
            case .timeRemaining: return false
            }
        }
        return indexes <= 1
    }

    /// What the C chunk hooks need of this function, with the run's state
    /// written into its arguments once; `owner` is handed to their failure
    /// report. `nil` when the function does not qualify.
    func chunkCall(owner: UnsafeMutableRawPointer, state: UnsafeMutableRawPointer?, rule: Int32) -> ChunkCall? {
        guard Self.changesOnlyTheIndex(function) else { return nil }
        for argument in dynamic where argument.kind == .state {
            argument.slot.storeBytes(of: state, as: UnsafeMutableRawPointer?.self)
        }
        let report: @convention(c) (UnsafeMutableRawPointer?, Int64) -> Void = { owner, value in
            let run = Unmanaged<ForeignRun>.fromOpaque(owner!).takeUnretainedValue()
            run.run.log(.error, "\(run.job.chunk.symbol) returned \(value) (\(run.resultRule.rawValue))")
        }
        let index = dynamic.first { $0.kind == .chunkIndex }
        if let direct {
            let call = UnsafeMutablePointer<curfew_direct_call>.allocate(capacity: 1)
            call.initialize(to: curfew_direct_call())
            call.pointee.function = direct
            withUnsafeMutableBytes(of: &call.pointee.arguments) { arguments in
                arguments.copyMemory(from: UnsafeRawBufferPointer(start: values, count: 32))
            }
            call.pointee.index_slot = index.map { Int32(($0.slot - values) / 8) } ?? -1
            call.pointee.index_kind = index.map { Self.cKind($0.type) } ?? 0
            call.pointee.index_lowest = index?.lowest ?? 0
            call.pointee.index_highest = index?.highest ?? 0
            call.pointee.result_kind = Self.cKind(returnType)
            call.pointee.rule = rule
            call.pointee.report_failure = report
            call.pointee.owner = owner
            return .direct(call)
        }
        let call = UnsafeMutablePointer<curfew_ffi_call>.allocate(capacity: 1)
        call.initialize(to: curfew_ffi_call())
        call.pointee.cif = function.cif
        call.pointee.function = function.address
        call.pointee.arguments = pointers
        call.pointee.index_slot = index?.slot
        call.pointee.index_kind = index.map { Self.cKind($0.type) } ?? 0
        call.pointee.index_lowest = index?.lowest ?? 0
        call.pointee.index_highest = index?.highest ?? 0
        call.pointee.result_kind = Self.cKind(returnType)
        call.pointee.rule = rule
        call.pointee.result = result
        call.pointee.report_failure = report
        call.pointee.owner = owner
        return .libffi(call)
    }

    /// A chunk's call for one of the C chunk hooks.
    enum ChunkCall {
        case direct(UnsafeMutablePointer<curfew_direct_call>)
        case libffi(UnsafeMutablePointer<curfew_ffi_call>)

        /// The job's state, as the C hook reads it.
        var state: UnsafeMutableRawPointer {
            switch self {
            case .direct(let call): UnsafeMutableRawPointer(call)
            case .libffi(let call): UnsafeMutableRawPointer(call)
            }
        }

        /// The index the C hook gives the next chunk.
        var nextIndex: Int64 {
            get {
                switch self {
                case .direct(let call): call.pointee.next_index
                case .libffi(let call): call.pointee.next_index
                }
            }
            nonmutating set {
                switch self {
                case .direct(let call): call.pointee.next_index = newValue
                case .libffi(let call): call.pointee.next_index = newValue
                }
            }
        }

        func deallocate() {
            switch self {
            case .direct(let call): call.deallocate()
            case .libffi(let call): call.deallocate()
            }
        }
    }

    /// How the C chunk hooks read or write a value of `type`.
    static func cKind(_ type: ForeignType) -> Int32 {
        let kind: Int
        switch type {
        case .int8: kind = CURFEW_DIRECT_INT8
        case .uint8: kind = CURFEW_DIRECT_UINT8
        case .int16: kind = CURFEW_DIRECT_INT16
        case .uint16: kind = CURFEW_DIRECT_UINT16
        case .int32: kind = CURFEW_DIRECT_INT32
        case .uint32: kind = CURFEW_DIRECT_UINT32
        case .uint64: kind = CURFEW_FFI_UNSIGNED64
        case .float: kind = CURFEW_FFI_FLOAT
        case .double: kind = CURFEW_FFI_DOUBLE
        case .void: kind = CURFEW_DIRECT_VOID
        case .int64, .pointer, .string: kind = CURFEW_DIRECT_AS_IS
        }
        return Int32(kind)
    }

    /// Calls the function with the changing arguments refreshed.
    @inline(__always)
    func call(chunkIndex: Int64, run: HostContext, state: UnsafeMutableRawPointer?) {
        if let direct {
            for argument in dynamic {
                let value: Int64
                switch argument.kind {
                case .chunkIndex: value = argument.clamp(chunkIndex)
                case .timeRemaining: value = argument.clamp(Self.wholeSeconds(run.timeRemainingSeconds))
                case .state: value = Int64(Int(bitPattern: state))
                }
                argument.slot.storeBytes(of: Self.extend(value, from: argument.type), as: Int64.self)
            }
            let returned = direct(
                values.load(as: Int64.self), values.load(fromByteOffset: 8, as: Int64.self),
                values.load(fromByteOffset: 16, as: Int64.self), values.load(fromByteOffset: 24, as: Int64.self))
            // What ffi_call would leave: the result widened from its type.
            result.storeBytes(of: Self.extend(returned, from: returnType), as: Int64.self)
            return
        }
        for argument in dynamic {
            switch argument.kind {
            case .chunkIndex: Self.store(argument.clamp(chunkIndex), as: argument.type, at: argument.slot)
            case .timeRemaining:
                let seconds = run.timeRemainingSeconds
                if argument.type.isFloatingPoint {
                    Self.store(seconds, as: argument.type, at: argument.slot)
                } else {
                    Self.store(argument.clamp(Self.wholeSeconds(seconds)), as: argument.type, at: argument.slot)
                }
            case .state: argument.slot.storeBytes(of: state, as: UnsafeMutableRawPointer?.self)
            }
        }
        ffi_call(function.cif, function.address, result, pointers)
    }

    /// The returned value as an integer (floating point truncated, pointers as addresses).
    @inline(__always)
    var integerResult: Int64 {
        switch returnType {
        case .int8, .int16, .int32, .int64: result.load(as: Int64.self)  // widened to ffi_sarg
        case .uint8, .uint16, .uint32, .uint64: Int64(clamping: result.load(as: UInt64.self))
        case .float: Int64(exactly: result.load(as: Float.self).rounded(.towardZero)) ?? 0
        case .double: Int64(exactly: result.load(as: Double.self).rounded(.towardZero)) ?? 0
        case .pointer, .string: Int64(Int(bitPattern: result.load(as: UnsafeRawPointer?.self)))
        case .void: 0
        }
    }

    var pointerResult: UnsafeMutableRawPointer? {
        result.load(as: UnsafeMutableRawPointer?.self)
    }

    /// Whole seconds, saturated: no budget reads as the largest value.
    @inline(__always)
    static func wholeSeconds(_ seconds: Double) -> Int64 {
        seconds >= 9.2e18 ? Int64.max : Int64(max(0, seconds).rounded(.down))
    }

    /// The low bits of `value` that a `type` holds, extended to 64 bits as
    /// its signedness says (pointers and 64-bit types as they are).
    @inline(__always)
    static func extend(_ value: Int64, from type: ForeignType) -> Int64 {
        switch type {
        case .int8: Int64(Int8(truncatingIfNeeded: value))
        case .int16: Int64(Int16(truncatingIfNeeded: value))
        case .int32: Int64(Int32(truncatingIfNeeded: value))
        case .uint8: Int64(UInt8(truncatingIfNeeded: value))
        case .uint16: Int64(UInt16(truncatingIfNeeded: value))
        case .uint32: Int64(UInt32(truncatingIfNeeded: value))
        case .void: 0
        default: value
        }
    }

    @inline(__always)
    static func store(_ value: Int64, as type: ForeignType, at slot: UnsafeMutableRawPointer) {
        switch type {
        case .int8, .uint8: slot.storeBytes(of: UInt8(truncatingIfNeeded: value), as: UInt8.self)
        case .int16, .uint16: slot.storeBytes(of: UInt16(truncatingIfNeeded: value), as: UInt16.self)
        case .int32, .uint32: slot.storeBytes(of: UInt32(truncatingIfNeeded: value), as: UInt32.self)
        case .int64, .uint64: slot.storeBytes(of: value, as: Int64.self)
        case .float: slot.storeBytes(of: Float(value), as: Float.self)
        case .double: slot.storeBytes(of: Double(value), as: Double.self)
        case .pointer, .string, .void: preconditionFailure("a number for a \(type) argument passed validation")
        }
    }

    @inline(__always)
    static func store(_ value: Double, as type: ForeignType, at slot: UnsafeMutableRawPointer) {
        if type == .float {
            slot.storeBytes(of: Float(value), as: Float.self)
        } else {
            slot.storeBytes(of: value, as: Double.self)
        }
    }

    static func store(_ constant: ForeignConstant, as type: ForeignType, at slot: UnsafeMutableRawPointer) {
        switch constant {
        case .integer(let value) where type.isInteger:
            // Validation checked the range; two's complement bits are the value for either signedness.
            store(Int64(truncatingIfNeeded: value), as: type, at: slot)
        case .integer(let value): store(Double(value), as: type, at: slot)
        case .floatingPoint(let value): store(value, as: type, at: slot)
        case .pointer(let address): slot.storeBytes(of: address, as: UInt.self)
        }
    }
}

/// One run of a foreign job: its frames, its state and its chunk count.
final class ForeignRun {
    let job: ForeignJob
    // Contexts are immortal (see HostContext), so an unowned reference is
    // safe, and an unsafe one costs no reference counting per call.
    unowned(unsafe) let run: HostContext
    let setupFrame: ForeignFrame?
    let chunkFrame: ForeignFrame
    let cleanupFrame: ForeignFrame?
    let teardownFrame: ForeignFrame?
    let stateBuffer: UnsafeMutableRawPointer?
    var state: UnsafeMutableRawPointer?
    /// The C chunk hook's call, for a job whose chunk qualifies.
    private(set) var chunkCall: ForeignFrame.ChunkCall?
    var chunkIndex: Int64 = 0
    let resultRule: ForeignResultRule

    init(job: ForeignJob, run: HostContext) {
        self.job = job
        self.run = run
        resultRule = job.resultRule
        setupFrame = job.setup.map(ForeignFrame.init)
        chunkFrame = ForeignFrame(job.chunk)
        cleanupFrame = job.cleanup.map(ForeignFrame.init)
        teardownFrame = job.teardown.map(ForeignFrame.init)
        if job.stateSize > 0 {
            let buffer = UnsafeMutableRawPointer.allocate(byteCount: job.stateSize, alignment: 16)
            buffer.initializeMemory(as: UInt8.self, repeating: 0, count: job.stateSize)
            stateBuffer = buffer
        } else {
            stateBuffer = nil
        }
        state = stateBuffer
    }

    deinit {
        stateBuffer?.deallocate()
        chunkCall?.deallocate()
    }

    /// Checks the parameters and calls `setup`; returns why it failed, if it did.
    func setUp() -> String? {
        for frame in [setupFrame, chunkFrame, cleanupFrame, teardownFrame].compactMap({ $0 }) {
            if let key = frame.missingParameter {
                return "\(frame.function.symbol) needs --param \(key)=<value>"
            }
        }
        if job.resumes { chunkIndex = resumedIndex() }
        guard let setupFrame else { return makeChunkCall() }
        setupFrame.call(chunkIndex: chunkIndex, run: run, state: state)
        switch setupFrame.function.returnType {
        case .void: return makeChunkCall()
        case .pointer:
            guard let pointer = setupFrame.pointerResult else { return "\(setupFrame.function.symbol) returned NULL" }
            state = pointer
            return makeChunkCall()
        default:
            let value = setupFrame.integerResult
            return value == 0 ? makeChunkCall() : "\(setupFrame.function.symbol) returned \(value)"
        }
    }

    /// Prepares the C chunk hook's call, when the chunk qualifies (after
    /// `setup`, which may set the state).
    private func makeChunkCall() -> String? {
        chunkCall = chunkFrame.chunkCall(owner: Unmanaged.passUnretained(self).toOpaque(), state: state, rule: resultRule.cRule)
        chunkCall?.nextIndex = chunkIndex
        return nil
    }

    /// The index the next chunk gets: the C hook counts for a chunk it calls.
    var nextIndex: Int64 { chunkCall?.nextIndex ?? chunkIndex }

    /// Where the last run's grant expired, from the job's checkpoint; 0 with
    /// none, or with one the host did not write (another job of that name).
    private func resumedIndex() -> Int64 {
        guard let bytes = run.loadCheckpoint() else { return 0 }
        guard let index = ForeignResume.index(from: bytes) else {
            run.log(.warning, "the checkpoint is not a chunk index the host saved (\(bytes.count) bytes); starting at chunk 0")
            return 0
        }
        if index > 0 { run.log(.info, "resumed at chunk \(index) from its checkpoint") }
        return index
    }

    func callChunk() -> curfew_chunk_result {
        chunkFrame.call(chunkIndex: chunkIndex, run: run, state: state)
        let value = chunkFrame.integerResult
        chunkIndex &+= 1
        let result = resultRule.map(value)
        if result < 0 && result != -1 {
            run.log(.error, "\(job.chunk.symbol) returned \(value) (\(resultRule.rawValue))")
        }
        return result
    }

    /// Calls `cleanup`, then saves where the job got to, for a job that resumes.
    func callCleanup() {
        let index = nextIndex
        cleanupFrame?.call(chunkIndex: index, run: run, state: state)
        if job.resumes && run.keepsCheckpoints {
            _ = ForeignResume.bytes(for: index).withUnsafeBytes { run.saveCheckpoint($0) }
        }
    }

    func callTeardown() {
        teardownFrame?.call(chunkIndex: nextIndex, run: run, state: state)
    }
}

/// The checkpoint the host keeps for a foreign job that resumes: the next
/// chunk's index, as the text `chunk-index N`, so `curfew state show` reads it.
enum ForeignResume {
    static let prefix = Array("chunk-index ".utf8)

    static func bytes(for index: Int64) -> [UInt8] { prefix + Array(String(index).utf8) }

    /// The index in `bytes`, or `nil` unless they are exactly what
    /// ``bytes(for:)`` writes for an index from 0 up.
    static func index(from bytes: [UInt8]) -> Int64? {
        guard bytes.count <= prefix.count + 19, bytes.starts(with: prefix) else { return nil }
        let digits = bytes[prefix.count...]
        guard !digits.isEmpty, digits.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        return Int64(String(decoding: digits, as: UTF8.self))
    }
}
