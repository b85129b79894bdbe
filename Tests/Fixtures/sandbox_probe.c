/* A plugin nobody here trusts: "probe" tries, from its chunk, each thing a
 * sandbox must refuse (or the one its `probe` parameter names), logs
 * "probe NAME: ok" or "probe NAME: refused: WHY" for each, and completes
 * either way: a refusal is an error it sees, not a crash.
 *
 * Parameters: `canary` (a file to read), `outside` (a folder to write in),
 * `allowed` (a folder the policy may grant), `port` (a TCP and a UDP port
 * on 127.0.0.1 that a test listens on), `unix` (the path of a Unix socket a
 * test listens on), `away` and `away-port` (an address of this machine's
 * other than loopback, and a TCP port a test listens on there), `pid` (a
 * process to signal and
 * whose memory to open; else the parent: the host or its fork server),
 * `trace` (a process to trace; else that one too).
 *
 * Its constructor, which runs wherever the file is loaded (its scanner
 * first), makes a file named for its pid in the folder $SANDBOX_PROBE_LOADS
 * names, if set: what a confined scanner must refuse. A manifest may name
 * it as its library (`sandbox_probe_nothing`). */
#define _GNU_SOURCE
#include <curfew.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ipc.h>
#include <sys/ptrace.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static const curfew_host *host;

#include "fixture_util.h"

static void say(curfew_context *ctx, const char *probe, int error) {
    char line[512];
    if (error == 0) {
        snprintf(line, sizeof line, "probe %s: ok", probe);
    } else {
        snprintf(line, sizeof line, "probe %s: refused: %s", probe, strerror(error));
    }
    host->log(ctx, CURFEW_LOG_INFO, line);
}

static const char *param(curfew_context *ctx, const char *key) {
    const char *value = host->param(ctx, key);
    return value ? value : "";
}

static struct sockaddr_in loopback(curfew_context *ctx) {
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(param(ctx, "port")))};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return address;
}

