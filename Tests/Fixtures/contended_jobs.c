/* JOB_COUNT jobs (default 40, at most the host's 256) named busy-0, busy-1, …: each spins 2 ms a
 * chunk and never finishes, so its grant expires; every hook logs
 * "<hook> started" as it starts, so a reason that names a hook can be
 * checked against what the job said. */
#define _POSIX_C_SOURCE 200809L
#include <curfew.h>

#include <stdio.h>
#include <stdlib.h>

#ifndef JOB_COUNT
#define JOB_COUNT 40
#endif

static const curfew_host *host;

#include "fixture_util.h"

static curfew_status busy_create(curfew_context *ctx, void **state) {
    (void)state;
    host->log(ctx, CURFEW_LOG_INFO, "create started");
    return CURFEW_OK;
}

static curfew_chunk_result busy_chunk(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    spin_us(2000);
    return CURFEW_CHUNK_CONTINUE;
}

static void busy_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)state; (void)reason;
    host->log(ctx, CURFEW_LOG_INFO, "expire started");
}

static void busy_destroy(curfew_context *ctx, void *state) {
    (void)state;
    host->log(ctx, CURFEW_LOG_INFO, "destroy started");
}

static char names[JOB_COUNT][32];
static curfew_job jobs[JOB_COUNT];
static const curfew_job *table[JOB_COUNT];
static curfew_plugin plugin;

CURFEW_EXPORT const curfew_plugin *curfew_plugin_entry(const curfew_host *services) {
    host = services;
    for (int i = 0; i < JOB_COUNT; i++) {
        snprintf(names[i], sizeof names[i], "busy-%d", i);
        jobs[i] = (curfew_job){
            .struct_size = sizeof(curfew_job), .name = names[i], .summary = "Spins until its grant expires.",
            .create = busy_create, .chunk = busy_chunk, .expire = busy_expire, .destroy = busy_destroy,
        };
        table[i] = &jobs[i];
    }
    plugin = (curfew_plugin){
        .abi_version = CURFEW_ABI_VERSION, .struct_size = sizeof plugin, .job_count = JOB_COUNT, .jobs = table,
    };
    return &plugin;
}
