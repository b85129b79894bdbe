/* A job that asks for runs of others (`submit_run`), and one it asks for. */
#define _POSIX_C_SOURCE 200809L
#include <curfew.h>

#include <stddef.h>
#include <stdio.h>

static const curfew_host *host;

static void said(curfew_context *ctx, const char *what, int status) {
    char line[96];
    snprintf(line, sizeof line, "%s answered %d", what, status);
    host->log(ctx, CURFEW_LOG_INFO, line);
}

/* With `flood`: asks 100 times for a run of `target` in an hour, then
 * once with a value that is not UTF-8; logs how many were taken. */
static curfew_chunk_result flood(curfew_context *ctx) {
    int taken = 0, refused = 0;
    for (int i = 0; i < 100; i++) {
        if (host->submit_run(ctx, "target", NULL, 3600.0) == CURFEW_OK) taken++; else refused++;
    }
    char line[96];
    snprintf(line, sizeof line, "flood: %d taken, %d refused", taken, refused);
    host->log(ctx, CURFEW_LOG_INFO, line);
    const char *latin[] = {"word", "caf\xe9", NULL};
    said(ctx, "latin", host->submit_run(ctx, "target", latin, 0.0));
    host->log(ctx, CURFEW_LOG_INFO, "flood done");
    return CURFEW_CHUNK_DONE;
}

/* submits: asks for `target` with word=submitted, and for `other`, which
 * its config does not let it start; logs each answer. */
static curfew_chunk_result submits_chunk(curfew_context *ctx, void *state) {
    (void)state;
    if (host->struct_size < offsetof(curfew_host, submit_run) + sizeof host->submit_run) {
        host->log(ctx, CURFEW_LOG_INFO, "this host has no submit_run");
        return CURFEW_CHUNK_DONE;
    }
    if (host->param(ctx, "flood")) return flood(ctx);
    const char *params[] = {"word", "submitted", NULL};
    said(ctx, "target", host->submit_run(ctx, "target", params, 0.0));
    said(ctx, "other", host->submit_run(ctx, "other", NULL, 0.0));
    const char *odd[] = {"word", NULL};
    said(ctx, "odd", host->submit_run(ctx, "target", odd, 0.0));
    return CURFEW_CHUNK_DONE;
}

/* target: logs the word it was given. */
static curfew_chunk_result target_chunk(curfew_context *ctx, void *state) {
    (void)state;
    const char *word = host->param(ctx, "word");
    char line[96];
    snprintf(line, sizeof line, "target got %s", word ? word : "nothing");
    host->log(ctx, CURFEW_LOG_INFO, line);
    return CURFEW_CHUNK_DONE;
}

static void no_cleanup(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}

CURFEW_JOB(submits_job, "submits", "Asks for runs of others.", .chunk = submits_chunk, .expire = no_cleanup);
CURFEW_JOB(target_job, "target", "Logs the word it was given.", .chunk = target_chunk, .expire = no_cleanup);

CURFEW_PLUGIN(host, &submits_job, &target_job)
