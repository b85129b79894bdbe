/* Small C glue for the Curfew host: what Swift cannot reach cleanly through
 * the Glibc module (GNU-only dlopen flags) or wants without overhead. */
#ifndef CURFEW_SHIMS_H
#define CURFEW_SHIMS_H

#include <stdint.h>

/* dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE). NODELETE because
 * unloading a Swift-built plugin unmaps type metadata the runtime still
 * caches, and the process crashes later. */
void *curfew_shim_dlopen_plugin(const char *path);

/* The nanoseconds of CLOCK_MONOTONIC. */
uint64_t curfew_shim_monotonic_nanoseconds(void);

#endif
