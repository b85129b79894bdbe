/* A plugin with a runtime that handles its own faults, as a garbage
 * collector's guard pages or a JIT's checks do: its entry installs a
 * SIGSEGV handler and starts a thread that waits until another handler
 * takes SIGSEGV's place (the scanner's, while it copies the descriptor),
 * then faults on a page it guards; its own handler opens the page, and
 * the thread writes "handled" to the file -DFAULTFILE="path" names. 256
 * jobs with background modes, so the copy takes a while; the entry
 * returns once the thread is watching, and the thread and the copy run on
 * cores of their own where there are two. */
#define _GNU_SOURCE
#include <curfew.h>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define JOB_COUNT 256

static const curfew_host *host;
static void *guarded;
static volatile int watching;

static void own_fault(int signal, siginfo_t *info, void *context) {
    (void)signal;
    (void)context;
    char *page = guarded;
    if ((char *)info->si_addr >= page && (char *)info->si_addr < page + 4096) {
        mprotect(guarded, 4096, PROT_READ | PROT_WRITE);
        return;
    }
    _exit(70); /* a fault it did not expect */
}

static void *watch(void *unused) {
    (void)unused;
    watching = 1;
    for (;;) {
        struct sigaction now;
        if (sigaction(SIGSEGV, NULL, &now) != 0) return NULL;
        if (now.sa_sigaction != own_fault) break;
    }
    ((volatile char *)guarded)[0] = 1; /* faults: its own handler opens the page */
    {
        int fd = open(FAULTFILE, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd >= 0) {
            (void)!write(fd, "handled\n", 8);
            close(fd);
        }
    }
    return NULL;
}

static curfew_chunk_result noop(curfew_context *ctx, void *state) {
    (void)ctx;
    (void)state;
    return CURFEW_CHUNK_DONE;
}

static void cleanup(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}

static char names[JOB_COUNT][32];
static curfew_job jobs[JOB_COUNT];
static const curfew_job *table[JOB_COUNT];
static curfew_plugin plugin;

CURFEW_EXPORT const curfew_plugin *curfew_plugin_entry(const curfew_host *services) {
    host = services;
    for (int i = 0; i < JOB_COUNT; i++) {
        snprintf(names[i], sizeof names[i], "runtime-%d", i);
        jobs[i] = (curfew_job){.struct_size = sizeof(curfew_job), .name = names[i], .summary = "Has a runtime.",
                               .flags = CURFEW_JOB_CONTINUOUS, .background_modes = "audio",
                               .chunk = noop, .expire = cleanup};
        table[i] = &jobs[i];
    }
    plugin = (curfew_plugin){CURFEW_ABI_VERSION, (uint32_t)sizeof(curfew_plugin), JOB_COUNT, 0u, table};
    guarded = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct sigaction handler = {.sa_sigaction = own_fault, .sa_flags = SA_SIGINFO};
    sigemptyset(&handler.sa_mask);
    pthread_t thread;
    if (guarded == MAP_FAILED || sigaction(SIGSEGV, &handler, NULL) != 0 || pthread_create(&thread, NULL, watch, NULL) != 0) return NULL;
    pthread_detach(thread);
    /* The thread on one core, this one (the copy's) on another. */
    cpu_set_t cores;
    if (sched_getaffinity(0, sizeof cores, &cores) == 0 && CPU_COUNT(&cores) >= 2) {
        int first = -1, second = -1;
        for (int core = 0; core < CPU_SETSIZE && second < 0; core++) {
            if (!CPU_ISSET(core, &cores)) continue;
            if (first < 0) first = core; else second = core;
        }
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(first, &one);
        pthread_setaffinity_np(thread, sizeof one, &one);
        CPU_ZERO(&one);
        CPU_SET(second, &one);
        sched_setaffinity(0, sizeof one, &one);
    }
    while (!watching) sched_yield();
    return &plugin;
}
