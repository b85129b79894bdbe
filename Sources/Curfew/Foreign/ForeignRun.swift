import CCurfew
import CLibFFI
import Glibc
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
