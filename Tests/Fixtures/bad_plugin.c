/* A plugin that breaks one loader rule, chosen with -DVARIANT=N. */
#include <curfew.h>
#include <stddef.h>

#define ENTRY_NULL 1
#define ABI_MISMATCH 2
#define STRUCT_TOO_SMALL 3
#define NO_EXPIRE 4
#define NO_CHUNK_NO_CREATE 5
#define EMPTY_NAME 6
#define INVALID_NAME 7
#define DUPLICATE_NAME 8
#define ZERO_JOBS 9
#define TOO_MANY_JOBS 10
#define NULL_JOBS 11
#define NULL_NAME 12
#define UNKNOWN_FLAGS 13
#define JOB_STRUCT_TOO_SMALL 14
#define NULL_JOB 15
#define MULTILINE_SUMMARY 16
#define RESERVED_SET 17
#define GOOD 18
#define LONG_NAME 19

#ifndef VARIANT
#error "define VARIANT"
#endif

#ifndef JOB_NAME
#define JOB_NAME "fixture-job"
#endif

static const curfew_host *host;

static curfew_chunk_result chunk(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    return CURFEW_CHUNK_DONE;
}

static void expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}

static const curfew_job first = {
    .struct_size = VARIANT == JOB_STRUCT_TOO_SMALL ? 12 : sizeof(curfew_job),
    .flags = VARIANT == UNKNOWN_FLAGS ? 0x80u : 0u,
    .name = VARIANT == EMPTY_NAME ? ""
          : VARIANT == INVALID_NAME ? "Bad Name!"
          : VARIANT == NULL_NAME ? NULL
          : VARIANT == LONG_NAME ? "a-very-long-job-name-that-goes-on-and-on-well-past-the-sixty-four-byte-limit"
          : JOB_NAME,
    .summary = VARIANT == MULTILINE_SUMMARY ? "two\nlines" : "A fixture job.",
    .chunk = VARIANT == NO_CHUNK_NO_CREATE ? NULL : chunk,
    .expire = (VARIANT == NO_EXPIRE || VARIANT == NO_CHUNK_NO_CREATE) ? NULL : expire,
};

static const curfew_job second = {
    .struct_size = sizeof(curfew_job),
    .name = VARIANT == DUPLICATE_NAME ? JOB_NAME : "fixture-second",
    .summary = "Another fixture job.",
    .chunk = chunk,
    .expire = expire,
};

static const curfew_job *const jobs[] = {VARIANT == NULL_JOB ? NULL : &first, &second};

static const curfew_plugin plugin = {
    .abi_version = VARIANT == ABI_MISMATCH ? 7u : CURFEW_ABI_VERSION,
    .struct_size = VARIANT == STRUCT_TOO_SMALL ? 8u : sizeof(curfew_plugin),
    .job_count = VARIANT == ZERO_JOBS ? 0u : VARIANT == TOO_MANY_JOBS ? 100000u : 2u,
    .reserved = VARIANT == RESERVED_SET ? 1u : 0u,
    .jobs = VARIANT == NULL_JOBS ? NULL : jobs,
};

CURFEW_EXPORT const curfew_plugin *curfew_plugin_entry(const curfew_host *services) {
    host = services;
    if (VARIANT == ENTRY_NULL) {
        host->log(NULL, CURFEW_LOG_ERROR, "needs FIXTURE_TOKEN to be set");
        return NULL;
    }
    return &plugin;
}
