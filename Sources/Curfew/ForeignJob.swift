import CCurfew
import CLibFFI
import Glibc
import _CurfewFFI

/// The C types a foreign function's arguments and result may have.
enum ForeignType: String, CaseIterable, Sendable {
    case int8, int16, int32, int64, uint8, uint16, uint32, uint64, float, double, pointer, string, void

    /// libffi's descriptor of the type (`string` is a pointer).
    var ffiType: UnsafeMutablePointer<ffi_type> {
        switch self {
        case .int8: curfew_ffi_type_sint8()
        case .int16: curfew_ffi_type_sint16()
        case .int32: curfew_ffi_type_sint32()
        case .int64: curfew_ffi_type_sint64()
        case .uint8: curfew_ffi_type_uint8()
        case .uint16: curfew_ffi_type_uint16()
        case .uint32: curfew_ffi_type_uint32()
        case .uint64: curfew_ffi_type_uint64()
        case .float: curfew_ffi_type_float()
        case .double: curfew_ffi_type_double()
        case .pointer, .string: curfew_ffi_type_pointer()
        case .void: curfew_ffi_type_void()
        }
    }

    var isSignedInteger: Bool { [.int8, .int16, .int32, .int64].contains(self) }
    var isUnsignedInteger: Bool { [.uint8, .uint16, .uint32, .uint64].contains(self) }
    var isInteger: Bool { isSignedInteger || isUnsignedInteger }
    var isFloatingPoint: Bool { self == .float || self == .double }

    /// The range of an integer type.
    var integerRange: ClosedRange<Int128>? {
        switch self {
        case .int8: Int128(Int8.min)...Int128(Int8.max)
        case .int16: Int128(Int16.min)...Int128(Int16.max)
        case .int32: Int128(Int32.min)...Int128(Int32.max)
        case .int64: Int128(Int64.min)...Int128(Int64.max)
        case .uint8: 0...Int128(UInt8.max)
        case .uint16: 0...Int128(UInt16.max)
        case .uint32: 0...Int128(UInt32.max)
        case .uint64: 0...Int128(UInt64.max)
        default: nil
        }
    }

    /// The types an argument may have, for messages.
    static let argumentTypeList = "int8, int16, int32, int64, uint8, uint16, uint32, uint64, float, double, pointer or string"
}

/// A value fixed when the job loads: a literal or a `--param`.
enum ForeignConstant: Sendable {
    case integer(Int128)
    case floatingPoint(Double)
    /// A NUL-terminated string or NULL; the memory lives as long as the process.
    case pointer(UInt)
}

/// Where an argument's value comes from at each call.
enum ForeignArgumentSource: Sendable {
    case constant(ForeignConstant)
    /// A `--param` that was not given and has no default: the job fails in create.
    case missingParameter(String)
    case chunkIndex
    case timeRemaining
    case state
}

/// How a chunk function's return value maps to what the runner does next.
enum ForeignResultRule: String, CaseIterable, Sendable {
    /// 0 means done, positive means continue (items left), negative means failed.
    case itemsLeft = "items-left"
    /// 0 means continue, positive means done, negative means failed.
    case zeroContinues = "zero-continues"
    /// 0 means continue, anything else means done.
    case nonzeroDone = "nonzero-done"
    /// Negative (EOF) means done, anything else means continue: `fgetc`, `gzgetc`.
    case negativeDone = "negative-done"
    /// The value is a `curfew_chunk_result`.
    case curfewResult = "curfew-result"
    /// The function returns nothing: always continue, until the grant expires.
    case void

    static let names = "items-left, zero-continues, nonzero-done, negative-done or curfew-result"

    func map(_ value: Int64) -> curfew_chunk_result {
        switch self {
        case .itemsLeft: value == 0 ? -1 : value > 0 ? 0 : -2
        case .zeroContinues: value == 0 ? 0 : value > 0 ? -1 : -2
        case .nonzeroDone: value == 0 ? 0 : -1
        case .negativeDone: value < 0 ? -1 : 0
        case .curfewResult: value
        case .void: 0
        }
    }
}

