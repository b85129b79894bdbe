#define _GNU_SOURCE
#include "curfew_shims.h"
#include "shims_private.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <dirent.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <linux/netlink.h>
#include <poll.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <limits.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <sys/resource.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

void *curfew_shim_dlopen_plugin(const char *path) {
    return dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
}

int curfew_shim_symbol_kind(void *handle, void *address) {
    Dl_info info;
    const ElfW(Sym) *symbol = NULL;
    struct link_map *named = NULL, *holder = NULL;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &named) != 0 || named == NULL) return 3;
    /* The object the address lies in must be the one the handle names. */
    if (dladdr1(address, &info, (void **)&holder, RTLD_DL_LINKMAP) == 0 || holder == NULL) return 3;
    if (holder != named) return 2;
    if (dladdr1(address, &info, (void **)&symbol, RTLD_DL_SYMENT) == 0 || symbol == NULL) return 3;
    int type = ELF64_ST_TYPE(symbol->st_info);
    return type == STT_FUNC || type == STT_GNU_IFUNC ? 0 : 1;
}

uint64_t curfew_shim_monotonic_nanoseconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int signal_pipe[2] = {-1, -1};

static void write_signal_number(int number) {
    int saved = errno;
    unsigned char byte = (unsigned char)number;
    ssize_t ignored = write(signal_pipe[1], &byte, 1); /* full pipe: already woken */
    (void)ignored;
    errno = saved;
}

/* Installs `handler` for `number`, restarting interrupted calls; 0 or -1. */
static int install_handler(int number, void (*handler)(int), int flags) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = handler;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | flags;
    return sigaction(number, &action, NULL);
}

int curfew_shim_signal_pipe(const int *signals, int count) {
    if (signal_pipe[0] < 0 && pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
    for (int i = 0; i < count; i++) {
        if (install_handler(signals[i], write_signal_number, 0) != 0) return -1;
    }
    return signal_pipe[0];
}

uint64_t curfew_shim_heap_bytes_in_use(void) {
    return (uint64_t)mallinfo2().uordblks;
}

int curfew_shim_spawn_close_from(void *actions, int low) {
    return posix_spawn_file_actions_addclosefrom_np((posix_spawn_file_actions_t *)actions, low);
}

int curfew_shim_spawn_worker(const char *path, char *const argv[], char *const envp[],
                             int channel, int out, int err, int *pid) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int status = posix_spawn_file_actions_init(&actions);
    if (status != 0) return status;
    status = posix_spawnattr_init(&attributes);
    if (status != 0) {
        posix_spawn_file_actions_destroy(&actions);
        return status;
    }
    /* dup2 clears close-on-exec on the new descriptor. A worker starts with
     * nothing of the host's but these: stdin reads /dev/null, and every other
     * descriptor the host had (inherited ones, without close-on-exec) is closed. */
    if ((status = posix_spawn_file_actions_adddup2(&actions, channel, 3)) == 0 &&
        (status = posix_spawn_file_actions_adddup2(&actions, out, 1)) == 0 &&
        (status = posix_spawn_file_actions_adddup2(&actions, err, 2)) == 0 &&
        (status = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)) == 0 &&
        (status = posix_spawn_file_actions_addclosefrom_np(&actions, 4)) == 0) {
        sigset_t none, all;
        sigemptyset(&none);
        sigfillset(&all);
        posix_spawnattr_setsigmask(&attributes, &none);
        posix_spawnattr_setsigdefault(&attributes, &all);
        posix_spawnattr_setpgroup(&attributes, 0);
        posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        pid_t child;
        status = posix_spawn(&child, path, &actions, &attributes, argv, envp);
        if (status == 0) *pid = child;
    }
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return status;
}

static int set_limit(int resource, uint64_t soft, uint64_t hard) {
    struct rlimit limit = {(rlim_t)soft, (rlim_t)hard};
    return setrlimit(resource, &limit) == 0 ? 0 : errno;
}

int curfew_shim_limit_worker(uint64_t memory_bytes, uint64_t cpu_seconds, uint64_t open_files) {
    int status;
    if (memory_bytes && (status = set_limit(RLIMIT_AS, memory_bytes, memory_bytes)) != 0) return status;
    /* SIGXCPU at the soft limit, SIGKILL a second later at the hard one. */
    if (cpu_seconds && (status = set_limit(RLIMIT_CPU, cpu_seconds, cpu_seconds + 1)) != 0) return status;
    if (open_files && (status = set_limit(RLIMIT_NOFILE, open_files, open_files)) != 0) return status;
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 ? 0 : errno;
}

int curfew_shim_pipe_cloexec(int fds[2]) {
    return pipe2(fds, O_CLOEXEC);
}

int curfew_shim_pidfd_open(int pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

int curfew_shim_xattr_is_set(const char *path, const char *name) {
    char value[8];
    return getxattr(path, name, value, sizeof value) > 0 && value[0] == '1';
}

int curfew_shim_pidfd_send_signal(int pidfd, int signal) {
    return (int)syscall(SYS_pidfd_send_signal, pidfd, signal, NULL, 0);
}

int curfew_shim_has_exited(int pid) {
    siginfo_t info;
    memset(&info, 0, sizeof info);
    if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return -1;
    return info.si_pid == pid ? 1 : 0;
}

int curfew_shim_pidfd_is_child(int pidfd) {
    siginfo_t info;
    memset(&info, 0, sizeof info);
    return waitid(P_PIDFD, (id_t)pidfd, &info, WEXITED | WNOHANG | WNOWAIT) == 0 ? 1 : 0;
}

int curfew_shim_wait_exited(int pid) {
    siginfo_t info;
    int status;
    do {
        status = waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT);
    } while (status != 0 && errno == EINTR);
    return status;
}

