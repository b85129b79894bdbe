/* One job, named by -DJOB_NAME, that counts the other children of its
 * worker's parent (under --isolate plugin: the fork server's, so the other
 * plugins' workers) and, built with -DWAITS=1, waits up to two seconds
 * for them to be gone. */
#define _GNU_SOURCE
#include <curfew.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#ifndef JOB_NAME
#define JOB_NAME "sibling"
#endif
/* Whether it waits (up to two seconds) for its siblings to be gone. */
#ifndef WAITS
#define WAITS 0
#endif

static const curfew_host *host;

static int siblings(void) {
    pid_t parent = getppid(), self = getpid();
    DIR *proc = opendir("/proc");
    if (!proc) return -1;
    int count = 0;
    struct dirent *entry;
    while ((entry = readdir(proc))) {
        int pid = atoi(entry->d_name);
        if (pid <= 0 || pid == self) continue;
        char path[64], state;
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        FILE *file = fopen(path, "r");
        if (!file) continue;
        int ppid = 0;
        /* pid (comm) state ppid: a worker's comm has no spaces or parentheses. */
        if (fscanf(file, "%*d %*s %c %d", &state, &ppid) == 2 && ppid == parent && state != 'Z') count++;
        fclose(file);
    }
    closedir(proc);
    return count;
}

static curfew_chunk_result chunk(curfew_context *ctx, void *state) {
    (void)state;
    int count = siblings();
    for (int waited = 0; WAITS && count > 0 && waited < 200; waited++) {
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
        count = siblings();
    }
    char line[64];
    snprintf(line, sizeof line, "siblings: %d", count);
    host->log(ctx, CURFEW_LOG_INFO, line);
    return CURFEW_CHUNK_DONE;
}

static void expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx, (void)state, (void)reason;
}

CURFEW_JOB(sibling_job, JOB_NAME, "Counts its worker's siblings.", .chunk = chunk, .expire = expire);
CURFEW_PLUGIN(host, &sibling_job)
