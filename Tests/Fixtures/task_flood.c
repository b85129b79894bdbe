/* flood: begins `tasks` (default 100,000) background tasks in create, past
 * the 10,000 a job may hold open, then ends every id it got, the invalid
 * ones too (harmless, says the header), 1,000 a chunk. */
#include <curfew.h>

#include <stdlib.h>

static const curfew_host *host;

typedef struct {
    long count;
    long next;
    curfew_task_id ids[];
} flood_state;

static curfew_status flood_create(curfew_context *ctx, void **state) {
    const char *given = host->param(ctx, "tasks");
    long count = given ? strtol(given, NULL, 10) : 100000;
    flood_state *s = calloc(1, sizeof *s + (size_t)count * sizeof(curfew_task_id));
    if (s == NULL) return CURFEW_ERROR;
    s->count = count;
    for (long i = 0; i < count; i++) s->ids[i] = host->begin_background_task(ctx, "t", NULL, NULL);
    *state = s;
    return CURFEW_OK;
}

static curfew_chunk_result flood_chunk(curfew_context *ctx, void *state) {
    flood_state *s = state;
    for (long k = 0; k < 1000 && s->next < s->count; k++, s->next++) host->end_background_task(ctx, s->ids[s->next]);
    return s->next < s->count ? CURFEW_CHUNK_CONTINUE : CURFEW_CHUNK_DONE;
}

static void flood_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}

static void flood_destroy(curfew_context *ctx, void *state) {
    (void)ctx;
    free(state);
}

CURFEW_JOB(flood_job, "flood", "Begins and ends 100,000 tasks.",
           .create = flood_create, .chunk = flood_chunk, .expire = flood_expire, .destroy = flood_destroy);
CURFEW_PLUGIN(host, &flood_job)
