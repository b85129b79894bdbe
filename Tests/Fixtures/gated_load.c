/* A plugin whose constructor appends a line to GATE ".log" each time it is
 * loaded (a scan), then waits (up to 20 s) until the file GATE exists:
 * a scan that takes as long as the test likes. Build with -DGATE="path". */
#define _POSIX_C_SOURCE 200809L
#include <curfew.h>

#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef GATE
#error "build with -DGATE=\"path\""
#endif

static const curfew_host *host;

__attribute__((constructor)) static void wait_for_gate(void) {
    int log = open(GATE ".log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (log >= 0) {
        if (write(log, "loaded\n", 7) < 0) {}
        close(log);
    }
    struct timespec step = {0, 5000000};
    for (int waited = 0; waited < 4000 && access(GATE, F_OK) != 0; waited++) nanosleep(&step, NULL);
}

static curfew_chunk_result gated_chunk(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    return CURFEW_CHUNK_DONE;
}

static void gated_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}

CURFEW_JOB(gated_job, "gated", "Loads once its gate is open.", .chunk = gated_chunk, .expire = gated_expire);

CURFEW_PLUGIN(host, &gated_job)
