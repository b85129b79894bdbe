/* What the fork server (shims.c) and the scanner (scanner.c) share, beyond
 * the module's header. */
#ifndef CURFEW_SHIMS_PRIVATE_H
#define CURFEW_SHIMS_PRIVATE_H

/* Catches SIGCHLD with a handler that writes a byte to a pipe, made on the
 * first call (non-blocking, close-on-exec), and returns its read end: poll
 * it, drain it, then reap. -1 when the pipe or the handler cannot be made. */
int curfew_shim_child_pipe(void);

#endif
