/* Two jobs that log, from their create and first chunk, whether the hook
 * runs on its process's main thread: a worker's first job's do (the
 * thread that read the job's `run` runs its first work). */
#define _GNU_SOURCE
#include <curfew.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

static const curfew_host *host;

static void say(curfew_context *ctx, const char *hook) {
    char line[64];
    snprintf(line, sizeof line, "%s on %s thread", hook, syscall(SYS_gettid) == getpid() ? "the main" : "another");
    host->log(ctx, CURFEW_LOG_INFO, line);
}

static curfew_status create(curfew_context *ctx, void **state) {
    (void)state;
    say(ctx, "create");
    return CURFEW_OK;
}

static curfew_chunk_result chunk(curfew_context *ctx, void *state) {
    (void)state;
    say(ctx, "chunk");
    return CURFEW_CHUNK_DONE;
}

static void expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx, (void)state, (void)reason;
}

CURFEW_JOB(main_thread_job, "main-thread", "Says which thread its hooks run on.", .create = create, .chunk = chunk,
           .expire = expire);
CURFEW_JOB(main_thread_job_2, "main-thread-2", "Says which thread its hooks run on.", .create = create, .chunk = chunk,
           .expire = expire);
CURFEW_PLUGIN(host, &main_thread_job, &main_thread_job_2)
