#include "curfew_http.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <microhttpd.h>

/* libmicrohttpd, loaded at the first start. */
static struct {
    __typeof__(&MHD_start_daemon) start_daemon;
    __typeof__(&MHD_stop_daemon) stop_daemon;
    __typeof__(&MHD_create_response_from_buffer) create_response_from_buffer;
    __typeof__(&MHD_add_response_header) add_response_header;
    __typeof__(&MHD_queue_response) queue_response;
    __typeof__(&MHD_destroy_response) destroy_response;
    __typeof__(&MHD_lookup_connection_value) lookup_connection_value;
} mhd;
static char load_error[256];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

#define RESOLVE(name)                                                                    \
    if (!(mhd.name = (__typeof__(mhd.name))dlsym(handle, "MHD_" #name))) {               \
        snprintf(load_error, sizeof load_error, "libmicrohttpd has no MHD_%s", #name); \
        return;                                                                          \
    }

static void load(void) {
    void *handle = dlopen("libmicrohttpd.so.12", RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        snprintf(load_error, sizeof load_error, "cannot load libmicrohttpd.so.12 (Debian: libmicrohttpd12): %s", why ? why : "unknown");
        return;
    }
    RESOLVE(start_daemon)
    RESOLVE(stop_daemon)
    RESOLVE(create_response_from_buffer)
    RESOLVE(add_response_header)
    RESOLVE(queue_response)
    RESOLVE(destroy_response)
    RESOLVE(lookup_connection_value)
}

const char *curfew_http_load(void) {
    pthread_once(&load_once, load);
    return load_error[0] ? load_error : NULL;
}

struct curfew_http_reply {
    unsigned status;
    char content_type[64];
    void *body;
    size_t length;
    int set;
};

typedef struct {
    struct MHD_Daemon *daemon;
    curfew_http_handler handler;
    void *context;
} server;

void curfew_http_reply_set(curfew_http_reply *reply, unsigned status, const char *content_type, const void *body, size_t length) {
    if (reply->set) return;
    void *copy = malloc(length ? length : 1);
    if (!copy) return;
    if (length) memcpy(copy, body, length);
    reply->status = status;
    strncpy(reply->content_type, content_type ? content_type : "text/plain; charset=utf-8", sizeof reply->content_type - 1);
    reply->content_type[sizeof reply->content_type - 1] = '\0';
    reply->body = copy;
    reply->length = length;
    reply->set = 1;
}

static enum MHD_Result queue(struct MHD_Connection *connection, unsigned status, const char *type, void *body, size_t length,
                             const char *allow) {
    struct MHD_Response *response = mhd.create_response_from_buffer(length, body, MHD_RESPMEM_MUST_FREE);
    if (!response) {
        free(body);
        return MHD_NO;
    }
    mhd.add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    mhd.add_response_header(response, "X-Content-Type-Options", "nosniff");
    /* /metrics answers in the format the request's Accept prefers. */
    mhd.add_response_header(response, "Vary", "Accept");
    mhd.add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    /* The page is self-contained: nothing to load, nothing to run, no framing. */
    mhd.add_response_header(response, "Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'");
    if (allow) mhd.add_response_header(response, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result result = mhd.queue_response(connection, status, response);
    mhd.destroy_response(response);
    return result;
}

static enum MHD_Result plain(struct MHD_Connection *connection, unsigned status, const char *text, const char *allow) {
    size_t length = strlen(text);
    char *body = malloc(length + 1);
    if (!body) return MHD_NO;
    memcpy(body, text, length + 1);
    return queue(connection, status, "text/plain; charset=utf-8", body, length, allow);
}

/* Answers at the first call for a request, before any body: nothing here
 * takes one, so a body is never read into memory. */
static enum MHD_Result answer(void *cls, struct MHD_Connection *connection, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_data_size, void **request) {
    (void)version; (void)upload_data; (void)upload_data_size;
    server *self = cls;
    if (*request) return MHD_NO; /* not called again once answered; if it were, the connection closes */
    *request = self;
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return plain(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "GET or HEAD only\n", "GET, HEAD");
    const char *length = mhd.lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if ((length && strcmp(length, "0") != 0) || mhd.lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING))
        return plain(connection, MHD_HTTP_CONTENT_TOO_LARGE, "a request here has no body\n", NULL);
    curfew_http_reply reply = {0};
    self->handler(self->context, url, mhd.lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT), &reply);
    if (!reply.set) return plain(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, "no answer\n", NULL);
    return queue(connection, reply.status, reply.content_type, reply.body, reply.length, NULL);
}

void *curfew_http_start(int listen_fd, unsigned connections, unsigned per_address, unsigned timeout_seconds, size_t memory_limit,
                        curfew_http_handler handler, void *context) {
    if (curfew_http_load()) {
        errno = ENOENT;
        return NULL;
    }
    server *self = calloc(1, sizeof *self);
    if (!self) return NULL;
    self->handler = handler;
    self->context = context;
    self->daemon = mhd.start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC, 0, NULL, NULL, answer, self,
                                    MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listen_fd,
                                    MHD_OPTION_CONNECTION_LIMIT, connections,
                                    MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_address,
                                    MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds,
                                    MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory_limit,
                                    MHD_OPTION_END);
    if (!self->daemon) {
        int error = errno;
        free(self);
        errno = error ? error : EINVAL;
        return NULL;
    }
    return self;
}

void curfew_http_stop(void *opaque) {
    server *self = opaque;
    if (!self) return;
    mhd.stop_daemon(self->daemon);
    free(self);
}
