/* Small C glue for the Curfew host: what Swift cannot reach cleanly through
 * the Glibc module (GNU-only dlopen flags) or wants without overhead. */
#ifndef CURFEW_SHIMS_H
#define CURFEW_SHIMS_H

#include <stdint.h>

/* dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE). NODELETE because
 * unloading a Swift-built plugin unmaps type metadata the runtime still
 * caches, and the process crashes later. */
void *curfew_shim_dlopen_plugin(const char *path);

/// What `address` (from dlsym on `handle`) is: 0 a function defined in the
/// object `handle` names itself, 1 not a function (data, TLS, …), 2 defined
/// in another object (a library it depends on), 3 unknown.
int curfew_shim_symbol_kind(void *handle, void *address);

/* The nanoseconds of CLOCK_MONOTONIC. */
uint64_t curfew_shim_monotonic_nanoseconds(void);

/* pidfd_open(pid, 0): a descriptor that becomes readable when the process
 * exits, or -1 with errno set. */
int curfew_shim_pidfd_open(int pid);

/* 1 when the extended attribute `name` of `path` begins with '1' (how
 * systemd marks a delegated cgroup), else 0. */
int curfew_shim_xattr_is_set(const char *path, const char *name);

/* pidfd_send_signal(pidfd, signal, NULL, 0): 0, or -1 with errno set (ESRCH
 * once that process has exited, whatever now has its pid). */
int curfew_shim_pidfd_send_signal(int pidfd, int signal);

/* 1 when the process `pidfd` refers to is this process's child (waitid would
 * report on it), else 0. */
int curfew_shim_pidfd_is_child(int pidfd);

/* 1 when the child `pid` has exited (it stays unreaped), 0 while it runs,
 * -1 when it is not this process's child. */
int curfew_shim_has_exited(int pid);

/* Waits until `pid` has exited without reaping it (waitid with WNOWAIT), so
 * its pid cannot be reused while its process group is signalled. */
int curfew_shim_wait_exited(int pid);

/* The fork server: `curfew __forkserver` runs this loop, single-threaded,
 * on the SOCK_SEQPACKET socket `control`. Messages are short texts:
 *   host -> server  "fork" with three descriptors (SCM_RIGHTS): a worker's
 *                   socket, stdout and stderr, and a fourth, optional: the
 *                   folder of a cgroup v2 to fork the worker into; "kill PID".
 *   server -> host  "pid PID SEQUENCE" for each fork, in order, with
 *                   " placed" when the child was forked into the cgroup;
 *                   "exit PID STATUS" when a child ends (its process group is
 *                   killed before it is reaped, so no pid is reused under a
 *                   signal).
 * Returns 0 in a forked child, with the three descriptors on 3, 1 and 2, in
 * a process group of its own, with default signals: it goes on as a
 * worker. Returns -1 when the host closes the socket, -2 when the process is
 * not single-threaded within a second (forking it would be unsafe).
 * For a process that has run no Swift (the scanner's server). */
int curfew_shim_fork_server(int control);

/* The same loop, for a process that has run Swift: on a thread of its own,
 * started here, that has run none, while the calling thread waits for it.
 * A forked child's one thread is that thread, so what Swift's runtime keeps
 * per thread (the thread's id, which its locks store the first time the
 * thread takes one) is the child's own, not the caller's. A child calls
 * `child` to go on as a worker and exits when it returns; only the server
 * returns here: -1 when the host closes the socket, -2 as above. */
int curfew_shim_fork_server_on_fresh_thread(int control, void (*child)(void));

/* Sends `text` with `count` (1 to 4) descriptors over a SOCK_SEQPACKET
 * socket. 0, or errno. */
int curfew_shim_send_with_fds(int sock, const char *text, const int *fds, int count);

/* pipe2(fds, O_CLOEXEC): both ends close-on-exec from the start, so a worker
 * spawned by another thread at the same moment cannot inherit them. */
int curfew_shim_pipe_cloexec(int fds[2]);

/* posix_spawn_file_actions_addclosefrom_np(3) on `actions` (a
 * posix_spawn_file_actions_t *): the child closes every descriptor from
 * `low` up. Not visible through Swift's Glibc module. 0, or an errno. */
int curfew_shim_spawn_close_from(void *actions, int low);

