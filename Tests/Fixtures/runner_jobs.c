#define _POSIX_C_SOURCE 200809L
/* Jobs for the runner's end-to-end tests. Each job keeps counters, summed
 * over every run of that job, that the tests read with fixture_count(). */
#include <curfew.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const curfew_host *host;

enum counter {
    C_CREATES, C_CHUNKS, C_EXPIRES, C_DESTROYS, C_OVERLAPS, C_CHUNKS_AFTER_EXPIRE,
    C_AFTER_DESTROY, C_EXPIRE_TIMEOUT, C_EXPIRE_SHUTDOWN, C_EXPIRE_CANCELLED, C_HANDLERS,
    C_IS_EXPIRING_IN_EXPIRE, C_REMAINING_OK, C_REFUSED, C_COUNT
};
static const char *const counter_names[C_COUNT] = {
    "creates", "chunks", "expires", "destroys", "overlaps", "chunks-after-expire",
    "after-destroy", "expire-timeout", "expire-shutdown", "expire-cancelled", "handlers",
    "is-expiring-in-expire", "remaining-ok", "refused",
};

#define MAX_JOBS 32
static const char *job_names[MAX_JOBS];
static atomic_llong counters[MAX_JOBS][C_COUNT];

#include "fixture_release.h"
#include "fixture_util.h"

/* The value of one counter of one job, or -1 for an unknown name. */
CURFEW_EXPORT long long fixture_count(const char *job, const char *counter) {
    for (int j = 0; j < MAX_JOBS && job_names[j]; j++) {
        if (strcmp(job_names[j], job) != 0) continue;
        for (int c = 0; c < C_COUNT; c++)
            if (strcmp(counter_names[c], counter) == 0) return atomic_load(&counters[j][c]);
    }
    return -1;
}

typedef struct {
    int job;                 /* index into job_names */
    atomic_int in_hook;      /* a hook of this run is running */
    atomic_int expired;      /* expire has been called */
    atomic_int destroyed;    /* destroy has been called */
    long chunks;
    long limit;
    long chunk_us;
    long tick_ms;
    curfew_context *ctx;
    pthread_mutex_t lock;
    curfew_task_id task;
    pthread_t thread;
    int has_thread;
} run_state;

static void bump(const run_state *run, enum counter counter) {
    atomic_fetch_add(&counters[run->job][counter], 1);
}

/* Marks a hook's start; counts an overlap with another hook of the same run. */
static void enter(run_state *run) {
    if (atomic_load(&run->destroyed)) bump(run, C_AFTER_DESTROY);
    if (atomic_exchange(&run->in_hook, 1)) bump(run, C_OVERLAPS);
}

static void leave(run_state *run) {
    atomic_store(&run->in_hook, 0);
}

static void sleep_ms(long ms) {
    struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
}

#define JOB_INDEX(name) job_index(name)
static int job_index(const char *name) {
    for (int j = 0; j < MAX_JOBS; j++) {
        if (job_names[j] == NULL) { job_names[j] = name; return j; }
        if (strcmp(job_names[j], name) == 0) return j;
    }
    return 0;
}

/* ---- hooks shared by the chunked jobs ---- */

static curfew_status common_create(curfew_context *ctx, void **state, const char *name) {
    run_state *run = calloc(1, sizeof *run);
    run->job = JOB_INDEX(name);
    run->ctx = ctx;
    run->limit = param_long(ctx, "count", 10);
    run->chunk_us = param_long(ctx, "chunk-us", 20);
    run->tick_ms = param_long(ctx, "tick-ms", 1000);
    pthread_mutex_init(&run->lock, NULL);
    bump(run, C_CREATES);
    double remaining = host->time_remaining(ctx);
    if (remaining > 0 && remaining <= 600) bump(run, C_REMAINING_OK);
    *state = run;
    return CURFEW_OK;
}

static void common_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    run_state *run = state;
    enter(run);
    bump(run, C_EXPIRES);
    if (host->is_expiring(ctx)) bump(run, C_IS_EXPIRING_IN_EXPIRE);
    bump(run, reason == CURFEW_EXPIRE_TIMEOUT ? C_EXPIRE_TIMEOUT
            : reason == CURFEW_EXPIRE_SHUTDOWN ? C_EXPIRE_SHUTDOWN : C_EXPIRE_CANCELLED);
    atomic_store(&run->expired, 1);
    leave(run);
}

static void common_destroy(curfew_context *ctx, void *state) {
    (void)ctx;
    run_state *run = state;
    enter(run);
    if (run->has_thread) pthread_join(run->thread, NULL);
    bump(run, C_DESTROYS);
    atomic_store(&run->destroyed, 1);
    leave(run);
    /* The state is kept (not freed) so a late hook would be counted, not crash. */
}

