/* Jobs held to conditions: one that runs once, one that runs until it is
 * expired, and one that asks for conditions of its own mid-run. */
#define _POSIX_C_SOURCE 200809L
#include <curfew.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static const curfew_host *host;

static void pause_ms(long ms) {
    struct timespec pause = {.tv_sec = 0, .tv_nsec = ms * 1000000L};
    nanosleep(&pause, NULL);
}

/* once: logs that it ran and is done. */
static curfew_chunk_result once_chunk(curfew_context *ctx, void *state) {
    (void)state;
    host->log(ctx, CURFEW_LOG_INFO, "once ran");
    return CURFEW_CHUNK_DONE;
}

/* steady: a chunk every 10 ms until its grant expires. */
static curfew_chunk_result steady_chunk(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    pause_ms(10);
    return CURFEW_CHUNK_CONTINUE;
}

/* With `flood`: changes the conditions it asks for 100 times (power,
 * network, power, …), then asks for power 100 times more; logs how many
 * were taken. */
static curfew_chunk_result flood(curfew_context *ctx) {
    int taken = 0, refused = 0;
    for (int i = 0; i < 200; i++) {
        uint32_t mask = i < 100 && i % 2 ? CURFEW_CONDITION_NETWORK : CURFEW_CONDITION_EXTERNAL_POWER;
        if (host->require_conditions(ctx, mask) == CURFEW_OK) taken++; else refused++;
    }
    char line[64];
    snprintf(line, sizeof line, "flood: %d taken, %d refused", taken, refused);
    host->log(ctx, CURFEW_LOG_INFO, line);
    return CURFEW_CHUNK_DONE;
}

/* asks: in its first chunk asks to run only on external power, then for a
 * bit no host knows, logging each answer; then as steady. */
static curfew_chunk_result asks_chunk(curfew_context *ctx, void *state) {
    static int asked;
    (void)state;
    if (host->param(ctx, "flood")) return flood(ctx);
    if (!asked) {
        asked = 1;
        if (host->struct_size < offsetof(curfew_host, require_conditions) + sizeof host->require_conditions) {
            host->log(ctx, CURFEW_LOG_INFO, "this host has no require_conditions");
            return CURFEW_CHUNK_DONE;
        }
        char line[64];
        snprintf(line, sizeof line, "power answered %d", host->require_conditions(ctx, CURFEW_CONDITION_EXTERNAL_POWER));
        host->log(ctx, CURFEW_LOG_INFO, line);
        snprintf(line, sizeof line, "unknown answered %d", host->require_conditions(ctx, 1u << 20));
        host->log(ctx, CURFEW_LOG_INFO, line);
    }
    pause_ms(10);
    return CURFEW_CHUNK_CONTINUE;
}

static void expired(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)state;
    char line[64];
    snprintf(line, sizeof line, "expired with reason %d", (int)reason);
    host->log(ctx, CURFEW_LOG_INFO, line);
}

CURFEW_JOB(once_job, "once", "Runs once.", .chunk = once_chunk, .expire = expired);
CURFEW_JOB(steady_job, "steady", "Runs until expired.", .chunk = steady_chunk, .expire = expired);
CURFEW_JOB(asks_job, "asks", "Asks for external power mid-run.", .chunk = asks_chunk, .expire = expired);

CURFEW_PLUGIN(host, &once_job, &steady_job, &asks_job)
