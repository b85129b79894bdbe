/* One job, "swap", for a plugin file overwritten in place (as `cp` does)
 * while it runs. Each run logs "vV waiting", then runs 1 ms chunks until
 * the file its `gate` parameter names exists, then logs "vV done" from a
 * function in pages of its own, which the loader has not touched before
 * the overwrite, and completes. Build with -DVERSION=N; version 2 puts
 * two pages of code before that function, so its layout differs too. */
#define _POSIX_C_SOURCE 200809L
#include <curfew.h>

#include <unistd.h>

#ifndef VERSION
#define VERSION 1
#endif
#define TEXT(x) #x
#define VERSIONED(x, words) "v" TEXT(x) " " words

static const curfew_host *host;

#include "fixture_util.h"

#if VERSION == 2
__attribute__((used, noinline)) void swap_padding(void) {
    __asm__ volatile(".fill 8192, 1, 0x90");
}
#endif

__attribute__((noinline, aligned(4096))) static curfew_chunk_result swap_finish(curfew_context *ctx) {
    host->log(ctx, CURFEW_LOG_INFO, VERSIONED(VERSION, "done"));
    return CURFEW_CHUNK_DONE;
}

static curfew_status swap_create(curfew_context *ctx, void **state) {
    (void)state;
    host->log(ctx, CURFEW_LOG_INFO, VERSIONED(VERSION, "waiting"));
    return CURFEW_OK;
}

static curfew_chunk_result swap_chunk(curfew_context *ctx, void *state) {
    (void)state;
    const char *gate = host->param(ctx, "gate");
    if (gate && access(gate, F_OK) == 0) return swap_finish(ctx);
    spin_us(1000);
    return CURFEW_CHUNK_CONTINUE;
}

static void swap_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}

CURFEW_JOB(swap_job, "swap", "Waits for its gate, then says which build it is.", .create = swap_create, .chunk = swap_chunk,
           .expire = swap_expire);

CURFEW_PLUGIN(host, &swap_job)