/* Starts `path` with `argv` and `envp` as a worker: in a process group of its
 * own, with default signal dispositions and an empty signal mask, its fd 3
 * the socket `channel`, and its stdout and stderr the pipes `out` and `err`
 * (the parent's copies stay in the parent). Returns 0 and sets *pid, or an
 * errno value. */
int curfew_shim_spawn_worker(const char *path, char *const argv[], char *const envp[],
                             int channel, int out, int err, int *pid);

/* Applies a worker's limits before it loads a plugin: address space bytes,
 * CPU seconds and open files (0 leaves one as it is), then
 * PR_SET_NO_NEW_PRIVS. Returns 0, or an errno value. */
int curfew_shim_limit_worker(uint64_t memory_bytes, uint64_t cpu_seconds, uint64_t open_files);

/* Bytes of heap in use (mallinfo2's uordblks), for benchmarks of memory. */
uint64_t curfew_shim_heap_bytes_in_use(void);

/* Installs, with sigaction and at once, a handler for each of `signals`
 * that writes the signal's number as one byte to a pipe, and returns the
 * pipe's read end (non-blocking, close-on-exec), or -1 with errno set. The
 * handler does only async-signal-safe work (write(2), saving errno), and a
 * signal that arrives before anyone reads the pipe waits in it. One pipe per
 * process; calling again adds signals to it. */
int curfew_shim_signal_pipe(const int *signals, int count);

/* stdout (the C library's FILE, which Swift 6 cannot name safely): make it
 * line-buffered, or flush it. For plugins' output captured in process. */
void curfew_shim_stdout_line_buffered(void);
void curfew_shim_flush_stdout(void);

/* Asks for SIGKILL when the parent dies (PR_SET_PDEATHSIG), then checks
 * that `parent` is still the parent: 0, or -1 when it is gone already (or
 * prctl failed). The signal comes when the thread that started this process
 * ends, so only a helper whose starter waits for it may use it. */
int curfew_shim_die_with_parent(int parent);

/* Sets the calling thread's timer slack (PR_SET_TIMERSLACK) to
 * `nanoseconds`: how much later than asked the kernel may end its timed
 * waits (50 µs by default). 0, or errno. */
int curfew_shim_set_timer_slack(unsigned long nanoseconds);

/* Sets the calling thread's nice value (setpriority on its thread id; a
 * value below 0 needs CAP_SYS_NICE or RLIMIT_NICE). 0, or errno. */
int curfew_shim_set_thread_nice(int nice);

/* Puts the calling thread in the real-time class at the lowest priority
 * (SCHED_FIFO 1), with SCHED_RESET_ON_FORK: a thread or process it starts
 * begins in the normal class, and says so (glibc's own note of the class is
 * left unset). Needs CAP_SYS_NICE or RLIMIT_RTPRIO. 0, or errno. */
int curfew_shim_set_thread_realtime(void);

/* Names the calling thread (PR_SET_NAME; 15 bytes are kept), as `ps -L`,
 * `top -H` and `perf` show it. 0, or errno. */
int curfew_shim_name_thread(const char *name);

/* A non-blocking, close-on-exec netlink socket of `family` (NETLINK_ROUTE
 * is 0, NETLINK_KOBJECT_UEVENT 15) bound to the multicast `groups`: the fd,
 * or -1 with errno. */
int curfew_shim_netlink_socket(int family, uint32_t groups);

/* How many CPUs the calling thread may run on (its affinity: `taskset`, a
 * container's cpuset), at least 1; the online CPUs when the affinity cannot
 * be read. */
int curfew_shim_usable_cpus(void);

/* Makes this process a child subreaper (PR_SET_CHILD_SUBREAPER): orphans
 * of its descendants come to it, not to init. 0, or errno. */
int curfew_shim_become_subreaper(void);

/* SIGKILLs (with its process group) and reaps every child of this process
 * whose pid is not in `keep`, round after round as the orphans of the killed
 * arrive (in a subreaper), for at most `rounds` rounds. How many were
 * killed, or -1 when the kernel cannot list children. */
int curfew_shim_kill_children(const int *keep, int keep_count, int rounds);

/* SIGPIPE caught by a handler that does nothing: a write to a pipe whose
 * reader is gone fails with EPIPE instead of ending the process, and, unlike
 * SIG_IGN, exec resets it, so programs started from here are unaffected. */
void curfew_shim_catch_sigpipe(void);

