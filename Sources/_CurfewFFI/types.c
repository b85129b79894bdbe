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

int64_t curfew_direct_chunk(void *context, void *state) {
    (void)context;
    curfew_direct_call *call = state;
    if (call->index_slot >= 0) {
        int64_t index = call->next_index;
        if (index < call->index_lowest) index = call->index_lowest;
        if (index > call->index_highest) index = call->index_highest;
        call->arguments[call->index_slot] = curfew_direct_widen(index, call->index_kind);
    }
    call->next_index++;
    int64_t value = curfew_direct_widen(
        call->function(call->arguments[0], call->arguments[1], call->arguments[2], call->arguments[3]), call->result_kind);
    int64_t result;
    switch (call->rule) {
    case CURFEW_DIRECT_ITEMS_LEFT: result = value == 0 ? -1 : value > 0 ? 0 : -2; break;
    case CURFEW_DIRECT_ZERO_CONTINUES: result = value == 0 ? 0 : value > 0 ? -1 : -2; break;
    case CURFEW_DIRECT_NONZERO_DONE: result = value == 0 ? 0 : -1; break;
    case CURFEW_DIRECT_NEGATIVE_DONE: result = value < 0 ? -1 : 0; break;
    case CURFEW_DIRECT_CURFEW_RESULT: result = value; break;
    default: result = 0; break;
    }
    if (result < 0 && result != -1) call->report_failure(call->owner, value);
    return result;
}
