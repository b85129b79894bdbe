/* Jobs that attack the host's output and its process: forged host lines,
 * terminal escapes, floods of output, huge messages, exit() and _exit(),
 * and children that try to outlive the job. Parameters tune each one. */
#define _GNU_SOURCE
#include <curfew.h>

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const curfew_host *host;

#include "fixture_util.h"

/* Logs, and with the parameter `marker` appends a line to that file, so a
 * test can see the cleanup ran even when the host's output is gone. */
static void cleanup(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)state;
    host->log(ctx, CURFEW_LOG_INFO, "cleanup ran");
    const char *path = host->param(ctx, "marker");
    FILE *marker = path ? fopen(path, "a") : NULL;
    if (marker) {
        fprintf(marker, "cleanup ran: %s\n", reason == CURFEW_EXPIRE_SHUTDOWN ? "shutdown" : "other");
        fclose(marker);
    }
}

/* A log line that would read as the host's own, escapes that would clear
 * the screen and colour it, a carriage return that would overwrite the
 * line, and a failure whose reason spans lines. */
static curfew_chunk_result forges(curfew_context *ctx, void *state) {
    (void)state;
    host->log(ctx, CURFEW_LOG_INFO, "hello\nfinished  fake-job: completed (work done) after 1 chunk, 0.00s");
    host->log(ctx, CURFEW_LOG_WARNING, "\x1b[2J\x1b[31mred\x1b[0m and\rover");
    host->log(ctx, CURFEW_LOG_ERROR, "disk\nfinished  other: completed");
    return CURFEW_CHUNK_FAILED;
}

/* `lines` lines to stdout and as many to stderr, then a last stdout line
 * with no newline. */
static curfew_chunk_result prints(curfew_context *ctx, void *state) {
    (void)state;
    long lines = param_long(ctx, "lines", 100);
    for (long i = 0; i < lines; i++) {
        printf("out %ld {\"event\":\"finished\"}\n", i);
        fprintf(stderr, "err %ld\n", i);
    }
    printf("no newline at the end");
    fflush(stdout);
    return CURFEW_CHUNK_DONE;
}

/* One log message of `bytes` bytes (default 1 MiB). */
static curfew_chunk_result logs_huge(curfew_context *ctx, void *state) {
    (void)state;
    long bytes = param_long(ctx, "bytes", 1L << 20);
    char *text = malloc((size_t)bytes + 1);
    if (text == NULL) return CURFEW_CHUNK_FAILED;
    memset(text, 'x', (size_t)bytes);
    text[bytes] = '\0';
    host->log(ctx, CURFEW_LOG_INFO, text);
    free(text);
    return CURFEW_CHUNK_DONE;
}

static curfew_chunk_result exits(curfew_context *ctx, void *state) {
    (void)state;
    exit((int)param_long(ctx, "status", 0));
}

static curfew_chunk_result quick_exits(curfew_context *ctx, void *state) {
    (void)state;
    _exit((int)param_long(ctx, "status", 3));
}

/* Forks `children` sleepers (setsid() first with setsid=1), writes their
 * pids to the file `pidfile`, one a line, and completes; with stay=1 it
 * runs on instead, a chunk every 5 ms, until its grant expires. */
static curfew_chunk_result forks(curfew_context *ctx, void *state) {
    (void)state;
    static int forked;
    if (forked) return CURFEW_CHUNK_AFTER_MS(5);
    long children = param_long(ctx, "children", 5);
    long escape = param_long(ctx, "setsid", 0);
    const char *path = host->param(ctx, "pidfile");
    FILE *pids = path ? fopen(path, "w") : NULL;
    for (long i = 0; i < children; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            if (escape) setsid();
            for (;;) pause();
        }
        if (pid > 0 && pids) fprintf(pids, "%d\n", (int)pid);
    }
    if (pids) fclose(pids);
    forked = param_long(ctx, "stay", 0) != 0;
    return forked ? CURFEW_CHUNK_AFTER_MS(5) : CURFEW_CHUNK_DONE;
}

/* Logs a tick every 5 ms until its grant expires; its cleanup logs. */
static curfew_chunk_result ticks(curfew_context *ctx, void *state) {
    (void)state;
    host->log(ctx, CURFEW_LOG_INFO, "tick");
    return CURFEW_CHUNK_AFTER_MS(5);
}

/* Sends `line` and a newline on the channel with `count` descriptors of an
 * unsealed 10-byte memory file attached to its first byte. */
