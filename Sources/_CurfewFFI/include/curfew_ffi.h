/* Accessors for libffi's global type descriptors. Swift 6 rejects direct use
 * of mutable C globals ("not concurrency-safe"); these return their
 * addresses, which never change. */
#ifndef CURFEW_FFI_H
#define CURFEW_FFI_H

#include <ffi.h>

ffi_type *curfew_ffi_type_void(void);
ffi_type *curfew_ffi_type_sint8(void);
ffi_type *curfew_ffi_type_sint16(void);
ffi_type *curfew_ffi_type_sint32(void);
ffi_type *curfew_ffi_type_sint64(void);
ffi_type *curfew_ffi_type_uint8(void);
ffi_type *curfew_ffi_type_uint16(void);
ffi_type *curfew_ffi_type_uint32(void);
ffi_type *curfew_ffi_type_uint64(void);
ffi_type *curfew_ffi_type_float(void);
ffi_type *curfew_ffi_type_double(void);
ffi_type *curfew_ffi_type_pointer(void);

/* FFI_DEFAULT_ABI, which Swift cannot import (it is an enum alias). */
ffi_abi curfew_ffi_default_abi(void);

#endif