/* A worker's crash report. `curfew_shim_crash_where` records, for the
 * calling thread, the hook it is about to run: the job (a validated name,
 * which needs no JSON escaping, kept alive by the caller), the hook (0
 * "create", 1 "chunk", 2 "expire", 3 "destroy", 4 "app_event"), and for a chunk slice the
 * chunks run before it and the address of the slice's running count. NULL
 * `job` clears it. `curfew_shim_install_crash_reporter` installs handlers
 * for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT that write one line to
 * `fd` for a thread inside a hook,
 *   {"type":"crashing","job":"J","hook":"chunk","chunks":N}
 * (N: the chunks that had returned), then let the signal take its default
 * course: the process still dies of it. Async-signal-safe. 0, or -1. */
void curfew_shim_crash_where(const char *job, int hook, unsigned long long base,
                             const unsigned long long *count);
int curfew_shim_install_crash_reporter(int fd);

/* The host's report of a fault in plugin code run in its own process
 * (--isolate none). For a thread inside a hook (as recorded above) in the
 * process that installed it, the handlers for SIGSEGV, SIGBUS, SIGFPE,
 * SIGILL and SIGABRT write one line to `human_fd`,
 *   curfew: job 'J' crashed with SIGSEGV in chunk N, in the host's process; ...
 * and, when `machine_fd` >= 0, one JSON line to it,
 *   {"event":"host-crash","job":"J","hook":"chunk","chunk":N,"signal":"SIGSEGV"}
 * then end the process with `_exit(status)`: the fault is the plugin's, so
 * the Swift runtime's backtracer (whose handler it replaces there) neither
 * prints the host's stack as the job's output nor returns into the plugin.
 * With `notify_fd` >= 0 the handler first writes one byte there and waits
 * up to a second for a thread of the host's to report the fault (having
 * delivered what the job said before it: see `curfew_shim_fault`) and end
 * the process; the line above is its fallback. A fault outside a hook goes
 * to the handler that was there before (the backtracer's, for a bug of the
 * host's). Async-signal-safe. 0, or -1. */
int curfew_shim_install_fault_reporter(int human_fd, int machine_fd, int status, int notify_fd);

/* Gives the calling thread an alternate signal stack (64 KiB, freed when the
 * thread ends) unless it has one: the crash and fault handlers run on it, so
 * a hook that overflows its stack is still reported. 0, or -1. */
int curfew_shim_give_thread_alt_stack(void);

/* Closes `fd` in every child this process forks from now on (pthread_atfork):
 * for a lock held by its open file, which a child that plugin code forks,
 * and that outlives the host, would otherwise hold on. One fd; -1 stops it. */
void curfew_shim_close_in_children(int fd);

/* The fault the handler above is reporting: 1 with its job, hook, chunk
 * (0 outside a chunk) and signal name filled in, or 0 when there is none. */
int curfew_shim_fault(const char **job, const char **hook, unsigned long long *chunk, const char **signal);

/* Reads a count another thread is writing (one aligned 64-bit load). */
static inline unsigned long long curfew_shim_load_count(const unsigned long long *count) {
    return *(const volatile unsigned long long *)count;
}

/* accept4(fd, NULL, NULL, SOCK_CLOEXEC): -1 with errno set on failure. */
int curfew_shim_accept(int fd);

/* The user id of the peer of a connected Unix socket, from SO_PEERCRED
 * (the kernel's record, not the peer's claim): 0 on success, -1 with errno. */
int curfew_shim_peer_uid(int fd, unsigned int *uid);

