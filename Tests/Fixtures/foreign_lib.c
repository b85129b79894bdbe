/* A library that knows nothing of Curfew: plain functions a manifest turns
 * into jobs. foreign_count() lets the tests read what happened. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long step_calls, tick_calls, greet_calls, byte_calls, slow_calls, cleanup_calls, teardown_calls, setup_calls;
static long float_calls;
static double first_remaining = -1, last_remaining = -1;
static long last_seconds = -1;
static char greeting[64];

long foreign_count(const char *what) {
    if (strcmp(what, "step") == 0) return step_calls;
    if (strcmp(what, "tick") == 0) return tick_calls;
    if (strcmp(what, "greet") == 0) return greet_calls;
    if (strcmp(what, "byte") == 0) return byte_calls;
    if (strcmp(what, "slow") == 0) return slow_calls;
    if (strcmp(what, "cleanup") == 0) return cleanup_calls;
    if (strcmp(what, "teardown") == 0) return teardown_calls;
    if (strcmp(what, "setup") == 0) return setup_calls;
    if (strcmp(what, "seconds") == 0) return last_seconds;
    if (strcmp(what, "float") == 0) return float_calls;
    return -1;
}

double foreign_remaining(int last) { return last ? last_remaining : first_remaining; }
const char *foreign_greeting(void) { return greeting; }

/* A counter step: returns how many steps are left after step i (of 10). */
int step(long i) {
    step_calls++;
    return (int)(9 - i);
}

/* Sees the remaining time and a host-owned state buffer; done after 5 calls. */
int tick(double remaining, void *state) {
    long *calls = state;
    if (*calls == 0) first_remaining = remaining;
    last_remaining = remaining;
    tick_calls++;
    return ++*calls >= 5 ? 1 : 0;
}

/* A counter step with a floating-point index and a signed 8-bit result
 * (libffi calls it): -3 after five steps, a failure under items-left. */
int8_t step_float(float i, int64_t steps) {
    float_calls++;
    return i + 1 >= (float)steps ? (int8_t)-3 : (int8_t)(steps - 1 - (int64_t)i);
}

/* Takes a string: copies it and is done. */
int greet(const char *name) {
    greet_calls++;
    strncpy(greeting, name ? name : "(null)", sizeof greeting - 1);
    return 1;
}

/* Returns uint8_t: 200 first (must not read as negative), then 4, 3, 2, 1, 0. */
uint8_t countdown8(uint32_t i) {
    byte_calls++;
    return i == 0 ? 200 : (uint8_t)(i < 5 ? 5 - i : 0);
}

/* Runs past any budget: 200 µs of work per call, never done. */
void slow_step(void *state) {
    (void)state;
    slow_calls++;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < 200000L);
}

void *make_state(int64_t size) {
    setup_calls++;
    return calloc(1, (size_t)size);
}

void on_cleanup(void *state) {
    (void)state;
    cleanup_calls++;
}

void free_state(void *state) {
    teardown_calls++;
    free(state);
}

/* A no-op chunk for benchmarks. */
int32_t noop(void) { return 0; }

/* Exported data: a manifest must not be able to call it. */
long foreign_data = 7;

/* Notes whole seconds remaining, in an int8: done at once. */
int note_seconds(int8_t seconds) {
    last_seconds = seconds;
    return 1;
}

/* A job of `total` 1 ms steps that resumes across grants: steady_step
 * records the first index each run sees, steady_cleanup where the grant
 * expired and steady_teardown the index it was given last. */
static long steady_first = -1, steady_first_seen = -1, steady_cleanup_index = -1, steady_teardown_index = -1;

long steady_count(const char *what) {
    if (strcmp(what, "first") == 0) return steady_first_seen;
    if (strcmp(what, "cleanup") == 0) return steady_cleanup_index;
    if (strcmp(what, "teardown") == 0) return steady_teardown_index;
    return -1;
}

int64_t steady_step(int64_t i, int64_t total) {
    if (steady_first < 0) steady_first = steady_first_seen = i;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < 1000000L);
    return total - 1 - i;
}

void steady_cleanup(int64_t i) { steady_cleanup_index = i; }

void steady_teardown(int64_t i) {
    steady_teardown_index = i;
    steady_first = -1;
}
