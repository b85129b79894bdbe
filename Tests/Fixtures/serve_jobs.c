#define _POSIX_C_SOURCE 200809L
/* Jobs for `curfew serve` and `request_next_run`. Build with
 * -DVERSION=N to make a second build of the same plugin that says so, and
 * with -DSUFFIX='"-N"' for a copy whose job names end in -N (several
 * copies in one folder). */
#include <curfew.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef VERSION
#define VERSION 1
#endif
#ifndef SUFFIX
#define SUFFIX ""
#endif

static const curfew_host *host;

#include "fixture_util.h"

static void say(curfew_context *ctx, const char *format, double value) {
    char text[160];
    snprintf(text, sizeof text, format, value);
    host->log(ctx, CURFEW_LOG_INFO, text);
}

/* asks: asks for its next run in `next` seconds (a decimal; default 0.2)
 * and logs what the host answered; with `bad` set it first asks with
 * NaN, -1, infinity and 11 years, logging each answer. Completes. */
static curfew_chunk_result asks_chunk(curfew_context *ctx, void *state) {
    (void)state;
    if (host->param(ctx, "bad")) {
        const double bad[] = {NAN, -1.0, INFINITY, 11.0 * 366 * 24 * 3600};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            say(ctx, "bad request answered %.0f", (double)host->request_next_run(ctx, bad[i]));
        }
    }
    const char *next = host->param(ctx, "next");
    double seconds = next ? strtod(next, NULL) : 0.2;
    say(ctx, "request answered %.0f", (double)host->request_next_run(ctx, seconds));
    return CURFEW_CHUNK_DONE;
}

/* tally: each run goes on from its checkpoint (a count of runs, kept by
 * expiring: the job never completes), logs "vV run N", asks for its
 * next run in `next` seconds when given, and waits in 5 ms steps for its
 * grant to expire, saving the count in its cleanup. */
typedef struct {
    uint64_t runs;
} tally_state;

static curfew_status tally_create(curfew_context *ctx, void **state) {
    tally_state *s = calloc(1, sizeof *s);
    if (!s) return CURFEW_ERROR;
    uint64_t saved = 0;
    if (host->checkpoint_load(ctx, &saved, sizeof saved) == sizeof saved) s->runs = saved;
    s->runs += 1;
    char text[96];
    snprintf(text, sizeof text, "v%d run %llu", VERSION, (unsigned long long)s->runs);
    host->log(ctx, CURFEW_LOG_INFO, text);
    const char *next = host->param(ctx, "next");
    if (next) host->request_next_run(ctx, strtod(next, NULL));
    const char *word = host->param(ctx, "word");
    if (word) {
        char said[160];
        snprintf(said, sizeof said, "word %s", word);
        host->log(ctx, CURFEW_LOG_INFO, said);
    }
    *state = s;
    return CURFEW_OK;
}

static curfew_chunk_result tally_chunk(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    return CURFEW_CHUNK_AFTER_MS(5);
}

static void tally_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    tally_state *s = state;
    host->checkpoint_save(ctx, &s->runs, sizeof s->runs);
    say(ctx, "expired by reason %.0f", (double)reason);
}

static void tally_destroy(curfew_context *ctx, void *state) {
    (void)ctx;
    free(state);
}

/* flaky: fails every run, after logging "flaky failed". */
static curfew_chunk_result flaky_chunk(curfew_context *ctx, void *state) {
    (void)state;
    host->log(ctx, CURFEW_LOG_ERROR, "flaky failed");
    /* With `final`: a failure another run cannot help. */
    return host->param(ctx, "final") ? CURFEW_CHUNK_FAILED_FINAL : CURFEW_CHUNK_FAILED;
}

static void no_cleanup(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}

CURFEW_JOB(asks_job, "asks" SUFFIX, "Asks for its next run.", .chunk = asks_chunk, .expire = no_cleanup);
CURFEW_JOB(tally_job, "tally" SUFFIX, "Counts its runs across grants.", .create = tally_create, .chunk = tally_chunk,
           .expire = tally_expire, .destroy = tally_destroy);
CURFEW_JOB(flaky_job, "flaky" SUFFIX, "Always fails.", .chunk = flaky_chunk, .expire = no_cleanup);

CURFEW_PLUGIN(host, &asks_job, &tally_job, &flaky_job)
