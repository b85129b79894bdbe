/* A task-driven job written the way the seeds' second example is: `create`
 * begins a background task with an expiration handler, starts its own
 * thread to do the work in steps while it watches the remaining time, and
 * returns at once. The thread ends the task when the work is done; the
 * expiration handler ends it if time runs out first. The job is over when
 * the task has ended.
 *
 * Parameters: --param steps=N (default 8), --param step-ms=N (default 250). */
#define _POSIX_C_SOURCE 200809L
#include <curfew.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const curfew_host *host;

typedef struct {
    curfew_context *ctx;
    pthread_t thread;
    pthread_mutex_t lock;
    curfew_task_id task; /* guarded by lock; CURFEW_TASK_INVALID once ended */
    long steps;
    long step_ms;
} sync_state;

/* Ends the task once, from whichever side gets there first. */
static void end_task(sync_state *sync) {
    pthread_mutex_lock(&sync->lock);
    if (sync->task != CURFEW_TASK_INVALID) {
        host->end_background_task(sync->ctx, sync->task);
        sync->task = CURFEW_TASK_INVALID;
    }
    pthread_mutex_unlock(&sync->lock);
}

static bool task_open(sync_state *sync) {
    pthread_mutex_lock(&sync->lock);
    bool open = sync->task != CURFEW_TASK_INVALID;
    pthread_mutex_unlock(&sync->lock);
    return open;
}

/* [expiration-queue] Runs concurrently with the worker thread. */
static void on_expiration(void *user_data, curfew_expire_reason reason) {
    (void)reason;
    sync_state *sync = user_data;
    host->log(sync->ctx, CURFEW_LOG_WARNING, "expiring: ending the sync task early");
    end_task(sync);
}

static void *work(void *argument) {
    sync_state *sync = argument;
    long step = 0;
    while (step < sync->steps && task_open(sync) && host->time_remaining(sync->ctx) > 0) {
        struct timespec pause = {sync->step_ms / 1000, (sync->step_ms % 1000) * 1000000L};
        nanosleep(&pause, NULL); /* stands for a network round trip */
        step++;
        host->report_progress(sync->ctx, step, sync->steps);
    }
    if (task_open(sync)) {
        char line[80];
        snprintf(line, sizeof line, "synced %ld of %ld items", step, sync->steps);
        host->log(sync->ctx, CURFEW_LOG_INFO, line);
    }
    end_task(sync);
    return NULL;
}

static curfew_status sync_create(curfew_context *ctx, void **state) {
    sync_state *sync = calloc(1, sizeof *sync);
    if (sync == NULL) {
        host->log(ctx, CURFEW_LOG_ERROR, "out of memory");
        return CURFEW_ERROR;
    }
    sync->ctx = ctx;
    const char *steps = host->param(ctx, "steps");
    const char *step_ms = host->param(ctx, "step-ms");
    sync->steps = steps != NULL ? strtol(steps, NULL, 10) : 8;
    sync->step_ms = step_ms != NULL ? strtol(step_ms, NULL, 10) : 250;
    pthread_mutex_init(&sync->lock, NULL);
    sync->task = host->begin_background_task(ctx, "sync", on_expiration, sync);
    if (sync->task == CURFEW_TASK_INVALID) {
        host->log(ctx, CURFEW_LOG_ERROR, "failed to start background task");
        pthread_mutex_destroy(&sync->lock);
        free(sync);
        return CURFEW_ERROR;
    }
    if (pthread_create(&sync->thread, NULL, work, sync) != 0) {
        host->log(ctx, CURFEW_LOG_ERROR, "cannot start the worker thread");
        end_task(sync);
        pthread_mutex_destroy(&sync->lock);
        free(sync);
        return CURFEW_ERROR;
    }
    *state = sync;
    return CURFEW_OK;
}

/* Runs once the task has ended: the thread is finishing or finished. */
static void sync_destroy(curfew_context *ctx, void *state) {
    (void)ctx;
    sync_state *sync = state;
    pthread_join(sync->thread, NULL);
    pthread_mutex_destroy(&sync->lock);
    free(sync);
}

static const curfew_job sync_job = {
    .struct_size = sizeof(curfew_job),
    .name = "sync-worker",
    .summary = "Syncs items on its own thread under a background task it begins.",
    .create = sync_create,
    .destroy = sync_destroy,
};

static const curfew_job *const jobs[] = {&sync_job};

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
