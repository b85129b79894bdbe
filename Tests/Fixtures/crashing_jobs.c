/* Jobs that crash, hang, exit, print garbage or exceed limits, for
 * --isolate job. "fine" completes, to show the others do not take it down. */
#define _DEFAULT_SOURCE
#include <curfew.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const curfew_host *host;

static void cleanup(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}

static curfew_chunk_result fine(curfew_context *ctx, void *state) {
    (void)state;
    host->log(ctx, CURFEW_LOG_INFO, "fine and done");
    return CURFEW_CHUNK_DONE;
}

static curfew_chunk_result segfault(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    fprintf(stderr, "about to dereference NULL\n");
    fflush(stderr);
    volatile int *nowhere = NULL;
    return *nowhere;
}

static curfew_chunk_result aborts(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    abort();
}

static curfew_chunk_result loops(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    for (volatile unsigned long spin = 0;; spin++) {
    }
    return CURFEW_CHUNK_CONTINUE;
}

static curfew_chunk_result keeps_going(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    return CURFEW_CHUNK_AFTER_MS(5);
}

static void loops_in_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
    for (volatile unsigned long spin = 0;; spin++) {
    }
}

/* 32 MiB a chunk, never freed; aborts when malloc fails. One byte is
 * touched: --memory limits address space, which a block takes once mapped,
 * so the limit is met within a few chunks however little CPU the worker
 * gets (touching it all took seconds on a loaded machine, past a 2 s budget). */
static curfew_chunk_result allocates(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    char *block = malloc(32u << 20);
    if (block == NULL) abort();
    block[0] = 1;
    return CURFEW_CHUNK_CONTINUE;
}

static curfew_chunk_result prints(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    printf("{\"event\": not json\n\"quote\" \\ and a partial line");
    fflush(stdout);
    fprintf(stderr, "warning from the plugin\n");
    return CURFEW_CHUNK_DONE;
}

/* Leaves a process behind that holds the worker's stdout and stderr. */
static curfew_chunk_result spawns_helper(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    if (system("sleep 30 &") != 0) return CURFEW_CHUNK_FAILED;
    return CURFEW_CHUNK_DONE;
}

static curfew_chunk_result exits(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    exit(0);
}

/* Chunks 1 to 30 return at once (one time slice holds them all); chunk 31
 * logs "hangs" and never returns. */
static curfew_chunk_result hangs_at_31(curfew_context *ctx, void *state) {
    static int calls;
    if (++calls <= 30) return CURFEW_CHUNK_CONTINUE;
    host->log(ctx, CURFEW_LOG_INFO, "hangs");
    return loops(ctx, state);
}

/* Chunks 1 to 4 return at once; chunk 5 dereferences NULL. */
static curfew_chunk_result crashes_at_5(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    static int calls;
    if (++calls <= 4) return CURFEW_CHUNK_CONTINUE;
    volatile int *nowhere = NULL;
    return *nowhere;
}

CURFEW_JOB(fine_job, "fine", "Completes.", .chunk = fine, .expire = cleanup);
CURFEW_JOB(hangs_at_31_job, "hangs-at-31", "Never returns from chunk 31.", .chunk = hangs_at_31, .expire = cleanup);
CURFEW_JOB(crashes_at_5_job, "crashes-at-5", "Dereferences NULL in chunk 5.", .chunk = crashes_at_5, .expire = cleanup);
CURFEW_JOB(segfault_job, "segfault", "Dereferences NULL in chunk.", .chunk = segfault, .expire = cleanup);
CURFEW_JOB(abort_job, "abort", "Calls abort() in chunk.", .chunk = aborts, .expire = cleanup);
CURFEW_JOB(loop_job, "loops-in-chunk", "Never returns from chunk.", .chunk = loops, .expire = cleanup);
CURFEW_JOB(loop_expire_job, "loops-in-expire", "Never returns from expire.", .chunk = keeps_going, .expire = loops_in_expire);
CURFEW_JOB(allocates_job, "allocates", "Allocates without end.", .chunk = allocates, .expire = cleanup);
CURFEW_JOB(burns_job, "burns-cpu", "Never returns from chunk (for --cpu-time).", .chunk = loops, .expire = cleanup);
CURFEW_JOB(prints_job, "prints", "Prints garbage to stdout and stderr.", .chunk = prints, .expire = cleanup);
CURFEW_JOB(exits_job, "exits", "Calls exit(0) in chunk.", .chunk = exits, .expire = cleanup);
CURFEW_JOB(helper_job, "spawns-helper", "Leaves a process holding its output.", .chunk = spawns_helper, .expire = cleanup);
CURFEW_JOB(ticks_job, "ticks", "Ticks until its grant expires.", .chunk = keeps_going, .expire = cleanup);

CURFEW_PLUGIN(host, &fine_job, &segfault_job, &abort_job, &loop_job, &loop_expire_job, &allocates_job, &burns_job,
              &prints_job, &exits_job, &helper_job, &ticks_job, &hangs_at_31_job, &crashes_at_5_job)
