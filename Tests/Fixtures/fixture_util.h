/* Helpers the C fixtures share. Include after declaring
 * `static const curfew_host *host;`, which they read. */
#ifndef FIXTURE_UTIL_H
#define FIXTURE_UTIL_H

#include <curfew.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

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

/* Writes "written\n" to the file `name` in `folder`: 0, or an errno. */
static inline int write_file(const char *folder, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", folder, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    int error = write(fd, "written\n", 8) == 8 ? 0 : errno;
    close(fd);
    return error;
}

#endif
