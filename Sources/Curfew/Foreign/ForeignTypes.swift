import CCurfew
import CLibFFI
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

    /// The rule as the C chunk hooks know it.
    var cRule: Int32 {
        let rule: Int
        switch self {
        case .itemsLeft: rule = CURFEW_DIRECT_ITEMS_LEFT
        case .zeroContinues: rule = CURFEW_DIRECT_ZERO_CONTINUES
        case .nonzeroDone: rule = CURFEW_DIRECT_NONZERO_DONE
        case .negativeDone: rule = CURFEW_DIRECT_NEGATIVE_DONE
        case .curfewResult: rule = CURFEW_DIRECT_CURFEW_RESULT
        case .void: rule = CURFEW_DIRECT_RULE_VOID
        }
        return Int32(rule)
    }

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
