/* A worker's sandbox: what the kernel can confine of a job the host did not
 * write. Applied once, by a worker with one thread, before any plugin code:
 * no capability (and, where the kernel has no Landlock, a user and IPC
 * namespace), Landlock's file, TCP and scope rules, then a seccomp filter
 * whose denials trap into a handler that notes the call for the host and
 * returns EPERM to the plugin. */
#define _GNU_SOURCE
#include "curfew_shims.h"
#include "shims_private.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

/* Calls newer than Debian's headers: numbered alike on every architecture. */
#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif
#ifndef SYS_setxattrat
#define SYS_setxattrat 463
#endif
#ifndef SYS_removexattrat
#define SYS_removexattrat 466
#endif
#ifndef SYS_file_setattr
#define SYS_file_setattr 469
#endif
/* The first number past every call this filter knows: a later kernel's
 * new calls fail with ENOSYS until they are weighed here. */
#define SANDBOX_FIRST_UNKNOWN_CALL 470

#ifndef SYS_SECCOMP
#define SYS_SECCOMP 1 /* si_code of a seccomp trap */
#endif

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* ---- Landlock, as the kernel's ABI 7 has it (Debian's header stops at 2) ---- */

struct sandbox_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

struct sandbox_path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

struct sandbox_net_port_attr {
    uint64_t allowed_access;
    uint64_t port;
};

enum {
    FS_EXECUTE = 1 << 0, FS_WRITE_FILE = 1 << 1, FS_READ_FILE = 1 << 2, FS_READ_DIR = 1 << 3,
    FS_REMOVE_DIR = 1 << 4, FS_REMOVE_FILE = 1 << 5, FS_MAKE_CHAR = 1 << 6, FS_MAKE_DIR = 1 << 7,
    FS_MAKE_REG = 1 << 8, FS_MAKE_SOCK = 1 << 9, FS_MAKE_FIFO = 1 << 10, FS_MAKE_BLOCK = 1 << 11,
    FS_MAKE_SYM = 1 << 12, FS_REFER = 1 << 13, FS_TRUNCATE = 1 << 14, FS_IOCTL_DEV = 1 << 15,
};
enum { NET_BIND_TCP = 1 << 0, NET_CONNECT_TCP = 1 << 1 };
enum { SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0, SCOPE_SIGNAL = 1 << 1 };
enum { RULE_PATH_BENEATH = 1 };

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

/* A test seam: a kernel without Landlock, for the warning's test. */
static int landlock_refused = 0;

void curfew_sandbox_refuse_landlock(void) {
    landlock_refused = 1;
}

int curfew_sandbox_landlock_abi(void) {
    if (landlock_refused) return 0;
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1U /* LANDLOCK_CREATE_RULESET_VERSION */);
    return abi < 0 ? 0 : (int)abi;
}

/* The file rights each ABI can restrict: a right the kernel does not know
 * makes the ruleset invalid. */
static uint64_t fs_rights(int abi) {
    uint64_t rights = (FS_MAKE_SYM << 1) - 1;
    if (abi >= 2) rights |= FS_REFER;
    if (abi >= 3) rights |= FS_TRUNCATE;
    if (abi >= 5) rights |= FS_IOCTL_DEV;
    return rights;
}

/* The rights that apply to a file, not a folder: a rule on a file with a
 * folder's right is invalid. */
static const uint64_t file_rights = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV;

static uint64_t granted(curfew_sandbox_access access, int allow_exec) {
    uint64_t read = FS_READ_FILE | FS_READ_DIR | (allow_exec ? FS_EXECUTE : 0);
    switch (access) {
    case CURFEW_SANDBOX_READ: return read;
    case CURFEW_SANDBOX_DEVICE: return read | FS_WRITE_FILE | FS_IOCTL_DEV;
    case CURFEW_SANDBOX_WRITE:
        return read | FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_DIR | FS_MAKE_REG | FS_MAKE_SOCK
               | FS_MAKE_FIFO | FS_MAKE_SYM | FS_REFER | FS_TRUNCATE;
    }
    return 0;
}

/* Adds a rule for the file or folder `fd` (an O_PATH descriptor), known to
 * be a folder or not, grants `access`. */
static int add_known_rule(int ruleset, int fd, curfew_sandbox_access access, int folder, uint64_t handled, int allow_exec) {
    uint64_t allowed = granted(access, allow_exec) & handled;
    if (!folder) allowed &= file_rights;
    struct sandbox_path_beneath_attr rule = {.allowed_access = allowed, .parent_fd = fd};
    return syscall(SYS_landlock_add_rule, ruleset, RULE_PATH_BENEATH, &rule, 0) == 0 ? 0 : errno;
}

/* Adds a rule for the file or folder `fd` (an O_PATH descriptor) grants `access`. */
static int add_rule(int ruleset, int fd, curfew_sandbox_access access, uint64_t handled, int allow_exec) {
    struct stat status;
    if (fstat(fd, &status) != 0) return errno;
    return add_known_rule(ruleset, fd, access, S_ISDIR(status.st_mode), handled, allow_exec);
}

/* Adds a rule for one path; a path that does not exist grants nothing and
 * is no error (a system without /lib64). */
static int add_path_rule(int ruleset, const curfew_sandbox_path *path, uint64_t handled, int allow_exec) {
    int fd = open(path->path, O_PATH | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT || errno == ENOTDIR || errno == EACCES ? 0 : errno;
    int error = add_rule(ruleset, fd, path->access, handled, allow_exec);
    close(fd);
    return error;
}

/* A ruleset made ahead of the job by curfew_sandbox_prepare, holding the
 * rules every sandbox has (see is_common_rule), for the network and exec it
 * was made for; -1 for none. */
static int ready_ruleset = -1;
static int ready_network;
static int ready_exec;
static int is_common_rule(const curfew_sandbox_path *path);

static struct sandbox_ruleset_attr ruleset_attributes(int abi, int network) {
    struct sandbox_ruleset_attr attributes = {.handled_access_fs = fs_rights(abi)};
    /* TCP: no bind or connect anywhere unless the network is the job's. */
    if (abi >= 4 && network == CURFEW_SANDBOX_NETWORK_OFF) attributes.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP;
    if (abi >= 6) attributes.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL;
    return attributes;
}

static int apply_landlock(const curfew_sandbox_spec *spec, int abi, curfew_sandbox_report *report) {
    uint64_t handled = fs_rights(abi);
    struct sandbox_ruleset_attr attributes = ruleset_attributes(abi, spec->network);
    /* The ruleset made ahead serves a spec of its network and exec: its
     * rules grant what this spec's would. */
    int ready = ready_ruleset >= 0 && ready_network == spec->network && ready_exec == spec->allow_exec;
    int ruleset = ready ? ready_ruleset : (int)syscall(SYS_landlock_create_ruleset, &attributes, sizeof attributes, 0);
    if (ready_ruleset >= 0) {
        if (!ready) close(ready_ruleset);
        ready_ruleset = -1;
    }
    if (ruleset < 0) return errno;
    for (size_t index = 0; index < spec->path_count; index++) {
        if (ready && is_common_rule(&spec->paths[index])) continue;
        int error = add_path_rule(ruleset, &spec->paths[index], handled, spec->allow_exec);
        if (error != 0) {
            report->failed_path = spec->paths[index].path;
            close(ruleset);
            return error;
        }
    }
    int error = syscall(SYS_landlock_restrict_self, ruleset, 0) == 0 ? 0 : errno;
    close(ruleset);
    if (error == 0) {
        report->landlock_abi = abi;
        report->applied |= CURFEW_SANDBOX_FILES;
        if (attributes.handled_access_net) report->applied |= CURFEW_SANDBOX_TCP_RULES;
        if (attributes.scoped) report->applied |= CURFEW_SANDBOX_SCOPES;
    }
    return error;
}

/* ---- a network of its own: a user namespace that maps only this user ---- */

static int write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    size_t length = strlen(text);
    ssize_t written = write(fd, text, length);
    int error = written == (ssize_t)length ? 0 : written < 0 ? errno : EIO;
    close(fd);
    return error;
}