/* ---- The plugin scanner ------------------------------------------------
 * A scanner loads one plugin file in a process of its own and reports what
 * the file's entry returned, so a verdict comes from a process that loaded
 * that file alone, and runs no Swift: `curfew __scanserver` is a fork server
 * (see curfew_shim_fork_server) whose children each scan the file named on
 * their fd 3; `curfew __scanfile` scans one file itself (for a host that
 * cannot fork one). Both start straight from `main`, before any Swift code
 * has run, so a fork copies little.
 *
 * The host sends the path: a u32 length (at most CURFEW_SCAN_MAX_PATH) and
 * its bytes. The scanner answers in frames: a u32 CURFEW_SCAN_MAGIC, a u32
 * kind, a u32 payload length and the payload, all in native byte order:
 * LOADING (before the file is opened), one ANSWER, then DONE. An ANSWER's
 * payload is a u32 outcome, then:
 *   DESCRIPTOR     a u64 descriptor address, a u32 region count, and per
 *                  region a u64 address, a u32 size asked for, a u32 size
 *                  readable and that many bytes: copies of the descriptor,
 *                  its job table, each job and its strings, each cut where
 *                  the memory stopped being readable (a fault ends the
 *                  copy, not the scanner), for the host to check;
 *   STAT_FAILED    a u32 errno;   NOT_REGULAR, NO_ENTRY  nothing;
 *   DLOPEN_FAILED  a u32 cause (CANNOT_LOAD, EMPTY: 0 bytes, NOT_ELF: no
 *                  ELF magic), then dlerror's text, cut at
 *                  CURFEW_SCAN_MAX_DLERROR_BYTES;
 *   DECLINED       a u32 count, then per message a u32 length and bytes:
 *                  what the entry logged before it returned NULL (the first
 *                  CURFEW_SCAN_MAX_MESSAGES, each cut at
 *                  CURFEW_SCAN_MAX_MESSAGE_BYTES);
 *   UNCONFINED     a u32 errno, then the step of the sandbox that failed
 *                  (CURFEW_SCAN_SANDBOX_VARIABLE), at most 256 bytes: the
 *                  file was not opened.
 * Plugin code runs in the scanner and can write on fd 3 too: the host
 * takes nothing it reads for more than a claim about this file. */
/* The batch role, `curfew-scanner __scanbatch.N` (or `curfew` with the same
 * argument, when curfew-scanner is not installed), scans many files, each
 * in a scanner it forks, and reports each on its fd 3, a stream socket. The host sends a u32 timeout
 * in milliseconds and a u32 number of scanners to run at once, then per
 * file a u32 id, a u32 path length and the path; once all are sent, a u32
 * CURFEW_SCAN_END and a u32 0; to end at once, CURFEW_SCAN_STOP and 0 (the
 * end of its stream ends the server at once too).
 * Per file the server sends a u32 id, its scanner's i32 wait status (-1
 * with CURFEW_SCAN_NOT_STARTED), u32 flags, a u32 length and what the
 * scanner said on its channel (frames as above, at most
 * CURFEW_SCAN_MAX_REPLY bytes). Reports are held and sent together once
 * CURFEW_SCAN_REPORTS_AT_ONCE or more (or 64 KiB) are held, or when no
 * request waits to start, or once the oldest has waited 10 ms: a host that
 * keeps more files than that and the width with a server wakes about once
 * per that many files and never leaves the server idle.
 * A scanner still running at the timeout is killed and flagged
 * CURFEW_SCAN_HUNG. The server leaves once every file is
 * reported after the end. Its scanners die with it (what they
 * started is killed before it leaves). */
/* The number after the dot is the protocol's version, bumped with any change
 * to a request, a report or a frame: a curfew-scanner of another build then
 * refuses the role (exit 64) instead of misreading what it is sent. */
#define CURFEW_SCAN_BATCH_ARGUMENT "__scanbatch.3"
#define CURFEW_SCAN_STOP 0xFFFFFFFFu
#define CURFEW_SCAN_END 0xFFFFFFFEu
#define CURFEW_SCAN_MAX_REPLY 4198400u /* 4 MiB and 4 KiB */
#define CURFEW_SCAN_REPORTS_AT_ONCE 8u
#define CURFEW_SCAN_HUNG 1u
#define CURFEW_SCAN_OVERFLOW 2u
#define CURFEW_SCAN_NOT_STARTED 4u
#define CURFEW_SCAN_SERVER_ARGUMENT "__scanserver"
#define CURFEW_SCAN_FILE_ARGUMENT "__scanfile"
/* The environment variable naming the host that started a helper. */
#define CURFEW_PARENT_VARIABLE "CURFEW_PARENT_PID"
#define CURFEW_SCAN_MAGIC 0x43465343u
#define CURFEW_SCAN_MAX_PATH 4096u
#define CURFEW_SCAN_LOADING 1u
#define CURFEW_SCAN_ANSWER 2u
#define CURFEW_SCAN_DONE 3u
#define CURFEW_SCAN_DESCRIPTOR 0u
#define CURFEW_SCAN_STAT_FAILED 1u
#define CURFEW_SCAN_NOT_REGULAR 2u
#define CURFEW_SCAN_DLOPEN_FAILED 3u
#define CURFEW_SCAN_NO_ENTRY 4u
#define CURFEW_SCAN_DECLINED 5u
#define CURFEW_SCAN_UNCONFINED 6u
#define CURFEW_SCAN_MAX_MESSAGES 64u
#define CURFEW_SCAN_MAX_MESSAGE_BYTES 4096u
#define CURFEW_SCAN_CANNOT_LOAD 0u
#define CURFEW_SCAN_EMPTY 1u
#define CURFEW_SCAN_NOT_ELF 2u
#define CURFEW_SCAN_MAX_DLERROR_BYTES 4096u
/* Bytes of a job's background modes text copied at most: more than the
 * host reads (its limit and one more). A name and a summary are copied to
 * their limits in curfew.h and one more. */
