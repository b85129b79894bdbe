/* A read-only HTTP server over libmicrohttpd for `curfew serve --metrics`:
 * GET and HEAD only, each answered whole from one call of the handler. */
#ifndef CURFEW_HTTP_H
#define CURFEW_HTTP_H

#include <stddef.h>

/* What the handler answers: set with curfew_http_reply_set. */
typedef struct curfew_http_reply curfew_http_reply;

/* Called on the server's thread for each GET or HEAD, with the path (no
 * query) and the request's Accept header (NULL without one). It must call
 * curfew_http_reply_set once; a reply it leaves unset is a 500. */
typedef void (*curfew_http_handler)(void *context, const char *path, const char *accept, curfew_http_reply *reply);

/* Copies `length` bytes of `body` for the answer. */
void curfew_http_reply_set(curfew_http_reply *reply, unsigned status, const char *content_type, const void *body, size_t length);

/* Loads libmicrohttpd (once): NULL when it is there, else why not. */
const char *curfew_http_load(void);

/* Serves on `listen_fd` (bound and listening; the server closes it when
 * stopped, and may close it when it fails to start) on a thread of its
 * own: at most `connections` at once and `per_address` from one address,
 * each cut off after `timeout_seconds` without progress, a request's line
 * and headers held to `memory_limit` bytes. NULL with errno when it cannot
 * start. */
void *curfew_http_start(int listen_fd, unsigned connections, unsigned per_address, unsigned timeout_seconds, size_t memory_limit,
                        curfew_http_handler handler, void *context);

/* Stops the server: once it returns, no handler call runs or starts. */
void curfew_http_stop(void *server);

#endif