static curfew_chunk_result begin_chunk(run_state *run) {
    enter(run);
    bump(run, C_CHUNKS);
    if (atomic_load(&run->expired)) bump(run, C_CHUNKS_AFTER_EXPIRE);
    run->chunks++;
    return CURFEW_CHUNK_CONTINUE;
}

#define DEFINE_CREATE(fn, name) \
    static curfew_status fn(curfew_context *ctx, void **state) { return common_create(ctx, state, name); }

/* count: done after `count` chunks. */
DEFINE_CREATE(count_create, "count")
static curfew_chunk_result count_chunk(curfew_context *ctx, void *state) {
    run_state *run = state;
    begin_chunk(run);
    host->report_progress(ctx, run->chunks, run->limit);
    curfew_chunk_result result = run->chunks >= run->limit ? CURFEW_CHUNK_DONE : CURFEW_CHUNK_CONTINUE;
    leave(run);
    return result;
}

/* spin: busy for `chunk-us` per chunk, forever. */
DEFINE_CREATE(spin_create, "spin")
static curfew_chunk_result spin_chunk(curfew_context *ctx, void *state) {
    (void)ctx;
    run_state *run = state;
    begin_chunk(run);
    spin_us(run->chunk_us);
    leave(run);
    return CURFEW_CHUNK_CONTINUE;
}

/* fail: logs an error and fails at its third chunk. */
DEFINE_CREATE(fail_create, "fail")
static curfew_chunk_result fail_chunk(curfew_context *ctx, void *state) {
    run_state *run = state;
    begin_chunk(run);
    curfew_chunk_result result = CURFEW_CHUNK_CONTINUE;
    if (run->chunks == 3) {
        host->log(ctx, CURFEW_LOG_ERROR, "disk full");
        result = CURFEW_CHUNK_FAILED;
    }
    leave(run);
    return result;
}

/* bad-result: returns a negative value that means nothing. */
DEFINE_CREATE(bad_result_create, "bad-result")
static curfew_chunk_result bad_result_chunk(curfew_context *ctx, void *state) {
    (void)ctx;
    run_state *run = state;
    begin_chunk(run);
    leave(run);
    return -7;
}

/* stuck: its first chunk blocks until fixture_release(). */
DEFINE_CREATE(stuck_create, "stuck")
static curfew_chunk_result stuck_chunk(curfew_context *ctx, void *state) {
    (void)ctx;
    run_state *run = state;
    begin_chunk(run);
    wait_for_release();
    leave(run);
    return CURFEW_CHUNK_CONTINUE;
}

/* stuck-expire: chunks run until expiry; expire blocks until fixture_release(). */
DEFINE_CREATE(stuck_expire_create, "stuck-expire")
static void stuck_expire_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    common_expire(ctx, state, reason);
    wait_for_release();
}

/* tick: asks to be called again after `tick-ms`, like a timer. */
DEFINE_CREATE(tick_create, "tick")
static curfew_chunk_result tick_chunk(curfew_context *ctx, void *state) {
    (void)ctx;
    run_state *run = state;
    begin_chunk(run);
    leave(run);
    return CURFEW_CHUNK_AFTER_MS(run->tick_ms);
}

/* create-fails: create logs and fails; no other hook may run. */
static curfew_status create_fails_create(curfew_context *ctx, void **state) {
    common_create(ctx, state, "create-fails");
    host->log(ctx, CURFEW_LOG_ERROR, "missing configuration");
    return CURFEW_ERROR;
}

/* params: logs the `greeting` parameter and is done. */
DEFINE_CREATE(params_create, "params")
static curfew_chunk_result params_chunk(curfew_context *ctx, void *state) {
    run_state *run = state;
    begin_chunk(run);
    const char *greeting = host->param(ctx, "greeting");
    char line[128];
    snprintf(line, sizeof line, "greeting=%s missing=%s", greeting ? greeting : "(null)",
             host->param(ctx, "no-such-key") ? "set" : "(null)");
    host->log(ctx, CURFEW_LOG_INFO, line);
    leave(run);
    return CURFEW_CHUNK_DONE;
}

/* hold: a chunked job that begins its own task in create and ends it from a
 * thread `tick-ms` later; its chunk is done at once. */
static void *hold_thread(void *argument) {
    run_state *run = argument;
    sleep_ms(run->tick_ms);
    pthread_mutex_lock(&run->lock);
    host->end_background_task(run->ctx, run->task);
    host->end_background_task(run->ctx, run->task); /* twice: harmless */
    run->task = CURFEW_TASK_INVALID;
    pthread_mutex_unlock(&run->lock);
    return NULL;
}
static curfew_status hold_create(curfew_context *ctx, void **state) {
    common_create(ctx, state, "hold");
    run_state *run = *state;
    run->task = host->begin_background_task(ctx, "upload", NULL, NULL);
    host->end_background_task(ctx, CURFEW_TASK_INVALID); /* harmless */
    run->has_thread = pthread_create(&run->thread, NULL, hold_thread, run) == 0;
    return CURFEW_OK;
}
static curfew_chunk_result hold_chunk(curfew_context *ctx, void *state) {
    (void)ctx;
    run_state *run = state;
    begin_chunk(run);
    leave(run);
    return CURFEW_CHUNK_DONE;
}