#define CURFEW_SCAN_MODES_BYTES 1024u

/* Whether the peer of the connected Unix socket `fd` is the process
 * `ancestor` or one of its descendants: 1 when it is, 0 when it is not, -1
 * when it cannot be told (the peer is gone, or /proc cannot be read). The
 * peer's pid goes to *peer. A host that is its children's subreaper keeps
 * every orphan of theirs as a descendant, so a job's child that detached
 * (setsid, a double fork) is still found; a chain over 1024 deep is -1.
 * Against pid reuse the peer is held by a pidfd (SO_PEERPIDFD; before Linux
 * 6.5, pidfd_open of its pid, best effort) and must still live once its
 * ancestors were read, and an ancestor that started after its child is a
 * reused pid, for which the walk starts again. A job can still have a
 * process outside its tree connect for it (at, systemd-run --user): this
 * keeps jobs off the socket, it does not sandbox them. */
int curfew_shim_peer_descends_from(int fd, int ancestor, int *peer);

/* mkostemp(3) with O_CLOEXEC: a new file named from `template`, open for
 * reading and writing, mode 0600; its descriptor, or -1 with errno. */
int curfew_shim_make_temporary(char *template_path);

/* Exchanges the entries `a` and `b` at once (renameat2 RENAME_EXCHANGE):
 * 0, or -1 with errno. */
int curfew_shim_exchange(const char *a, const char *b);

/* copy_file_range(2) from `in` at *offset (advanced) to `out`'s position,
 * at most `length` bytes: the bytes copied, or -1 with errno. */
long curfew_shim_copy_file_range(int in, long long *offset, int out, unsigned long length);

/* A checkpoint too big for a line of the channel crosses it as a memory file:
 * a memfd holding `count` bytes, sealed against writes and size changes, so
 * what the host reads is what was sent. The descriptor (close-on-exec), or -1
 * with errno set. */
int curfew_shim_sealed_memory_file(const void *bytes, unsigned long count);

/* Reads the sealed memory file `fd` (write, shrink and grow sealed) into
 * `buffer`: its size when it is at most `capacity`, else -1 with errno EFBIG;
 * -1 with errno EPERM when it is not sealed so, or with read's errno. */
long curfew_shim_read_sealed_memory_file(int fd, void *buffer, unsigned long capacity);

/* Sends the `length` bytes at `text` on the stream socket `sock` with the
 * descriptor `fd` attached to its first byte (SCM_RIGHTS). 0, or an errno. */
int curfew_shim_send_with_descriptor(int sock, const void *text, unsigned long length, int fd);

/* recvmsg into `buffer` (at most `size` bytes), taking up to `capacity`
 * (at most 253, SCM_MAX_FD) descriptors sent with them (close-on-exec) into
 * `fds` and their count into `*received`; `*truncated` is 1 when more came
 * than fit (the kernel closed those). The bytes read, 0 at the end, or -1
 * with errno set. */
long curfew_shim_receive_with_descriptors(int sock, void *buffer, unsigned long size, int *fds, int capacity, int *received,
                                           int *truncated);

/* Whether `haystack` holds `needle` (memmem(3)). */
int curfew_shim_contains(const void *haystack, unsigned long haystack_length, const void *needle, unsigned long needle_length);

/* 1 when the file system `path` lies on is mounted noexec, 0 when not, -1
 * with errno when it cannot be told. */
int curfew_shim_mounted_noexec(const char *path);