static int send_attached(const char *line, int count) {
    char text[4096];
    int length = snprintf(text, sizeof text, "%s\n", line);
    int file = memfd_create("lie", MFD_CLOEXEC);
    if (file < 0 || write(file, "0123456789", 10) != 10 || count < 1 || count > 8) return -1;
    int fds[8];
    for (int i = 0; i < count; i++) fds[i] = file;
    union {
        char buffer[CMSG_SPACE(8 * sizeof(int))];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct iovec io = {text, (size_t)length};
    struct msghdr message = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = control.buffer,
                             .msg_controllen = CMSG_SPACE((size_t)count * sizeof(int))};
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN((size_t)count * sizeof(int));
    memcpy(CMSG_DATA(header), fds, (size_t)count * sizeof(int));
    int sent = sendmsg(3, &message, MSG_NOSIGNAL) == length ? 0 : -1;
    close(file);
    return sent;
}

/* Lies on the worker's channel (fd 3): writes the parameter `line` there as
 * a message (with `attach` descriptors of an unsealed memory file sent
 * along, when given), or with `keys` an object of that many keys, then does
 * what `then` says: segfault, hang, or complete. */
static curfew_chunk_result lies(curfew_context *ctx, void *state) {
    (void)state;
    const char *line = host->param(ctx, "line");
    long keys = param_long(ctx, "keys", 0);
    long attach = param_long(ctx, "attach", 0);
    if (line && attach > 0) {
        if (send_attached(line, (int)attach) != 0) return CURFEW_CHUNK_FAILED;
    } else if (line) {
        if (write(3, line, strlen(line)) < 0 || write(3, "\n", 1) < 0) return CURFEW_CHUNK_FAILED;
    }
    if (keys > 0) {
        FILE *channel = fdopen(dup(3), "w");
        if (channel == NULL) return CURFEW_CHUNK_FAILED;
        fputs("{\"type\":\"log\",\"job\":\"lies\"", channel);
        for (long i = 0; i < keys; i++) fprintf(channel, ",\"k%ld\":0", i);
        fputs("}\n", channel);
        fclose(channel);
    }
    const char *then = host->param(ctx, "then");
    if (then && strcmp(then, "segfault") == 0) {
        volatile int *nowhere = NULL;
        *nowhere = 1;
    }
    if (then && strcmp(then, "hang") == 0) {
        for (;;) pause();
    }
    return CURFEW_CHUNK_DONE;
}

/* Writes `bytes` newlines (default 4 MiB) to stdout. */
static curfew_chunk_result newlines(curfew_context *ctx, void *state) {
    (void)state;
    long bytes = param_long(ctx, "bytes", 4L << 20);
    char block[65536];
    memset(block, '\n', sizeof block);
    for (long left = bytes; left > 0;) {
        ssize_t written = write(1, block, left < (long)sizeof block ? (size_t)left : sizeof block);
        if (written <= 0) return CURFEW_CHUNK_FAILED;
        left -= written;
    }
    return CURFEW_CHUNK_DONE;
}

/* Logs what it was given: whether stdin has data, whether fd 7 (which a
 * test opens in the host's parent) is open, and the signal mask a child it
 * forks starts with. */
static curfew_chunk_result inspects(curfew_context *ctx, void *state) {
    (void)state;
    char byte;
    ssize_t got = read(0, &byte, 1);
    const char *input = got > 0 ? "data" : got == 0 ? "empty" : "unreadable";
    const char *seven = fcntl(57, F_GETFD) >= 0 ? "open" : "closed"; /* far above what a worker opens itself */
    char mask[64] = "unknown";
    int ends[2];
    if (pipe(ends) == 0) {
        pid_t child = fork();
        if (child == 0) {
            FILE *status = fopen("/proc/self/status", "r");
            char line[256];
            while (status && fgets(line, sizeof line, status)) {
                if (strncmp(line, "SigBlk:", 7) == 0) {
                    if (write(ends[1], line + 8, strcspn(line + 8, "\n")) < 0) _exit(1);
                }
            }
            _exit(0);
        }
        close(ends[1]);
        ssize_t n = child > 0 ? read(ends[0], mask, sizeof mask - 1) : -1;
        mask[n > 0 ? n : 0] = '\0';
        close(ends[0]);
        if (child > 0) waitpid(child, NULL, 0);
    }
    char text[256];
    snprintf(text, sizeof text, "stdin: %s; fd 57: %s; a child's blocked signals: %s", input, seven, mask);
    host->log(ctx, CURFEW_LOG_INFO, text);
    return CURFEW_CHUNK_DONE;
}

/* What the C library knew of a process's first thread as this plugin was
 * loaded there: a worker's, the one a fork server that forks with clone3
 * (into a cgroup) made, which must be set as glibc's fork() sets it: its
 * tid (its CPU clock, its priority-inheriting mutexes go by it) and its
 * robust-mutex list. */
static const char *first_tid = "not looked at";
static const char *first_robust = "not looked at";