/* The namespaces own_namespaces makes where the kernel has no Landlock. A
 * fork server's filter then lets this one unshare through, and the worker
 * seals it (seal_namespaces) once made. */
static const uint32_t worker_namespaces = CLONE_NEWUSER | CLONE_NEWIPC;

/* A user and IPC namespace of its own (no network namespace: a job with
 * the network off can open no socket, and one costs 0.55 ms a worker to
 * make and more to tear down): -1 when the kernel will not make them
 * (nothing changed), 0 when made, or an errno when made but the user
 * could not be mapped into it (the worker cannot go on as itself). */
static int own_namespaces(void) {
    uid_t user = getuid();
    gid_t group = getgid();
    if (unshare((int)worker_namespaces) != 0) return -1;
    char map[64];
    int error;
    snprintf(map, sizeof map, "%u %u 1\n", (unsigned)user, (unsigned)user);
    if ((error = write_file("/proc/self/uid_map", map)) != 0) return error;
    if ((error = write_file("/proc/self/setgroups", "deny")) != 0) return error;
    snprintf(map, sizeof map, "%u %u 1\n", (unsigned)group, (unsigned)group);
    return write_file("/proc/self/gid_map", map);
}

/* Whether this process can make and map a user namespace: -1 not known
 * yet, 0 no, 1 yes. Some systems let unshare succeed and refuse the map
 * (AppArmor's restriction of unprivileged user namespaces, as on Ubuntu):
 * a throwaway child finds out, once; the fork server asks before it forks,
 * so its workers inherit the answer. */
static int namespaces_usable = -1;

int curfew_sandbox_probe_namespaces(void) {
    if (namespaces_usable >= 0) return namespaces_usable;
    pid_t child = fork();
    if (child < 0) return 0;
    if (child == 0) _exit(own_namespaces() == 0 ? 0 : 1);
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {}
    namespaces_usable = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    return namespaces_usable;
}

/* The highest capability this kernel knows (63 when it does not say): the
 * bounding set is dropped a call per capability, each through the call
 * filter. Read once per process (a fork server's workers inherit it). */
static int last_capability(void) {
    static int last = -1;
    if (last >= 0) return last;
    last = 63;
    int fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return last;
    char text[16];
    ssize_t size = read(fd, text, sizeof text - 1);
    close(fd);
    if (size <= 0) return last;
    text[size] = 0;
    char *end = NULL;
    long value = strtol(text, &end, 10);
    if (end != text && value >= 0 && value <= 63) last = (int)value;
    return last;
}

/* The bounding set, emptied where this process holds CAP_SETPCAP (a root
 * host's, or a namespace just made); elsewhere none can be dropped, and
 * with no_new_privs an exec gains none anyway. */
static int drop_bounding_set(void) {
    int last = last_capability();
    for (int capability = 0; capability <= last; capability++) {
        if (prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) == 0 || errno == EINVAL) continue;
        return errno == EPERM ? 0 : errno;
    }
    return 0;
}

/* Whether the fork server emptied the bounding set its workers inherit, as
 * far as it could (where it could drop none, neither can they): a worker
 * that makes no user namespace (which would give it a full one) has
 * nothing left to drop there. */
static int bounding_set_dropped;

/* Every capability goes: the bounding set, the ambient set, then the
 * process's own. `own_namespace`: one was just made. */
static int drop_capabilities(int own_namespace) {
    int error;
    if ((own_namespace || !bounding_set_dropped) && (error = drop_bounding_set()) != 0) return error;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) return errno;
    struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    return syscall(SYS_capset, &header, data) == 0 ? 0 : errno;
}

/* ---- seccomp: calls no job needs, trapped and named ---- */

#if defined(__x86_64__)
#define SANDBOX_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SANDBOX_ARCH AUDIT_ARCH_AARCH64
#endif

/* What each trapped call is, for the host's line. */
struct denied_call {
    int number;
    const char *name;
    const char *why;
};

#define DENY(call, reason) {SYS_##call, #call, reason}
static const char system_only[] = "a job may not change the system";
static const char other_processes[] = "a job may not reach into other processes";
static const char namespaces[] = "a job may not make or join namespaces";
/* Its operations (connect, openat) would pass the filter unseen. */
static const char uring[] = "io_uring would bypass the call filter";
/* Landlock confines what a file holds, not its mode, owner or times. */
static const char metadata[] = "a job may not change files' modes, owners, times or attributes";
/* Reached by key or by a guessable id from every process of the user. */
static const char ipc[] = "a job may not use System V IPC or POSIX message queues";
static const struct denied_call denied_calls[] = {
    DENY(ptrace, other_processes), DENY(process_vm_readv, other_processes), DENY(process_vm_writev, other_processes),
    DENY(kexec_load, system_only), DENY(kexec_file_load, system_only), DENY(init_module, system_only),
    DENY(finit_module, system_only), DENY(delete_module, system_only), DENY(mount, system_only),
    DENY(umount2, system_only), DENY(pivot_root, system_only), DENY(fsopen, system_only), DENY(fsmount, system_only),
    DENY(move_mount, system_only), DENY(open_tree, system_only), DENY(bpf, system_only),
    DENY(perf_event_open, system_only), DENY(keyctl, system_only), DENY(add_key, system_only),
    DENY(request_key, system_only), DENY(setns, namespaces), DENY(unshare, namespaces), DENY(swapon, system_only),
    DENY(swapoff, system_only), DENY(reboot, system_only), DENY(acct, system_only), DENY(quotactl, system_only),
    DENY(open_by_handle_at, system_only), DENY(userfaultfd, system_only), DENY(settimeofday, system_only),
    DENY(clock_settime, system_only), DENY(clock_adjtime, system_only), DENY(io_uring_setup, uring),
    DENY(io_uring_enter, uring), DENY(io_uring_register, uring), DENY(pidfd_getfd, other_processes),
    DENY(process_madvise, other_processes), DENY(kcmp, other_processes), DENY(fchmod, metadata),
    DENY(fchmodat, metadata), DENY(fchmodat2, metadata), DENY(fchown, metadata), DENY(fchownat, metadata),
    DENY(utimensat, metadata), DENY(setxattr, metadata), DENY(lsetxattr, metadata), DENY(fsetxattr, metadata),
    DENY(removexattr, metadata), DENY(lremovexattr, metadata), DENY(fremovexattr, metadata),
    DENY(setxattrat, metadata), DENY(removexattrat, metadata), DENY(file_setattr, metadata),
    DENY(shmget, ipc), DENY(shmat, ipc), DENY(shmctl, ipc), DENY(semget, ipc), DENY(semop, ipc),
    DENY(semtimedop, ipc), DENY(semctl, ipc), DENY(msgget, ipc), DENY(msgsnd, ipc), DENY(msgrcv, ipc),
    DENY(msgctl, ipc), DENY(mq_open, ipc), DENY(mq_unlink, ipc), DENY(mq_timedsend, ipc),
    DENY(mq_timedreceive, ipc), DENY(mq_notify, ipc), DENY(mq_getsetattr, ipc),
    /* The older spellings, which the generic table (aarch64) lacks. */
#ifdef SYS_chmod
    DENY(chmod, metadata),
#endif
#ifdef SYS_chown
    DENY(chown, metadata),
#endif
#ifdef SYS_lchown
    DENY(lchown, metadata),
#endif
#ifdef SYS_utime
    DENY(utime, metadata),
#endif
#ifdef SYS_utimes
    DENY(utimes, metadata),
#endif
#ifdef SYS_futimesat
    DENY(futimesat, metadata),
#endif
#if defined(__x86_64__)
    DENY(iopl, system_only), DENY(ioperm, system_only),
#endif
};
static const struct denied_call exec_calls[] = {{SYS_execve, "execve", ""}, {SYS_execveat, "execveat", ""}};
static const char network_off[] = "network is off for this job";
static const struct denied_call socket_call = DENY(socket, network_off);
static const struct denied_call loopback_socket_call = DENY(socket, "the job's network is loopback: TCP only");
/* Which of the two a denied socket() is. */
static int network_is_loopback;
static const struct denied_call clone_call = DENY(clone, namespaces);
static const struct denied_call unknown_call = {-1, "a system call", "the sandbox refuses it"};
#undef DENY