/// One function of a foreign job, with its call interface prepared once, at load.
final class ForeignFunction: @unchecked Sendable {
    // Safe because every stored property is set in init and never changed,
    // and the memory they point to is never freed (plugins are never unloaded).
    let symbol: String
    let address: @convention(c) () -> Void
    let returnType: ForeignType
    let argumentTypes: [ForeignType]
    let sources: [ForeignArgumentSource]
    let cif: UnsafeMutablePointer<ffi_cif>
    private let ffiArgumentTypes: UnsafeMutablePointer<UnsafeMutablePointer<ffi_type>?>

    init?(symbol: String, address: UnsafeMutableRawPointer, returnType: ForeignType, arguments: [(ForeignType, ForeignArgumentSource)]) {
        self.symbol = symbol
        self.address = unsafeBitCast(address, to: (@convention(c) () -> Void).self)
        self.returnType = returnType
        self.argumentTypes = arguments.map(\.0)
        self.sources = arguments.map(\.1)
        cif = .allocate(capacity: 1)
        ffiArgumentTypes = .allocate(capacity: max(arguments.count, 1))
        for (index, type) in argumentTypes.enumerated() { ffiArgumentTypes[index] = type.ffiType }
        let status = ffi_prep_cif(cif, curfew_ffi_default_abi(), UInt32(arguments.count), returnType.ffiType, ffiArgumentTypes)
        guard status == FFI_OK else {
            cif.deallocate()
            ffiArgumentTypes.deallocate()
            return nil
        }
    }
}

/// A job described by a manifest and called through libffi.
final class ForeignJob: Sendable {
    let libraryPath: String
    let setup: ForeignFunction?
    let chunk: ForeignFunction
    let cleanup: ForeignFunction?
    let teardown: ForeignFunction?
    let resultRule: ForeignResultRule
    /// Bytes of the zeroed state buffer the host owns for each run; 0 for none.
    let stateSize: Int

    init(libraryPath: String, setup: ForeignFunction?, chunk: ForeignFunction, cleanup: ForeignFunction?,
         teardown: ForeignFunction?, resultRule: ForeignResultRule, stateSize: Int) {
        self.libraryPath = libraryPath
        self.setup = setup
        self.chunk = chunk
        self.cleanup = cleanup
        self.teardown = teardown
        self.resultRule = resultRule
        self.stateSize = stateSize
    }