static int probe(curfew_context *ctx, const char *name) {
    if (strcmp(name, "read-canary") == 0) {
        int fd = open(param(ctx, "canary"), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return errno;
        char byte;
        int error = read(fd, &byte, 1) == 1 ? 0 : errno;
        close(fd);
        return error;
    }
    if (strcmp(name, "write-outside") == 0) return write_file(param(ctx, "outside"), "escaped");
    if (strcmp(name, "write-allowed") == 0) return write_file(param(ctx, "allowed"), "granted");
    if (strcmp(name, "write-scratch") == 0) {
        const char *scratch = host->scratch_dir(ctx);
        if (scratch == NULL) return ENOENT;
        const char *named = getenv("CURFEW_SCRATCH");
        if (named == NULL || strcmp(named, scratch) != 0) return EINVAL;
        char line[4200];
        snprintf(line, sizeof line, "scratch at %s", scratch);
        host->log(ctx, CURFEW_LOG_INFO, line);
        return write_file(scratch, "mine");
    }
    if (strcmp(name, "connect-tcp") == 0) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return errno;
        struct sockaddr_in address = loopback(ctx);
        int error = connect(fd, (struct sockaddr *)&address, sizeof address) == 0 ? 0 : errno;
        close(fd);
        return error;
    }
    /* Not connected within a second is refused too: a socket held to
     * loopback sends its SYN where nothing answers. */
    if (strcmp(name, "connect-away") == 0) {
        struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(param(ctx, "away-port")))};
        if (inet_pton(AF_INET, param(ctx, "away"), &address.sin_addr) != 1) return EDESTADDRREQ;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) return errno;
        int error = connect(fd, (struct sockaddr *)&address, sizeof address) == 0 ? 0 : errno;
        if (error == EINPROGRESS) {
            struct pollfd wait = {.fd = fd, .events = POLLOUT};
            socklen_t length = sizeof error;
            if (poll(&wait, 1, 1000) != 1) error = ETIMEDOUT;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
        }
        close(fd);
        return error;
    }
    if (strcmp(name, "unix-socket") == 0) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return errno;
        struct sockaddr_un address = {.sun_family = AF_UNIX};
        snprintf(address.sun_path, sizeof address.sun_path, "%s", param(ctx, "unix"));
        int error = connect(fd, (struct sockaddr *)&address, sizeof address) == 0 ? 0 : errno;
        close(fd);
        return error;
    }
    if (strcmp(name, "chmod-canary") == 0) return chmod(param(ctx, "canary"), 0644) == 0 ? 0 : errno;
    if (strcmp(name, "spawn") == 0) {
        extern char **environ;
        char *arguments[] = {"/bin/sh", "-c", "exit 0", NULL};
        pid_t child;
        int error = posix_spawn(&child, "/bin/sh", NULL, NULL, arguments, environ);
        if (error != 0) return error;
        int status = 0;
        if (waitpid(child, &status, 0) != child) return errno;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : ECHILD;
    }
    if (strcmp(name, "send-udp") == 0) {
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return errno;
        struct sockaddr_in address = loopback(ctx);
        int error = sendto(fd, "x", 1, 0, (struct sockaddr *)&address, sizeof address) == 1 ? 0 : errno;
        close(fd);
        return error;
    }
    pid_t target = host->param(ctx, "pid") ? (pid_t)atoi(param(ctx, "pid")) : getppid();
    if (strcmp(name, "ptrace") == 0) {
        pid_t traced = host->param(ctx, "trace") ? (pid_t)atoi(param(ctx, "trace")) : target;
        if (ptrace(PTRACE_ATTACH, traced, NULL, NULL) != 0) return errno;
        waitpid(traced, NULL, __WALL);
        ptrace(PTRACE_DETACH, traced, NULL, NULL);
        return 0;
    }
    if (strcmp(name, "signal") == 0) return kill(target, SIGCONT) == 0 ? 0 : errno;
    if (strcmp(name, "proc-mem") == 0) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/mem", (int)target);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return errno;
        close(fd);
        return 0;
    }
    if (strcmp(name, "exec") == 0) {
        pid_t child = fork();
        if (child < 0) return errno;
        if (child == 0) {
            char *arguments[] = {"/bin/sh", "-c", "exit 0", NULL};
            execv("/bin/sh", arguments);
            _exit(errno > 0 && errno < 126 ? errno : 126);
        }
        int status = 0;
        if (waitpid(child, &status, 0) != child) return errno;
        return WIFEXITED(status) ? WEXITSTATUS(status) : EINTR;
    }
    /* Any capability the process holds, or (as root) that an exec could
     * give it back: "ok" when one is left. */
    if (strcmp(name, "capabilities") == 0) {
        FILE *status = fopen("/proc/self/status", "re");
        if (status == NULL) return errno;
        char line[256];
        int held = 0;
        while (fgets(line, sizeof line, status)) {
            int own = strncmp(line, "CapEff:", 7) == 0 || strncmp(line, "CapPrm:", 7) == 0 || strncmp(line, "CapAmb:", 7) == 0;
            int bounding = strncmp(line, "CapBnd:", 7) == 0 && getuid() == 0;
            if ((own || bounding) && strtoull(line + 7, NULL, 16) != 0) held = 1;
        }
        fclose(status);
        return held ? 0 : EPERM;
    }
    /* A segment any process of the user could attach by its id. */
    if (strcmp(name, "sysv-ipc") == 0) {
        int id = shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
        if (id < 0) return errno;
        shmctl(id, IPC_RMID, NULL);
        return 0;
    }
    /* A queue any process of the user could open by its name. */
    if (strcmp(name, "mqueue") == 0) {
        char queue[64];
        snprintf(queue, sizeof queue, "/curfew-probe-%d", (int)getpid());
        mqd_t opened = mq_open(queue, O_CREAT | O_RDWR | O_CLOEXEC, 0600, NULL);
        if (opened == (mqd_t)-1) return errno;
        mq_close(opened);
        mq_unlink(queue);
        return 0;
    }
    /* The namespaces a worker makes itself where Landlock is missing, which
     * its fork server's filter lets through until the worker seals them. */
    if (strcmp(name, "unshare-namespaces") == 0) {
        pid_t child = fork();
        if (child < 0) return errno;
        if (child == 0) _exit(unshare(CLONE_NEWUSER | CLONE_NEWIPC) == 0 ? 0 : errno);
        int status = 0;
        if (waitpid(child, &status, 0) != child) return errno;
        return WIFEXITED(status) ? WEXITSTATUS(status) : EINTR;
    }
    /* In a child of its own: a process with threads cannot enter a new
     * user namespace, and a mount must not reach the test's namespace. */
    if (strcmp(name, "unshare") == 0 || strcmp(name, "mount") == 0) {
        pid_t child = fork();
        if (child < 0) return errno;
        if (child == 0) {
            if (strcmp(name, "unshare") == 0) _exit(unshare(CLONE_NEWUSER) == 0 ? 0 : errno);
            if (unshare(CLONE_NEWNS) != 0) _exit(errno);
            _exit(mount("none", param(ctx, "outside"), "tmpfs", 0, NULL) == 0 ? 0 : errno);
        }
        int status = 0;
        if (waitpid(child, &status, 0) != child) return errno;
        return WIFEXITED(status) ? WEXITSTATUS(status) : EINTR;
    }
    return ENOSYS;
}

static const char *const probes[] = {
    "read-canary", "write-outside", "write-allowed", "write-scratch", "connect-tcp", "connect-away", "send-udp", "unix-socket",
    "chmod-canary", "ptrace", "signal", "proc-mem", "exec", "spawn", "unshare", "unshare-namespaces", "mount", "sysv-ipc",
    "mqueue", "capabilities",
};

static curfew_chunk_result probe_chunk(curfew_context *ctx, void *state) {
    (void)state;
    const char *only = host->param(ctx, "probe");
    for (size_t index = 0; index < sizeof probes / sizeof probes[0]; index++) {
        if (only == NULL || strcmp(only, probes[index]) == 0) say(ctx, probes[index], probe(ctx, probes[index]));
    }
    return CURFEW_CHUNK_DONE;
}

static void probe_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}

/* A function of its own for a manifest to name (a library's job that ends at once). */
__attribute__((visibility("default"))) int sandbox_probe_nothing(void) { return -1; }

__attribute__((constructor)) static void loaded(void) {
    const char *folder = getenv("SANDBOX_PROBE_LOADS");
    if (folder == NULL) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/loaded-%d", folder, (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
}

CURFEW_JOB(probe_job, "probe", "Tries what a sandbox must refuse; logs whether each was refused.", .chunk = probe_chunk,
           .expire = probe_expire);

CURFEW_PLUGIN(host, &probe_job)