/* The denials not yet sent: the handler writes, the worker reads (one
 * reader). A full ring drops the newest; the count says how many. */
#define DENIAL_SLOTS 64
static struct {
    const char *job;
    const struct denied_call *call;
} denial_ring[DENIAL_SLOTS];
static atomic_uint denial_written;
static atomic_uint denial_read;
static atomic_uint denial_dropped;
static int next_denial(const char **job, const char **call, const char **why);

static const struct denied_call *find_denied(int number) {
    for (size_t index = 0; index < sizeof denied_calls / sizeof denied_calls[0]; index++) {
        if (denied_calls[index].number == number) return &denied_calls[index];
    }
    if (number == SYS_socket) return network_is_loopback ? &loopback_socket_call : &socket_call;
    if (number == SYS_clone) return &clone_call;
    return &unknown_call;
}

static void on_denied(int number, siginfo_t *info, void *context) {
    (void)number;
    /* Not the filter's (a plugin raised it): what SIGSYS does by default. */
    if (info->si_code != SYS_SECCOMP) {
        signal(SIGSYS, SIG_DFL);
        raise(SIGSYS);
        return;
    }
    int saved = errno;
    const struct denied_call *call = find_denied(info->si_syscall);
    unsigned written = atomic_load_explicit(&denial_written, memory_order_relaxed);
    unsigned read = atomic_load_explicit(&denial_read, memory_order_acquire);
    /* One handler at a time per slot: claim it, then publish it. */
    while (1) {
        if (written - read >= DENIAL_SLOTS) {
            atomic_fetch_add_explicit(&denial_dropped, 1, memory_order_relaxed);
            break;
        }
        if (atomic_compare_exchange_weak_explicit(&denial_written, &written, written + 1, memory_order_acq_rel,
                                                  memory_order_relaxed)) {
            denial_ring[written % DENIAL_SLOTS].job = curfew_shim_crash_job();
            atomic_store_explicit((_Atomic(const struct denied_call *) *)&denial_ring[written % DENIAL_SLOTS].call, call,
                                  memory_order_release);
            break;
        }
        read = atomic_load_explicit(&denial_read, memory_order_acquire);
    }
    /* The plugin sees the call fail with EPERM, as if the kernel refused it. */
    ucontext_t *state = context;
#if defined(__x86_64__)
    state->uc_mcontext.gregs[REG_RAX] = -EPERM;
#elif defined(__aarch64__)
    state->uc_mcontext.regs[0] = (unsigned long long)-EPERM;
#endif
    errno = saved;
}

/* The ring has one reader at a time: the worker reads it from two queues. */
static pthread_mutex_t denial_reader = PTHREAD_MUTEX_INITIALIZER;

int curfew_sandbox_next_denial(const char **job, const char **call, const char **why) {
    pthread_mutex_lock(&denial_reader);
    int found = next_denial(job, call, why);
    pthread_mutex_unlock(&denial_reader);
    return found;
}

static int next_denial(const char **job, const char **call, const char **why) {
    unsigned read = atomic_load_explicit(&denial_read, memory_order_relaxed);
    if (read == atomic_load_explicit(&denial_written, memory_order_acquire)) return 0;
    _Atomic(const struct denied_call *) *slot = (_Atomic(const struct denied_call *) *)&denial_ring[read % DENIAL_SLOTS].call;
    const struct denied_call *denied = atomic_load_explicit(slot, memory_order_acquire);
    if (denied == NULL) return 0;  /* claimed, not yet published */
    *job = denial_ring[read % DENIAL_SLOTS].job;
    *call = denied->name;
    *why = denied->why;
    atomic_store_explicit(slot, NULL, memory_order_relaxed);
    atomic_store_explicit(&denial_read, read + 1, memory_order_release);
    return 1;
}

unsigned curfew_sandbox_dropped_denials(void) {
    return atomic_exchange_explicit(&denial_dropped, 0, memory_order_relaxed);
}

#define FILTER_MAX 512
#define DENIED_COUNT (sizeof denied_calls / sizeof denied_calls[0])

static int compare_calls(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* A search of the sorted `calls[lo, hi)` for the number in A: each found
 * is denied, any other allowed. A call crosses about seven tests, not one
 * per denied call: the kernel runs the filter on every call and, to cache
 * which calls it always allows, once per call number as it installs it (a
 * chain of sixty tests took 174 us to install, most of a sandbox's cost). */
static int emit_denials(struct sock_filter *filter, size_t *length, const uint32_t *calls, size_t lo, size_t hi, uint32_t deny) {
    if (hi - lo <= 3) {
        if (*length + 2 * (hi - lo) + 1 > FILTER_MAX) return E2BIG;
        for (size_t index = lo; index < hi; index++) {
            filter[(*length)++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, calls[index], 0, 1);
            filter[(*length)++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, deny);
        }
        filter[(*length)++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
        return 0;
    }
    size_t middle = lo + (hi - lo) / 2;
    if (*length == FILTER_MAX) return E2BIG;
    size_t node = (*length)++;
    int error = emit_denials(filter, length, calls, lo, middle, deny);
    if (error != 0) return error;
    /* At or past the middle: over the lower half, which follows the test. */
    size_t lower = *length - node - 1;
    if (lower > 255) return E2BIG;
    filter[node] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, calls[middle], (uint8_t)lower, 0);
    return emit_denials(filter, length, calls, middle, hi, deny);
}

/* `loopback`: a helper answers for IPv4 and IPv6 sockets (see
 * install_socket_listener), so this filter lets them through to it.
 * `for_server`: a fork server's, inherited by the workers it forks, which
 * lets one unshare of worker_namespaces through (only where they make
 * them: see wants_namespaces). `lets_clone3`: a fork server's, which forks
 * into cgroups with clone3; each child it forks refuses clone3 again before
 * anything else (curfew_sandbox_seal_forked_child). */
static int install_filter(const curfew_sandbox_spec *spec, int loopback, int for_server, int lets_clone3) {
#ifndef SANDBOX_ARCH
    (void)spec;
    (void)loopback;
    (void)for_server;
    (void)lets_clone3;
    return ENOSYS;
#else
    struct sock_filter filter[FILTER_MAX];
    size_t length = 0;
    /* A denial traps into the worker's handler, which names it and returns
     * EPERM; a program the job execs has no such handler (exec resets it),
     * so with exec allowed a denial is a plain EPERM, named by nobody. */
    const uint32_t deny = spec->allow_exec ? SECCOMP_RET_ERRNO | EPERM : SECCOMP_RET_TRAP;
#define PUT(statement)                                    \
    do {                                                  \
        if (length == FILTER_MAX) return E2BIG;           \
        filter[length++] = (struct sock_filter)statement; \
    } while (0)
    /* Another architecture's calls (i386) would skip every rule: killed. */
    PUT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)));
    PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SANDBOX_ARCH, 1, 0));
    PUT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
    PUT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
