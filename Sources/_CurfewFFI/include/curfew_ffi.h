/* Accessors for libffi's global type descriptors. Swift 6 rejects direct use
 * of mutable C globals ("not concurrency-safe"); these return their
 * addresses, which never change. */
#ifndef CURFEW_FFI_H
#define CURFEW_FFI_H

#include <ffi.h>
#include <stdint.h>

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

/* A foreign chunk called without libffi or Swift in between: a function of
 * up to four integer or pointer arguments, all fixed but the chunk index,
 * returning an integer, a pointer or nothing. The host's chunk hook for such
 * a job is curfew_direct_chunk, whose state is this struct. */

/* How a value is narrowed to its C type and widened back. */
enum {
    CURFEW_DIRECT_AS_IS = 0, /* 64-bit integers and pointers */
    CURFEW_DIRECT_INT8, CURFEW_DIRECT_UINT8, CURFEW_DIRECT_INT16, CURFEW_DIRECT_UINT16,
    CURFEW_DIRECT_INT32, CURFEW_DIRECT_UINT32, CURFEW_DIRECT_VOID
};

/* The result rules of a manifest, as numbers. */
enum {
    CURFEW_DIRECT_ITEMS_LEFT = 0, CURFEW_DIRECT_ZERO_CONTINUES, CURFEW_DIRECT_NONZERO_DONE,
    CURFEW_DIRECT_NEGATIVE_DONE, CURFEW_DIRECT_CURFEW_RESULT, CURFEW_DIRECT_RULE_VOID
};

typedef struct curfew_direct_call {
    /* First, in both call structures: the run, handed to report_failure. */
    void *owner;
    int64_t (*function)(int64_t, int64_t, int64_t, int64_t);
    /* The arguments, each already widened from its type. */
    int64_t arguments[4];
    /* The argument that gets the chunk index (saturated to lowest...highest
     * and narrowed by index_kind), or -1. */
    int32_t index_slot;
    int32_t index_kind;
    int64_t index_lowest;
    int64_t index_highest;
    int32_t result_kind;
    int32_t rule;
    /* The next chunk's index. */
    int64_t next_index;
    /* Called with the value a chunk returned when the rule maps it to a
     * failure, to log it. */
    void (*report_failure)(void *owner, int64_t value);
} curfew_direct_call;

/* The chunk hook (curfew_chunk_fn) of a direct foreign job: `state` is its
 * curfew_direct_call. */
int64_t curfew_direct_chunk(void *context, void *state);

/* The same through libffi, for any other signature whose only changing
 * argument is the chunk index (a floating-point one, say). */
enum { CURFEW_FFI_FLOAT = CURFEW_DIRECT_VOID + 1, CURFEW_FFI_DOUBLE, CURFEW_FFI_UNSIGNED64 };

typedef struct curfew_ffi_call {
    void *owner;
    ffi_cif *cif;
    void (*function)(void);
    void **arguments;
    /* Where the chunk index goes (saturated, then stored as index_kind: a
     * CURFEW_DIRECT_* integer kind, CURFEW_FFI_FLOAT or CURFEW_FFI_DOUBLE), or NULL. */
    void *index_slot;
    int32_t index_kind;
    int64_t index_lowest;
    int64_t index_highest;
    /* How the result is read: a CURFEW_DIRECT_* kind (AS_IS for 64-bit
     * signed integers and pointers), CURFEW_FFI_UNSIGNED64, CURFEW_FFI_FLOAT
     * or CURFEW_FFI_DOUBLE (truncated toward zero; 0 when out of range). */
    int32_t result_kind;
    int32_t rule;
    int64_t next_index;
    /* At least 16 bytes, 16-aligned. */
    void *result;
    void (*report_failure)(void *owner, int64_t value);
} curfew_ffi_call;

int64_t curfew_ffi_chunk(void *context, void *state);

#endif
