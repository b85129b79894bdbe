#define _GNU_SOURCE
#include "curfew_shims.h"

#include <dlfcn.h>
#include <time.h>

void *curfew_shim_dlopen_plugin(const char *path) {
    return dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
}

uint64_t curfew_shim_monotonic_nanoseconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
