/* Not a plugin: helpers a test loads to change the calling thread's CPU
 * affinity, which Swift's Glibc module does not expose. */
#define _GNU_SOURCE
#include <sched.h>

static cpu_set_t saved;

/* Binds the calling thread to the first CPU it may run on: 0, or -1. */
__attribute__((visibility("default"))) int fixture_bind_to_first_cpu(void) {
    if (sched_getaffinity(0, sizeof saved, &saved) != 0) return -1;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (CPU_ISSET(cpu, &saved)) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            return sched_setaffinity(0, sizeof one, &one);
        }
    }
    return -1;
}

/* Gives the calling thread back the CPUs it had before the bind: 0, or -1. */
__attribute__((visibility("default"))) int fixture_unbind(void) {
    return sched_setaffinity(0, sizeof saved, &saved);
}
