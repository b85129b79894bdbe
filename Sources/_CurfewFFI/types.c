#include "curfew_ffi.h"

ffi_type *curfew_ffi_type_void(void) { return &ffi_type_void; }
ffi_type *curfew_ffi_type_sint8(void) { return &ffi_type_sint8; }
ffi_type *curfew_ffi_type_sint16(void) { return &ffi_type_sint16; }
ffi_type *curfew_ffi_type_sint32(void) { return &ffi_type_sint32; }
ffi_type *curfew_ffi_type_sint64(void) { return &ffi_type_sint64; }
ffi_type *curfew_ffi_type_uint8(void) { return &ffi_type_uint8; }
ffi_type *curfew_ffi_type_uint16(void) { return &ffi_type_uint16; }
ffi_type *curfew_ffi_type_uint32(void) { return &ffi_type_uint32; }
ffi_type *curfew_ffi_type_uint64(void) { return &ffi_type_uint64; }
ffi_type *curfew_ffi_type_float(void) { return &ffi_type_float; }
ffi_type *curfew_ffi_type_double(void) { return &ffi_type_double; }
ffi_type *curfew_ffi_type_pointer(void) { return &ffi_type_pointer; }

ffi_abi curfew_ffi_default_abi(void) { return FFI_DEFAULT_ABI; }

static inline int64_t curfew_direct_widen(int64_t value, int32_t kind) {
    switch (kind) {
    case CURFEW_DIRECT_INT8: return (int8_t)value;
    case CURFEW_DIRECT_UINT8: return (uint8_t)value;
    case CURFEW_DIRECT_INT16: return (int16_t)value;
    case CURFEW_DIRECT_UINT16: return (uint16_t)value;
    case CURFEW_DIRECT_INT32: return (int32_t)value;
    case CURFEW_DIRECT_UINT32: return (uint32_t)value;
    case CURFEW_DIRECT_VOID: return 0;
    default: return value;
    }
}

static inline int64_t curfew_direct_apply(int32_t rule, int64_t value) {
    switch (rule) {
    case CURFEW_DIRECT_ITEMS_LEFT: return value == 0 ? -1 : value > 0 ? 0 : -2;
    case CURFEW_DIRECT_ZERO_CONTINUES: return value == 0 ? 0 : value > 0 ? -1 : -2;
    case CURFEW_DIRECT_NONZERO_DONE: return value == 0 ? 0 : -1;
    case CURFEW_DIRECT_NEGATIVE_DONE: return value < 0 ? -1 : 0;
    case CURFEW_DIRECT_CURFEW_RESULT: return value;
    default: return 0;
    }
}

static inline int64_t curfew_clamp(int64_t value, int64_t lowest, int64_t highest) {
    return value < lowest ? lowest : value > highest ? highest : value;
}

/* A floating-point value truncated toward zero, or 0 when no int64_t holds it. */
static inline int64_t curfew_truncate(double value) {
    if (!(value > -9223372036854775808.0 && value < 9223372036854775808.0)) return 0;
    return (int64_t)value;
}

int64_t curfew_ffi_chunk(void *context, void *state) {
    (void)context;
    curfew_ffi_call *call = state;
    if (call->index_slot) {
        int64_t index = curfew_clamp(call->next_index, call->index_lowest, call->index_highest);
        switch (call->index_kind) {
        case CURFEW_FFI_FLOAT: *(float *)call->index_slot = (float)index; break;
        case CURFEW_FFI_DOUBLE: *(double *)call->index_slot = (double)index; break;
        case CURFEW_DIRECT_INT8: case CURFEW_DIRECT_UINT8: *(uint8_t *)call->index_slot = (uint8_t)index; break;
        case CURFEW_DIRECT_INT16: case CURFEW_DIRECT_UINT16: *(uint16_t *)call->index_slot = (uint16_t)index; break;
        case CURFEW_DIRECT_INT32: case CURFEW_DIRECT_UINT32: *(uint32_t *)call->index_slot = (uint32_t)index; break;
        default: *(int64_t *)call->index_slot = index; break;
        }
    }
    call->next_index++;
    ffi_call(call->cif, call->function, call->result, call->arguments);
    int64_t value;
    switch (call->result_kind) {
    case CURFEW_FFI_FLOAT: value = curfew_truncate(*(float *)call->result); break;
    case CURFEW_FFI_DOUBLE: value = curfew_truncate(*(double *)call->result); break;
    case CURFEW_FFI_UNSIGNED64: {
        uint64_t raw = *(uint64_t *)call->result;
        value = raw > INT64_MAX ? INT64_MAX : (int64_t)raw;
        break;
    }
    default: value = curfew_direct_widen(*(int64_t *)call->result, call->result_kind); break;
    }
    int64_t result = curfew_direct_apply(call->rule, value);
    if (result < 0 && result != -1) call->report_failure(call->owner, value);
    return result;
}

int64_t curfew_direct_chunk(void *context, void *state) {
    (void)context;
    curfew_direct_call *call = state;
    if (call->index_slot >= 0) {
        int64_t index = curfew_clamp(call->next_index, call->index_lowest, call->index_highest);
        call->arguments[call->index_slot] = curfew_direct_widen(index, call->index_kind);
    }
    call->next_index++;
    int64_t value = curfew_direct_widen(
        call->function(call->arguments[0], call->arguments[1], call->arguments[2], call->arguments[3]), call->result_kind);
    int64_t result = curfew_direct_apply(call->rule, value);
    if (result < 0 && result != -1) call->report_failure(call->owner, value);
    return result;
}
