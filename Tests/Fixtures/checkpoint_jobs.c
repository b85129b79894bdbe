#define _POSIX_C_SOURCE 200809L
/* Jobs that save and load checkpoints, for the state store's tests. */
#include <curfew.h>

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const curfew_host *host;

#include "fixture_util.h"

static void logf_(curfew_context *ctx, curfew_log_level level, const char *format, uint64_t value) {
    char text[128];
    snprintf(text, sizeof text, format, value);
    host->log(ctx, level, text);
}

/* resume: counts to `count` (default 30), one per chunk of `chunk-ms`
 * (default 20), saving the next number after each chunk. Its create logs
 * "resumed at N" from the checkpoint it loads; its expire logs "expired at N". */
typedef struct {
    uint64_t next;
    uint64_t count;
    long chunk_ms;
} counter_state;

static curfew_status resume_create(curfew_context *ctx, void **state) {
    counter_state *s = calloc(1, sizeof *s);
    if (!s) return CURFEW_ERROR;
    s->count = (uint64_t)param_long(ctx, "count", 30);
    s->chunk_ms = param_long(ctx, "chunk-ms", 20);
    uint64_t saved = 0;
    size_t size = host->checkpoint_load(ctx, &saved, sizeof saved);
    if (size != 0 && size != sizeof saved) {
        logf_(ctx, CURFEW_LOG_ERROR, "a checkpoint of %" PRIu64 " bytes, not 8", size);
        free(s);
        return CURFEW_ERROR;
    }
    s->next = saved;
    logf_(ctx, CURFEW_LOG_INFO, "resumed at %" PRIu64, s->next);
    *state = s;
    return CURFEW_OK;
}

static curfew_chunk_result resume_chunk(curfew_context *ctx, void *state) {
    counter_state *s = state;
    spin_us(s->chunk_ms * 1000);
    s->next++;
    curfew_status status = host->checkpoint_save(ctx, &s->next, sizeof s->next);
    if (status != CURFEW_OK) {
        logf_(ctx, CURFEW_LOG_ERROR, "checkpoint_save returned %" PRIu64, (uint64_t)status);
        return CURFEW_CHUNK_FAILED;
    }
    return s->next >= s->count ? CURFEW_CHUNK_DONE : CURFEW_CHUNK_CONTINUE;
}

static void resume_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)reason;
    counter_state *s = state;
    logf_(ctx, CURFEW_LOG_INFO, "expired at %" PRIu64, s->next);
}

static void quiet_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx;
    (void)state;
    (void)reason;
}

static void free_destroy(curfew_context *ctx, void *state) {
    (void)ctx;
    free(state);
}

/* oversize: saves one byte more than the limit (refused), then exactly the
 * limit (kept), logging each status, and loads it back. */
static curfew_chunk_result oversize_chunk(curfew_context *ctx, void *state) {
    (void)state;
    size_t limit = CURFEW_MAX_CHECKPOINT;
    unsigned char *bytes = malloc(limit + 1);
    if (!bytes) return CURFEW_CHUNK_FAILED;
    for (size_t i = 0; i <= limit; i++) bytes[i] = (unsigned char)(i * 7);
    logf_(ctx, CURFEW_LOG_INFO, "over the limit: %" PRIu64, (uint64_t)host->checkpoint_save(ctx, bytes, limit + 1));
    logf_(ctx, CURFEW_LOG_INFO, "at the limit: %" PRIu64, (uint64_t)host->checkpoint_save(ctx, bytes, limit));
    size_t size = host->checkpoint_load(ctx, NULL, 0);
    logf_(ctx, CURFEW_LOG_INFO, "size: %" PRIu64, (uint64_t)size);
    unsigned char *back = malloc(size ? size : 1);
    int same = back && host->checkpoint_load(ctx, back, size) == size && memcmp(back, bytes, size) == 0;
    logf_(ctx, CURFEW_LOG_INFO, "loaded back: %" PRIu64, (uint64_t)same);
    free(back);
    free(bytes);
    return CURFEW_CHUNK_FAILED;  /* keeps the checkpoint for the test to read */
}

/* tight: saves 4 KiB checkpoints as fast as it can, each the counter
 * repeated, and after each acknowledged save appends "ack N\n" to the file
 * `ack-file` with one write(2) (kept if the process is killed), for the
 * kill -9 test. It goes on from its checkpoint. */
static curfew_chunk_result tight_chunk(curfew_context *ctx, void *state) {
    (void)state;
    static uint64_t block[512];
    static uint64_t counter;
    static int acks = -1;
    if (acks < 0) {
        const char *path = host->param(ctx, "ack-file");
        acks = path ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600) : -1;
        if (acks < 0) return CURFEW_CHUNK_FAILED;
        if (host->checkpoint_load(ctx, block, sizeof block) == sizeof block) counter = block[0];
    }
    counter++;
    for (int i = 0; i < 512; i++) block[i] = counter;
    if (host->checkpoint_save(ctx, block, sizeof block) != CURFEW_OK) return CURFEW_CHUNK_FAILED;
    char line[32];
    int length = snprintf(line, sizeof line, "ack %" PRIu64 "\n", counter);
    if (write(acks, line, (size_t)length) != length) return CURFEW_CHUNK_FAILED;
    return CURFEW_CHUNK_CONTINUE;
}

/* paced: chunks of `chunk-ms` (default 70) of CPU, forever; expire logs. */
static curfew_chunk_result paced_chunk(curfew_context *ctx, void *state) {
    (void)state;
    spin_us(param_long(ctx, "chunk-ms", 70) * 1000);
    return CURFEW_CHUNK_CONTINUE;
}

static void paced_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)state;
    (void)reason;
    host->log(ctx, CURFEW_LOG_INFO, "cleanup ran");
}

CURFEW_JOB(resume_job, "resume", "Counts across grants from its checkpoint.",
           .create = resume_create, .chunk = resume_chunk, .expire = resume_expire, .destroy = free_destroy);
CURFEW_JOB(oversize_job, "oversize", "Saves checkpoints over and at the limit.",
           .chunk = oversize_chunk, .expire = quiet_expire);
CURFEW_JOB(tight_job, "tight", "Saves checkpoints in a tight loop.", .chunk = tight_chunk, .expire = quiet_expire);
CURFEW_JOB(paced_job, "paced", "Runs chunks of chunk-ms.", .chunk = paced_chunk, .expire = paced_expire);

CURFEW_PLUGIN(host, &resume_job, &oversize_job, &tight_job, &paced_job)
