/* Two jobs, pair-a and pair-b, each of which marks that it started (a file
 * named after it in the folder `--param dir=`) and waits up to a second for
 * the other's mark: it logs "met" when the two ran at once, "alone" when
 * the other had not started. */
#define _GNU_SOURCE
#include <curfew.h>
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static const curfew_host *host;

static int marked(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static curfew_chunk_result meet(curfew_context *ctx, const char *self, const char *other) {
    const char *dir = host->param(ctx, "dir");
    if (!dir) return CURFEW_CHUNK_FAILED;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, self);
    int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) return CURFEW_CHUNK_FAILED;
    close(fd);
    int met = marked(dir, other);
    for (int waited = 0; !met && waited < 100; waited++) {
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
        met = marked(dir, other);
    }
    host->log(ctx, CURFEW_LOG_INFO, met ? "met" : "alone");
    return CURFEW_CHUNK_DONE;
}

static curfew_chunk_result chunk_a(curfew_context *ctx, void *state) { (void)state; return meet(ctx, "pair-a", "pair-b"); }
static curfew_chunk_result chunk_b(curfew_context *ctx, void *state) { (void)state; return meet(ctx, "pair-b", "pair-a"); }

static void expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx, (void)state, (void)reason;
}

CURFEW_JOB(pair_a, "pair-a", "Waits a second for pair-b to start.", .chunk = chunk_a, .expire = expire);
CURFEW_JOB(pair_b, "pair-b", "Waits a second for pair-a to start.", .chunk = chunk_b, .expire = expire);
CURFEW_PLUGIN(host, &pair_a, &pair_b)
