/* Jobs for `curfew test`: one that keeps the contract, and one for each
 * violation the harness reports. */
#define _POSIX_C_SOURCE 200809L
#include <curfew.h>

#include <pthread.h>
#include <stdio.h>
#include <time.h>

static const curfew_host *host;
static long steady_count;

#include "fixture_release.h"

static void quiet_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)state; (void)reason;
    host->log(ctx, CURFEW_LOG_INFO, "cleaning up");
}

static curfew_chunk_result done_at_once(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    return CURFEW_CHUNK_DONE;
}

/* steady: five chunks with progress and a log line each, then done. */
static curfew_status steady_create(curfew_context *ctx, void **state) {
    (void)ctx;
    steady_count = 0;
    *state = &steady_count;
    return CURFEW_OK;
}
static curfew_chunk_result steady_chunk(curfew_context *ctx, void *state) {
    long *count = state;
    ++*count;
    char line[64];
    snprintf(line, sizeof line, "step %ld, %.1f s left", *count, host->time_remaining(ctx));
    host->log(ctx, CURFEW_LOG_INFO, line);
    host->report_progress(ctx, *count, 5);
    return *count >= 5 ? CURFEW_CHUNK_DONE : CURFEW_CHUNK_CONTINUE;
}

/* never-ends: begins a task in create that nothing ever ends. */
static curfew_status never_ends_create(curfew_context *ctx, void **state) {
    (void)state;
    host->begin_background_task(ctx, "upload", NULL, NULL);
    return CURFEW_OK;
}

/* hangs-in-expire: its expire blocks until fixture_release(). */
static curfew_chunk_result forever(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    return CURFEW_CHUNK_CONTINUE;
}
static void hanging_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
    wait_for_release();
}

/* talks-after-destroy: destroy leaves a thread behind that logs through the
 * job's context a moment later. */
static void *late_talker(void *argument) {
    struct timespec pause = {0, 5000000};
    nanosleep(&pause, NULL);
    host->log(argument, CURFEW_LOG_INFO, "still here");
    return NULL;
}
static void talking_destroy(curfew_context *ctx, void *state) {
    (void)state;
    pthread_t thread;
    if (pthread_create(&thread, NULL, late_talker, ctx) == 0) pthread_detach(thread);
}

/* bad-progress: reports 12 of 10, then -1 of 10, then is done. */
static long bad_progress_count;
static curfew_chunk_result bad_progress_chunk(curfew_context *ctx, void *state) {
    (void)state;
    ++bad_progress_count;
    if (bad_progress_count == 1) host->report_progress(ctx, 12, 10);
    if (bad_progress_count == 2) host->report_progress(ctx, -1, 10);
    return bad_progress_count >= 3 ? CURFEW_CHUNK_DONE : CURFEW_CHUNK_CONTINUE;
}

/* quick-task: task-driven; its create begins a task and ends it at once. */
static curfew_status quick_task_create(curfew_context *ctx, void **state) {
    (void)state;
    host->end_background_task(ctx, host->begin_background_task(ctx, "quick", NULL, NULL));
    return CURFEW_OK;
}

CURFEW_JOB(quick_task_job, "quick-task", "Ends its only task inside create.", .create = quick_task_create);
CURFEW_JOB(steady_job, "steady", "Five steps, then done.", .create = steady_create, .chunk = steady_chunk, .expire = quiet_expire);
CURFEW_JOB(never_ends_job, "never-ends", "Begins a task it never ends.", .create = never_ends_create, .chunk = done_at_once, .expire = quiet_expire);
CURFEW_JOB(hangs_job, "hangs-in-expire", "Never returns from expire.", .chunk = forever, .expire = hanging_expire);
CURFEW_JOB(talks_job, "talks-after-destroy", "Logs after destroy.", .chunk = done_at_once, .expire = quiet_expire, .destroy = talking_destroy);
CURFEW_JOB(bad_progress_job, "bad-progress", "Reports impossible progress.", .chunk = bad_progress_chunk, .expire = quiet_expire);

CURFEW_PLUGIN(host, &steady_job, &never_ends_job, &hangs_job, &talks_job, &bad_progress_job, &quick_task_job)