    /// The native hooks every foreign job runs through: the runner calls a
    /// foreign job exactly as it calls a plugin's C job.
    static let hooks = JobHooks(
        create: { context, state in
            guard let run = HostContext.from(context), let foreign = run.job.foreign, let state else { return CURFEW_ERROR }
            let frames = ForeignRun(job: foreign, run: run)
            if let failure = frames.setUp() {
                run.log(.error, failure)
                return CURFEW_ERROR
            }
            state.pointee = Unmanaged.passRetained(frames).toOpaque()
            return CURFEW_OK
        },
        chunk: { _, state in
            // The run owns its frames until destroy: no retain or release per chunk.
            Unmanaged<ForeignRun>.fromOpaque(state!)._withUnsafeGuaranteedRef { $0.callChunk() }
        },
        expire: { _, state, _ in
            Unmanaged<ForeignRun>.fromOpaque(state!)._withUnsafeGuaranteedRef { $0.callCleanup() }
        },
        destroy: { _, state in
            let frames = Unmanaged<ForeignRun>.fromOpaque(state!)
            frames.takeUnretainedValue().callTeardown()
            frames.release()
        })
}

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
    }

    let function: ForeignFunction
    private let values: UnsafeMutableRawPointer      // 8 bytes per argument
    private let pointers: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    private let result: UnsafeMutableRawPointer       // at least sizeof(ffi_arg)
    private let dynamic: UnsafeMutableBufferPointer<DynamicArgument>
    /// The first parameter the function needs and was not given.
    let missingParameter: String?

    init(_ function: ForeignFunction) {
        self.function = function
        let count = function.argumentTypes.count
        values = .allocate(byteCount: max(count, 1) * 8, alignment: 8)
        values.initializeMemory(as: UInt8.self, repeating: 0, count: max(count, 1) * 8)
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
            case .constant(let constant): Self.store(constant, as: type, at: slot)
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

    /// Calls the function with the changing arguments refreshed.
    @inline(__always)
    func call(chunkIndex: Int64, run: HostContext, state: UnsafeMutableRawPointer?) {
        for argument in dynamic {
            switch argument.kind {
            case .chunkIndex: Self.store(Self.clamp(chunkIndex, to: argument.type), as: argument.type, at: argument.slot)
            case .timeRemaining:
                let seconds = run.timeRemainingSeconds
                if argument.type.isFloatingPoint {
                    Self.store(seconds, as: argument.type, at: argument.slot)
                } else {
                    // Whole seconds, saturated to the type: no budget reads as the type's maximum.
                    let whole = seconds >= 9.2e18 ? Int64.max : Int64(max(0, seconds).rounded(.down))
                    Self.store(Self.clamp(whole, to: argument.type), as: argument.type, at: argument.slot)
                }
            case .state: argument.slot.storeBytes(of: state, as: UnsafeMutableRawPointer?.self)
            }
        }
        ffi_call(function.cif, function.address, result, pointers)
    }

    /// The returned value as an integer (floating point truncated, pointers as addresses).
    var integerResult: Int64 {
        switch function.returnType {
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

    /// `value` saturated to an integer type's range (floating-point types take it as is).
    @inline(__always)
    static func clamp(_ value: Int64, to type: ForeignType) -> Int64 {
        guard let range = type.integerRange else { return value }
        if Int128(value) < range.lowerBound { return Int64(truncatingIfNeeded: range.lowerBound) }
        if Int128(value) > range.upperBound { return Int64(truncatingIfNeeded: range.upperBound) }
        return value
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
    // Contexts are immortal (see HostContext), so an unowned reference is safe.
    unowned let run: HostContext
    let setupFrame: ForeignFrame?
    let chunkFrame: ForeignFrame
    let cleanupFrame: ForeignFrame?
    let teardownFrame: ForeignFrame?
    let stateBuffer: UnsafeMutableRawPointer?
    var state: UnsafeMutableRawPointer?
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
    }

    /// Checks the parameters and calls `setup`; returns why it failed, if it did.
    func setUp() -> String? {
        for frame in [setupFrame, chunkFrame, cleanupFrame, teardownFrame].compactMap({ $0 }) {
            if let key = frame.missingParameter {
                return "\(frame.function.symbol) needs --param \(key)=<value>"
            }
        }
        guard let setupFrame else { return nil }
        setupFrame.call(chunkIndex: 0, run: run, state: state)
        switch setupFrame.function.returnType {
        case .void: return nil
        case .pointer:
            guard let pointer = setupFrame.pointerResult else { return "\(setupFrame.function.symbol) returned NULL" }
            state = pointer
            return nil
        default:
            let value = setupFrame.integerResult
            return value == 0 ? nil : "\(setupFrame.function.symbol) returned \(value)"
        }
    }

    func callChunk() -> curfew_chunk_result {
        chunkFrame.call(chunkIndex: chunkIndex, run: run, state: state)
        chunkIndex &+= 1
        let value = chunkFrame.integerResult
        let result = resultRule.map(value)
        if result < 0 && result != -1 {
            run.log(.error, "\(job.chunk.symbol) returned \(value) (\(resultRule.rawValue))")
        }
        return result
    }

    func callCleanup() {
        cleanupFrame?.call(chunkIndex: chunkIndex, run: run, state: state)
    }

    func callTeardown() {
        teardownFrame?.call(chunkIndex: chunkIndex, run: run, state: state)
    }
}
