/* Plugins that fail while they load, chosen with -DVARIANT=N:
 * 1 the entry function segfaults, 2 a library constructor aborts,
 * 3 the entry function never returns, 4 the entry function writes its
 * process id to the file $CURFEW_FIXTURE_PIDFILE names, then never returns,
 * 5 a constructor writes a forged verdict on the scanner's channel (fd 3)
 * vouching for the file -DVICTIM="path" names, then the entry function
 * segfaults, 6 a constructor kills its process's parent (the scanner's
 * fork server) unless that is the process -DSPARE=pid names, 7 the entry
 * returns an address where nothing is mapped, 8 and 9 the entry returns a
 * descriptor whose job name ends a readable page that an unreadable one
 * follows, with its NUL as the page's last byte (8) or without one (9),
 * 10 a constructor writes 5 MiB of well-formed "loading" frames on the
 * scanner's channel (fd 3), 11 the entry calls each host service appended
 * after ABI 1 that `struct_size` says the table has, as a plugin may
 * while it loads, then returns one job. VICTIM and SPARE are built in, not read from
 * the environment: a test would set them with setenv while other threads
 * read the environment. */
#define _DEFAULT_SOURCE
#include <curfew.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#if VARIANT == 2
__attribute__((constructor)) static void explode_on_load(void) {
    abort();
}
#endif

#if VARIANT == 5
__attribute__((constructor)) static void forge_a_verdict(void) {
    const char *victim = VICTIM;
    dprintf(3, "{\"type\":\"scanned\",\"file\":\"%s\",\"jobs\":[{\"name\":\"forged\",\"summary\":\"s\","
               "\"continuous\":false,\"chunked\":true}]}\n", victim);
}
#endif

#if VARIANT == 6
#include <signal.h>
__attribute__((constructor)) static void kill_the_parent(void) {
    if (SPARE == (int)getppid()) return;
    kill(getppid(), SIGKILL);
}
#endif

#if VARIANT == 10
#include <stdint.h>
#include <unistd.h>
__attribute__((constructor)) static void flood_the_channel(void) {
    static uint32_t frames[5461][3];
    for (int i = 0; i < 5461; i++) {
        frames[i][0] = 0x43465343u;
        frames[i][1] = 1;
        frames[i][2] = 0;
    }
    for (int i = 0; i < 80; i++)
        if (write(3, frames, sizeof frames) < 0) return;
}
#endif

#if VARIANT == 8 || VARIANT == 9
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static curfew_chunk_result edge_chunk(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    return CURFEW_CHUNK_DONE;
}
static void edge_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}
static curfew_job edge_job = {sizeof(curfew_job), 0, NULL, "Its name ends a page.", NULL, edge_chunk, edge_expire, NULL, NULL, NULL, NULL};
static const curfew_job *edge_jobs[] = {&edge_job};
static const curfew_plugin edge_plugin = {CURFEW_ABI_VERSION, sizeof(curfew_plugin), 1, 0, edge_jobs};
static const curfew_plugin *edge(void) {
    long page = sysconf(_SC_PAGESIZE);
    char *pages = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pages == MAP_FAILED || mprotect(pages + page, (size_t)page, PROT_NONE) != 0) return NULL;
    const char *name = VARIANT == 8 ? "edge-job" : "edge-job-without-end";
    size_t length = strlen(name) + (VARIANT == 8 ? 1 : 0);
    memcpy(pages + page - length, name, length);
    edge_job.name = pages + page - length;
    return &edge_plugin;
}
#endif

#if VARIANT == 11
#include <stddef.h>
static curfew_chunk_result calls_chunk(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    return CURFEW_CHUNK_DONE;
}
static void calls_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}
static const curfew_job calls_job = {.struct_size = sizeof(curfew_job), .name = "calls-at-entry", .summary = "Calls the host as it loads.", .chunk = calls_chunk, .expire = calls_expire};
static const curfew_job *const calls_jobs[] = {&calls_job};
static const curfew_plugin calls_plugin = {
    .abi_version = CURFEW_ABI_VERSION, .struct_size = sizeof(curfew_plugin), .job_count = 1, .jobs = calls_jobs};
#define HAS(field) (host->struct_size >= offsetof(curfew_host, field) + sizeof host->field)
#endif

CURFEW_EXPORT const curfew_plugin *curfew_plugin_entry(const curfew_host *host) {
    (void)host;
#if VARIANT == 11
    if (HAS(request_next_run)) host->request_next_run(NULL, 1.0);
    if (HAS(scratch_dir)) (void)host->scratch_dir(NULL);
    if (HAS(submit_run)) host->submit_run(NULL, "other", NULL, 0.0);
    if (HAS(require_conditions)) host->require_conditions(NULL, CURFEW_CONDITION_EXTERNAL_POWER);
    return &calls_plugin;
#endif
#if VARIANT == 7
    return (const curfew_plugin *)(unsigned long)4096;
#elif VARIANT == 8 || VARIANT == 9
    return edge();
#endif
#if VARIANT == 1 || VARIANT == 5
    volatile int *nowhere = NULL;
    *nowhere = 1;
#elif VARIANT == 3
    for (volatile unsigned long spin = 0;; spin++) {
    }
#elif VARIANT == 4
    const char *path = getenv("CURFEW_FIXTURE_PIDFILE");
    FILE *file = path ? fopen(path, "w") : NULL;
    if (file) {
        fprintf(file, "%d\n", (int)getpid());
        fclose(file);
    }
    for (;;) pause();
#endif
    return NULL;
}