#if defined(__x86_64__)
    /* x32's numbers (and any past the table) name no call this filter
     * checks: refused as unknown. */
    PUT(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1));
    PUT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS));
#endif
    PUT(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, SANDBOX_FIRST_UNKNOWN_CALL, 0, 1));
    PUT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS));
    /* clone3's flags are behind a pointer a filter cannot read: glibc falls
     * back to clone, whose flags it can. */
    if (!lets_clone3) {
        PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1));
        PUT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS));
    }
    /* exec fails as Landlock would have it fail; a trap would kill the
     * child of posix_spawn, which runs with every handler reset. */
    if (!spec->allow_exec) {
        for (size_t index = 0; index < 2; index++) {
            PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)exec_calls[index].number, 0, 1));
            PUT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM));
        }
    }
    /* clone with a namespace flag. */
    const uint32_t namespace_flags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER
                                     | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWTIME;
    PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 4));
    PUT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])));
    PUT(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, namespace_flags, 0, 1));
    PUT(BPF_STMT(BPF_RET | BPF_K, deny));
    PUT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    /* With the network off, no socket at all: Landlock cannot confine a
     * Unix socket reached by its path (a session bus, a container engine's),
     * and a family left open (vsock, SMC) would be a way out. (socketpair
     * makes a pair no one else can reach.) A Unix or netlink socket is
     * refused unnamed, as Landlock refuses a path: libc tries those on its
     * own (nscd, syslog, getaddrinfo's look at the interfaces) and goes on
     * without them; any other is trapped and named. */
    if (spec->network != CURFEW_SANDBOX_NETWORK_ON) {
        PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, loopback ? 8 : 5));
        PUT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])));
        if (loopback) {
            /* To the block's last allow, for the helper's filter to take. */
            PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET, 5, 0));
            PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET6, 4, 0));
        }
        PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 1, 0));
        PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_NETLINK, 0, 1));
        PUT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EACCES));
        PUT(BPF_STMT(BPF_RET | BPF_K, deny));
        if (loopback) PUT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    }
    /* A worker's own namespaces, before it seals them; A is the number again after. */
    if (for_server) {
        PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_unshare, 0, 4));
        PUT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])));
        PUT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, worker_namespaces, 0, 1));
        PUT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
        PUT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
    }
    /* Last, as each of the checks above either returns or leaves the call's
     * number in A: the calls no job needs. */
    uint32_t calls[DENIED_COUNT];
    size_t count = 0;
    for (size_t index = 0; index < DENIED_COUNT; index++) calls[index] = (uint32_t)denied_calls[index].number;
    qsort(calls, DENIED_COUNT, sizeof calls[0], compare_calls);
    for (size_t index = 0; index < DENIED_COUNT; index++) {
        if (count == 0 || calls[count - 1] != calls[index]) calls[count++] = calls[index];
    }
    int error = emit_denials(filter, &length, calls, 0, count, deny);
    if (error != 0) return error;
#undef PUT
    struct sock_fprog program = {.len = (unsigned short)length, .filter = filter};
    /* TSYNC: the rule holds for every thread, should one exist (a thread
     * that cannot take it is named by its id: then EBUSY). */
    long status = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &program);
    return status == 0 ? 0 : status > 0 ? EBUSY : errno;
#endif
}

/* ---- the loopback network: sockets made by a helper, bound to `lo` ----
 *
 * A filter cannot read the address a connect names (it is behind a
 * pointer, and a second thread could change it once read), so the job's
 * inet sockets are not its own to make: seccomp hands each socket()
 * to a helper process forked before the sandbox, which makes the socket,
 * binds it to the loopback device and puts it in the job's table as the
 * call's result (SECCOMP_ADDFD_FLAG_SEND, Linux 5.14). A socket bound to a
 * device is routed through it alone, and only CAP_NET_RAW in the host's
 * network namespace, which no worker has, undoes the binding: a connect
 * elsewhere, even to this machine's other addresses, goes nowhere. */

/* The socket() calls the helper answers: those of IPv4 and IPv6. */
static int install_socket_listener(void) {
#ifndef SANDBOX_ARCH
    errno = ENOSYS;
    return -1;
#else
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SANDBOX_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW), /* the main filter kills it */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 4),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET6, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = {.len = sizeof filter / sizeof filter[0], .filter = filter};
    /* No TSYNC (which a listener cannot have): this process has one thread. */
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &program);
#endif
}

/* Whether the kernel can put a descriptor in the caller's table as its
 * call's result (5.14): asked of a request id no call has, it says ENOENT. */
static int can_send_descriptors(int listener) {
    struct seccomp_notif_addfd probe = {.id = 0, .flags = SECCOMP_ADDFD_FLAG_SEND, .srcfd = (uint32_t)listener};
    return ioctl(listener, SECCOMP_IOCTL_NOTIF_ADDFD, &probe) < 0 && errno == ENOENT;
}

/* One socket() the filter passed on: made here, bound to `lo`, and sent.
 * Only TCP: a UDP send picks its own way out with IP_PKTINFO, whatever the
 * socket is bound to (seen: a thousand datagrams to 8.8.8.8 left by eth0),
 * and a raw socket, were the host root, would see all of loopback's
 * traffic. A TCP connect and what it accepts keep the binding. */
static void answer_socket_call(int listener, const struct seccomp_notif *request) {
    int domain = (int)request->data.args[0];
    int type = (int)request->data.args[1];
    int protocol = (int)request->data.args[2];
    int kind = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
    struct seccomp_notif_resp response = {.id = request->id, .error = -EACCES};
    int plain = kind == SOCK_STREAM && (protocol == 0 || protocol == IPPROTO_TCP);
    if (request->data.nr == SYS_socket && (domain == AF_INET || domain == AF_INET6) && plain) {
        int made = socket(domain, type | SOCK_CLOEXEC, protocol);
        if (made < 0) {
            response.error = -errno;
        } else if (setsockopt(made, SOL_SOCKET, SO_BINDTODEVICE, "lo", sizeof "lo") != 0) {
            response.error = -errno;
        } else {
            struct seccomp_notif_addfd add = {
                .id = request->id,
                .flags = SECCOMP_ADDFD_FLAG_SEND,
                .srcfd = (uint32_t)made,
                .newfd_flags = (type & SOCK_CLOEXEC) ? O_CLOEXEC : 0,
            };
            /* Sent, or the call is gone (its thread interrupted): done either way. */
            if (ioctl(listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add) >= 0 || errno == ENOENT) {
                close(made);
                return;
            }
            response.error = -errno;
        }
        if (made >= 0) close(made);
    }
    (void)ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &response);
}

/* The helper: takes the listener from `channel`, answers until the worker
 * is gone. It holds no other descriptor and runs no plugin code. */
