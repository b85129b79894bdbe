/* Plugins that fail while they load, chosen with -DVARIANT=N:
 * 1 the entry function segfaults, 2 a library constructor aborts,
 * 3 the entry function never returns. */
#include <curfew.h>
#include <stdlib.h>

#if VARIANT == 2
__attribute__((constructor)) static void explode_on_load(void) {
    abort();
}
#endif

CURFEW_EXPORT const curfew_plugin *curfew_plugin_entry(const curfew_host *host) {
    (void)host;
#if VARIANT == 1
    volatile int *nowhere = NULL;
    *nowhere = 1;
#elif VARIANT == 3
    for (volatile unsigned long spin = 0;; spin++) {
    }
#endif
    return NULL;
}
