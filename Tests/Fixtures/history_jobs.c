/* Two jobs that complete at once, for the order of a run's history writes:
 * `second` creates the file its `marker` parameter names as it starts, so
 * a test sees it start while the test holds the state store's lock. */
#define _POSIX_C_SOURCE 200809L
#include <curfew.h>
#include <fcntl.h>
#include <unistd.h>

static const curfew_host *host;

static curfew_status create_first(curfew_context *ctx, void **state) {
    (void)ctx;
    (void)state;
    return CURFEW_OK;
}

static curfew_status create_second(curfew_context *ctx, void **state) {
    (void)state;
    const char *marker = host->param(ctx, "marker");
    if (marker) {
        int fd = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0) close(fd);
    }
    return CURFEW_OK;
}

static curfew_chunk_result done(curfew_context *ctx, void *state) {
    (void)ctx;
    (void)state;
    return CURFEW_CHUNK_DONE;
}

static void expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx;
    (void)state;
    (void)reason;
}

CURFEW_JOB(first_job, "first", "Done at once.", .create = create_first, .chunk = done, .expire = expire);
CURFEW_JOB(second_job, "second", "Touches its marker, then done.", .create = create_second, .chunk = done, .expire = expire);
CURFEW_PLUGIN(host, &first_job, &second_job)