static int child_pipe[2] = {-1, -1};

static void on_child(int number);

int curfew_shim_child_pipe(void) {
    if (child_pipe[0] < 0 && pipe2(child_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
    if (install_handler(SIGCHLD, on_child, SA_NOCLDSTOP) != 0) return -1;
    return child_pipe[0];
}

static void on_child(int number) {
    (void)number;
    int saved = errno;
    char byte = 1;
    ssize_t ignored = write(child_pipe[1], &byte, 1);
    (void)ignored;
    errno = saved;
}

static int thread_count(void) {
    DIR *tasks = opendir("/proc/self/task");
    if (tasks == NULL) return -1;
    int count = 0;
    struct dirent *entry;
    while ((entry = readdir(tasks)) != NULL)
        if (entry->d_name[0] != '.') count++;
    closedir(tasks);
    return count;
}

static void send_text(int sock, const char *text) {
    ssize_t ignored = send(sock, text, strlen(text), MSG_NOSIGNAL);
    (void)ignored;
}

/* One sendmsg of `length` bytes at `text` with `count` (at most 4)
 * descriptors attached: what it sent, or -1 with errno set. */
static ssize_t send_with_rights(int sock, const void *text, size_t length, const int *fds, int count) {
    struct iovec io = {(void *)text, length};
    union {
        char buffer[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } control;
    if (count < 1 || count > 4) {
        errno = EINVAL;
        return -1;
    }
    memset(&control, 0, sizeof control);
    struct msghdr message = {0};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    message.msg_control = control.buffer;
    message.msg_controllen = CMSG_SPACE((size_t)count * sizeof(int));
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN((size_t)count * sizeof(int));
    memcpy(CMSG_DATA(header), fds, (size_t)count * sizeof(int));
    ssize_t sent;
    do {
        sent = sendmsg(sock, &message, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    return sent;
}

int curfew_shim_send_with_fds(int sock, const char *text, const int *fds, int count) {
    return send_with_rights(sock, text, strlen(text), fds, count) < 0 ? errno : 0;
}

int curfew_shim_sealed_memory_file(const void *bytes, unsigned long count) {
    int fd = memfd_create("curfew-checkpoint", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return -1;
    const char *at = bytes;
    unsigned long left = count;
    while (left > 0) {
        ssize_t written = write(fd, at, left);
        if (written < 0 && errno == EINTR) continue;
        if (written <= 0) {
            int saved = errno;
            close(fd);
            errno = written < 0 ? saved : EIO;
            return -1;
        }
        at += written;
        left -= (unsigned long)written;
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

long curfew_shim_read_sealed_memory_file(int fd, void *buffer, unsigned long capacity) {
    int seals = fcntl(fd, F_GET_SEALS);
    int needed = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;
    if (seals < 0 || (seals & needed) != needed) {
        errno = EPERM;
        return -1;
    }
    struct stat info;
    if (fstat(fd, &info) != 0) return -1;
    if (!S_ISREG(info.st_mode) || info.st_size < 0) {
        errno = EPERM;
        return -1;
    }
    if ((unsigned long long)info.st_size > capacity) {
        errno = EFBIG;
        return -1;
    }
    unsigned long size = (unsigned long)info.st_size, done = 0;
    while (done < size) {
        ssize_t got = pread(fd, (char *)buffer + done, size - done, (off_t)done);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            if (got == 0) errno = EIO;
            return -1;
        }
        done += (unsigned long)got;
    }
    return (long)size;
}

int curfew_shim_send_with_descriptor(int sock, const void *text, unsigned long length, int fd) {
    ssize_t sent = send_with_rights(sock, text, length, &fd, 1);
    if (sent < 0) return errno;
    /* The rest, if the socket took only part: the descriptor went with the first byte. */
    const char *at = (const char *)text + sent;
    unsigned long left = length - (unsigned long)sent;
    while (left > 0) {
        ssize_t more = send(sock, at, left, MSG_NOSIGNAL);
        if (more < 0 && errno == EINTR) continue;
        if (more < 0) return errno;
        at += more;
        left -= (unsigned long)more;
    }
    return 0;
}

long curfew_shim_receive_with_descriptors(int sock, void *buffer, unsigned long size, int *fds, int capacity, int *received,
                                           int *truncated) {
    *received = 0;
    *truncated = 0;
    if (capacity < 1 || capacity > 253) {
        errno = EINVAL;
        return -1;
    }
    struct iovec io = {buffer, size};
    union {
        char buffer[CMSG_SPACE(253 * sizeof(int))];
        struct cmsghdr align;
    } control;
    struct msghdr message = {0};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    message.msg_control = control.buffer;
    message.msg_controllen = CMSG_SPACE((size_t)capacity * sizeof(int));
    ssize_t got = recvmsg(sock, &message, MSG_CMSG_CLOEXEC);
    if (got < 0) return -1;
    if (message.msg_flags & MSG_CTRUNC) *truncated = 1;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
        int count = (int)((header->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        int *data = (int *)CMSG_DATA(header);
        for (int i = 0; i < count; i++) {
            if (*received < capacity) fds[(*received)++] = data[i];
            else {
                close(data[i]);
                *truncated = 1;
            }
        }
    }
    return (long)got;
}

/* The server's children: pid and the sequence number of the fork that made it. */
#define MAX_CHILDREN 4096
static struct { pid_t pid; unsigned long sequence; } children[MAX_CHILDREN];
static int child_count;

/* Removes `pid` from the table; 0 when it was not there. */
static int forget_child(pid_t pid) {
    for (int i = 0; i < child_count; i++)
        if (children[i].pid == pid) {
            children[i] = children[--child_count];
            return 1;
        }
    return 0;
}

/* Kills the processes the workers left behind (they come to this server, a
 * subreaper), keeping the workers themselves. */
static void kill_orphans(void) {
    int keep[MAX_CHILDREN];
    for (int i = 0; i < child_count; i++) keep[i] = children[i].pid;
    curfew_shim_kill_children(keep, child_count, 64);
}

/* Reaps every child that has exited: its group killed first, while its pid is
 * still its own, then "exit PID STATUS" to the host. */
static void reap_exited(int control) {
    for (;;) {
        siginfo_t info;
        memset(&info, 0, sizeof info);
        if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
        pid_t pid = info.si_pid;
        kill(-pid, SIGKILL); /* what it left in its group */
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        /* An orphan a worker left (this server is a subreaper) is no worker:
         * the host must never hear of it, or a later worker given the same
         * pid would seem to have exited. */
        if (!forget_child(pid)) continue;
        char text[64];
        snprintf(text, sizeof text, "exit %d %d", (int)pid, status);
        send_text(control, text);
    }
}

/* The signal a forked worker gets when its parent dies: one plugins have
 * no reason to use. */
#define CURFEW_PARENT_DEATH_SIGNAL (SIGRTMAX - 1)

/* The host: the fork server's parent; and the fork server. */
static pid_t fork_server_host;
static pid_t fork_server;

/* A forked worker's parent-death signal, which comes each time the thread
 * that is its parent ends. When the fork server dies (a worker can kill
 * it) the worker has come to the host, a subreaper, and lives on; when the
 * host dies, so does the worker. The thread that forked it can end before
 * the server's other thread (the one that started it) as the server dies:
 * the worker is that thread's for a moment, still the server's, and the
 * signal comes again when that thread ends. */
static void on_parent_death(int number) {
    (void)number;
    pid_t parent = getppid();
    if (parent != fork_server_host && parent != fork_server) kill(getpid(), SIGKILL);
}

/* Forking a worker straight into its cgroup (clone3 with CLONE_INTO_CGROUP,
 * Linux 5.7): a move into it afterwards (a write to cgroup.procs) takes the
 * kernel's global threadgroup lock for writing, which waits for an RCU grace
 * period (a tick, 4 ms at 250 Hz) and holds up every fork, thread start and
 * exit on the machine meanwhile. The raw call skips what glibc's fork does
 * in the child. Here the loop's thread holds no lock, the process's only
 * other thread waits in pthread_join (curfew_shim_fork_server_on_fresh_thread),
 * and no atfork handler is registered (none is by the host's code; a
 * preloaded library might, so LD_PRELOAD turns this off): what matters is
 * the thread descriptor's tid, which the kernel writes (CLONE_CHILD_SETTID)
 * where glibc's own fork writes it, found below, and the robust-mutex list,
 * registered again. The child's C library still counts the waiting thread
 * among its threads, which only a thread's exit consults: a worker ends
 * with exit(). */
struct curfew_clone_args {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};
#define CURFEW_CLONE_INTO_CGROUP 0x200000000ULL

/* Where, from the forking thread's descriptor (pthread_self()), glibc keeps
 * that thread's tid; -1 when it could not be told for sure. */
static long thread_tid_offset = -1;
static void *robust_head;
static size_t robust_length;

/* Finds thread_tid_offset: the words of the descriptor's first 1 KiB (glibc
 * keeps the tid well inside it) that hold this thread's tid, then, in a
 * child of glibc's fork, the one of them that holds the child's. */
static void find_thread_tid(void) {
    const unsigned char *self = (const unsigned char *)pthread_self();
    pid_t tid = (pid_t)syscall(SYS_gettid);
    enum { SPAN = 1024, MOST = 16 };
    int candidates[MOST];
    int count = 0;
    for (int offset = 0; offset + (int)sizeof(pid_t) <= SPAN && count < MOST; offset += (int)sizeof(pid_t)) {
        pid_t value;
        memcpy(&value, self + offset, sizeof value);
        if (value == tid) candidates[count++] = offset;
    }
    if (count == 0 || getenv("LD_PRELOAD")) return;
    int answer[2];
    if (pipe2(answer, O_CLOEXEC) != 0) return;
    pid_t child = fork();
    if (child == 0) {
        pid_t own = (pid_t)syscall(SYS_gettid);
        int found = -1, matches = 0;
        for (int i = 0; i < count; i++) {
            pid_t value;
            memcpy(&value, self + candidates[i], sizeof value);
            if (value == own) {
                found = candidates[i];
                matches++;
            }
        }
        if (matches != 1) found = -1;
        ssize_t written = write(answer[1], &found, sizeof found);
        _exit(written == (ssize_t)sizeof found ? 0 : 1);
    }
    close(answer[1]);
    int found = -1;
    if (child > 0) {
        ssize_t got;
        do {
            got = read(answer[0], &found, sizeof found);
        } while (got < 0 && errno == EINTR);
        if (got != (ssize_t)sizeof found) found = -1;
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    close(answer[0]);
    if (found < 0 || syscall(SYS_get_robust_list, 0, &robust_head, &robust_length) != 0 || !robust_head) return;
    thread_tid_offset = found;
}

/* Forks into the cgroup whose folder is open on `cgroup`: the child's pid
 * (0 in the child), or -1 when this kernel or cgroup cannot. The first call
 * finds the tid's place (a fork of its own, reaped before it returns). */
static pid_t fork_into_cgroup(int cgroup) {
    static int searched;
    if (cgroup < 0) return -1;
    if (!searched) {
        searched = 1;
        find_thread_tid();
    }
    if (thread_tid_offset < 0) return -1;
    struct curfew_clone_args args;
    memset(&args, 0, sizeof args);
    args.flags = CURFEW_CLONE_INTO_CGROUP | CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID;
    args.child_tid = (uint64_t)(uintptr_t)((unsigned char *)pthread_self() + thread_tid_offset);
    args.exit_signal = SIGCHLD;
    args.cgroup = (uint64_t)cgroup;
    long pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid == 0) syscall(SYS_set_robust_list, robust_head, robust_length);
    /* No such call, or one a filter refuses: not tried again. */
    if (pid < 0 && (errno == ENOSYS || errno == EINVAL || errno == E2BIG || errno == EPERM)) thread_tid_offset = -1;
    return (pid_t)pid;
}

/* The loop, on the thread that forks (see curfew_shim_fork_server). Returns
 * 0 in a forked child, -1 in the server when the host is done. */
static int serve_forks(int control) {
    fork_server_host = getppid();
    if (curfew_shim_child_pipe() < 0) return -1;
    /* What a worker's job started and left behind comes here when the worker dies. */
    curfew_shim_become_subreaper();
    pid_t server = getpid();
    fork_server = server;
    unsigned long sequence = 0;
    for (;;) {
        struct pollfd polls[2] = {{control, POLLIN, 0}, {child_pipe[0], POLLIN, 0}};
        if (poll(polls, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (polls[1].revents) {
            char drain[64];
            while (read(child_pipe[0], drain, sizeof drain) > 0) {
            }
            reap_exited(control);
            kill_orphans();
        }
        if (!polls[0].revents) continue;
        char text[64];
        int fds[4] = {-1, -1, -1, -1};
        int received = 0;
        union {
            char buffer[CMSG_SPACE(8 * sizeof(int))];
            struct cmsghdr align;
        } ancillary;
        struct iovec io = {text, sizeof text - 1};
        struct msghdr message = {0};
        message.msg_iov = &io;
        message.msg_iovlen = 1;
        message.msg_control = ancillary.buffer;
        message.msg_controllen = sizeof ancillary.buffer;
        ssize_t count = recvmsg(control, &message, MSG_CMSG_CLOEXEC);
        if (count < 0 && errno == EINTR) continue;
        if (count <= 0) break; /* the host is done */
        text[count] = 0;
        for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header; header = CMSG_NXTHDR(&message, header)) {
            if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
            int n = (int)((header->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            int *data = (int *)CMSG_DATA(header);
            for (int i = 0; i < n; i++) {
                if (received < 4) fds[received] = data[i]; else close(data[i]);
                received++;
            }
        }
        /* A fourth descriptor, where given, is the folder of the cgroup to fork into. */
        int complete = (received == 3 || received == 4) && !(message.msg_flags & MSG_CTRUNC);
        if (strcmp(text, "fork") == 0) {
            pid_t pid = -1;
            int placed = 0;
            if (complete && child_count < MAX_CHILDREN) {
                curfew_sandbox_refresh_common();
                pid = fork_into_cgroup(fds[3]);
                placed = pid >= 0;
                if (!placed) pid = fork();
            }
            if (pid == 0) {
                /* Before anything else: the server's filter lets clone3 through. */
                if (curfew_sandbox_seal_forked_child() != 0) _exit(126);
                close(control);
                close(child_pipe[0]);
                close(child_pipe[1]);
                signal(SIGCHLD, SIG_DFL);
                sigset_t none;
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                setpgid(0, 0);
                /* If the host dies, so does the worker; if only the server does, the
                 * worker comes to the host, which reaps and kills it from then on. */
                install_handler(CURFEW_PARENT_DEATH_SIGNAL, on_parent_death, 0);
                prctl(PR_SET_PDEATHSIG, CURFEW_PARENT_DEATH_SIGNAL);
                /* Died before the call, no signal comes: the server (a plugin
                 * may kill it), and the worker is the host's now and lives on
                 * as above; or the host too, and the worker ends. */
                pid_t parent = getppid();
                if (parent != server && parent != fork_server_host) _exit(1);
                if (fds[3] >= 0) close(fds[3]);
                dup2(fds[0], 3);
                dup2(fds[1], 1);
                dup2(fds[2], 2);
                /* stdin reads nothing, and no descriptor but 0 to 3 stays open,
                 * and the sandbox's paths the server opened for its workers. */
                int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (null >= 0) dup2(null, 0);
                int low = 0, high = 0;
                if (curfew_sandbox_common_range(&low, &high) && low > 4) {
                    close_range(4, (unsigned)low - 1, 0);
                    close_range((unsigned)high + 1, ~0U, 0);
                } else {
                    close_range(4, ~0U, 0);
                }
                return 0;
            }
            if (pid > 0) {
                setpgid(pid, pid); /* also here, so a kill right away finds the group */
                children[child_count].pid = pid;
                children[child_count].sequence = ++sequence;
                child_count++;
            }
            for (int i = 0; i < 4; i++)
                if (fds[i] >= 0) close(fds[i]);
            char reply[48];
            if (pid > 0) snprintf(reply, sizeof reply, "pid %d %lu%s", (int)pid, sequence, placed ? " placed" : "");
            else snprintf(reply, sizeof reply, "pid -1 0");
            send_text(control, reply);
            continue;
        }
        for (int i = 0; i < 4; i++)
            if (fds[i] >= 0) close(fds[i]);
        int pid = 0;
        unsigned long wanted = 0;
        if (sscanf(text, "kill %d %lu", &pid, &wanted) == 2) {
            /* Only the child that fork made, not yet reaped: its pid is still its own. */
            for (int i = 0; i < child_count; i++)
                if (children[i].pid == pid && children[i].sequence == wanted) kill(-pid, SIGKILL);
        }
    }
    /* The host is done (or gone): no more forks; what still runs is killed and reaped. */
    for (int i = 0; i < child_count; i++) kill(-children[i].pid, SIGKILL);
    while (child_count > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0 && errno == EINTR) continue;
        if (pid < 0) break;
        forget_child(pid);
        char text[64];
        snprintf(text, sizeof text, "exit %d %d", (int)pid, status);
        send_text(control, text);
    }
    /* What dead workers left behind came here (a subreaper): it goes too. */
    curfew_shim_kill_children(NULL, 0, 64);
    return -1;
}

struct fork_server_start {
    int control;
    void (*child)(void);
    int result;
};

static void *fork_server_thread(void *argument) {
    struct fork_server_start *start = argument;
    if (serve_forks(start->control) == 0) {
        start->child();
        _exit(0);
    }
    start->result = -1;
    return NULL;
}

/* Whether the process has one thread, within a second. Neither server
 * starts a thread before it serves, but a thread that has just ended can
 * stay in /proc/self/task for a moment after pthread_join returns (the
 * worker server's warm-up once ran on one), so a count of two is looked
 * at again before the server refuses. */
static int single_threaded(void) {
    int threads = thread_count();
    for (int waited = 0; threads > 1 && waited < 2000; waited++) {
        usleep(500);
        threads = thread_count();
    }
    return threads == 1;
}

int curfew_shim_fork_server(int control) {
    if (!single_threaded()) return -2;
    return serve_forks(control);
}

int curfew_shim_fork_server_on_fresh_thread(int control, void (*child)(void)) {
    if (!single_threaded()) return -2;
    /* Forks come from a thread that has run no Swift. Swift's runtime keeps
     * each thread's id in a thread-local the first time the thread takes one
     * of its locks (a lazy global's once, a Mutex), and a forked child's one
     * thread keeps its parent's copy: a lock it takes then holds the server's
     * thread id, and a thread of the worker that waits for it spins in
     * FUTEX_LOCK_PI for good, as does the holder's unlock. This thread's
     * copy is still unread, so each child reads its own id. This (main)
     * thread waits in pthread_join, holding no lock a child could need. */
    struct fork_server_start start = {control, child, -1};
    /* The default attributes: a stack as big as the stack limit says (glibc
     * sizes every thread's so), as a spawned worker's main thread may grow. */
    pthread_t thread;
    if (pthread_create(&thread, NULL, fork_server_thread, &start) != 0) return -1;
    pthread_join(thread, NULL);
    return start.result;
}

void curfew_shim_stdout_line_buffered(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
}

void curfew_shim_flush_stdout(void) {
    fflush(stdout);
}

int curfew_shim_die_with_parent(int parent) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return -1;
    /* The parent may have died before the call: then no signal will come. */
    return getppid() == (pid_t)parent ? 0 : -1;
}

int curfew_shim_set_timer_slack(unsigned long nanoseconds) {
    return prctl(PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0) == 0 ? 0 : errno;
}

int curfew_shim_name_thread(const char *name) {
    return prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0) == 0 ? 0 : errno;
}

int curfew_shim_usable_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int count = CPU_COUNT(&set);
        if (count > 0) return count;
    }
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 && online < 1 << 20 ? (int)online : 1;
}

int curfew_shim_become_subreaper(void) {
    return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 ? 0 : errno;
}

/* Appends this process's children to `pids` (at most `capacity`), from
 * /proc/self/task/TID/children for every thread; -1 when that file is not
 * there (a kernel without CONFIG_PROC_CHILDREN), else how many were found. */
static int list_children(pid_t *pids, int capacity) {
    DIR *tasks = opendir("/proc/self/task");
    if (tasks == NULL) return -1;
    int count = 0;
    int found_file = 0;
    struct dirent *entry;
    while ((entry = readdir(tasks)) != NULL) {
        if (entry->d_name[0] == '.') continue;
        char path[sizeof "/proc/self/task//children" + sizeof entry->d_name];
        snprintf(path, sizeof path, "/proc/self/task/%s/children", entry->d_name);
        FILE *file = fopen(path, "re");
        if (file == NULL) continue;
        found_file = 1;
        int pid;
        while (count < capacity && fscanf(file, "%d", &pid) == 1) pids[count++] = pid;
        fclose(file);
    }
    closedir(tasks);
    return found_file ? count : -1;
}

int curfew_shim_kill_children(const int *keep, int keep_count, int rounds) {
    int killed = 0;
    pid_t pids[1024];
    for (int round = 0; round < rounds; round++) {
        /* No child at all (the usual case): one system call, not a walk of
         * /proc, whose entries also cost the parent a flush when it reaps. */
        siginfo_t any;
        if (keep_count == 0 && waitid(P_ALL, 0, &any, WEXITED | WSTOPPED | WCONTINUED | WNOHANG | WNOWAIT) != 0 &&
            errno == ECHILD)
            break;
        int count = list_children(pids, 1024);
        if (count < 0) return -1;
        int acted = 0;
        for (int i = 0; i < count; i++) {
            int kept = 0;
            for (int k = 0; k < keep_count; k++)
                if (keep[k] == pids[i]) kept = 1;
            if (kept) continue;
            /* A child of this process, not reaped: its pid is still its own. */
            kill(-pids[i], SIGKILL); /* its group, if it leads one */
            kill(pids[i], SIGKILL);
            int status;
            while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR) {
            }
            killed++;
            acted = 1;
        }
        /* Killed children's own children come to this process (a subreaper):
         * another round finds them. Done when a round finds none. */
        if (!acted) break;
    }
    return killed;
}

static void ignore_signal(int number) {
    (void)number;
}

void curfew_shim_catch_sigpipe(void) {
    install_handler(SIGPIPE, ignore_signal, 0);
}

/* ---- a worker's crash report ---- */

static __thread struct {
    const char *job;
    const char *hook;
    unsigned long long base;
    const unsigned long long *count;
} crash_where;
static int crash_fd = -1;

const char *curfew_shim_crash_job(void) {
    return crash_where.job;
}

void curfew_shim_crash_where(const char *job, int hook, unsigned long long base,
                             const unsigned long long *count) {
    static const char *const hooks[] = {"create", "chunk", "expire", "destroy", "app_event"};
    crash_where.job = job;
    crash_where.hook = hook >= 0 && hook < (int)(sizeof hooks / sizeof hooks[0]) ? hooks[hook] : "";
    crash_where.base = base;
    crash_where.count = count;
}

/* Appends `text` (at most `limit` bytes of it) to `line` at `*used`. */
static void crash_append(char *line, size_t size, size_t *used, const char *text, size_t limit) {
    for (size_t i = 0; text[i] && i < limit && *used < size; i++) line[(*used)++] = text[i];
}

/* `value` in decimal into `text` (at least 21 bytes), NUL-terminated. */
static void decimal(unsigned long long value, char *text) {
    char digits[21];
    int n = 0;
    do {
        digits[n++] = (char)('0' + value % 10);
        value /= 10;
    } while (value && n < 20);
    for (int i = 0; i < n; i++) text[i] = digits[n - 1 - i];
    text[n] = 0;
}

static void on_crash(int number, siginfo_t *info, void *context) {
    (void)context;
    int saved = errno;
    if (crash_where.job && crash_fd >= 0) {
        char line[256];
        size_t used = 0;
        unsigned long long chunks = crash_where.base + (crash_where.count ? *crash_where.count : 0);
        char number_text[24];
        decimal(chunks, number_text);
        crash_append(line, sizeof line, &used, "{\"type\":\"crashing\",\"job\":\"", 64);
        crash_append(line, sizeof line, &used, crash_where.job, 64);
        crash_append(line, sizeof line, &used, "\",\"hook\":\"", 64);
        crash_append(line, sizeof line, &used, crash_where.hook ? crash_where.hook : "", 16);
        crash_append(line, sizeof line, &used, "\",\"chunks\":", 64);
        crash_append(line, sizeof line, &used, number_text, 24);
        crash_append(line, sizeof line, &used, "}\n", 2);
        ssize_t written = write(crash_fd, line, used);
        (void)written;
        crash_where.job = NULL; /* once */
    }
    /* SA_RESETHAND restored the default action. Sent again, the signal is
     * delivered as the handler returns (it is blocked until then): a fault
     * would repeat anyway, and a signal that was sent once (kill, raise,
     * abort, the kernel's) would not. */
    (void)info;
    raise(number);
    errno = saved;
}

int curfew_shim_install_crash_reporter(int fd) {
    crash_fd = fd;
    static const int signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_sigaction = on_crash;
        action.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
        sigemptyset(&action.sa_mask);
        if (sigaction(signals[i], &action, NULL) != 0) return -1;
    }
    return 0;
}

/* ---- the host's report of a fault in plugin code, in process ---- */

static const int fault_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
static struct sigaction fault_before[sizeof fault_signals / sizeof fault_signals[0]];
static int fault_human_fd = -1;
static int fault_machine_fd = -1;
static int fault_status = 1;
static int fault_notify_fd = -1;
static pid_t fault_process;
/* The fault being reported: set once, by the first thread to fault. */
static volatile sig_atomic_t fault_claimed;
static struct {
    const char *job;
    const char *hook;
    unsigned long long chunk;
    const char *signal;
} fault_seen;

static const char *signal_name(int number) {
    switch (number) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    default: return "a signal";
    }
}

static void write_all(int fd, const char *line, size_t length) {
    while (length > 0) {
        ssize_t n = write(fd, line, length);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        line += n;
        length -= (size_t)n;
    }
}

static void on_fault(int number, siginfo_t *info, void *context) {
    if (crash_where.job && getpid() == fault_process) {
        int is_chunk = crash_where.hook && crash_where.hook[0] == 'c' && crash_where.hook[1] == 'h';
        /* The chunk that faulted: the ones that returned, and this one. */
        unsigned long long chunk = crash_where.base + (crash_where.count ? *crash_where.count : 0) + 1;
        char number_text[24];
        decimal(chunk, number_text);
        const char *name = signal_name(number);
        /* One report: a second thread to fault waits for the first's. */
        if (__sync_lock_test_and_set(&fault_claimed, 1)) {
            for (;;) pause();
        }
        fault_seen.job = crash_where.job;
        fault_seen.hook = crash_where.hook;
        fault_seen.chunk = is_chunk ? chunk : 0;
        fault_seen.signal = name;
        __sync_synchronize();
        if (fault_notify_fd >= 0) {
            char byte = 1;
            write_all(fault_notify_fd, &byte, 1);
            /* The host's thread reports and exits; this is the fallback. */
            struct timespec tick = {0, 10 * 1000 * 1000};
            for (int i = 0; i < 100; i++) nanosleep(&tick, NULL);
        }
        char line[512];
        size_t used = 0;
        crash_append(line, sizeof line, &used, "curfew: job '", 64);
        crash_append(line, sizeof line, &used, crash_where.job, 64);
        crash_append(line, sizeof line, &used, "' crashed with ", 64);
        crash_append(line, sizeof line, &used, name, 16);
        crash_append(line, sizeof line, &used, " in ", 8);
        crash_append(line, sizeof line, &used, crash_where.hook ? crash_where.hook : "", 16);
        if (is_chunk) {
            crash_append(line, sizeof line, &used, " ", 1);
            crash_append(line, sizeof line, &used, number_text, 24);
        }
        crash_append(line, sizeof line, &used,
                     ", in the host's process; the run ends here, with no summary (exit status ", 128);
        char status_text[24];
        decimal((unsigned long long)fault_status, status_text);
        crash_append(line, sizeof line, &used, status_text, 24);
        crash_append(line, sizeof line, &used,
                     "). --isolate none trusts the plugin: run it with --isolate job to contain that.\n", 128);
        write_all(fault_human_fd, line, used);
        if (fault_machine_fd >= 0) {
            used = 0;
            crash_append(line, sizeof line, &used, "{\"event\":\"host-crash\",\"job\":\"", 64);
            crash_append(line, sizeof line, &used, crash_where.job, 64);
            crash_append(line, sizeof line, &used, "\",\"hook\":\"", 16);
            crash_append(line, sizeof line, &used, crash_where.hook ? crash_where.hook : "", 16);
            crash_append(line, sizeof line, &used, "\"", 1);
            if (is_chunk) {
                crash_append(line, sizeof line, &used, ",\"chunk\":", 16);
                crash_append(line, sizeof line, &used, number_text, 24);
            }
            crash_append(line, sizeof line, &used, ",\"signal\":\"", 16);
            crash_append(line, sizeof line, &used, name, 16);
            crash_append(line, sizeof line, &used, "\"}\n", 3);
            write_all(fault_machine_fd, line, used);
        }
        _exit(fault_status);
    }
    /* Not plugin code's: the handler before this one has it. */
    for (size_t i = 0; i < sizeof fault_signals / sizeof fault_signals[0]; i++) {
        if (fault_signals[i] != number) continue;
        struct sigaction *before = &fault_before[i];
        if ((before->sa_flags & SA_SIGINFO) && before->sa_sigaction) {
            before->sa_sigaction(number, info, context);
            return;
        }
        sigaction(number, before, NULL);
        /* Delivered as this handler returns: a fault would repeat anyway,
         * and a signal sent once (raise, abort) would not. */
        raise(number);
        return;
    }
}

int curfew_shim_fault(const char **job, const char **hook, unsigned long long *chunk, const char **signal) {
    __sync_synchronize();
    if (!fault_claimed || !fault_seen.job) return 0;
    *job = fault_seen.job;
    *hook = fault_seen.hook ? fault_seen.hook : "";
    *chunk = fault_seen.chunk;
    *signal = fault_seen.signal;
    return 1;
}

int curfew_shim_install_fault_reporter(int human_fd, int machine_fd, int status, int notify_fd) {
    fault_human_fd = human_fd;
    fault_machine_fd = machine_fd;
    fault_status = status;
    fault_notify_fd = notify_fd;
    fault_process = getpid();
    for (size_t i = 0; i < sizeof fault_signals / sizeof fault_signals[0]; i++) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_sigaction = on_fault;
        action.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&action.sa_mask);
        if (sigaction(fault_signals[i], &action, &fault_before[i]) != 0) return -1;
    }
    return 0;
}

/* ---- alternate signal stacks for hook threads ---- */

enum { alt_stack_size = 64 * 1024 };
static pthread_key_t alt_stack_key;
static pthread_once_t alt_stack_once = PTHREAD_ONCE_INIT;

static void free_alt_stack(void *stack) {
    stack_t off;
    memset(&off, 0, sizeof off);
    off.ss_flags = SS_DISABLE;
    sigaltstack(&off, NULL);
    munmap(stack, alt_stack_size);
}

static void make_alt_stack_key(void) {
    pthread_key_create(&alt_stack_key, free_alt_stack);
}

int curfew_shim_give_thread_alt_stack(void) {
    pthread_once(&alt_stack_once, make_alt_stack_key);
    if (pthread_getspecific(alt_stack_key) != NULL) return 0;
    stack_t current;
    if (sigaltstack(NULL, &current) == 0 && !(current.ss_flags & SS_DISABLE)) return 0; /* one of its own */
    void *stack = mmap(NULL, alt_stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) return -1;
    stack_t given;
    memset(&given, 0, sizeof given);
    given.ss_sp = stack;
    given.ss_size = alt_stack_size;
    if (sigaltstack(&given, NULL) != 0 || pthread_setspecific(alt_stack_key, stack) != 0) {
        munmap(stack, alt_stack_size);
        return -1;
    }
    return 0;
}

static volatile int closed_in_children = -1;

static void close_in_child(void) {
    if (closed_in_children >= 0) close(closed_in_children);
}

static void register_close_in_child(void) {
    pthread_atfork(NULL, NULL, close_in_child);
}

void curfew_shim_close_in_children(int fd) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    closed_in_children = fd;
    pthread_once(&once, register_close_in_child);
}

