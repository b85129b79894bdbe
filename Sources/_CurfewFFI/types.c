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