/* tasks: task-driven; a thread works `tick-ms` then ends its task, unless the
 * expiration handler ends it first. */
static void tasks_end(run_state *run) {
    pthread_mutex_lock(&run->lock);
    if (run->task != CURFEW_TASK_INVALID) {
        host->end_background_task(run->ctx, run->task);
        run->task = CURFEW_TASK_INVALID;
    }
    pthread_mutex_unlock(&run->lock);
}
static void tasks_handler(void *user_data, curfew_expire_reason reason) {
    (void)reason;
    run_state *run = user_data;
    bump(run, C_HANDLERS);
    tasks_end(run);
}
static void *tasks_thread(void *argument) {
    run_state *run = argument;
    for (long waited = 0; waited < run->tick_ms; waited += 2) {
        pthread_mutex_lock(&run->lock);
        int open = run->task != CURFEW_TASK_INVALID;
        pthread_mutex_unlock(&run->lock);
        if (!open) return NULL;
        sleep_ms(2);
    }
    tasks_end(run);
    return NULL;
}
static curfew_status tasks_create(curfew_context *ctx, void **state) {
    common_create(ctx, state, "tasks");
    run_state *run = *state;
    run->task = host->begin_background_task(ctx, "work", tasks_handler, run);
    run->has_thread = pthread_create(&run->thread, NULL, tasks_thread, run) == 0;
    return CURFEW_OK;
}

/* leaky: task-driven; begins a task whose handler does not end it. */
static void leaky_handler(void *user_data, curfew_expire_reason reason) {
    (void)reason;
    bump(user_data, C_HANDLERS);
}
static curfew_status leaky_create(curfew_context *ctx, void **state) {
    common_create(ctx, state, "leaky");
    host->begin_background_task(ctx, "leaky-upload", leaky_handler, *state);
    return CURFEW_OK;
}

/* stuck-destroy: done at its first chunk; destroy blocks until fixture_release(). */
DEFINE_CREATE(stuck_destroy_create, "stuck-destroy")
static void stuck_destroy_destroy(curfew_context *ctx, void *state) {
    common_destroy(ctx, state);
    wait_for_release();
}

/* blocking-handler: task-driven; its task's expiration handler blocks until
 * fixture_release() and never ends the task. */
static void blocking_handler(void *user_data, curfew_expire_reason reason) {
    (void)reason;
    bump(user_data, C_HANDLERS);
    wait_for_release();
}
static curfew_status blocking_handler_create(curfew_context *ctx, void **state) {
    common_create(ctx, state, "blocking-handler");
    host->begin_background_task(ctx, "stubborn", blocking_handler, *state);
    return CURFEW_OK;
}

/* late-begin: task-driven, ported the wrong way: create starts a thread and
 * returns with no task open; the thread then begins one (counting a refusal)
 * and ends it. */
static void *late_begin_thread(void *argument) {
    run_state *run = argument;
    sleep_ms(50); /* as dispatch_async would: create has long returned */
    curfew_task_id task = host->begin_background_task(run->ctx, "sync", NULL, NULL);
    if (task == CURFEW_TASK_INVALID) bump(run, C_REFUSED);
    host->end_background_task(run->ctx, task);
    return NULL;
}
static curfew_status late_begin_create(curfew_context *ctx, void **state) {
    common_create(ctx, state, "late-begin");
    run_state *run = *state;
    run->has_thread = pthread_create(&run->thread, NULL, late_begin_thread, run) == 0;
    return CURFEW_OK;
}

/* expired-in-create: task-driven; create waits (1 s at most) until the grant
 * is expiring, then begins a task, which is refused. */
static curfew_status expired_in_create_create(curfew_context *ctx, void **state) {
    common_create(ctx, state, "expired-in-create");
    for (int waited = 0; waited < 1000 && !host->is_expiring(ctx); waited++) sleep_ms(1);
    if (host->begin_background_task(ctx, "late", NULL, NULL) == CURFEW_TASK_INVALID) bump(*state, C_REFUSED);
    return CURFEW_OK;
}

/* begun-then-fails: create begins a task with a handler, logs an error and
 * fails; the handler must never run. */
static curfew_status begun_then_fails_create(curfew_context *ctx, void **state) {
    common_create(ctx, state, "begun-then-fails");
    host->begin_background_task(ctx, "download", leaky_handler, *state);
    host->log(ctx, CURFEW_LOG_ERROR, "no network");
    return CURFEW_ERROR;
}