int curfew_shim_accept(int fd) {
    return accept4(fd, NULL, NULL, SOCK_CLOEXEC);
}

int curfew_shim_peer_uid(int fd, unsigned int *uid) {
    struct ucred credentials;
    socklen_t length = sizeof credentials;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return -1;
    *uid = credentials.uid;
    return 0;
}

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* The parent and start time (clock ticks after boot) of `pid`, read from
 * /proc/<pid>/stat; -1 when it cannot be read. */
static int process_parent(pid_t pid, pid_t *parent, unsigned long long *start) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char text[1024];
    ssize_t count;
    do {
        count = read(fd, text, sizeof text - 1);
    } while (count < 0 && errno == EINTR);
    close(fd);
    if (count <= 0) return -1;
    text[count] = '\0';
    /* The command name, in parentheses, may hold spaces and parentheses itself. */
    char *cursor = strrchr(text, ')');
    if (!cursor) return -1;
    cursor++;
    /* Fields from 3 on, after the name: the parent is the 4th, the start time the 22nd. */
    int found = 0;
    for (int field = 3; field <= 22; field++) {
        while (*cursor == ' ') cursor++;
        if (*cursor == '\0') return -1;
        char *end;
        unsigned long long value = strtoull(cursor, &end, 10);
        if (field == 4) {
            if (end == cursor || value > INT_MAX) return -1;
            *parent = (pid_t)value;
            found++;
        } else if (field == 22) {
            if (end == cursor) return -1;
            *start = value;
            found++;
        }
        cursor = strchr(cursor, ' ');
        if (!cursor) return field == 22 && found == 2 ? 0 : -1;
    }
    return found == 2 ? 0 : -1;
}

