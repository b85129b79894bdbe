#define _GNU_SOURCE
#include "curfew_shims.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void *curfew_shim_dlopen_plugin(const char *path) {
    return dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
}

uint64_t curfew_shim_monotonic_nanoseconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int signal_pipe[2] = {-1, -1};

static void write_signal_number(int number) {
    int saved = errno;
    unsigned char byte = (unsigned char)number;
    ssize_t ignored = write(signal_pipe[1], &byte, 1); /* full pipe: already woken */
    (void)ignored;
    errno = saved;
}

int curfew_shim_signal_pipe(const int *signals, int count) {
    if (signal_pipe[0] < 0 && pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = write_signal_number;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (int i = 0; i < count; i++) {
        if (sigaction(signals[i], &action, NULL) != 0) return -1;
    }
    return signal_pipe[0];
}

uint64_t curfew_shim_heap_bytes_in_use(void) {
    return (uint64_t)mallinfo2().uordblks;
}
