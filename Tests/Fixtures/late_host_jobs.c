/* Jobs for a host that is late: "tidy" waits between chunks, and its
 * cleanup returns once the test calls late_go(); "blocker", run on the same
 * one-thread scheduler, spins in a chunk until the test calls
 * late_release(), holding that thread. */
#include <curfew.h>

#include <stdatomic.h>

static const curfew_host *host;

static atomic_int released;
static atomic_int go;
static atomic_int spinning;
static atomic_int tidy_destroyed;

CURFEW_EXPORT void late_release(void) { atomic_store(&released, 1); }
CURFEW_EXPORT void late_go(void) { atomic_store(&go, 1); }
CURFEW_EXPORT int late_spinning(void) { return atomic_load(&spinning); }
CURFEW_EXPORT int late_tidy_destroyed(void) { return atomic_load(&tidy_destroyed); }

static curfew_chunk_result tidy_chunk(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    return CURFEW_CHUNK_AFTER_MS(3600 * 1000);
}
static void tidy_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)state; (void)reason;
    host->log(ctx, CURFEW_LOG_INFO, "tidied");
    while (!atomic_load(&go)) {
    }
}
static void tidy_destroy(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    atomic_fetch_add(&tidy_destroyed, 1);
}

/* Its first chunk asks for the next after `delay-ms`; that one spins. */
static curfew_chunk_result blocker_chunk(curfew_context *ctx, void *state) {
    (void)state;
    static atomic_int calls;
    if (atomic_fetch_add(&calls, 1) == 0) {
        const char *delay = host->param(ctx, "delay-ms");
        int ms = 0;
        for (const char *p = delay; p && *p >= '0' && *p <= '9'; p++) ms = ms * 10 + (*p - '0');
        return CURFEW_CHUNK_AFTER_MS(ms);
    }
    atomic_store(&spinning, 1);
    while (!atomic_load(&released)) {
    }
    return CURFEW_CHUNK_DONE;
}
static void blocker_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}

CURFEW_JOB(tidy_job, "tidy", "Waits between chunks; cleans up at once.",
           .chunk = tidy_chunk, .expire = tidy_expire, .destroy = tidy_destroy);
CURFEW_JOB(blocker_job, "blocker", "Holds its thread in a chunk until released.",
           .chunk = blocker_chunk, .expire = blocker_expire);
CURFEW_PLUGIN(host, &tidy_job, &blocker_job)
