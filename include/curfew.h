/*
 * curfew.h — the C ABI between the Curfew host and a job plugin.
 *
 * A plugin is a shared object that exports one function,
 * `curfew_plugin_entry`. The host calls it once with its services table and
 * gets back a descriptor listing the plugin's jobs. Every job then runs under
 * a background-task grant: a time budget, an expiration handler that fires a
 * lead time before the budget ends, and a hard deadline at the end of it —
 * the model of UIKit's beginBackgroundTask(expirationHandler:).
 *
 * Rules of this header
 * - Versioned and append-only. Every struct that may grow starts with (or
 *   carries) `struct_size`. ABI 1 is every field below; a field added later
 *   is only ever appended and names the ABI version that added it. A host
 *   refuses a plugin built for a newer ABI than its own, so a plugin never
 *   meets a host table shorter than its header's ABI made it, but for a
 *   field appended within an ABI, which says so: a plugin checks the host
 *   table's `struct_size` before it uses one. A host reads an older
 *   plugin's structs only up to their `struct_size`, a field a shorter
 *   struct lacks counting as NULL.
 * - Strings are UTF-8 and NUL-terminated. Nothing crosses the boundary that
 *   needs the other side's allocator, and no C++ exception or Swift error may
 *   cross it.
 * - Ownership and lifetime are stated beside each pointer.
 *
 * Thread tags, used beside every hook and host function:
 * [loader]            Called once, on the thread that loads plugins, with no
 *                     other call into the plugin in flight.
 * [job-queue]         Called on one of libdispatch's worker threads, on the
 *                     job's serial queue: `create`, `chunk`, `expire` and
 *                     `destroy` of one job never overlap. Each call may come
 *                     on a different thread. The threads are as many as the
 *                     cores and shared by every job: a hook that blocks holds
 *                     one, and libdispatch adds another for the other jobs
 *                     only after about a second, so wait by returning
 *                     CURFEW_CHUNK_AFTER_MS, not by sleeping.
 * [expiration-queue]  Called on the job's expiration queue, concurrently with
 *                     any threads the job started itself (as on iOS), and
 *                     with `create` itself when the grant begins to expire
 *                     while `create` runs.
 * [any-thread]        May be called from any thread, including threads the
 *                     job started itself, while the context is valid.
 *
 * Minimal chunked job:
 *
 *     #include <curfew.h>
 *     static curfew_chunk_result tick(curfew_context *ctx, void *state) {
 *         (void)ctx; (void)state;
 *         return CURFEW_CHUNK_DONE;
 *     }
 *     static void cleanup(curfew_context *ctx, void *state,
 *                         curfew_expire_reason reason) {
 *         (void)ctx; (void)state; (void)reason;
 *     }
 *     static const curfew_job job = {
 *         .struct_size = sizeof(curfew_job), .name = "hello",
 *         .summary = "Says hello once.", .chunk = tick, .expire = cleanup,
 *     };
 *     static const curfew_job *const jobs[] = { &job };
 *     static const curfew_plugin plugin = {
 *         .abi_version = CURFEW_ABI_VERSION, .struct_size = sizeof plugin,
 *         .job_count = 1, .jobs = jobs,
 *     };
 *     CURFEW_EXPORT const curfew_plugin *
 *     curfew_plugin_entry(const curfew_host *host) {
 *         (void)host;
 *         return &plugin;
 *     }
 *
 * Build: cc -shared -fPIC -fvisibility=hidden -I include job.c -o job.so
 */
#ifndef CURFEW_H
#define CURFEW_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes. A host accepts a plugin whose
 * descriptor carries a version it speaks; version 1 is the first. */
#define CURFEW_ABI_VERSION 2u

/* Marks the entry function as exported, so plugins can build with
 * -fvisibility=hidden and export nothing else. */
#if defined(_WIN32)
#define CURFEW_EXPORT __declspec(dllexport)
#else
#define CURFEW_EXPORT __attribute__((visibility("default")))
#endif

