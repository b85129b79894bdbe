/* A job that finishes well before its grant runs out: it sums the squares
 * of 1...N in chunks of 100,000, reports its progress, and says done. It
 * declares itself with the header's CURFEW_JOB and CURFEW_PLUGIN helpers.
 *
 * When its grant expires first, its expire hook saves where it got to as a
 * checkpoint (as iOS asks an app to save its state when it leaves the
 * foreground), and its next run goes on from there: give it a count too big
 * for one grant and run it twice.
 *
 * Parameter: --param count=N (default 50,000,000). */
#include <curfew.h>

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

static const curfew_host *host;

typedef struct {
    uint64_t next;
    uint64_t count;
    uint64_t sum; /* modulo 2^64 */
} sum_state;

/* The checkpoint is the state itself: plain numbers, no pointers. */
_Static_assert(sizeof(sum_state) == 24, "the checkpoint's layout");

enum { STEP = 100000 };

static curfew_status sum_create(curfew_context *ctx, void **state) {
    sum_state *sum = calloc(1, sizeof *sum);
    if (sum == NULL) {
        host->log(ctx, CURFEW_LOG_ERROR, "out of memory");
        return CURFEW_ERROR;
    }
    const char *count = host->param(ctx, "count");
    sum->count = count != NULL ? strtoull(count, NULL, 10) : 50000000u;
    sum->next = 1;
    /* Go on from the last run's checkpoint, if it was counting to the same N. */
    sum_state saved;
    if (host->checkpoint_load(ctx, &saved, sizeof saved) == sizeof saved &&
        saved.count == sum->count && saved.next >= 1 && saved.next <= saved.count + 1) {
        *sum = saved;
        char line[96];
        snprintf(line, sizeof line, "resumed at %" PRIu64 " of %" PRIu64 " from its checkpoint", sum->next, sum->count);
        host->log(ctx, CURFEW_LOG_INFO, line);
    }
    *state = sum;
    return CURFEW_OK;
}

static curfew_chunk_result sum_chunk(curfew_context *ctx, void *state) {
    sum_state *sum = state;
    uint64_t end = sum->next + STEP;
    if (end > sum->count + 1) end = sum->count + 1;
    for (uint64_t i = sum->next; i < end; i++) sum->sum += i * i;
    sum->next = end;
    host->report_progress(ctx, (int64_t)(sum->next - 1), (int64_t)sum->count);
    if (sum->next <= sum->count) return CURFEW_CHUNK_CONTINUE;
    char line[96];
    snprintf(line, sizeof line, "sum of squares 1...%" PRIu64 " = %" PRIu64 " (mod 2^64)", sum->count, sum->sum);
    host->log(ctx, CURFEW_LOG_INFO, line);
    return CURFEW_CHUNK_DONE;
}

static void sum_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)reason;
    sum_state *sum = state;
    int saved = host->checkpoint_save(ctx, sum, sizeof *sum) == CURFEW_OK;
    char line[128];
    snprintf(line, sizeof line, "stopped at %" PRIu64 " of %" PRIu64 "%s", sum->next - 1, sum->count,
             saved ? "; checkpoint saved, the next run goes on from here" : "");
    host->log(ctx, CURFEW_LOG_WARNING, line);
}

static void sum_destroy(curfew_context *ctx, void *state) {
    (void)ctx;
    free(state);
}

CURFEW_JOB(sum_job, "sum-squares", "Sums squares in chunks and finishes early.",
           .create = sum_create, .chunk = sum_chunk, .expire = sum_expire, .destroy = sum_destroy);

CURFEW_PLUGIN(host, &sum_job)
