/* A fork server's view of sandbox.c, compiled with it into a program of its
 * own: what it holds for its workers must stay true as the system's files
 * change, and a worker must be alone to take a sandbox. Prints one line per
 * check, "name ok" or "name FAILED: why"; exits 0 when all held, 1 when
 * one did not, 2 when the setup failed (no user namespace). */
#define _GNU_SOURCE
#include "curfew_shims.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* sandbox.c names the job a denial came from; no job runs here. */
const char *curfew_shim_crash_job(void) { return NULL; }

static int failures;

static void check(const char *name, int held, const char *why) {
    if (held) printf("%s ok\n", name);
    else printf("%s FAILED: %s\n", name, why);
    failures += !held;
}

static void *sleeper(void *unused) {
    (void)unused;
    pause();
    return NULL;
}

static int write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    ssize_t length = (ssize_t)strlen(text);
    int held = write(fd, text, (size_t)length) == length;
    return close(fd) == 0 && held ? 0 : -1;
}

/* A file replaced as editors and package managers do: a new inode. */
static int replace_file(const char *path, const char *text) {
    char temporary[64];
    snprintf(temporary, sizeof temporary, "%s.new", path);
    return write_file(temporary, text) == 0 && rename(temporary, path) == 0 ? 0 : -1;
}

/* Forks a worker as the fork server does, which prepares and applies the
 * sandbox and reads `path`: 0 when it read it, else the errno it got. */
static int worker_reads(const char *path) {
    pid_t pid = fork();
    if (pid < 0) return errno;
    if (pid == 0) {
        curfew_sandbox_report report;
        if (curfew_sandbox_prepare(CURFEW_SANDBOX_NETWORK_OFF, 0, &report) != 0) _exit(100);
        curfew_sandbox_spec spec = {.paths = NULL, .path_count = 0, .network = CURFEW_SANDBOX_NETWORK_OFF, .allow_exec = 0};
        if (curfew_sandbox_apply(&spec, &report) != 0 || !(report.applied & CURFEW_SANDBOX_FILES)) _exit(101);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        _exit(fd >= 0 ? 0 : errno);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

int main(int argc, char **argv) {
    int refresh = !(argc > 1 && strcmp(argv[1], "--no-refresh") == 0);
    setvbuf(stdout, NULL, _IONBF, 0);

    /* An /etc of this program's own, in a mount namespace of its own. */
    uid_t user = getuid();
    gid_t group = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return 2;
    char map[64];
    snprintf(map, sizeof map, "0 %u 1", (unsigned)user);
    write_file("/proc/self/setgroups", "deny");
    if (write_file("/proc/self/uid_map", map) != 0) return 2;
    snprintf(map, sizeof map, "0 %u 1", (unsigned)group);
    if (write_file("/proc/self/gid_map", map) != 0) return 2;
    if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return 2;
    if (mount("tmpfs", "/etc", "tmpfs", 0, "mode=0755") != 0) return 2;
    if (write_file("/etc/hosts", "127.0.0.1 localhost\n") != 0) return 2;
    /* Files behind links into a folder nobody watches (as NixOS has them):
     * one whose target is there, one whose target comes later. */
    if (mkdir("/etc/static", 0755) != 0 || write_file("/etc/static/host.conf", "multi on\n") != 0) return 2;
    if (symlink("static/host.conf", "/etc/host.conf") != 0 || symlink("static/nsswitch.conf", "/etc/nsswitch.conf") != 0) return 2;

    if (curfew_sandbox_open_common() != 0) return 2;
    int low = 0, high = 0;
    check("range", curfew_sandbox_common_range(&low, &high) && low >= 256 && high > low, "no range kept");
    check("held", worker_reads("/etc/hosts") == 0, "a worker could not read /etc/hosts");
    check("outside", worker_reads("/etc") == EACCES, "a worker read /etc itself");

    /* Replaced: the descriptor held names the old inode. */
    if (replace_file("/etc/hosts", "127.0.0.1 localhost here\n") != 0) return 2;
    if (refresh) curfew_sandbox_refresh_common();
    check("replaced", worker_reads("/etc/hosts") == 0, "a worker forked after /etc/hosts was replaced could not read it");

    /* Missing when opened, made since. */
    if (write_file("/etc/gai.conf", "\n") != 0) return 2;
    if (refresh) curfew_sandbox_refresh_common();
    check("created", worker_reads("/etc/gai.conf") == 0, "a worker forked after /etc/gai.conf was made could not read it");

    /* Removed, then made again. */
    if (unlink("/etc/hosts") != 0 || write_file("/etc/hosts", "::1 localhost\n") != 0) return 2;
    if (refresh) curfew_sandbox_refresh_common();
    check("recreated", worker_reads("/etc/hosts") == 0, "a worker forked after /etc/hosts was made again could not read it");

    /* Changed behind a link: no event names the file. */
    if (replace_file("/etc/static/host.conf", "multi off\n") != 0 || write_file("/etc/static/nsswitch.conf", "hosts: files\n") != 0) return 2;
    if (refresh) curfew_sandbox_refresh_common();
    check("linked", worker_reads("/etc/host.conf") == 0, "a worker could not read /etc/host.conf after its link's target was replaced");
    check("dangling", worker_reads("/etc/nsswitch.conf") == 0, "a worker could not read /etc/nsswitch.conf after its link's target was made");

    /* Landlock binds only the thread that asks: with another, nothing is changed. */
    pthread_t thread;
    if (pthread_create(&thread, NULL, sleeper, NULL) != 0) return 2;
    curfew_sandbox_report report;
    int error = curfew_sandbox_prepare(CURFEW_SANDBOX_NETWORK_OFF, 0, &report);
    check("threads", error == EBUSY && report.step && strstr(report.step, "more than one thread"), report.step ? report.step : "prepared");
    return failures ? 1 : 0;
}