/* When argv[1] is CURFEW_SCAN_BATCH_ARGUMENT, CURFEW_SCAN_SERVER_ARGUMENT
 * or CURFEW_SCAN_FILE_ARGUMENT (and nothing follows it), runs that role and
 * exits; else returns at once. */
void curfew_shim_scanner_main(int argc, char **argv);

/* ---- a worker's sandbox (sandbox.c) ---- */

typedef enum {
    CURFEW_SANDBOX_READ = 0,   /* read files and list folders beneath */
    CURFEW_SANDBOX_DEVICE = 1, /* read, write and ioctl a device file */
    CURFEW_SANDBOX_WRITE = 2,  /* everything a file tree allows: make, change, remove */
} curfew_sandbox_access;

typedef struct {
    const char *path;
    curfew_sandbox_access access;
} curfew_sandbox_path;

/* Off: no socket but a pair. Loopback: TCP sockets, each made by a helper
 * process and bound to the loopback device (`lo`), so they reach the
 * addresses on it (127.0.0.0/8, ::1) and nothing else. On: any. */
enum { CURFEW_SANDBOX_NETWORK_OFF = 0, CURFEW_SANDBOX_NETWORK_ON = 1, CURFEW_SANDBOX_NETWORK_LOOPBACK = 2 };

typedef struct {
    const curfew_sandbox_path *paths;
    unsigned long path_count;
    int network;    /* CURFEW_SANDBOX_NETWORK_* */
    int allow_exec; /* 0: execve and execveat are denied */
} curfew_sandbox_spec;

/* What a sandbox's layers did: bits of `applied`. */
enum {
    CURFEW_SANDBOX_NO_CAPABILITIES = 1 << 0,
    CURFEW_SANDBOX_FILES = 1 << 1,          /* Landlock's file rules */
    CURFEW_SANDBOX_TCP_RULES = 1 << 2,      /* Landlock's TCP rules (ABI 4) */
    CURFEW_SANDBOX_SCOPES = 1 << 3,         /* Landlock's signal and abstract socket scopes (ABI 6) */
    CURFEW_SANDBOX_OWN_NAMESPACES = 1 << 4, /* a user and IPC namespace (only without Landlock) */
    CURFEW_SANDBOX_SOCKET_FILTER = 1 << 5,  /* seccomp refuses every socket (the network is off) */
    CURFEW_SANDBOX_SYSCALLS = 1 << 6,       /* seccomp's denials */
    CURFEW_SANDBOX_LOOPBACK_SOCKETS = 1 << 7, /* a helper makes the job's sockets, bound to `lo` */
};

typedef struct {
    int applied;
    int landlock_abi;
    const char *step;        /* the step that failed, when one did */
    const char *failed_path; /* the path whose rule failed, when one did */
} curfew_sandbox_report;

/* The Landlock ABI this kernel has, 0 for none (or refused by the seam). */
int curfew_sandbox_landlock_abi(void);

/* Whether this process can make a user namespace and map itself into it
 * (asked once, in a throwaway child; the answer is kept). 1 or 0. */
int curfew_sandbox_probe_namespaces(void);

/* From now on, Landlock reads as missing: a test seam for older kernels. */
void curfew_sandbox_refuse_landlock(void);

/* Applies `spec` to this process, which must have one thread: no_new_privs,
 * a user and IPC namespace (where the kernel has no Landlock and lets a
 * user make them), every capability dropped, Landlock as far as the kernel has it,
 * then seccomp. 0, or an errno with `report->step` naming the failed step.
 * What the kernel lacks is no failure: `report->applied` says what holds. */
int curfew_sandbox_apply(const curfew_sandbox_spec *spec, curfew_sandbox_report *report);

/* Applies, ahead of the job, the layers that name no path (no_new_privs,
 * the namespaces, the capabilities, the call filter for `network` and
 * `allow_exec`) to this process, which must have one thread, and makes the
 * Landlock ruleset's rules every sandbox has: a worker waiting for its job
 * does it, so the job waits only for its own paths' rules. A later
 * curfew_sandbox_apply keeps them and adds the rest; a spec they are
 * narrower than (a network or exec they refuse) fails there with EPERM.
 * EINVAL for the loopback network (its helper comes first) or a second
 * call, and EBUSY with a second thread, each changing nothing (a later
 * curfew_sandbox_apply applies every layer itself); else 0, or an errno as
 * curfew_sandbox_apply's, which every later curfew_sandbox_apply returns
 * too (a layer may be half made). */
