/* A continuous job that declares background modes: MODES (default
 * "audio,location"). Built with -DNOT_CONTINUOUS it lacks the flag. It
 * completes after three chunks. */
#include <curfew.h>

#ifndef MODES
#define MODES "audio,location"
#endif

#ifdef NOT_CONTINUOUS
#define FLAGS 0u
#else
#define FLAGS CURFEW_JOB_CONTINUOUS
#endif

static const curfew_host *host;

static curfew_chunk_result play(curfew_context *ctx, void *state) {
    (void)state;
    static _Thread_local int calls;
    (void)host;
    (void)ctx;
    return ++calls >= 3 ? CURFEW_CHUNK_DONE : CURFEW_CHUNK_CONTINUE;
}

static void stop(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}

CURFEW_JOB(player_job, "player", "Plays in the background.", .flags = FLAGS, .chunk = play, .expire = stop,
           .background_modes = MODES);

CURFEW_PLUGIN(host, &player_job)