/* Limits the host enforces when it validates a descriptor. */
#define CURFEW_MAX_JOBS 256u          /* jobs in one plugin */
#define CURFEW_MAX_JOB_NAME 64u       /* bytes in a job name, without NUL */
#define CURFEW_MAX_SUMMARY 200u       /* bytes in a summary, without NUL */
#define CURFEW_MAX_OPEN_TASKS 10000u  /* background tasks one job has open */
#define CURFEW_MAX_CHECKPOINT 1048576u /* bytes in one checkpoint (1 MiB) */
#define CURFEW_MAX_MODES 16u          /* background modes of one job */

/* Status returned by `create` and by `checkpoint_save`. */
typedef enum curfew_status {
    CURFEW_OK = 0,
    CURFEW_ERROR = 1,
    /* checkpoint_save: more than CURFEW_MAX_CHECKPOINT bytes; nothing saved. */
    CURFEW_TOO_LARGE = 2,
    /* checkpoint_save: the host keeps no state (no state store, or it
     * failed: the host logs why), or the job is over; nothing saved. */
    CURFEW_UNAVAILABLE = 3
} curfew_status;

/* One running job, as the host sees it. Opaque; owned by the host; valid
 * from the job's `create` until its `destroy` returns. Every host function
 * takes it first. */
typedef struct curfew_context curfew_context;

/* ------------------------------------------------------------------------ */
/* Background tasks                                                         */

/* Identifies a background task begun with `begin_background_task`.
 * Like UIBackgroundTaskIdentifier: never reused within one host process. */
typedef uint64_t curfew_task_id;

/* Returned when no task could be begun (UIBackgroundTaskInvalid). */
#define CURFEW_TASK_INVALID ((curfew_task_id)0)

/* Why a grant is expiring. */
typedef enum curfew_expire_reason {
    /* The budget is about to run out: the expiration point was reached. */
    CURFEW_EXPIRE_TIMEOUT = 1,
    /* The host is shutting down (SIGINT or SIGTERM). */
    CURFEW_EXPIRE_SHUTDOWN = 2,
    /* The job was cancelled by whoever embeds the host. */
    CURFEW_EXPIRE_CANCELLED = 3,
    /* Its progress (`report_progress`) did not move for the stall time its
     * policy sets. A job built against an older header sees 4: any value
     * it does not know is to be treated as CURFEW_EXPIRE_TIMEOUT. */
    CURFEW_EXPIRE_STALLED = 4,
    /* A condition its runs wait for (the policy's "conditions", or
     * `require_conditions`) stopped holding: the machine left external
     * power, lost its network, ran low on storage, and so on. */
    CURFEW_EXPIRE_CONDITIONS = 5
} curfew_expire_reason;

/* What a job's runs may wait for, as bits of `require_conditions`' mask
 * (after BGProcessingTaskRequest and WorkManager's constraints). A run
 * waits until each holds and is expired (CURFEW_EXPIRE_CONDITIONS) when
 * one stops holding. */
typedef enum curfew_condition {
    /* On mains power or a charger; a machine with no battery always is. */
    CURFEW_CONDITION_EXTERNAL_POWER = 1 << 0,
    /* A default route (IPv4 or IPv6) is up. */
    CURFEW_CONDITION_NETWORK = 1 << 1,
    /* Storage is not low on the state store's and the scratch folders'
     * file systems. */
    CURFEW_CONDITION_STORAGE = 1 << 2,
    /* The CPU is not busy (pressure, or the load per core). */
    CURFEW_CONDITION_CPU = 1 << 3,
    /* Memory is not under pressure. */
    CURFEW_CONDITION_MEMORY = 1 << 4,
    /* The battery is not low (or charging, or there is none). */
    CURFEW_CONDITION_BATTERY = 1 << 5
} curfew_condition;

/* An expiration handler given to `begin_background_task`.
 * [expiration-queue] Called at most once, when the job's grant starts to
 * expire, if the task has not ended by then. It should stop the work and
 * call `end_background_task` promptly: a task still open at the hard
 * deadline gets the job terminated. `user_data` is the pointer given to
 * `begin_background_task`, passed through untouched. */
typedef void (*curfew_expiration_handler)(void *user_data,
                                          curfew_expire_reason reason);

/* The host's app state, after UIApplication.State. A host starts in the
 * background (`curfew run` and `curfew serve` stay there unless told
 * otherwise: `curfew ctl foreground`); an embedding app moves it. Active and
 * inactive are the foreground: there a grant's clock does not run. */
