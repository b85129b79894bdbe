#define _GNU_SOURCE
#include "curfew_shims.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/resource.h>
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

int curfew_shim_spawn_worker(const char *path, char *const argv[], char *const envp[],
                             int channel, int out, int err, int *pid) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int status = posix_spawn_file_actions_init(&actions);
    if (status != 0) return status;
    status = posix_spawnattr_init(&attributes);
    if (status != 0) {
        posix_spawn_file_actions_destroy(&actions);
        return status;
    }
    /* dup2 clears close-on-exec on the new descriptor. */
    if ((status = posix_spawn_file_actions_adddup2(&actions, channel, 3)) == 0 &&
        (status = posix_spawn_file_actions_adddup2(&actions, out, 1)) == 0 &&
        (status = posix_spawn_file_actions_adddup2(&actions, err, 2)) == 0) {
        sigset_t none, all;
        sigemptyset(&none);
        sigfillset(&all);
        posix_spawnattr_setsigmask(&attributes, &none);
        posix_spawnattr_setsigdefault(&attributes, &all);
        posix_spawnattr_setpgroup(&attributes, 0);
        posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        pid_t child;
        status = posix_spawn(&child, path, &actions, &attributes, argv, envp);
        if (status == 0) *pid = child;
    }
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return status;
}

static int set_limit(int resource, uint64_t soft, uint64_t hard) {
    struct rlimit limit = {(rlim_t)soft, (rlim_t)hard};
    return setrlimit(resource, &limit) == 0 ? 0 : errno;
}

int curfew_shim_limit_worker(uint64_t memory_bytes, uint64_t cpu_seconds, uint64_t open_files) {
    int status;
    if (memory_bytes && (status = set_limit(RLIMIT_AS, memory_bytes, memory_bytes)) != 0) return status;
    /* SIGXCPU at the soft limit, SIGKILL a second later at the hard one. */
    if (cpu_seconds && (status = set_limit(RLIMIT_CPU, cpu_seconds, cpu_seconds + 1)) != 0) return status;
    if (open_files && (status = set_limit(RLIMIT_NOFILE, open_files, open_files)) != 0) return status;
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 ? 0 : errno;
}

int curfew_shim_pipe_cloexec(int fds[2]) {
    return pipe2(fds, O_CLOEXEC);
}

int curfew_shim_pidfd_open(int pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

int curfew_shim_wait_exited(int pid) {
    siginfo_t info;
    int status;
    do {
        status = waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT);
    } while (status != 0 && errno == EINTR);
    return status;
}