static void serve_socket_calls(int channel, pid_t worker) __attribute__((noreturn));
static void serve_socket_calls(int channel, pid_t worker) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != worker) _exit(0);
    if (dup2(channel, 0) < 0) _exit(0);
    /* Nothing of the worker's stays open here (before 5.9, one by one). */
    if (close_range(1, ~0U, 0) != 0) {
        long most = sysconf(_SC_OPEN_MAX);
        for (long fd = 1; fd < (most > 0 && most < 65536 ? most : 65536); fd++) close((int)fd);
    }
    char byte;
    char space[CMSG_SPACE(sizeof(int))];
    struct iovec vector = {.iov_base = &byte, .iov_len = 1};
    struct msghdr message = {.msg_iov = &vector, .msg_iovlen = 1, .msg_control = space, .msg_controllen = sizeof space};
    if (recvmsg(0, &message, MSG_CMSG_CLOEXEC) != 1) _exit(0);
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    if (header == NULL || header->cmsg_type != SCM_RIGHTS || header->cmsg_len != CMSG_LEN(sizeof(int))) _exit(0);
    int listener;
    memcpy(&listener, CMSG_DATA(header), sizeof listener);
    close(0);
    struct pollfd wait = {.fd = listener, .events = POLLIN};
    while (1) {
        if (poll(&wait, 1, -1) < 0) {
            if (errno == EINTR) continue;
            _exit(0);
        }
        /* Every process of the filter has ended. */
        if (wait.revents & (POLLHUP | POLLERR | POLLNVAL)) _exit(0);
        struct seccomp_notif request;
        memset(&request, 0, sizeof request);
        if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &request) != 0) {
            if (errno == EINTR || errno == ENOENT) continue;
            _exit(0);
        }
        answer_socket_call(listener, &request);
    }
}

/* Forks the helper; `*channel` is where its listener goes. */
static int start_socket_helper(int *channel, pid_t *helper) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return errno;
    pid_t worker = getpid();
    pid_t child = fork();
    if (child < 0) {
        int error = errno;
        close(pair[0]);
        close(pair[1]);
        return error;
    }
    if (child == 0) serve_socket_calls(pair[1], worker);
    close(pair[1]);
    *channel = pair[0];
    *helper = child;
    return 0;
}

static int send_descriptor(int channel, int fd) {
    char byte = 0;
    char space[CMSG_SPACE(sizeof(int))];
    memset(space, 0, sizeof space);
    struct iovec vector = {.iov_base = &byte, .iov_len = 1};
    struct msghdr message = {.msg_iov = &vector, .msg_iovlen = 1, .msg_control = space, .msg_controllen = sizeof space};
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(header), &fd, sizeof fd);
    return sendmsg(channel, &message, MSG_NOSIGNAL) == 1 ? 0 : errno;
}

static pid_t socket_helper;

int curfew_sandbox_helper(void) { return socket_helper; }

/* Gives the helper its listener: 1 when the loopback network holds, 0 when
 * this kernel cannot (the job then has no network at all), or -errno. */
static int hand_sockets_to_helper(int channel) {
    int listener = install_socket_listener();
    if (listener < 0) {
        /* Older than 5.0, no seccomp, or a listener already made for this
         * process (a container engine's): no loopback network. */
        return errno == EINVAL || errno == ENOSYS || errno == EBUSY || errno == EACCES ? 0 : -errno;
    }
    int error = can_send_descriptors(listener) ? send_descriptor(channel, listener) : -1;
    close(listener);
    return error == 0 ? 1 : error < 0 ? 0 : -error;
}

/* The call filter a fork server installed for its workers (see
 * curfew_sandbox_prepare_server), the spec it was made for, and whether it
 * lets their namespaces through. */
static int server_filter;
static int server_network;
static int server_exec;
static int server_unshare;

/* Whether a worker makes a user and IPC namespace: only where the kernel has
 * no Landlock, whose ptrace rule elsewhere keeps other processes' memory
 * (/proc/PID/mem) closed; System V IPC and message queues the call filter
 * refuses either way. Under a fork server's filter, what that filter lets
 * through (no worker can widen it). */
static int wants_namespaces(void) {
    if (server_filter) return server_unshare;
    return curfew_sandbox_landlock_abi() <= 0 && curfew_sandbox_probe_namespaces();
}

int curfew_sandbox_prepare_server(int network, int allow_exec) {
    if (network == CURFEW_SANDBOX_NETWORK_LOOPBACK || server_filter) return EINVAL;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
    int lets_unshare = wants_namespaces();
    /* Its own effective set stays: the bounding set limits only what an exec gains. */
    if (drop_bounding_set() == 0) bounding_set_dropped = 1;
    curfew_sandbox_spec spec = {.paths = NULL, .path_count = 0, .network = network, .allow_exec = allow_exec};
    int error = install_filter(&spec, 0, lets_unshare, 1);
    if (error != 0) return error;
    server_filter = 1;
    server_network = network;
    server_exec = allow_exec;
    server_unshare = lets_unshare;
    return 0;
}

#ifdef SANDBOX_ARCH
/* Adds a filter of four instructions that answers call `number` with
 * `action` and lets every other call through: 0, EBUSY (TSYNC found a
 * thread it could not sync), or an errno. */
static int refuse_one_call(uint32_t number, uint32_t action, unsigned flags) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, number, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, action),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = {.len = sizeof filter / sizeof filter[0], .filter = filter};
    long status = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &program);
    return status == 0 ? 0 : status > 0 ? EBUSY : errno;
}
#endif

int curfew_sandbox_seal_forked_child(void) {
#ifndef SANDBOX_ARCH
    return 0;
#else
    return server_filter ? refuse_one_call(SYS_clone3, SECCOMP_RET_ERRNO | ENOSYS, 0) : 0;
#endif
}

/* Under a fork server's filter: no more namespaces, as the full filter has it. */
static int seal_namespaces(int allow_exec) {
#ifndef SANDBOX_ARCH
    (void)allow_exec;
    return ENOSYS;
#else
    return refuse_one_call(SYS_unshare, allow_exec ? SECCOMP_RET_ERRNO | EPERM : SECCOMP_RET_TRAP, SECCOMP_FILTER_FLAG_TSYNC);
#endif
}

static int install_denial_handler(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_denied;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&action.sa_mask);
    return sigaction(SIGSYS, &action, NULL) == 0 ? 0 : errno;
}

/* The threads of this process. /proc/self/task's link count is two and
 * one per thread: a stat, which makes no text. Else from /proc/self/stat
 * (its 20th field), which costs half what `status` does to make; the name
 * in field 2 may hold spaces and parentheses: the fields are counted from
 * its last ')'. */