typedef enum curfew_app_state {
    CURFEW_APP_STATE_ACTIVE = 0,
    CURFEW_APP_STATE_INACTIVE = 1,
    CURFEW_APP_STATE_BACKGROUND = 2
} curfew_app_state;

/* The app events a job's `app_event` hook receives, after UIApplicationDelegate.
 * The states go background <-> inactive <-> active, one step per event:
 * CURFEW_APP_EVENT_LAUNCH                 first, once, right after `create`
 *                                         (each run is a launch of the job;
 *                                         `app_state` says into which state)
 * CURFEW_APP_EVENT_WILL_RESIGN_ACTIVE     active -> inactive
 * CURFEW_APP_EVENT_DID_ENTER_BACKGROUND   inactive -> background: the grant's
 *                                         clock starts, with the whole budget
 * CURFEW_APP_EVENT_WILL_ENTER_FOREGROUND  background -> inactive: the clock
 *                                         stops; a good time to end tasks early
 * CURFEW_APP_EVENT_DID_BECOME_ACTIVE      inactive -> active
 * CURFEW_APP_EVENT_WILL_TERMINATE         the host is shutting down; the
 *                                         grant expires with the shutdown
 *                                         reason right after
 * A newer host may add events: ignore a value not listed here. */
typedef enum curfew_app_event {
    CURFEW_APP_EVENT_LAUNCH = 0,
    CURFEW_APP_EVENT_WILL_RESIGN_ACTIVE = 1,
    CURFEW_APP_EVENT_DID_ENTER_BACKGROUND = 2,
    CURFEW_APP_EVENT_WILL_ENTER_FOREGROUND = 3,
    CURFEW_APP_EVENT_DID_BECOME_ACTIVE = 4,
    CURFEW_APP_EVENT_WILL_TERMINATE = 5
} curfew_app_event;

/* Log levels for `log`. */
typedef enum curfew_log_level {
    CURFEW_LOG_DEBUG = 0,
    CURFEW_LOG_INFO = 1,
    CURFEW_LOG_WARNING = 2,
    CURFEW_LOG_ERROR = 3
} curfew_log_level;

/* `time_remaining` returns this for a grant without a budget (a continuous
 * job), as backgroundTimeRemaining returns DBL_MAX in the foreground. */
#define CURFEW_TIME_UNLIMITED 1.7976931348623157e308

/* ------------------------------------------------------------------------ */
/* Host services                                                            */

/* The host's services. Owned by the host, valid for the life of the process;
 * the plugin may keep the pointer it is given in `curfew_plugin_entry`.
 * Every function is [any-thread] and safe to call while `ctx` is valid. */
