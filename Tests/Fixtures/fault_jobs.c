/* Jobs whose plugin code faults in the host's process (--isolate none):
 * each logs a line first, which must still reach the output. */
#define _DEFAULT_SOURCE
#include <curfew.h>

#include <signal.h>
#include <stdint.h>

static const curfew_host *host;

static void cleanup(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}

/* Dereferences NULL in chunk 3. */
static curfew_chunk_result null_at_3(curfew_context *ctx, void *state) {
    (void)state;
    static int calls;
    if (++calls < 3) return CURFEW_CHUNK_CONTINUE;
    host->log(ctx, CURFEW_LOG_INFO, "last words before the fault");
    volatile int *nowhere = NULL;
    return (curfew_chunk_result)*nowhere;
}

/* raise(SIGSEGV) in its first chunk: a signal sent, not a fault that repeats. */
static curfew_chunk_result raises(curfew_context *ctx, void *state) {
    (void)state;
    host->log(ctx, CURFEW_LOG_INFO, "last words before the signal");
    raise(SIGSEGV);
    return CURFEW_CHUNK_DONE;
}

/* Faults in its expire hook. */
static curfew_chunk_result spins(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    return CURFEW_CHUNK_AFTER_MS(5);
}
static void faults_in_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)state; (void)reason;
    host->log(ctx, CURFEW_LOG_INFO, "expiring, then the fault");
    volatile int *nowhere = (int *)(uintptr_t)8;
    *nowhere = 1;
}

/* Recurses until its stack runs out (a guard-page fault on no stack left). */
static int deeper(int depth) {
    volatile char frame[4096];
    frame[0] = (char)depth;
    if (depth < 0) return 0;
    return deeper(depth + 1) + frame[0];
}
static curfew_chunk_result overflows(curfew_context *ctx, void *state) {
    (void)state;
    host->log(ctx, CURFEW_LOG_INFO, "last words before the overflow");
    return (curfew_chunk_result)deeper(0);
}

CURFEW_JOB(null_job, "null-at-3", "Dereferences NULL in chunk 3.", .chunk = null_at_3, .expire = cleanup);
CURFEW_JOB(raise_job, "raises-segv", "raise(SIGSEGV) in a chunk.", .chunk = raises, .expire = cleanup);
CURFEW_JOB(expire_job, "faults-in-expire", "Faults in its expire hook.", .chunk = spins, .expire = faults_in_expire);
CURFEW_JOB(overflow_job, "overflows", "Overflows its stack in a chunk.", .chunk = overflows, .expire = cleanup);
CURFEW_PLUGIN(host, &null_job, &raise_job, &expire_job, &overflow_job)
