/* Jobs the benchmarks run, and the same chunk functions exported by name so
 * a baseline loop can call them directly. Parameters: count (chunks before
 * done), spin-ns (busy time per chunk), work (loop iterations per chunk). */
#define _POSIX_C_SOURCE 200809L
#include <curfew.h>

#include <stdlib.h>
#include <time.h>

static const curfew_host *host;

typedef struct {
    int64_t done;
    int64_t limit;
    int64_t spin_ns;
    int64_t work;
    uint64_t sink;
} bench_state;

static int64_t param(curfew_context *ctx, const char *key, int64_t fallback) {
    const char *value = host->param(ctx, key);
    return value ? strtoll(value, NULL, 10) : fallback;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

CURFEW_EXPORT bench_state *bench_make_state(int64_t limit, int64_t spin_ns, int64_t work) {
    bench_state *state = calloc(1, sizeof *state);
    state->limit = limit;
    state->spin_ns = spin_ns;
    state->work = work;
    return state;
}

/* Does nothing but count: done after `limit` calls. */
CURFEW_EXPORT curfew_chunk_result bench_noop_chunk(curfew_context *ctx, void *state) {
    (void)ctx;
    bench_state *s = state;
    return ++s->done >= s->limit ? CURFEW_CHUNK_DONE : CURFEW_CHUNK_CONTINUE;
}

/* Busy for `spin_ns` reading the monotonic clock, then counts. */
CURFEW_EXPORT curfew_chunk_result bench_spin_chunk(curfew_context *ctx, void *state) {
    (void)ctx;
    bench_state *s = state;
    int64_t end = now_ns() + s->spin_ns;
    while (now_ns() < end) {
    }
    return ++s->done >= s->limit ? CURFEW_CHUNK_DONE : CURFEW_CHUNK_CONTINUE;
}

/* CPU-bound: `work` rounds of xorshift, then counts. */
CURFEW_EXPORT curfew_chunk_result bench_cpu_chunk(curfew_context *ctx, void *state) {
    (void)ctx;
    bench_state *s = state;
    uint64_t x = s->sink | 1;
    for (int64_t i = 0; i < s->work; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    s->sink = x;
    return ++s->done >= s->limit ? CURFEW_CHUNK_DONE : CURFEW_CHUNK_CONTINUE;
}

/* The foreign twin of bench_noop_chunk, for a manifest: items left after step i of n. */
CURFEW_EXPORT int64_t bench_foreign_step(int64_t index, int64_t count) {
    return count - 1 - index;
}

static curfew_status bench_create(curfew_context *ctx, void **state) {
    *state = bench_make_state(param(ctx, "count", 1000), param(ctx, "spin-ns", 0), param(ctx, "work", 0));
    return *state ? CURFEW_OK : CURFEW_ERROR;
}

static void bench_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}

static void bench_destroy(curfew_context *ctx, void *state) {
    (void)ctx;
    free(state);
}

#define BENCH_JOB(var, jname, jchunk) \
    static const curfew_job var = { \
        .struct_size = sizeof(curfew_job), .name = jname, .summary = "Benchmark job " jname ".", \
        .create = bench_create, .chunk = jchunk, .expire = bench_expire, .destroy = bench_destroy, \
    };

BENCH_JOB(noop_job, "bench-noop", bench_noop_chunk)
BENCH_JOB(spin_job, "bench-spin", bench_spin_chunk)
BENCH_JOB(cpu_job, "bench-cpu", bench_cpu_chunk)

static const curfew_job *const jobs[] = {&noop_job, &spin_job, &cpu_job};

static const curfew_plugin plugin = {
    .abi_version = CURFEW_ABI_VERSION,
    .struct_size = sizeof(curfew_plugin),
    .job_count = 3,
    .jobs = jobs,
};

CURFEW_EXPORT const curfew_plugin *curfew_plugin_entry(const curfew_host *services) {
    host = services;
    return &plugin;
}