typedef struct curfew_host {
    /* CURFEW_ABI_VERSION of the host. */
    uint32_t abi_version;
    /* sizeof(curfew_host) of the host: a plugin built against a newer header
     * checks it before using a field this host may not have. */
    uint32_t struct_size;

    /* Seconds until the job's hard deadline, like backgroundTimeRemaining;
     * 0 once it has passed, CURFEW_TIME_UNLIMITED for a continuous job and
     * while the host is in the foreground (active or inactive).
     * Cheap (one clock read): call it inside a long chunk to decide whether
     * to stop early. */
    double (*time_remaining)(curfew_context *ctx);

    /* True once the job's grant has started to expire (the expiration point
     * was reached, the host is shutting down, or the job was cancelled). */
    bool (*is_expiring)(curfew_context *ctx);

    /* Begins a background task that keeps the job alive until it ends, like
     * beginBackgroundTask(withName:expirationHandler:). The task shares the
     * job's deadline. `name` is copied; it may be NULL. `handler` may be
     * NULL; `user_data` is passed to it untouched. Returns
     * CURFEW_TASK_INVALID once the grant is expiring or over, and while the
     * job has CURFEW_MAX_OPEN_TASKS tasks open (the refusal is logged); the
     * host then keeps neither `handler` nor `user_data`. */
    curfew_task_id (*begin_background_task)(curfew_context *ctx,
                                            const char *name,
                                            curfew_expiration_handler handler,
                                            void *user_data);

    /* Ends a task begun with `begin_background_task`. Ending a task twice, or
     * ending CURFEW_TASK_INVALID or an unknown id, is harmless. */
    void (*end_background_task)(curfew_context *ctx, curfew_task_id task);

    /* The host's app state now (see curfew_app_state). */
    curfew_app_state (*app_state)(curfew_context *ctx);

    /* Logs one message for the job. `message` is copied. With a NULL `ctx`,
     * inside `curfew_plugin_entry`, the message is attributed to the plugin
     * being loaded: an entry that returns NULL logs its reason this way. */
    void (*log)(curfew_context *ctx, curfew_log_level level,
                const char *message);

    /* Reports progress: `completed` of `total` units (`total` 0 when
     * unknown). Cheap; the host shows the latest value. */
    void (*report_progress)(curfew_context *ctx, int64_t completed,
                            int64_t total);

    /* The value of `--param key=value` for `key`, or NULL when not given.
     * The string is owned by the host and valid until the job's `destroy`
     * returns. */
    const char *(*param)(curfew_context *ctx, const char *key);

    /* The `user_data` of the job `ctx` runs, as its descriptor declares it
     * (NULL when the descriptor's struct_size ends before `user_data`). Lets one set of hooks
     * serve several jobs. */
    void *(*job_user_data)(curfew_context *ctx);

    /* Saves the job's checkpoint: `length` bytes from `bytes`, copied, kept
     * by the host under the job's name across runs and host restarts. Durable
     * when it returns CURFEW_OK: the write is on disk (in a worker process,
     * the host has acknowledged it), so a crash, a kill or a power loss after
     * that keeps it. Zero bytes clear the checkpoint. Returns
     * CURFEW_TOO_LARGE above CURFEW_MAX_CHECKPOINT bytes and
     * CURFEW_UNAVAILABLE when the host keeps no state or the job is over;
     * either way the last saved checkpoint stays. It writes to disk: call it
     * at a point worth resuming from, not for every chunk of a fast loop.
     *
     * A job that completes has its checkpoint cleared, so its next run
     * starts afresh; one that expires, fails, crashes or is terminated keeps
     * its last one, and its next run's `create` can load it: save what lets
     * the work resume, as iOS asks an app to save its state before it
     * leaves the foreground. */
    curfew_status (*checkpoint_save)(curfew_context *ctx, const void *bytes,
                                     size_t length);

    /* The size in bytes of the job's last saved checkpoint (from this run or
     * an earlier one), or 0 when it has none. When `capacity` is at least
     * that size, the checkpoint is copied into `buffer` too; else call again
     * with a buffer that big. `buffer` may be NULL when `capacity` is 0. */
    size_t (*checkpoint_load)(curfew_context *ctx, void *buffer,
                              size_t capacity);

    /* Asks for the job's next run no sooner than `earliest_seconds` from
     * now, as an iOS app submits a refresh request with an earliest begin
     * date. `curfew serve` schedules the job then, 100 ms from now at the
     * soonest (the operator's config may set a later time, or disable the
     * job); `curfew run`, a batch,
     * records nothing. The last call of a run wins; a run that makes none
     * follows the job's `every` in the config, or runs no more. Returns
     * CURFEW_OK, or CURFEW_ERROR for a negative, NaN or infinite value, or
     * one over ten years (the request is logged and dropped), and
     * CURFEW_UNAVAILABLE once the job is over. */
    curfew_status (*request_next_run)(curfew_context *ctx,
                                      double earliest_seconds);

    /* ABI 2. The folder the job may write in when its worker is sandboxed
     * (`--sandbox`): its worker's (shared by a plugin's jobs under
     * `--isolate plugin`), empty at the worker's start and removed, with
     * what it holds, after the worker ends; also $CURFEW_SCRATCH and
     * $TMPDIR. NULL when the job runs without a sandbox. Valid for the life
     * of the process. */
    const char *(*scratch_dir)(curfew_context *ctx);

    /* Appended within ABI 2: check `struct_size` first. Asks `curfew serve`
     * to run the job named `job` once, no sooner than `earliest_seconds`
     * from now, with `params` over its own: NULL, or an array of key, value,
     * key, value, … UTF-8 strings ended by NULL (at most 64 pairs of at
     * most 1024 bytes each), copied. As BGTaskScheduler's `submit`, the
     * host then keeps it as a one-off run (in the state store, when it has
     * one) until it ran, unless it cannot: a target it does not serve or
     * that is continuous, too many runs waiting, a store that fails (each
     * logged). Only a job the operator's config lets this one start (its
     * "submits") may be asked for, at most 64 times a run. Returns
     * CURFEW_OK once the request is on its way to the host; CURFEW_ERROR
     * for a bad name, parameter or time, a job this one may not start, or
     * past 64 a run (logged); CURFEW_UNAVAILABLE when the host takes no
     * such request (`curfew run`, a batch) or the job is over. */
    curfew_status (*submit_run)(curfew_context *ctx, const char *job,
                                const char *const *params,
                                double earliest_seconds);

    /* Appended within ABI 2: check `struct_size` first. Asks `curfew serve`
     * to hold this job's runs to `conditions` (CURFEW_CONDITION_* bits, at
     * the host's thresholds) besides those its policy names, as
     * BGProcessingTaskRequest's `requiresExternalPower`: this run (unless
     * `curfew ctl run` started it) is expired with CURFEW_EXPIRE_CONDITIONS
     * when one stops holding, and later runs wait until all hold. The last
     * call wins (0: the policy's only), until the host restarts or the job
     * leaves its folder; asking for the same again is free,
     * and a run may change what it asks for at most 64 times. Returns
     * CURFEW_OK once the request is on its way to the host (or the host has
     * it already); CURFEW_ERROR for a bit this host does not know, or past
     * 64 changes (logged); CURFEW_UNAVAILABLE when the host watches no
     * conditions (`curfew run`, a batch) or the job is over. */
    curfew_status (*require_conditions)(curfew_context *ctx,
                                        uint32_t conditions);
} curfew_host;