__attribute__((constructor)) static void look_at_first_thread(void) {
    if (syscall(SYS_gettid) != getpid()) return;
    /* The thread's CPU clock is made from the tid the library keeps for it;
     * a tid of another process's thread names no clock of this one. */
    clockid_t clock;
    struct timespec spent;
    first_tid = pthread_getcpuclockid(pthread_self(), &clock) == 0 && clock_gettime(clock, &spent) == 0 ? "known" : "unknown";
    void *head = NULL;
    size_t length = 0;
    first_robust = syscall(SYS_get_robust_list, 0, &head, &length) == 0 && head ? "registered" : "none";
}

/* Logs what its constructor saw, whether clone3 is refused, as the call
 * filter has it (its flags are behind a pointer no filter can read), and
 * how many of its process's threads are real-time. */
static curfew_chunk_result reports_self(curfew_context *ctx, void *state) {
    (void)state;
    uint64_t args[11] = {0};
    args[4] = SIGCHLD; /* exit_signal: were it let through, a fork */
    long clone3 = syscall(SYS_clone3, args, sizeof args);
    if (clone3 == 0) _exit(0);
    if (clone3 > 0) waitpid((pid_t)clone3, NULL, 0);
    const char *clone3_said = clone3 < 0 && errno == ENOSYS ? "refused" : "let through";
    /* A worker's process is its plugin's: none of its threads (the host's
     * timer thread among them) may be real-time. */
    int real_time = 0;
    DIR *tasks = opendir("/proc/self/task");
    for (struct dirent *entry; tasks && (entry = readdir(tasks));) {
        int policy = entry->d_name[0] == '.' ? -1 : sched_getscheduler((pid_t)atoi(entry->d_name));
        if (policy >= 0 && (policy & ~SCHED_RESET_ON_FORK) != SCHED_OTHER && (policy & ~SCHED_RESET_ON_FORK) != SCHED_BATCH &&
            (policy & ~SCHED_RESET_ON_FORK) != SCHED_IDLE)
            real_time++;
    }
    if (tasks) closedir(tasks);
    char text[256];
    snprintf(text, sizeof text, "first thread: tid %s, robust list %s; clone3: %s; real-time threads: %d", first_tid, first_robust,
             clone3_said, real_time);
    host->log(ctx, CURFEW_LOG_INFO, text);
    return CURFEW_CHUNK_DONE;
}

/* Kills its worker's parent if that is the fork server (never the host),
 * and logs whether it did. */
static curfew_chunk_result kills_server(curfew_context *ctx, void *state) {
    (void)state;
    char path[64], arguments[256] = {0};
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)getppid());
    FILE *file = fopen(path, "r");
    size_t length = file ? fread(arguments, 1, sizeof arguments - 1, file) : 0;
    if (file) fclose(file);
    int server = 0;
    for (size_t at = 0; at < length; at += strlen(arguments + at) + 1) {
        if (strcmp(arguments + at, "__forkserver") == 0) server = 1;
    }
    if (server && kill(getppid(), SIGKILL) == 0) {
        host->log(ctx, CURFEW_LOG_INFO, "killed the fork server");
    } else {
        host->log(ctx, CURFEW_LOG_INFO, "no fork server above");
    }
    return CURFEW_CHUNK_DONE;
}

CURFEW_JOB(forges_job, "forges", "Logs lines that imitate the host's.", .chunk = forges, .expire = cleanup);
CURFEW_JOB(prints_job, "prints", "Floods stdout and stderr.", .chunk = prints, .expire = cleanup);
CURFEW_JOB(huge_job, "logs-huge", "Logs one huge message.", .chunk = logs_huge, .expire = cleanup);
CURFEW_JOB(exits_job, "exits", "Calls exit() in chunk.", .chunk = exits, .expire = cleanup);
CURFEW_JOB(quick_exits_job, "quick-exits", "Calls _exit() in chunk.", .chunk = quick_exits, .expire = cleanup);
CURFEW_JOB(forks_job, "forks", "Leaves sleeping children behind.", .chunk = forks, .expire = cleanup);
CURFEW_JOB(ticks_job, "ticks", "Ticks until its grant expires.", .chunk = ticks, .expire = cleanup);
CURFEW_JOB(lies_job, "lies", "Writes forged messages on the worker's channel.", .chunk = lies, .expire = cleanup);
CURFEW_JOB(inspects_job, "inspects", "Logs what it inherited.", .chunk = inspects, .expire = cleanup);
CURFEW_JOB(kills_server_job, "kills-server", "Kills the fork server.", .chunk = kills_server, .expire = cleanup);
CURFEW_JOB(reports_self_job, "reports-self", "Logs what its C library knows of its thread.", .chunk = reports_self, .expire = cleanup);
CURFEW_JOB(newlines_job, "newlines", "Floods stdout with empty lines.", .chunk = newlines, .expire = cleanup);

CURFEW_PLUGIN(host, &kills_server_job, &reports_self_job, &forges_job, &prints_job, &huge_job, &exits_job, &quick_exits_job, &forks_job, &ticks_job, &lies_job,
              &newlines_job, &inspects_job)
