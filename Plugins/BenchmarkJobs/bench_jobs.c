/* Jobs the benchmarks run, and the same chunk functions exported by name so
 * a baseline loop can call them directly. Parameters: count (chunks before
 * done), spin-ns (busy time per chunk), work (loop iterations per chunk);
 * for bench-sleep, sleep-ms (the wait between chunks) and lead-ns (the
 * grant's lead, to measure how late its expire hook runs); for
 * bench-checkpoint, bytes (each checkpoint's size). */
#define _POSIX_C_SOURCE 200809L
#include <curfew.h>

#include <stdlib.h>
#include <string.h>
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

/* The same with a floating-point argument, which libffi must call. */
CURFEW_EXPORT int64_t bench_foreign_step_double(double index, int64_t count) {
    return count - 1 - (int64_t)index;
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

/* A live job that holds no thread: each chunk asks to be called again after
 * `sleep-ms` (default 100). Its expire hook records how late it ran, from
 * the grant's remaining time and its lead (the `lead-ns` parameter). */
#define BENCH_MAX_SAMPLES 100000
static _Atomic int64_t sleepers_live;
static _Atomic int64_t lateness_count;
static double lateness_ms[BENCH_MAX_SAMPLES];
static int64_t expired_at_ns[BENCH_MAX_SAMPLES];  /* CLOCK_MONOTONIC, as the host's clock */

typedef struct {
    int64_t sleep_ms;
    int64_t lead_ns;
} sleep_state;

static curfew_status sleep_create(curfew_context *ctx, void **state) {
    sleep_state *s = calloc(1, sizeof *s);
    if (!s) return CURFEW_ERROR;
    s->sleep_ms = param(ctx, "sleep-ms", 100);
    s->lead_ns = param(ctx, "lead-ns", 0);
    *state = s;
    return CURFEW_OK;
}

static curfew_chunk_result sleep_chunk(curfew_context *ctx, void *state) {
    (void)ctx;
    sleep_state *s = state;
    if (s->lead_ns >= 0) {
        s->lead_ns = -s->lead_ns - 1;  /* counted once, on the first chunk */
        sleepers_live++;
    }
    return CURFEW_CHUNK_AFTER_MS(s->sleep_ms);
}

static void sleep_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)reason;
    sleep_state *s = state;
    double lead_ms = (double)(-s->lead_ns - 1) / 1e6;
    double late = lead_ms - host->time_remaining(ctx) * 1000;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t index = lateness_count++;
    if (index < BENCH_MAX_SAMPLES) {
        lateness_ms[index] = late;
        expired_at_ns[index] = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    }
}

/* For the benchmark: how many sleepers have run a chunk; the lateness
 * samples so far (copied into `out`, at most `capacity`), and when each
 * hook ran; a reset. */
CURFEW_EXPORT int64_t bench_sleepers_live(void) { return sleepers_live; }
CURFEW_EXPORT int64_t bench_lateness(double *out, int64_t capacity) {
    int64_t count = lateness_count < BENCH_MAX_SAMPLES ? lateness_count : BENCH_MAX_SAMPLES;
    for (int64_t i = 0; i < count && i < capacity; i++) out[i] = lateness_ms[i];
    return count;
}
CURFEW_EXPORT int64_t bench_expired_at(int64_t *out, int64_t capacity) {
    int64_t count = lateness_count < BENCH_MAX_SAMPLES ? lateness_count : BENCH_MAX_SAMPLES;
    for (int64_t i = 0; i < count && i < capacity; i++) out[i] = expired_at_ns[i];
    return count;
}
CURFEW_EXPORT void bench_sleepers_reset(void) {
    sleepers_live = 0;
    lateness_count = 0;
}

static const curfew_job sleep_job = {
    .struct_size = sizeof(curfew_job), .name = "bench-sleep", .summary = "Benchmark job bench-sleep.",
    .create = sleep_create, .chunk = sleep_chunk, .expire = sleep_expire, .destroy = bench_destroy,
};

#define BENCH_JOB(var, jname, jchunk) \
    static const curfew_job var = { \
        .struct_size = sizeof(curfew_job), .name = jname, .summary = "Benchmark job " jname ".", \
        .create = bench_create, .chunk = jchunk, .expire = bench_expire, .destroy = bench_destroy, \
    };

/* One checkpoint save a chunk, `bytes` long (default 64, at most 1 MiB), the
 * chunk number first. One job at a time uses the block. */
static curfew_chunk_result bench_checkpoint_chunk(curfew_context *ctx, void *state) {
    bench_state *s = state;
    static unsigned char block[CURFEW_MAX_CHECKPOINT];
    int64_t bytes = param(ctx, "bytes", 64);
    if (bytes < 8 || bytes > (int64_t)sizeof block) return CURFEW_CHUNK_FAILED;
    memcpy(block, &s->done, sizeof s->done);
    if (host->checkpoint_save(ctx, block, (size_t)bytes) != CURFEW_OK) return CURFEW_CHUNK_FAILED;
    return ++s->done >= s->limit ? CURFEW_CHUNK_DONE : CURFEW_CHUNK_CONTINUE;
}

BENCH_JOB(noop_job, "bench-noop", bench_noop_chunk)
BENCH_JOB(spin_job, "bench-spin", bench_spin_chunk)
BENCH_JOB(cpu_job, "bench-cpu", bench_cpu_chunk)
BENCH_JOB(checkpoint_job, "bench-checkpoint", bench_checkpoint_chunk)

static const curfew_job *const jobs[] = {&noop_job, &spin_job, &cpu_job, &sleep_job, &checkpoint_job};

static const curfew_plugin plugin = {
    .abi_version = CURFEW_ABI_VERSION,
    .struct_size = sizeof(curfew_plugin),
    .job_count = sizeof jobs / sizeof jobs[0],
    .jobs = jobs,
};

CURFEW_EXPORT const curfew_plugin *curfew_plugin_entry(const curfew_host *services) {
    host = services;
    return &plugin;
}