/* ------------------------------------------------------------------------ */
/* Jobs                                                                     */

/* What a chunk asks for next, returned by `chunk`:
 * CURFEW_CHUNK_CONTINUE  call me again as soon as possible;
 * CURFEW_CHUNK_DONE      the work is complete;
 * CURFEW_CHUNK_FAILED    the work failed (log the reason first);
 * CURFEW_CHUNK_FAILED_FINAL  the work failed and another run cannot help
 *                        (bad input, say): `curfew serve` does not retry it
 *                        (an older host reads it as CURFEW_CHUNK_FAILED);
 * a positive value N     call me again after N nanoseconds, without holding a
 *                        worker thread meanwhile (a timer-like job).
 * Any other negative value is treated as a failure. */
typedef int64_t curfew_chunk_result;

#define CURFEW_CHUNK_CONTINUE ((curfew_chunk_result)0)
#define CURFEW_CHUNK_DONE ((curfew_chunk_result)-1)
#define CURFEW_CHUNK_FAILED ((curfew_chunk_result)-2)
#define CURFEW_CHUNK_FAILED_FINAL ((curfew_chunk_result)-3)
/* Continue after `ms` milliseconds (`ms` > 0). */
#define CURFEW_CHUNK_AFTER_MS(ms) ((curfew_chunk_result)(ms) * 1000000)

/* Job flags. */
/* The job has no budget, like an app with a background mode (audio, VoIP,
 * location). The host runs it only when told to (`--allow-continuous`) and
 * refuses it otherwise. It runs until it finishes or the host shuts down. */
#define CURFEW_JOB_CONTINUOUS (1u << 0)