int curfew_shim_peer_descends_from(int fd, int ancestor, int *peer) {
    struct ucred credentials;
    socklen_t length = sizeof credentials;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return -1;
    *peer = credentials.pid;
    int pidfd = -1;
    length = sizeof pidfd;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &length) != 0 || pidfd < 0) {
        /* Only a kernel without SO_PEERPIDFD (before 6.5) falls back to the
         * pid, which a peer gone since could have handed on: best effort.
         * Any other failure (the peer is gone) is not knowing. */
        if (errno != ENOPROTOOPT) return -1;
        pidfd = (int)syscall(SYS_pidfd_open, credentials.pid, 0);
    }
    if (pidfd < 0) return -1;
    int verdict = -1;
    for (int attempt = 0; attempt < 3 && verdict < 0; attempt++) {
        pid_t current = credentials.pid, parent;
        unsigned long long started;
        if (process_parent(current, &parent, &started) != 0) break;
        for (int depth = 0;; depth++) {
            if (current == ancestor) {
                verdict = 1;
                break;
            }
            /* No parent in this pid namespace (pid 1, or a process entered from outside it). */
            if (parent <= 0 || current == 1) {
                verdict = 0;
                break;
            }
            /* A chain this deep is a job's doing (it cannot escape by depth): not knowing. */
            if (depth > 1024) break;
            pid_t next;
            unsigned long long parent_started;
            if (process_parent(parent, &next, &parent_started) != 0 || parent_started > started) break;
            current = parent;
            parent = next;
            started = parent_started;
        }
    }
    /* Still alive: the /proc entry read was the peer's, not a later holder of its pid's. */
    if (verdict >= 0 && syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) != 0) verdict = -1;
    close(pidfd);
    return verdict;
}