int curfew_sandbox_prepare(int network, int allow_exec, curfew_sandbox_report *report);

/* In a fork server whose workers prepare a sandbox: opens, once, the
 * paths every sandbox lets a job read or write (the system's libraries and
 * files, /proc, the devices) as O_PATH descriptors numbered from 256 on
 * with no gap, which each child it forks keeps (curfew_sandbox_common_range)
 * and its curfew_sandbox_prepare makes those rules from, looking up nothing
 * itself, then closes (as curfew_sandbox_apply does, before any plugin
 * code). 0, or an errno and none kept. */
int curfew_sandbox_open_common(void);

/* In that fork server, before each fork: opens again each of those paths
 * but a folder whose lookup names another inode than the one held, or
 * whose presence changed (a file replaced by rename is a new inode, which
 * an old descriptor's rule would not grant). */
void curfew_sandbox_refresh_common(void);

/* In a fork server whose workers prepare a sandbox for `network` and
 * `allow_exec` (not the loopback network): sets no_new_privs, empties the
 * bounding set as far as it can and installs that sandbox's call filter
 * once, for every worker it forks to inherit, so each worker's
 * curfew_sandbox_prepare installs no filter of its own (the kernel runs a
 * filter once per call number as it installs it). Where the kernel has no
 * Landlock the filter lets one unshare of the namespaces a worker makes
 * through, and each worker seals them with a filter of four instructions.
 * The server itself is bound by it. 0, or an errno and no filter installed
 * (no_new_privs and the bounding set may have changed). */
int curfew_sandbox_prepare_server(int network, int allow_exec);

/* 1 and the range of descriptors curfew_sandbox_open_common keeps open, or 0. */
int curfew_sandbox_common_range(int *low, int *high);

/* The loopback network's socket helper this process started (its child,
 * which must outlive the jobs' leftovers), or 0. */
int curfew_sandbox_helper(void);

/* What every sandbox reads beneath (the system's libraries and the files
 * libc and the runtime read), and the devices it reads and writes: each a
 * NULL-terminated list of absolute paths. */
const char *const *curfew_sandbox_system_paths(void);
const char *const *curfew_sandbox_device_paths(void);

/* Confines a scanner process: as curfew_sandbox_apply with every file to
 * read (a library's dependencies may be anywhere), nothing to write but
 * the devices, no network and no exec. */
int curfew_sandbox_apply_for_scan(curfew_sandbox_report *report);

/* Set (to 1) in a scanner's environment, a batch server, a scan fork
 * server or a lone scanner confines itself once as it starts, before any
 * file is opened, so every scanner it forks is confined at no cost of its
 * own (curfew_sandbox_apply_for_scan). */
#define CURFEW_SCAN_SANDBOX_VARIABLE "CURFEW_SCAN_SANDBOX"

/* Takes the oldest denial the seccomp handler noted: 1 with the job whose
 * hook made the call (NULL when none was running), the call's name and why
 * it is denied, all static or kept for the process's life; 0 when none. */
int curfew_sandbox_next_denial(const char **job, const char **call, const char **why);

/* The denials dropped because the notes were full, since the last ask. */
unsigned curfew_sandbox_dropped_denials(void);

/* The file the Swift runtime (swift_retain) was loaded from: a library's
 * path, or the executable's when it is linked in; NULL when unknown. */
const char *curfew_sandbox_swift_runtime_file(void);

/* Removes the folder `path` and all it holds, following no link (a link
 * inside is removed, not what it names), to a depth of 256 folders. 0, or an
 * errno; a missing folder is no error. */
int curfew_shim_remove_tree(const char *path);

/* Empties the folder `path` for another job of this process's: removes
 * what it holds (as curfew_shim_remove_tree), sets its mode to 0700 and its
 * group to this process's, removes its ACLs, and reads it again. 0, or an
 * errno: EPERM when it is not this user's folder, or keeps an extended
 * attribute a job could have set (what one job could leave the next);
 * ENOTEMPTY when something is left. */
int curfew_shim_empty_folder(const char *path);

/* The job whose hook the calling thread runs, as `curfew_shim_crash_where`
 * recorded it, or NULL. Async-signal-safe. */
const char *curfew_shim_crash_job(void);

#endif