/* [job-queue] Makes the job's state. Optional (NULL: state is NULL).
 * Store the state in `*state`; the host passes it to every later hook and
 * never reads it. Return CURFEW_ERROR (after logging why) to fail the job
 * at once, with the last logged error as its reason: no other hook is
 * called then, and the tasks it began are ended by the host (their
 * handlers are not called). The job's grant is already running.
 *
 * A task-driven job (NULL `chunk`) starts its work here and returns at
 * once, with a task open: begin the task here, before `create` returns,
 * and hand its id to the thread that does the work, which ends it when
 * done. A task-driven job whose `create` returns without having begun a
 * task fails ("create returned with no background task open"): the grant
 * has nothing to keep it alive, and a task begun later from another thread
 * would be refused. (One whose `create` begins and ends its tasks itself
 * did its work there, and completes.) As on iOS:
 *
 *     struct work { curfew_context *ctx; curfew_task_id task; };
 *     static void *run(void *arg) {
 *         struct work *w = arg;
 *         ... the work, checking host->is_expiring(w->ctx) ...
 *         host->end_background_task(w->ctx, w->task);
 *         return NULL;
 *     }
 *     static curfew_status create(curfew_context *ctx, void **state) {
 *         struct work *w = calloc(1, sizeof *w);
 *         if (!w) return CURFEW_ERROR;
 *         w->ctx = ctx;
 *         w->task = host->begin_background_task(ctx, "sync", NULL, NULL);
 *         pthread_t thread;
 *         if (pthread_create(&thread, NULL, run, w) != 0) {
 *             host->log(ctx, CURFEW_LOG_ERROR, "cannot start a thread");
 *             free(w);  // no handler was given, so none can hold `w`
 *             return CURFEW_ERROR;  // the host ends the task
 *         }
 *         pthread_detach(thread);
 *         *state = w;  // freed in destroy, after the task ended
 *         return CURFEW_OK;
 *     }
 */
typedef curfew_status (*curfew_create_fn)(curfew_context *ctx, void **state);

/* [job-queue] Does one bounded unit of work and says what next (see
 * curfew_chunk_result). Keep a chunk short — well under the grant's lead
 * time — so the host can stop between chunks. The host checks the remaining
 * time before each call and calls no chunk once the grant is expiring. */
typedef curfew_chunk_result (*curfew_chunk_fn)(curfew_context *ctx,
                                               void *state);

/* [job-queue] The cleanup hook, called from the grant's expiration handler:
 * at most once, when the grant starts to expire while the job is still
 * alive. For a chunked job it never overlaps a chunk: it runs at once when
 * no chunk is in flight, else right after the in-flight chunk returns, and
 * no chunk runs after it. Save what must last, release what must not leak,
 * and return promptly: the job is terminated if it has not returned by the
 * hard deadline. Required for chunked jobs; optional for task-driven jobs,
 * whose own tasks' handlers run on the expiration queue as well. */
typedef void (*curfew_expire_fn)(curfew_context *ctx, void *state,
                                 curfew_expire_reason reason);

/* [job-queue] Tells the job of an app event (see curfew_app_event), as
 * UIApplicationDelegate's methods tell an app. Optional. Called between
 * `create` and `destroy`, never overlapping another hook of the job (for a
 * chunked job, between chunks), in the order the events happened, while
 * the job is alive: LAUNCH first, then each transition of the host's state
 * after the job launched. A task-driven job may end its tasks here (on
 * WILL_ENTER_FOREGROUND, say, as an app that needs no background time in
 * the foreground does). Return promptly: it counts against the grant like
 * any hook. */
typedef void (*curfew_app_event_fn)(curfew_context *ctx, void *state,
                                    curfew_app_event event);

/* [job-queue] Frees the job's state. Optional. Called last, once the job is
 * over (its chunks stopped, `expire` returned if it was called, its own
 * tasks ended), and never for a job that failed in `create` or was
 * terminated. `ctx` is valid during the call and not after. */
typedef void (*curfew_destroy_fn)(curfew_context *ctx, void *state);

/* One job. Owned by the plugin; must stay valid and unchanged while the
 * plugin is loaded (the host never unloads a plugin). */
