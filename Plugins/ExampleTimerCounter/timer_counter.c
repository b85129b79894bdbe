/* The seed's timer counter as a Curfew job: it logs a count every second
 * until its grant expires. It never sleeps on a worker thread: each chunk
 * asks to be called again after the interval. Its cleanup runs in `expire`.
 *
 * Parameter: --param interval-ms=N (default 1000). */
#include <curfew.h>

#include <stdio.h>
#include <stdlib.h>

static const curfew_host *host;

typedef struct {
    long count;
    long interval_ms;
} timer_state;

static curfew_status timer_create(curfew_context *ctx, void **state) {
    timer_state *timer = calloc(1, sizeof *timer);
    if (timer == NULL) {
        host->log(ctx, CURFEW_LOG_ERROR, "out of memory");
        return CURFEW_ERROR;
    }
    const char *interval = host->param(ctx, "interval-ms");
    timer->interval_ms = interval != NULL ? strtol(interval, NULL, 10) : 1000;
    if (timer->interval_ms <= 0) {
        host->log(ctx, CURFEW_LOG_WARNING, "interval-ms must be positive; using 1000");
        timer->interval_ms = 1000;
    }
    *state = timer;
    return CURFEW_OK;
}

static curfew_chunk_result timer_chunk(curfew_context *ctx, void *state) {
    timer_state *timer = state;
    char line[96];
    snprintf(line, sizeof line, "count %ld (%.1f s remaining)", timer->count++, host->time_remaining(ctx));
    host->log(ctx, CURFEW_LOG_INFO, line);
    return CURFEW_CHUNK_AFTER_MS(timer->interval_ms);
}

static void timer_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    timer_state *timer = state;
    char line[96];
    snprintf(line, sizeof line, "expiring (%s): stopping the timer after %ld counts",
             reason == CURFEW_EXPIRE_TIMEOUT ? "time ran out" : "host stopping", timer->count);
    host->log(ctx, CURFEW_LOG_INFO, line);
}

static void timer_destroy(curfew_context *ctx, void *state) {
    (void)ctx;
    free(state);
}

static const curfew_job timer_job = {
    .struct_size = sizeof(curfew_job),
    .name = "timer-counter",
    .summary = "Logs a count every second until its grant expires.",
    .create = timer_create,
    .chunk = timer_chunk,
    .expire = timer_expire,
    .destroy = timer_destroy,
};

static const curfew_job *const jobs[] = {&timer_job};

static const curfew_plugin plugin = {
    .abi_version = CURFEW_ABI_VERSION,
    .struct_size = sizeof(curfew_plugin),
    .job_count = 1,
    .jobs = jobs,
};

CURFEW_EXPORT const curfew_plugin *curfew_plugin_entry(const curfew_host *services) {
    host = services;
    return &plugin;
}
