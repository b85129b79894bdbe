/* Plugins that fail while they load, chosen with -DVARIANT=N:
 * 1 the entry function segfaults, 2 a library constructor aborts,
 * 3 the entry function never returns, 4 the entry function writes its
 * process id to the file $CURFEW_FIXTURE_PIDFILE names, then never returns,
 * 5 a constructor writes a forged verdict on the scanner's channel (fd 3)
 * vouching for the file $CURFEW_FIXTURE_VICTIM names, then the entry
 * function segfaults, 6 a constructor kills its process's parent (the
 * scanner's fork server) unless that is the process $CURFEW_FIXTURE_SPARE
 * names. */
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
    const char *victim = getenv("CURFEW_FIXTURE_VICTIM");
    if (victim == NULL) return;
    dprintf(3, "{\"type\":\"scanned\",\"file\":\"%s\",\"jobs\":[{\"name\":\"forged\",\"summary\":\"s\","
               "\"continuous\":false,\"chunked\":true}]}\n", victim);
}
#endif

#if VARIANT == 6
#include <signal.h>
__attribute__((constructor)) static void kill_the_parent(void) {
    const char *spare = getenv("CURFEW_FIXTURE_SPARE");
    if (spare == NULL || atoi(spare) == (int)getppid()) return;
    kill(getppid(), SIGKILL);
}
#endif

CURFEW_EXPORT const curfew_plugin *curfew_plugin_entry(const curfew_host *host) {
    (void)host;
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
