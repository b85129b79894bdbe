/* Helpers the C fixtures share. Include after declaring
 * `static const curfew_host *host;`, which they read. */
#ifndef FIXTURE_UTIL_H
#define FIXTURE_UTIL_H

#include <curfew.h>
#include <stdlib.h>
#include <time.h>

/* The parameter `key` as a number, or `fallback` when not given. */
static inline long param_long(curfew_context *ctx, const char *key, long fallback) {
    const char *value = host->param(ctx, key);
    return value ? strtol(value, NULL, 10) : fallback;
}

/* Busy for `us` microseconds of the monotonic clock. */
static inline void spin_us(long us) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000000L + (now.tv_nsec - start.tv_nsec) / 1000 < us);
}

#endif
