/* What the fork server (shims.c) and the scanner (scanner.c) share, beyond
 * the module's header. */
#ifndef CURFEW_SHIMS_PRIVATE_H
#define CURFEW_SHIMS_PRIVATE_H

/* Catches SIGCHLD with a handler that writes a byte to a pipe, made on the
 * first call (non-blocking, close-on-exec), and returns its read end: poll
 * it, drain it, then reap. -1 when the pipe or the handler cannot be made. */
int curfew_shim_child_pipe(void);

/* In a child a fork server forked under its own call filter (which lets
 * clone3 through, to fork into cgroups): refuses clone3 again, as every
 * worker's filter does (its flags are behind a pointer no filter can read).
 * Call it first thing. 0, or an errno. */
int curfew_sandbox_seal_forked_child(void);

#endif
