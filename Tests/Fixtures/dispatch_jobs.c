/* Two jobs that log, from their create and first chunk, where the hook
 * runs: the label of the Dispatch queue it runs on (read through dlsym: the
 * fixture links no libdispatch of its own) and whether a frame of
 * libdispatch is on its stack, under the hook. */
#define _GNU_SOURCE
#include <curfew.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <stdio.h>
#include <string.h>

static const curfew_host *host;

static void say(curfew_context *ctx, const char *hook) {
    const char *(*label)(const void *) = (const char *(*)(const void *))dlsym(RTLD_DEFAULT, "dispatch_queue_get_label");
    void *frames[128];
    int count = backtrace(frames, 128);
    int dispatch = 0;
    for (int i = 1; i < count; i++) {
        Dl_info info;
        if (dladdr(frames[i], &info) && info.dli_fname && strstr(info.dli_fname, "libdispatch")) dispatch = 1;
    }
    char line[256];
    snprintf(line, sizeof line, "%s on %s, %s", hook, label ? label(NULL) : "no queue",
             dispatch ? "under libdispatch" : "not under libdispatch");
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

CURFEW_JOB(where_job, "where", "Says where its hooks run.", .create = create, .chunk = chunk, .expire = expire);
CURFEW_JOB(where_job_2, "where-2", "Says where its hooks run.", .create = create, .chunk = chunk, .expire = expire);
CURFEW_PLUGIN(host, &where_job, &where_job_2)