static int thread_count(void) {
    struct stat task;
    if (stat("/proc/self/task", &task) == 0 && task.st_nlink >= 3 && task.st_nlink < INT_MAX) return (int)task.st_nlink - 2;
    char text[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t size = read(fd, text, sizeof text - 1);
    close(fd);
    if (size <= 0) return -1;
    text[size] = 0;
    char *name_end = strrchr(text, ')');
    if (name_end == NULL) return -1;
    int field = 2;
    for (char *at = name_end + 1; *at; at++) {
        if (*at == ' ' && ++field == 20) return atoi(at + 1);
    }
    return -1;
}

static int apply_layers(const curfew_sandbox_spec *spec, curfew_sandbox_report *report, int channel);
static int apply_process_layers(const curfew_sandbox_spec *spec, curfew_sandbox_report *report, int loopback);
static int confine_identity(curfew_sandbox_report *report);

static int prepare_ruleset(int network, int allow_exec);
static void close_common(void);

/* The layers curfew_sandbox_prepare made: 0 when it did not (or failed);
 * else what they hold and the network and exec they were made for. */
static int prepared;
static int prepared_applied;
static int prepared_network;
static int prepared_exec;
/* A prepare that failed after it changed this process: the step and the
 * errno every later curfew_sandbox_apply fails with (a user namespace left
 * unmapped, say, cannot be made again from inside itself). */
static const char *prepare_failed_step;
static int prepare_failed_error;

int curfew_sandbox_prepare(int network, int allow_exec, curfew_sandbox_report *report) {
    memset(report, 0, sizeof *report);
    /* The loopback network's helper is forked per job, before any layer. */
    if (network == CURFEW_SANDBOX_NETWORK_LOOPBACK || prepared || prepare_failed_error) return EINVAL;
    if (thread_count() != 1) {
        report->step = "the worker has more than one thread";
        return EBUSY;
    }
    curfew_sandbox_spec spec = {.paths = NULL, .path_count = 0, .network = network, .allow_exec = allow_exec};
    int error = confine_identity(report);
    if (error == 0) error = apply_process_layers(&spec, report, 0);
    if (error != 0) {
        prepare_failed_step = report->step;
        prepare_failed_error = error;
        return error;
    }
    /* Without it, Landlock is applied whole with the job. */
    prepare_ruleset(network, allow_exec);
    close_common();
    prepared = 1;
    prepared_applied = report->applied;
    prepared_network = network;
    prepared_exec = allow_exec;
    return 0;
}

int curfew_sandbox_apply(const curfew_sandbox_spec *spec, curfew_sandbox_report *report) {
    memset(report, 0, sizeof *report);
    /* Opened by the fork server for a prepare that did not get so far: no plugin code holds them. */
    close_common();
    /* Landlock and a new user namespace bind only the calling thread (and
     * what it starts later): another thread would run unconfined. */
    if (thread_count() != 1) {
        report->step = "the worker has more than one thread";
        return EBUSY;
    }
    int error;
    /* The helper first, while this process has all it started with. */
    int channel = -1;
    if (spec->network == CURFEW_SANDBOX_NETWORK_LOOPBACK) {
        pid_t helper = 0;
        if ((error = start_socket_helper(&channel, &helper)) != 0) {
            report->step = "starting the loopback network's helper";
            return error;
        }
        socket_helper = helper;
    }
    error = apply_layers(spec, report, channel);
    if (channel >= 0) {
        close(channel);
        /* Given no listener, the helper leaves at the channel's end: reaped.
         * (After a failure the worker ends, and the helper with it.) */
        if (error == 0 && !(report->applied & CURFEW_SANDBOX_LOOPBACK_SOCKETS)) {
            while (waitpid(socket_helper, NULL, 0) < 0 && errno == EINTR) {}
            socket_helper = 0;
        }
    }
    return error;
}

static int apply_layers(const curfew_sandbox_spec *spec, curfew_sandbox_report *report, int channel) {
    int error;
    if (prepare_failed_error != 0) {
        report->step = prepare_failed_step;
        return prepare_failed_error;
    }
    if (prepared) {
        /* What was made ahead holds. Its call filter may be wider than this
         * spec's, never narrower: a filter added on top narrows it (each
         * filter must allow a call), none can widen it. */
        int wider = spec->network == CURFEW_SANDBOX_NETWORK_LOOPBACK
            || (spec->network == CURFEW_SANDBOX_NETWORK_ON && prepared_network != CURFEW_SANDBOX_NETWORK_ON)
            || (spec->allow_exec && !prepared_exec);
        if (wider) {
            report->step = "the layers made ahead of the job (for a narrower sandbox)";
            return EPERM;
        }
        report->applied = prepared_applied;
        int abi = curfew_sandbox_landlock_abi();
        if (abi <= 0 && ready_ruleset >= 0) {
            /* Landlock refused since (the test seam): the job gets no descriptor of it. */
            close(ready_ruleset);
            ready_ruleset = -1;
        }
        if (abi > 0 && (error = apply_landlock(spec, abi, report)) != 0) {
            report->step = "Landlock";
            return error;
        }
        if (spec->network != prepared_network || spec->allow_exec != prepared_exec) {
            if ((error = install_filter(spec, 0, 0, 0)) != 0) {
                report->step = "seccomp";
                return error;
            }
            if (spec->network != CURFEW_SANDBOX_NETWORK_ON) report->applied |= CURFEW_SANDBOX_SOCKET_FILTER;
        }
        return 0;
    }
    if ((error = confine_identity(report)) != 0) return error;
    int abi = curfew_sandbox_landlock_abi();
    if (abi > 0 && (error = apply_landlock(spec, abi, report)) != 0) {
        report->step = "Landlock";
        return error;
    }
    int loopback = 0;
    if (channel >= 0 && (loopback = hand_sockets_to_helper(channel)) < 0) {
        report->step = "the loopback network's filter";
        return -loopback;
    }
    return apply_process_layers(spec, report, loopback);
}

/* no_new_privs, a user and IPC namespace where wants_namespaces, and every
 * capability dropped. */
static int confine_identity(curfew_sandbox_report *report) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        report->step = "no_new_privs";
        return errno;
    }
    int made = wants_namespaces() ? own_namespaces() : -1;
    if (made > 0) {
        report->step = "mapping the user into its namespace";
        return made;
    }
    if (made == 0) report->applied |= CURFEW_SANDBOX_OWN_NAMESPACES;
    int error = drop_capabilities(made == 0);
    if (error != 0) {
        report->step = "dropping capabilities";
        return error;
    }
    report->applied |= CURFEW_SANDBOX_NO_CAPABILITIES;
    return 0;
}

/* The SIGSYS handler and the call filter. */
static int apply_process_layers(const curfew_sandbox_spec *spec, curfew_sandbox_report *report, int loopback) {
    int error;
    if ((error = install_denial_handler()) != 0) {
        report->step = "the SIGSYS handler";
        return error;
    }
    /* The fork server's filter, made once for this spec, is this one but
     * for any unshare it let through for the namespaces: sealed now. */
    int inherited = server_filter && !loopback && server_network == spec->network && server_exec == spec->allow_exec;
    if (inherited) error = server_unshare ? seal_namespaces(spec->allow_exec) : 0;
    else error = install_filter(spec, loopback, 0, 0);
    if (error != 0) {
        report->step = "seccomp";
        return error;
    }
    report->applied |= CURFEW_SANDBOX_SYSCALLS;
    network_is_loopback = loopback;
    if (loopback) report->applied |= CURFEW_SANDBOX_LOOPBACK_SOCKETS;
    else if (spec->network != CURFEW_SANDBOX_NETWORK_ON) report->applied |= CURFEW_SANDBOX_SOCKET_FILTER;
    return 0;
}

/* ---- what every sandbox grants ---- */

/* Read beneath: the loader and its libraries, the time zone and the user
 * database that libc reads, and what Dispatch and the runtime read of the
 * CPUs and of this process's threads (`/proc/TID/stat`, by a thread id no
 * rule made beforehand can name: Dispatch stops the process when it cannot
 * read one). Of another process, `/proc` then shows what it shows any
 * user; what needs a ptrace check (`mem`, `environ`) Landlock refuses
 * outside the sandbox's domain. Paths that do not exist are skipped. */