/* many-tasks: task-driven; create begins `tasks` tasks (default
 * CURFEW_MAX_OPEN_TASKS + 1), counting refusals, each with a handler that
 * ends its own task (or, with `end=0`, does not). */
static int many_tasks_end = 1;
typedef struct {
    run_state *run;
    curfew_task_id id;
} owned_task;
static owned_task owned[CURFEW_MAX_OPEN_TASKS + 8];
static void many_tasks_handler(void *user_data, curfew_expire_reason reason) {
    (void)reason;
    owned_task *task = user_data;
    bump(task->run, C_HANDLERS);
    if (many_tasks_end) host->end_background_task(task->run->ctx, task->id);
}
static curfew_status many_tasks_create(curfew_context *ctx, void **state) {
    common_create(ctx, state, "many-tasks");
    run_state *run = *state;
    long count = param_long(ctx, "tasks", CURFEW_MAX_OPEN_TASKS + 1);
    many_tasks_end = param_long(ctx, "end", 1) != 0;
    if (count < 1 || count > CURFEW_MAX_OPEN_TASKS + 8) return CURFEW_ERROR;
    for (long i = 0; i < count; i++) {
        owned[i].run = run;
        owned[i].id = host->begin_background_task(ctx, "item", many_tasks_handler, &owned[i]);
        if (owned[i].id == CURFEW_TASK_INVALID) bump(run, C_REFUSED);
    }
    return CURFEW_OK;
}

/* continuous: no budget; ticks every 5 ms. */
DEFINE_CREATE(continuous_create, "continuous")

#define JOB(var, jname, jflags, jcreate, jchunk, jexpire) \
    static const curfew_job var = { \
        .struct_size = sizeof(curfew_job), .flags = jflags, .name = jname, \
        .summary = "Fixture job " jname ".", .create = jcreate, .chunk = jchunk, \
        .expire = jexpire, .destroy = common_destroy, \
    };

JOB(count_job, "count", 0, count_create, count_chunk, common_expire)
JOB(spin_job, "spin", 0, spin_create, spin_chunk, common_expire)
JOB(fail_job, "fail", 0, fail_create, fail_chunk, common_expire)
JOB(bad_result_job, "bad-result", 0, bad_result_create, bad_result_chunk, common_expire)
JOB(stuck_job, "stuck", 0, stuck_create, stuck_chunk, common_expire)
JOB(stuck_expire_job, "stuck-expire", 0, stuck_expire_create, spin_chunk, stuck_expire_expire)
JOB(tick_job, "tick", 0, tick_create, tick_chunk, common_expire)
JOB(create_fails_job, "create-fails", 0, create_fails_create, count_chunk, common_expire)
JOB(params_job, "params", 0, params_create, params_chunk, common_expire)
JOB(hold_job, "hold", 0, hold_create, hold_chunk, common_expire)
JOB(tasks_job, "tasks", 0, tasks_create, NULL, NULL)
JOB(leaky_job, "leaky", 0, leaky_create, NULL, NULL)
JOB(blocking_handler_job, "blocking-handler", 0, blocking_handler_create, NULL, NULL)
JOB(late_begin_job, "late-begin", 0, late_begin_create, NULL, NULL)
JOB(begun_then_fails_job, "begun-then-fails", 0, begun_then_fails_create, NULL, NULL)
JOB(many_tasks_job, "many-tasks", 0, many_tasks_create, NULL, NULL)
JOB(expired_in_create_job, "expired-in-create", 0, expired_in_create_create, NULL, NULL)
static const curfew_job stuck_destroy_job = {
    .struct_size = sizeof(curfew_job), .name = "stuck-destroy", .summary = "Fixture job stuck-destroy.",
    .create = stuck_destroy_create, .chunk = hold_chunk, .expire = common_expire, .destroy = stuck_destroy_destroy,
};
JOB(continuous_job, "continuous", CURFEW_JOB_CONTINUOUS, continuous_create, tick_chunk, common_expire)

static const curfew_job *const jobs[] = {
    &count_job, &spin_job, &fail_job, &bad_result_job, &stuck_job, &stuck_expire_job, &tick_job,
    &create_fails_job, &params_job, &hold_job, &tasks_job, &leaky_job, &continuous_job, &blocking_handler_job,
    &stuck_destroy_job, &late_begin_job, &begun_then_fails_job, &many_tasks_job,
    &expired_in_create_job,
};

static const curfew_plugin plugin = {
    .abi_version = CURFEW_ABI_VERSION,
    .struct_size = sizeof(curfew_plugin),
    .job_count = sizeof jobs / sizeof jobs[0],
    .jobs = jobs,
};

CURFEW_EXPORT const curfew_plugin *curfew_plugin_entry(const curfew_host *services) {
    host = services;
    return &plugin;
}
