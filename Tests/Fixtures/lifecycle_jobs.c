/* Jobs that say every app event they hear, with the state and whether their
 * time runs: for the app lifecycle's tests.
 *   listener  chunked: waits in 5 ms steps until its grant expires.
 *   spinner   chunked: spins in its first chunk until the test releases it.
 *   ender     task-driven: one task, ended on will-enter-foreground (as the
 *             seeds' applicationWillEnterForeground ends its background task)
 *             or by its expiration handler. */
#include <curfew.h>
#include <stdio.h>
#include <stdlib.h>

static const curfew_host *host;

static const char *event_name(curfew_app_event event) {
    switch (event) {
    case CURFEW_APP_EVENT_LAUNCH: return "launch";
    case CURFEW_APP_EVENT_WILL_RESIGN_ACTIVE: return "will-resign-active";
    case CURFEW_APP_EVENT_DID_ENTER_BACKGROUND: return "did-enter-background";
    case CURFEW_APP_EVENT_WILL_ENTER_FOREGROUND: return "will-enter-foreground";
    case CURFEW_APP_EVENT_DID_BECOME_ACTIVE: return "did-become-active";
    case CURFEW_APP_EVENT_WILL_TERMINATE: return "will-terminate";
    }
    return "unknown";
}

static const char *state_name(curfew_app_state state) {
    switch (state) {
    case CURFEW_APP_STATE_ACTIVE: return "active";
    case CURFEW_APP_STATE_INACTIVE: return "inactive";
    case CURFEW_APP_STATE_BACKGROUND: return "background";
    }
    return "unknown";
}

/* "EVENT in STATE, unlimited|limited": whether the grant's clock runs. */
static void say(curfew_context *ctx, const char *what) {
    char line[128];
    double left = host->time_remaining(ctx);
    snprintf(line, sizeof line, "%s in %s, %s", what, state_name(host->app_state(ctx)),
             left >= CURFEW_TIME_UNLIMITED ? "unlimited" : "limited");
    host->log(ctx, CURFEW_LOG_INFO, line);
}

static void heard(curfew_context *ctx, void *state, curfew_app_event event) {
    (void)state;
    say(ctx, event_name(event));
}

static curfew_chunk_result wait_step(curfew_context *ctx, void *state) {
    (void)ctx; (void)state;
    return CURFEW_CHUNK_AFTER_MS(5);
}

static void stop(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)state;
    host->log(ctx, CURFEW_LOG_INFO,
              reason == CURFEW_EXPIRE_SHUTDOWN ? "expire shutdown"
              : reason == CURFEW_EXPIRE_CANCELLED ? "expire cancelled" : "expire timeout");
}

/* In its first chunk until the test calls lifecycle_release(): events and
 * the expiration come while a chunk runs. */
static int released;

CURFEW_EXPORT void lifecycle_release(void) {
    __atomic_store_n(&released, 1, __ATOMIC_RELEASE);
}

static curfew_chunk_result spin(curfew_context *ctx, void *state) {
    (void)state;
    host->log(ctx, CURFEW_LOG_INFO, "spinning");
    while (!__atomic_load_n(&released, __ATOMIC_ACQUIRE)) {
    }
    return CURFEW_CHUNK_AFTER_MS(5);
}

struct work { curfew_context *ctx; curfew_task_id task; };

static void out_of_time(void *user_data, curfew_expire_reason reason) {
    struct work *w = user_data;
    (void)reason;
    host->log(w->ctx, CURFEW_LOG_INFO, "task expired");
    host->end_background_task(w->ctx, w->task);
}

static curfew_status begin(curfew_context *ctx, void **state) {
    struct work *w = calloc(1, sizeof *w);
    if (!w) return CURFEW_ERROR;
    w->ctx = ctx;
    w->task = host->begin_background_task(ctx, "work", out_of_time, w);
    *state = w;
    return CURFEW_OK;
}

static void heard_and_end(curfew_context *ctx, void *state, curfew_app_event event) {
    struct work *w = state;
    say(ctx, event_name(event));
    if (event == CURFEW_APP_EVENT_WILL_ENTER_FOREGROUND) {
        host->log(ctx, CURFEW_LOG_INFO, "ending the task early");
        host->end_background_task(ctx, w->task);
    }
}

static void release(curfew_context *ctx, void *state) {
    (void)ctx;
    free(state);
}

CURFEW_JOB(listener, "listener", "Says each app event it hears.",
           .chunk = wait_step, .expire = stop, .app_event = heard);
CURFEW_JOB(spinner, "spinner", "Says each app event it hears, and spins in its chunk until it expires.",
           .chunk = spin, .expire = stop, .app_event = heard);
CURFEW_JOB(ender, "ender", "Ends its task when the app enters the foreground.",
           .create = begin, .destroy = release, .app_event = heard_and_end);

CURFEW_PLUGIN(host, &listener, &spinner, &ender)