static const char *const system_paths[] = {
    "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin",
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/timezone", "/etc/locale.alias",
    "/etc/nsswitch.conf", "/etc/passwd", "/etc/group", "/etc/hosts", "/etc/host.conf", "/etc/gai.conf",
    "/sys/devices/system/cpu", "/sys/fs/cgroup", "/proc", NULL,
};

/* Read and written: the devices every program may use. */
static const char *const device_paths[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", NULL};

const char *const *curfew_sandbox_system_paths(void) { return system_paths; }
const char *const *curfew_sandbox_device_paths(void) { return device_paths; }

/* Whether `path` is one every sandbox grants as it asks (a system path to
 * read, a device): what a ruleset made ahead holds already. */
static int is_common_rule(const curfew_sandbox_path *path) {
    const char *const *list = path->access == CURFEW_SANDBOX_READ ? system_paths : path->access == CURFEW_SANDBOX_DEVICE ? device_paths : NULL;
    for (; list && *list; list++) {
        if (strcmp(*list, path->path) == 0) return 1;
    }
    return 0;
}

/* The paths of system_paths then device_paths, opened once by a fork
 * server (curfew_sandbox_open_common) so that each worker it forks makes
 * its rules from these descriptors, looking up nothing itself: O_PATH,
 * numbered from common_low to common_high with no gap, one per path (a
 * path missing when the server opened it holds /dev/null's and is
 * `absent`). The server also knows, so no worker asks, whether each is a
 * folder and whether a rule beneath another covers it already (/lib is
 * /usr/lib on a merged /usr). A rule holds the inode, and a file such as
 * /etc/passwd is replaced by rename: before each fork the server looks
 * each path but a folder up again and opens it again onto its number when
 * it names another inode than the one held (curfew_sandbox_refresh_common),
 * so a worker's rule holds the file as it was when the worker was forked,
 * as a lookup of its own would. The held descriptor keeps the old inode
 * allocated, so a new file cannot have its number. Not inotify: closing a
 * watch waits for an SRCU grace period, which the server's exit, and so
 * the end of every run, would wait for. common_count is 0
 * where none were opened, and once closed. */
enum { common_most = 48, common_first = 256 };
/* How many paths there are: system_paths then device_paths, without their NULLs. */
enum {
    system_count = (int)(sizeof system_paths / sizeof system_paths[0]) - 1,
    common_total = system_count + (int)(sizeof device_paths / sizeof device_paths[0]) - 1,
};
/* What a worker does with each: a rule from the descriptor (a folder, a
 * file), nothing (absent when last looked at, or covered), or its own
 * lookup (a file behind a link, whose target may change unseen, or one
 * that could not be opened again). */
enum common_kind { common_absent, common_folder, common_file, common_covered, common_lookup };
static int common_fds[common_most];
static unsigned char common_kinds[common_most];
static int common_count;
static int common_low = -1;
static int common_high = -1;
/* The inode each path but a folder named when it was last opened (or
 * looked at): its device and number, or `there` 0 when it was missing. */
static struct {
    dev_t device;
    ino_t inode;
    unsigned char there;
} common_identity[common_most];
/* Each folder held, resolved (see is_covered); NULL for the rest. */
static char *common_resolved[common_most];

/* In a worker: the range holds these descriptors and no other (see
 * open_common). */
static void close_common(void) {
    if (common_count > 0) close_range((unsigned)common_low, (unsigned)common_high, 0);
    common_count = 0;
}

static const char *common_path(int index) {
    return index < system_count ? system_paths[index] : device_paths[index - system_count];
}

static curfew_sandbox_access common_access(int index) {
    return index < system_count ? CURFEW_SANDBOX_READ : CURFEW_SANDBOX_DEVICE;
}

/* Whether `path`, resolved, lies beneath a folder read by an earlier
 * present system path, which then grants all a rule of its own would. */
static int is_covered(int index, const char *resolved) {
    if (common_access(index) != CURFEW_SANDBOX_READ) return 0;
    for (int other = 0; other < index; other++) {
        const char *folder = common_resolved[other];
        if (common_kinds[other] != common_folder || common_access(other) != CURFEW_SANDBOX_READ || folder == NULL) continue;
        size_t length = strlen(folder);
        if (strncmp(resolved, folder, length) == 0 && (resolved[length] == '/' || length == 1)) return 1;
    }
    return 0;
}

/* Opens path `index` onto descriptor `target` (or a new number at or above
 * common_first when -1) and sets its kind: the descriptor, or -1 and errno. */
static int open_common_path(int index, int target) {
    const char *path = common_path(index);
    int fd = open(path, O_PATH | O_CLOEXEC);
    unsigned char kind = common_absent;
    char resolved[PATH_MAX];
    int is_resolved = 0;
    if (fd >= 0) {
        struct stat status;
        if (fstat(fd, &status) != 0) {
            int error = errno;
            close(fd);
            errno = error;
            return -1;
        }
        kind = S_ISDIR(status.st_mode) ? common_folder : common_file;
        common_identity[index].device = status.st_dev;
        common_identity[index].inode = status.st_ino;
        common_identity[index].there = 1;
        is_resolved = realpath(path, resolved) != NULL;
        if (is_resolved && is_covered(index, resolved)) kind = common_covered;
        /* A file reached through a link (NixOS's /etc/hosts ->
         * /etc/static/... -> /nix/store/...): the link itself can be
         * replaced to point elsewhere between two lookups of the server's,
         * so each worker looks it up. */
        else if (kind == common_file && (!is_resolved || strcmp(resolved, path) != 0)) kind = common_lookup;
    } else if (errno == ENOENT || errno == ENOTDIR || errno == EACCES) {
        common_identity[index].there = 0;
        /* A link whose target is missing may get one elsewhere: looked up. */
        struct stat link;
        if (lstat(path, &link) == 0) kind = common_lookup;
        fd = open("/dev/null", O_PATH | O_CLOEXEC);
        if (fd < 0) return -1;
    } else {
        return -1;
    }
    int moved = target >= 0 ? dup3(fd, target, O_CLOEXEC) : fcntl(fd, F_DUPFD_CLOEXEC, common_first);
    int error = errno;
    close(fd);
    if (moved < 0) {
        errno = error;
        return -1;
    }
    common_kinds[index] = kind;
    free(common_resolved[index]);
    common_resolved[index] = kind == common_folder && is_resolved ? strdup(resolved) : NULL;
    return moved;
}

int curfew_sandbox_open_common(void) {
    if (common_count > 0) return 0;
    int count = common_total;
    if (count > common_most) return E2BIG;
    int error = 0;
    for (int index = 0; index < count; index++) {
        common_fds[index] = open_common_path(index, -1);
        if (common_fds[index] < 0) {
            error = errno;
            count = index;
            break;
        }
    }
    common_count = count;
    /* A forked child keeps exactly this range open (curfew_sandbox_common_range). */
    if (error == 0 && common_fds[count - 1] - common_fds[0] + 1 != count) error = EBUSY;
    if (error == 0) {
        common_low = common_fds[0];
        common_high = common_fds[count - 1];
        return 0;
    }
    for (int index = 0; index < common_count; index++) {
        close(common_fds[index]);
        free(common_resolved[index]);
        common_resolved[index] = NULL;
    }
    common_count = 0;
    return error;
}

void curfew_sandbox_refresh_common(void) {
    for (int index = 0; index < common_count; index++) {
        if (common_kinds[index] == common_folder) continue;
        struct stat now = {0};
        int there = stat(common_path(index), &now) == 0;
        if (there == common_identity[index].there &&
            (!there || (now.st_dev == common_identity[index].device && now.st_ino == common_identity[index].inode)))
            continue;
        if (open_common_path(index, common_fds[index]) < 0) {
            /* Each worker looks it up; opened again once it changes again. */
            common_kinds[index] = common_lookup;
            common_identity[index].device = now.st_dev;
            common_identity[index].inode = now.st_ino;
            common_identity[index].there = (unsigned char)there;
        }
    }
}

int curfew_sandbox_common_range(int *low, int *high) {
    if (common_count == 0) return 0;
    *low = common_low;
    *high = common_high;
    return 1;
}

/* Makes the ruleset every sandbox with `network` and `allow_exec` starts
 * from (the system paths to read, the devices): 0, or an errno and none.
 * From the descriptors its fork server opened, where it did. */
static int prepare_ruleset(int network, int allow_exec) {
    int abi = curfew_sandbox_landlock_abi();
    if (abi <= 0) return ENOSYS;
    uint64_t handled = fs_rights(abi);
    struct sandbox_ruleset_attr attributes = ruleset_attributes(abi, network);
    int ruleset = (int)syscall(SYS_landlock_create_ruleset, &attributes, sizeof attributes, 0);
    if (ruleset < 0) return errno;
    for (int index = 0; index < common_total; index++) {
        curfew_sandbox_access access = common_access(index);
        int error = 0;
        unsigned char kind = index < common_count ? common_kinds[index] : common_lookup;
        if (kind == common_folder || kind == common_file) {
            error = add_known_rule(ruleset, common_fds[index], access, kind == common_folder, handled, allow_exec);
        } else if (kind == common_lookup) {
            curfew_sandbox_path path = {common_path(index), access};
            error = add_path_rule(ruleset, &path, handled, allow_exec);
        }
        if (error != 0) {
            close(ruleset);
            return error;
        }
    }
    ready_ruleset = ruleset;
    ready_network = network;
    ready_exec = allow_exec;
    return 0;
}

int curfew_sandbox_apply_for_scan(curfew_sandbox_report *report) {
    enum { devices = sizeof device_paths / sizeof device_paths[0] - 1 };
    /* Everything is read: a library's dependencies may be anywhere (its
     * RUNPATH, LD_LIBRARY_PATH, a toolchain), and a scan that cannot find
     * one would reject a plugin its run would load. */
    curfew_sandbox_path paths[devices + 1] = {{"/", CURFEW_SANDBOX_READ}};
    for (size_t index = 0; index < devices; index++) paths[index + 1] = (curfew_sandbox_path){device_paths[index], CURFEW_SANDBOX_DEVICE};
    curfew_sandbox_spec spec = {.paths = paths, .path_count = devices + 1, .network = CURFEW_SANDBOX_NETWORK_OFF, .allow_exec = 0};
    return curfew_sandbox_apply(&spec, report);
}

/* ---- a scratch folder's removal ---- */

#include <dirent.h>

/* Removes what the folder `fd` holds, never following a link: a job that
 * left a link to elsewhere in its scratch folder loses the link, not what
 * it names. Relative to descriptors, so a folder swapped for a link during
 * the walk is not followed either. Returns 0, or an errno (ELOOP when deeper
 * than `depth`). Closes `fd`. */
static int remove_contents(int fd, int depth) {
    DIR *folder = fdopendir(fd);
    if (folder == NULL) {
        int error = errno;
        close(fd);
        return error;
    }
    int result = 0;
    struct dirent *entry;
    while ((entry = readdir(folder)) != NULL) {
        const char *name = entry->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
        if (unlinkat(dirfd(folder), name, 0) == 0) continue;
        if (errno != EISDIR && errno != EPERM) {
            if (errno != ENOENT && result == 0) result = errno;
            continue;
        }
        if (depth == 0) {
            if (result == 0) result = ELOOP;
            continue;
        }
        int child = openat(dirfd(folder), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        /* A folder the job made unreadable (mkdir with mode 0) is its owner's to open again. */
        if (child < 0 && errno == EACCES && fchmodat(dirfd(folder), name, 0700, AT_SYMLINK_NOFOLLOW) == 0) {
            child = openat(dirfd(folder), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (child < 0) {
            if (errno != ENOENT && result == 0) result = errno;
            continue;
        }
        /* One the job made read-only (0500) opens, but its entries would not go. */
        (void)fchmod(child, 0700);
        int error = remove_contents(child, depth - 1);
        if (error == 0 && unlinkat(dirfd(folder), name, AT_REMOVEDIR) != 0 && errno != ENOENT) error = errno;
        if (error != 0 && result == 0) result = error;
    }
    closedir(folder);
    return result;
}

int curfew_shim_remove_tree(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : errno;
    int error = remove_contents(fd, 256);
    if (error == 0 && rmdir(path) != 0 && errno != ENOENT) error = errno;
    return error;
}

/* Whether every extended attribute in `names` (`size` bytes of names, each
 * ending in a NUL) is the security modules' own: a job cannot set those. */
static int only_security_attributes(const char *names, ssize_t size) {
    for (ssize_t at = 0; at < size; at += (ssize_t)strlen(names + at) + 1) {
        if (strncmp(names + at, "security.", 9) != 0) return 0;
    }
    return 1;
}

int curfew_shim_empty_folder(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    /* A folder its job made unreadable is its owner's to open again. */
    if (fd < 0 && errno == EACCES && fchmodat(AT_FDCWD, path, 0700, AT_SYMLINK_NOFOLLOW) == 0) {
        fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) return errno;
    struct stat info;
    int error = 0;
    if (fstat(fd, &info) != 0) error = errno;
    else if (!S_ISDIR(info.st_mode) || info.st_uid != geteuid()) error = EPERM;
    /* As mkdtemp made it: mode 0700, this process's group, no ACL. */
    else if (fchmod(fd, 0700) != 0 || fchown(fd, (uid_t)-1, getegid()) != 0) error = errno;
    if (error == 0) {
        (void)fremovexattr(fd, "system.posix_acl_access");
        (void)fremovexattr(fd, "system.posix_acl_default");
        char names[1024];
        ssize_t size = flistxattr(fd, names, sizeof names);
        if (size < 0 && errno != ENOTSUP) error = errno == ERANGE ? EPERM : errno;
        else if (size > 0 && !only_security_attributes(names, size)) error = EPERM;
    }
    if (error == 0) {
        int contents = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        error = contents < 0 ? errno : remove_contents(contents, 256);
    }
    /* Read again: a walk that unlinks as it reads may skip an entry on some file systems. */
    if (error == 0) {
        int again = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        DIR *folder = again < 0 ? NULL : fdopendir(again);
        if (folder == NULL) {
            error = errno;
            if (again >= 0) close(again);
        } else {
            rewinddir(folder);
            for (struct dirent *entry; error == 0 && (entry = readdir(folder)) != NULL;) {
                if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0) error = ENOTEMPTY;
            }
            closedir(folder);
        }
    }
    close(fd);
    return error;
}

/* ---- where the Swift runtime was loaded from ---- */

#include <dlfcn.h>

const char *curfew_sandbox_swift_runtime_file(void) {
    void *symbol = dlsym(RTLD_DEFAULT, "swift_retain");
    Dl_info info;
    if (symbol == NULL || dladdr(symbol, &info) == 0) return NULL;
    return info.dli_fname;
}
