/* A job whose progress stops moving, for a policy's stall time. */
#define _POSIX_C_SOURCE 200809L
#include <curfew.h>

#include <stdlib.h>
#include <time.h>

static const curfew_host *host;

#include "fixture_util.h"

typedef struct {
    long chunks;
    long moving; /* the chunks that report progress before it stops */
    long pause_ms;
} stall_state;

static curfew_status stalls_create(curfew_context *ctx, void **state) {
    stall_state *s = calloc(1, sizeof *s);
    if (!s) return CURFEW_ERROR;
    s->moving = param_long(ctx, "moving", 3);
    s->pause_ms = param_long(ctx, "pause_ms", 20);
    *state = s;
    return CURFEW_OK;
}

/* Moves for `moving` chunks, then goes on without a word of progress: a
 * job stuck in a loop that still returns. */
static curfew_chunk_result stalls_chunk(curfew_context *ctx, void *state) {
    stall_state *s = state;
    if (s->pause_ms > 0) {
        struct timespec pause = {s->pause_ms / 1000, (s->pause_ms % 1000) * 1000000L};
        nanosleep(&pause, NULL);
    }
    s->chunks++;
    if (s->chunks <= s->moving) host->report_progress(ctx, s->chunks, 0);
    return CURFEW_CHUNK_CONTINUE;
}

static void stalls_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)state;
    host->log(ctx, CURFEW_LOG_INFO, reason == CURFEW_EXPIRE_STALLED ? "expire: stalled" : "expire: another reason");
}

static void stalls_destroy(curfew_context *ctx, void *state) {
    (void)ctx;
    free(state);
}

CURFEW_JOB(stalls_job, "stalls", "Reports progress for a few chunks, then none.", .create = stalls_create, .chunk = stalls_chunk,
           .expire = stalls_expire, .destroy = stalls_destroy);

CURFEW_PLUGIN(host, &stalls_job)