typedef struct curfew_job {
    /* sizeof(curfew_job) as the plugin was built. */
    uint32_t struct_size;
    /* CURFEW_JOB_* flags; unknown bits are rejected. */
    uint32_t flags;
    /* Unique within the host: 1 to CURFEW_MAX_JOB_NAME bytes of [a-z0-9._-],
     * starting with a letter or digit. */
    const char *name;
    /* Required (a NULL summary rejects the plugin): one line, at most
     * CURFEW_MAX_SUMMARY bytes. */
    const char *summary;
    /* Hooks; see their typedefs. `chunk` NULL makes a task-driven job, which
     * then needs `create`. A chunked job needs `expire`. */
    curfew_create_fn create;
    curfew_chunk_fn chunk;
    curfew_expire_fn expire;
    curfew_destroy_fn destroy;
    /* Any pointer for the plugin's own use; the host never reads through it
     * and hands it back through `host->job_user_data(ctx)`. */
    void *user_data;
    /* The background modes a continuous job runs in, as an iOS app lists
     * UIBackgroundModes: comma-separated names, such as "audio,location".
     * The seven of iOS: audio, voip, location, newsstand-content,
     * external-accessory, bluetooth-central, bluetooth-peripheral; a mode of
     * your own is named "x-" and 1 to 62 of [a-z0-9-] ("x-sensor-feed").
     * At most CURFEW_MAX_MODES names, each once, in at most 512 bytes; only
     * a continuous job may have them. The operator allows a mode by name
     * (`--allow-mode audio`); the job runs when every mode it declares is
     * allowed, or with `--allow-continuous`, which allows every mode (and is
     * the only way to run a continuous job that declares none). NULL: none. */
    const char *background_modes;
    /* The app events hook; see curfew_app_event_fn. NULL: none. */
    curfew_app_event_fn app_event;
} curfew_job;

/* The plugin descriptor returned by `curfew_plugin_entry`. Owned by the
 * plugin; must stay valid while the plugin is loaded. The host checks
 * `abi_version` and `struct_size` before it reads anything else. */
typedef struct curfew_plugin {
    /* CURFEW_ABI_VERSION as the plugin was built. */
    uint32_t abi_version;
    /* sizeof(curfew_plugin) as the plugin was built. */
    uint32_t struct_size;
    /* Number of entries in `jobs`: 1 to CURFEW_MAX_JOBS. */
    uint32_t job_count;
    /* Must be zero. */
    uint32_t reserved;
    /* `job_count` pointers to job descriptors. */
    const curfew_job *const *jobs;
} curfew_plugin;

/* [loader] The one function a plugin exports. Returns the plugin's
 * descriptor, or NULL to decline to load (log the reason through
 * `host->log(NULL, ...)` first). `host` stays valid for the life of the
 * process. Call no other host function here. */
typedef const curfew_plugin *(*curfew_plugin_entry_fn)(const curfew_host *host);

/* The exported symbol's name. */
#define CURFEW_PLUGIN_ENTRY_SYMBOL "curfew_plugin_entry"

/* The entry every plugin defines (declared here so that a C++ plugin's
 * definition gets C linkage, and every plugin's its signature checked). */
CURFEW_EXPORT const curfew_plugin *curfew_plugin_entry(const curfew_host *host);

/* ------------------------------------------------------------------------ */
/* Optional helpers (C only: they use designated initializers)              */

/* Declares a job descriptor `var` with its name and summary; the remaining
 * arguments are designated initializers for its hooks and flags:
 *
 *     CURFEW_JOB(tick_job, "tick", "Ticks once a second.",
 *                .chunk = tick, .expire = stop);
 */
#define CURFEW_JOB(var, job_name, job_summary, ...)                          \
    static const curfew_job var = {.struct_size = sizeof(curfew_job),       \
                                   .name = (job_name),                      \
                                   .summary = (job_summary),                \
                                   __VA_ARGS__}

/* Defines the plugin: its job table, its descriptor and the exported entry,
 * which stores the host table in `host_var`, a `static const curfew_host *`
 * you declare before. List the jobs by address:
 *
 *     static const curfew_host *host;
 *     ...
 *     CURFEW_PLUGIN(host, &tick_job, &sync_job)
 */
#define CURFEW_PLUGIN(host_var, ...)                                         \
    static const curfew_job *const curfew_plugin_jobs_[] = {__VA_ARGS__};   \
    static const curfew_plugin curfew_plugin_descriptor_ = {                \
        CURFEW_ABI_VERSION, (uint32_t)sizeof(curfew_plugin),                \
        (uint32_t)(sizeof curfew_plugin_jobs_ /                             \
                   sizeof curfew_plugin_jobs_[0]),                          \
        0u, curfew_plugin_jobs_};                                           \
    const curfew_plugin *curfew_plugin_entry(const curfew_host *services_) { \
        host_var = services_;                                               \
        return &curfew_plugin_descriptor_;                                  \
    }

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CURFEW_H */
