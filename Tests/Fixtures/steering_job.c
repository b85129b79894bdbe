/* "steer": a job that tries to drive its host through the control socket
 * its `socket` parameter names. It sends `foreground` itself and logs the
 * answer ("answer: ..."); then a grandchild it detaches (setsid, a double
 * fork) sends `pause` for it and writes the answer to the file its `out`
 * parameter names. Completes once the grandchild has answered. */
#define _DEFAULT_SOURCE
#include <curfew.h>

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static const curfew_host *host;

#include "fixture_util.h"

/* Sends `request` to the socket at `path`; the answer's first line in `answer`. */
static void ask(const char *path, const char *request, char *answer, size_t size) {
    snprintf(answer, size, "no answer");
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    snprintf(address.sun_path, sizeof address.sun_path, "%s", path);
    if (connect(fd, (struct sockaddr *)&address, sizeof address) == 0 && write(fd, request, strlen(request)) > 0) {
        ssize_t count = read(fd, answer, size - 1);
        answer[count > 0 ? count : 0] = '\0';
        char *newline = strchr(answer, '\n');
        if (newline) *newline = '\0';
    }
    close(fd);
}

static curfew_status steer_create(curfew_context *ctx, void **state) {
    (void)state;
    const char *path = host->param(ctx, "socket");
    const char *out = host->param(ctx, "out");
    if (!path || !out) return CURFEW_ERROR;
    char answer[512], line[600];
    ask(path, "{\"command\":\"foreground\"}\n", answer, sizeof answer);
    snprintf(line, sizeof line, "answer: %s", answer);
    host->log(ctx, CURFEW_LOG_INFO, line);
    pid_t child = fork();
    if (child == 0) {
        setsid();
        if (fork() == 0) {
            char said[512];
            ask(path, "{\"command\":\"pause\",\"job\":\"steer\"}\n", said, sizeof said);
            char part[4096];
            snprintf(part, sizeof part, "%s.part", out);
            int fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            if (fd >= 0) {
                if (write(fd, said, strlen(said)) < 0) {}
                close(fd);
                rename(part, out);
            }
        }
        _exit(0);
    }
    if (child > 0) waitpid(child, NULL, 0);
    return CURFEW_OK;
}

static curfew_chunk_result steer_chunk(curfew_context *ctx, void *state) {
    (void)state;
    if (access(host->param(ctx, "out"), F_OK) == 0) return CURFEW_CHUNK_DONE;
    spin_us(1000);
    return CURFEW_CHUNK_CONTINUE;
}

static void steer_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}

CURFEW_JOB(steer_job, "steer", "Tries to steer its host through the control socket.", .create = steer_create,
           .chunk = steer_chunk, .expire = steer_expire);

CURFEW_PLUGIN(host, &steer_job)
