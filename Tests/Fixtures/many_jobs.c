/* JOB_COUNT no-op jobs (at most the host's 256) named JOB_PREFIX-0,
 * JOB_PREFIX-1, …, each logging one line and completing in its first chunk:
 * for load tests of the isolated modes. */
#include <curfew.h>

#include <stdio.h>
#include <stdlib.h>

#ifndef JOB_COUNT
#define JOB_COUNT 100
#endif
#ifndef JOB_PREFIX
#define JOB_PREFIX "noop"
#endif

static const curfew_host *host;

static curfew_chunk_result noop(curfew_context *ctx, void *state) {
    (void)state;
    host->log(ctx, CURFEW_LOG_INFO, "done");
    return CURFEW_CHUNK_DONE;
}

static void cleanup(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}

static char names[JOB_COUNT][32];
static curfew_job jobs[JOB_COUNT];
static const curfew_job *table[JOB_COUNT];
static curfew_plugin plugin;

CURFEW_EXPORT const curfew_plugin *curfew_plugin_entry(const curfew_host *services) {
    host = services;
    for (int i = 0; i < JOB_COUNT; i++) {
        snprintf(names[i], sizeof names[i], "%s-%d", JOB_PREFIX, i);
        jobs[i] = (curfew_job){.struct_size = sizeof(curfew_job), .name = names[i], .summary = "Does nothing.",
                               .chunk = noop, .expire = cleanup};
        table[i] = &jobs[i];
    }
    plugin = (curfew_plugin){CURFEW_ABI_VERSION, (uint32_t)sizeof(curfew_plugin), JOB_COUNT, 0u, table};
    return &plugin;
}