int curfew_shim_make_temporary(char *template_path) {
    return mkostemp(template_path, O_CLOEXEC);
}

int curfew_shim_exchange(const char *a, const char *b) {
    return renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE);
}

long curfew_shim_copy_file_range(int in, long long *offset, int out, unsigned long length) {
    off64_t position = *offset;
    ssize_t copied = copy_file_range(in, &position, out, NULL, length, 0);
    if (copied > 0) *offset = position;
    return copied;
}

int curfew_shim_contains(const void *haystack, unsigned long haystack_length, const void *needle, unsigned long needle_length) {
    return memmem(haystack, haystack_length, needle, needle_length) != NULL;
}

int curfew_shim_mounted_noexec(const char *path) {
    struct statvfs info;
    if (statvfs(path, &info) != 0) return -1;
    return (info.f_flag & ST_NOEXEC) != 0;
}

int curfew_shim_set_thread_nice(int nice) {
    return setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice) == 0 ? 0 : errno;
}

int curfew_shim_set_thread_realtime(void) {
    /* The call itself, not pthread_setschedparam: glibc would note the class
     * in the thread's descriptor, copy that note to every thread this one
     * starts, and report it there, though the kernel starts them normal. */
    struct sched_param parameter = {.sched_priority = 1};
    return syscall(SYS_sched_setscheduler, 0, SCHED_FIFO | SCHED_RESET_ON_FORK, &parameter) == 0 ? 0 : errno;
}

int curfew_shim_netlink_socket(int family, uint32_t groups) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, family);
    if (fd < 0)
        return -1;
    struct sockaddr_nl address = {.nl_family = AF_NETLINK, .nl_groups = groups};
    if (bind(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        int error = errno;
        close(fd);
        errno = error;
        return -1;
    }
    return fd;
}
