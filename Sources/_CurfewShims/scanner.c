/* The plugin scanner: loads one plugin file and reports, on fd 3, a copy of
 * what its entry returned (see curfew_shims.h for the protocol). It runs no
 * Swift and checks nothing itself: the host checks the copy with the same
 * validator it uses on a descriptor in its own memory. */
#define _GNU_SOURCE
#include "curfew_shims.h"
#include "shims_private.h"

#include <curfew.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- An answer being written -------------------------------------------- */

typedef struct {
    unsigned char *bytes;
    size_t used, capacity;
} buffer;

/* Out of memory in a scanner: it ends, and the host says it crashed. */
static void append(buffer *to, const void *bytes, size_t count) {
    if (count > to->capacity - to->used) {
        size_t capacity = to->capacity ? to->capacity : 4096;
        while (count > capacity - to->used) {
            if (capacity > SIZE_MAX / 2) _exit(3);
            capacity *= 2;
        }
        unsigned char *grown = realloc(to->bytes, capacity);
        if (!grown) _exit(3);
        to->bytes = grown;
        to->capacity = capacity;
    }
    if (count) memcpy(to->bytes + to->used, bytes, count);
    to->used += count;
}

static void append_u32(buffer *to, uint32_t value) { append(to, &value, sizeof value); }
static void append_u64(buffer *to, uint64_t value) { append(to, &value, sizeof value); }

static int write_all(int fd, const void *bytes, size_t count) {
    const unsigned char *at = bytes;
    while (count > 0) {
        ssize_t written = write(fd, at, count);
        if (written < 0 && errno == EINTR) continue;
        if (written <= 0) return -1;
        at += written;
        count -= (size_t)written;
    }
    return 0;
}

/* Appends a frame: its header, then `payload` (none when NULL). */
static void append_frame(buffer *to, uint32_t kind, const buffer *payload) {
    uint32_t header[3] = {CURFEW_SCAN_MAGIC, kind, payload ? (uint32_t)payload->used : 0};
    append(to, header, sizeof header);
    if (payload) append(to, payload->bytes, payload->used);
}

/* Writes `frames` on the channel; a scanner that cannot ends. */
static void send_frames(int channel, const buffer *frames) {
    if (write_all(channel, frames->bytes, frames->used) != 0) _exit(4);
}

/* ---- Reading memory that may not be there ------------------------------- */

/* The page size, read once before any scanner is forked. */
static size_t page_size = 4096;

/* Where a copy that meets memory that is not there goes instead of the
 * scanner's death: set, on the copying thread only, while a page is read.
 * Volatile: the handler reads it, and the compiler sees no other reader of
 * the store before the copy. */
static __thread sigjmp_buf *volatile copy_escape;

/* What SIGSEGV and SIGBUS did before the copy (the plugin's handlers, say). */
static struct sigaction copy_before[2];

/* SIGSEGV and SIGBUS while the descriptor is copied. A fault of the copy
 * ends that page's copy; any other (plugin code on another thread, say)
 * goes where it went before: the plugin's handler, or the death it would
 * have had. */
static void on_copy_fault(int signal, siginfo_t *info, void *context) {
    sigjmp_buf *escape = copy_escape;
    if (escape) siglongjmp(*escape, 1);
    struct sigaction *before = &copy_before[signal == SIGBUS];
    if (before->sa_flags & SA_SIGINFO) {
        before->sa_sigaction(signal, info, context);
        return;
    }
    if (before->sa_handler != SIG_DFL && before->sa_handler != SIG_IGN) {
        before->sa_handler(signal);
        return;
    }
    struct sigaction fallback = {.sa_handler = SIG_DFL};
    sigemptyset(&fallback.sa_mask);
    sigaction(signal, &fallback, NULL);
    raise(signal);
}

/* While the copy runs, a fault of it is caught (see copy_readable), on
 * this thread even if plugin code blocked the signals. */
static void catch_copy_faults(void) {
    struct sigaction on_fault = {.sa_sigaction = on_copy_fault, .sa_flags = SA_SIGINFO | SA_NODEFER};
    sigemptyset(&on_fault.sa_mask);
    /* What was there is read before the copy's handler takes its place:
     * the kernel writes the old action out only after it installed the new
     * one, and another thread's fault in between must find it. What it
     * says as it installs replaces that, in case the plugin changed it. */
    for (int which = 0; which < 2; which++) {
        int signal = which == 0 ? SIGSEGV : SIGBUS;
        struct sigaction was;
        sigaction(signal, NULL, &copy_before[which]);
        if (sigaction(signal, &on_fault, &was) == 0 && memcmp(&was, &copy_before[which], sizeof was) != 0) copy_before[which] = was;
    }
    sigset_t faults;
    sigemptyset(&faults);
    sigaddset(&faults, SIGSEGV);
    sigaddset(&faults, SIGBUS);
    pthread_sigmask(SIG_UNBLOCK, &faults, NULL);
}

/* The copy is done: SIGSEGV and SIGBUS go where they went before it. */
static void release_copy_faults(void) {
    sigaction(SIGSEGV, &copy_before[0], NULL);
    sigaction(SIGBUS, &copy_before[1], NULL);
}

/* Copies `count` bytes a byte at a time: loads the sanitizer does not
 * check (the bytes past a string's end are read on purpose, and a plugin
 * built with AddressSanitizer keeps redzones there) and no call to memcpy
 * it would intercept. */
__attribute__((noinline, no_sanitize("address"))) static void copy_bytes(
    unsigned char *out, const volatile unsigned char *from, size_t count) {
    for (size_t index = 0; index < count; index++) out[index] = from[index];
}

/* Copies `count` bytes of one page: 1, or 0 when the page is not readable. */
__attribute__((noinline)) static int copy_page(unsigned char *out, uintptr_t from, size_t count) {
    sigjmp_buf escape;
    if (sigsetjmp(escape, 0) != 0) {
        copy_escape = NULL;
        return 0;
    }
    copy_escape = &escape;
    copy_bytes(out, (const volatile unsigned char *)from, count);
    copy_escape = NULL;
    return 1;
}

/* Copies up to `size` bytes from `address` into `out`, a page at a time,
 * and returns how many could be read (a prefix). With `text`, stops after
 * the page that holds a NUL. A page that is not readable faults into
 * on_copy_fault, which ends the copy there: no system call per page. */
static size_t copy_readable(unsigned char *out, uintptr_t address, size_t size, int text) {
    size_t done = 0;
    while (done < size) {
        uintptr_t at = address + done;
        if (at < address) break; /* past the end of the address space */
        size_t piece = page_size - at % page_size;
        if (piece > size - done) piece = size - done;
        if (!copy_page(out + done, at, piece)) break;
        int ended = text && memchr(out + done, 0, piece) != NULL;
        done += piece;
        if (ended) break;
    }
    return done;
}

/* Appends a region: `size` bytes asked for at `address`, and the readable
 * prefix of them. Returns where its bytes start in `to` (or SIZE_MAX when
 * none could be read), and how many through `readable`. */
static size_t append_region(buffer *to, uintptr_t address, size_t size, int text, size_t *readable) {
    unsigned char *copy = malloc(size ? size : 1);
    if (!copy) _exit(3);
    size_t got = copy_readable(copy, address, size, text);
    append_u64(to, (uint64_t)address);
    append_u32(to, (uint32_t)size);
    append_u32(to, (uint32_t)got);
    size_t start = to->used;
    append(to, copy, got);
    free(copy);
    *readable = got;
    return got ? start : SIZE_MAX;
}

/* A pointer field of a copied struct, or 0 when the copy does not reach it. */
static uintptr_t pointer_at(const buffer *in, size_t start, size_t readable, size_t offset) {
    if (start == SIZE_MAX || offset + sizeof(uintptr_t) > readable) return 0;
    uintptr_t value;
    memcpy(&value, in->bytes + start + offset, sizeof value);
    return value;
}

/* Copies the descriptor at `address` and everything a host reads through
 * it: its job table (job_count entries, at most CURFEW_MAX_JOBS), each job,
 * and each job's name, summary and background modes. */
static void snapshot(buffer *to, uintptr_t address) {
    append_u32(to, CURFEW_SCAN_DESCRIPTOR);
    append_u64(to, (uint64_t)address);
    size_t count_at = to->used;
    uint32_t regions = 0;
    append_u32(to, 0);

    size_t readable;
    size_t header = append_region(to, address, sizeof(curfew_plugin), 0, &readable);
    regions++;
    if (header == SIZE_MAX || readable < sizeof(curfew_plugin)) goto done;
    curfew_plugin plugin;
    memcpy(&plugin, to->bytes + header, sizeof plugin);
    if (plugin.jobs == NULL || plugin.job_count == 0) goto done;
    uint32_t jobs = plugin.job_count < CURFEW_MAX_JOBS ? plugin.job_count : CURFEW_MAX_JOBS;
    size_t table = append_region(to, (uintptr_t)plugin.jobs, jobs * sizeof(void *), 0, &readable);
    regions++;
    size_t entries = table == SIZE_MAX ? 0 : readable / sizeof(void *);
    for (size_t index = 0; index < entries; index++) {
        /* The buffer may move as it grows: read the entry by its offset each time. */
        uintptr_t job = pointer_at(to, table, readable, index * sizeof(void *));
        if (job == 0) continue;
        size_t job_readable;
        size_t copied = append_region(to, job, sizeof(curfew_job), 0, &job_readable);
        regions++;
        uintptr_t name = pointer_at(to, copied, job_readable, offsetof(curfew_job, name));
        uintptr_t summary = pointer_at(to, copied, job_readable, offsetof(curfew_job, summary));
        uintptr_t modes = pointer_at(to, copied, job_readable, offsetof(curfew_job, background_modes));
        size_t ignored;
        if (name) {
            append_region(to, name, CURFEW_MAX_JOB_NAME + 1, 1, &ignored);
            regions++;
        }
        if (summary) {
            append_region(to, summary, CURFEW_MAX_SUMMARY + 1, 1, &ignored);
            regions++;
        }
        if (modes) {
            append_region(to, modes, CURFEW_SCAN_MODES_BYTES, 1, &ignored);
            regions++;
        }
    }
done:
    memcpy(to->bytes + count_at, &regions, sizeof regions);
}

/* ---- The host table an entry sees --------------------------------------- */

/* What the entry logs (with any context), kept for an entry that declines. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static buffer logged;
static uint32_t logged_count;

static double no_time_remaining(curfew_context *ctx) { (void)ctx; return 0; }
static bool always_expiring(curfew_context *ctx) { (void)ctx; return true; }
static curfew_task_id no_task(curfew_context *ctx, const char *name, curfew_expiration_handler handler, void *data) {
    (void)ctx; (void)name; (void)handler; (void)data;
    return CURFEW_TASK_INVALID;
}
static void end_no_task(curfew_context *ctx, curfew_task_id task) { (void)ctx; (void)task; }
static curfew_app_state background(curfew_context *ctx) { (void)ctx; return CURFEW_APP_STATE_BACKGROUND; }
static void keep_message(curfew_context *ctx, curfew_log_level level, const char *message) {
    (void)ctx; (void)level;
    if (message == NULL) return;
    size_t length = strnlen(message, CURFEW_SCAN_MAX_MESSAGE_BYTES);
    pthread_mutex_lock(&log_lock);
    if (logged_count < CURFEW_SCAN_MAX_MESSAGES) {
        append_u32(&logged, (uint32_t)length);
        append(&logged, message, length);
        logged_count++;
    }
    pthread_mutex_unlock(&log_lock);
}
static void no_progress(curfew_context *ctx, int64_t completed, int64_t total) { (void)ctx; (void)completed; (void)total; }
static const char *no_param(curfew_context *ctx, const char *key) { (void)ctx; (void)key; return NULL; }
static void *no_user_data(curfew_context *ctx) { (void)ctx; return NULL; }
static curfew_status no_save(curfew_context *ctx, const void *bytes, size_t length) {
    (void)ctx; (void)bytes; (void)length;
    return CURFEW_UNAVAILABLE;
}
static size_t no_load(curfew_context *ctx, void *buffer, size_t capacity) { (void)ctx; (void)buffer; (void)capacity; return 0; }
static curfew_status no_next_run(curfew_context *ctx, double seconds) { (void)ctx; (void)seconds; return CURFEW_UNAVAILABLE; }
static const char *no_scratch(curfew_context *ctx) { (void)ctx; return NULL; }
static curfew_status no_submit(curfew_context *ctx, const char *job, const char *const *params, double seconds) {
    (void)ctx; (void)job; (void)params; (void)seconds;
    return CURFEW_UNAVAILABLE;
}
static curfew_status no_require_conditions(curfew_context *ctx, uint32_t conditions) {
    (void)ctx; (void)conditions;
    return CURFEW_UNAVAILABLE;
}

/* No job runs in a scanner: every function answers as the host does for a
 * context that is no job's. */
static const curfew_host scanner_host = {
    .abi_version = CURFEW_ABI_VERSION,
    .struct_size = sizeof(curfew_host),
    .time_remaining = no_time_remaining,
    .is_expiring = always_expiring,
    .begin_background_task = no_task,
    .end_background_task = end_no_task,
    .app_state = background,
    .log = keep_message,
    .report_progress = no_progress,
    .param = no_param,
    .job_user_data = no_user_data,
    .checkpoint_save = no_save,
    .checkpoint_load = no_load,
    .request_next_run = no_next_run,
    .scratch_dir = no_scratch,
    .submit_run = no_submit,
    .require_conditions = no_require_conditions,
};

/* ---- One file ------------------------------------------------------------ */

static void scan_path(int channel, const char *name) __attribute__((noreturn));

/* Why this process could not confine itself as CURFEW_SCAN_SANDBOX_VARIABLE
 * asked (an errno, and the step), for each scanner to answer; 0 when it did
 * or was not asked. */
static int unconfined_error;
static const char *unconfined_step;

/* Confines this process, once, as CURFEW_SCAN_SANDBOX_VARIABLE asks: every
 * scanner it forks inherits the confinement. */
static void confine(void) {
    if (getenv(CURFEW_SCAN_SANDBOX_VARIABLE) == NULL) return;
    curfew_sandbox_report report;
    int error = curfew_sandbox_apply_for_scan(&report);
    if (error != 0) {
        unconfined_error = error;
        unconfined_step = report.step ? report.step : "sandbox";
    }
}

/* Reads `count` bytes, or as many as come before the end: how many, or -1
 * on an error. */
static ssize_t read_up_to(int fd, void *bytes, size_t count) {
    size_t done = 0;
    while (done < count) {
        ssize_t got = read(fd, (unsigned char *)bytes + done, count - done);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -1;
        if (got == 0) break;
        done += (size_t)got;
    }
    return (ssize_t)done;
}

static int read_all(int fd, void *bytes, size_t count) {
    return read_up_to(fd, bytes, count) == (ssize_t)count ? 0 : -1;
}

static void answer(int channel, const buffer *payload) __attribute__((noreturn));
static void answer(int channel, const buffer *payload) {
    /* The answer and the end in one write: one wake-up of the reader. */
    buffer frames = {0};
    append_frame(&frames, CURFEW_SCAN_ANSWER, payload);
    append_frame(&frames, CURFEW_SCAN_DONE, NULL);
    send_frames(channel, &frames);
    _exit(0);
}

/* Scans the file the host names on `channel` and exits: never returns. */
static void scan_file(int channel) {
    uint32_t length;
    if (read_all(channel, &length, sizeof length) != 0) _exit(0); /* started ahead of need, not needed */
    if (length == 0 || length > CURFEW_SCAN_MAX_PATH) _exit(2);
    char name[CURFEW_SCAN_MAX_PATH + 1];
    if (read_all(channel, name, length) != 0) _exit(2);
    name[length] = 0;
    if (strlen(name) != length) _exit(2);
    scan_path(channel, name);
}

/* Scans the file at `name` and reports on `channel`: never returns. */
static void scan_path(int channel, const char *name) {
    /* A process the plugin starts must not inherit the channel. */
    fcntl(channel, F_SETFD, FD_CLOEXEC);
    /* Room for "./" in front. */
    char path[CURFEW_SCAN_MAX_PATH + 3] = "./";
    strncat(path, name, CURFEW_SCAN_MAX_PATH);

    buffer out = {0};
    /* Asked to be confined and not: the file is not opened. */
    if (unconfined_error != 0) {
        append_u32(&out, CURFEW_SCAN_UNCONFINED);
        append_u32(&out, (uint32_t)unconfined_error);
        append(&out, unconfined_step, strnlen(unconfined_step, 256));
        answer(channel, &out);
    }
    buffer loading = {0};
    append_frame(&loading, CURFEW_SCAN_LOADING, NULL);
    send_frames(channel, &loading);
    struct stat info;
    /* dlopen would block on a FIFO: only regular files go to it. */
    if (stat(name, &info) != 0) {
        append_u32(&out, CURFEW_SCAN_STAT_FAILED);
        append_u32(&out, (uint32_t)errno);
        answer(channel, &out);
    }
    if (!S_ISREG(info.st_mode)) {
        append_u32(&out, CURFEW_SCAN_NOT_REGULAR);
        answer(channel, &out);
    }
    /* dlopen searches the library path for a name without a slash. */
    dlerror();
    void *handle = curfew_shim_dlopen_plugin(strchr(name, '/') ? name : path);
    if (handle == NULL) {
        const char *why = dlerror();
        append_u32(&out, CURFEW_SCAN_DLOPEN_FAILED);
        /* Why, in the host's words, judged here: the host reads no file a
         * plugin could have swapped for one that blocks. */
        uint32_t cause = CURFEW_SCAN_CANNOT_LOAD;
        int fd = open(name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd >= 0 && fstat(fd, &info) == 0 && info.st_size == 0) {
            cause = CURFEW_SCAN_EMPTY;
        } else if (fd >= 0) {
            /* Its first four bytes, or as many as it has: not the ELF magic, not ELF. */
            unsigned char magic[4];
            ssize_t got = read_up_to(fd, magic, sizeof magic);
            if (got >= 0 && (got < (ssize_t)sizeof magic || memcmp(magic, "\x7f" "ELF", 4) != 0)) cause = CURFEW_SCAN_NOT_ELF;
        }
        if (fd >= 0) close(fd);
        append_u32(&out, cause);
        if (why) append(&out, why, strnlen(why, CURFEW_SCAN_MAX_DLERROR_BYTES));
        answer(channel, &out);
    }
    void *symbol = dlsym(handle, CURFEW_PLUGIN_ENTRY_SYMBOL);
    if (symbol == NULL) {
        append_u32(&out, CURFEW_SCAN_NO_ENTRY);
        answer(channel, &out);
    }
    curfew_plugin_entry_fn entry;
    memcpy(&entry, &symbol, sizeof entry);
    const curfew_plugin *descriptor = entry(&scanner_host);
    if (descriptor == NULL) {
        pthread_mutex_lock(&log_lock);
        append_u32(&out, CURFEW_SCAN_DECLINED);
        append_u32(&out, logged_count);
        append(&out, logged.bytes, logged.used);
        pthread_mutex_unlock(&log_lock);
        answer(channel, &out);
    }
    catch_copy_faults();
    snapshot(&out, (uintptr_t)descriptor);
    release_copy_faults();
    answer(channel, &out);
}

/* ---- The batch server ----------------------------------------------------- */

#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

/* A scanner running, and what it has said so far. */
typedef struct {
    uint32_t id;
    pid_t pid; /* 0: a free slot */
    int fd;    /* the server's end of its channel; -1 once it ended */
    buffer said;
    int64_t started, deadline;
    uint32_t flags;
} batch_slot;

/* A scanner's channel is read once it has run this long, or when it ends:
 * most scanners are done sooner, and what they said waits in the socket, so
 * the server wakes once per scanner (its SIGCHLD), not per write. One with
 * more to say than the socket holds waits this long for a reader. */
#define BATCH_QUIET_MS 5
/* How often, at most, the server looks for what scanners left behind (a
 * walk of /proc); and once more before it leaves. */
#define BATCH_SWEEP_MS 50
/* The most scanners at once, whatever the host asks. */
#define BATCH_MAX_WIDTH 64

/* Reports are held and sent a few at once (see CURFEW_SCAN_REPORTS_AT_ONCE):
 * each write to the host wakes it, and a host woken per file takes the core
 * from this server per file. Held reports go out once there are that many,
 * or this many bytes, or when no request waits to start (the host has more
 * to send, or it is the end), or once the oldest has waited this long. */
#define BATCH_REPORT_BYTES 65536
#define BATCH_HOLD_MS 10

/* A file asked about and not started yet. */
typedef struct {
    uint32_t id;
    char *path;
} batch_request;

static int64_t batch_now_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* Reports held for the host (see CURFEW_SCAN_REPORTS_AT_ONCE). */
typedef struct {
    buffer bytes;
    uint32_t count;
    int64_t since; /* when the oldest was held */
} batch_held;

/* Holds a scanner's result: its id, wait status, flags and what it said. */
static void batch_report(batch_held *held, const batch_slot *slot, int status) {
    uint32_t header[4] = {slot->id, (uint32_t)status, slot->flags, (uint32_t)slot->said.used};
    if (held->count == 0) held->since = batch_now_ms();
    append(&held->bytes, header, sizeof header);
    append(&held->bytes, slot->said.bytes, slot->said.used);
    held->count++;
}

/* Sends the held reports if it is time (`waiting`: requests wait to
 * start): 0, or -1 when the host cannot take them. */
static int batch_send(int sock, batch_held *held, int waiting) {
    if (held->count == 0) return 0;
    if (waiting && held->count < CURFEW_SCAN_REPORTS_AT_ONCE && held->bytes.used < BATCH_REPORT_BYTES &&
        batch_now_ms() - held->since < BATCH_HOLD_MS)
        return 0;
    int sent = write_all(sock, held->bytes.bytes, held->bytes.used);
    held->bytes.used = 0;
    held->count = 0;
    /* A long answer's room is not kept for the next. */
    if (held->bytes.capacity > 4 * BATCH_REPORT_BYTES) {
        free(held->bytes.bytes);
        held->bytes = (buffer){0};
    }
    return sent;
}

/* Reads what a scanner's channel holds now, up to the cap: -1 at its end
 * or past the cap (flagged; the caller kills the scanner), else 0. */
static int batch_read(batch_slot *slot, int nonblocking) {
    unsigned char chunk[65536];
    for (;;) {
        ssize_t got = recv(slot->fd, chunk, sizeof chunk, nonblocking ? MSG_DONTWAIT : 0);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (got <= 0) return -1;
        if ((size_t)got > CURFEW_SCAN_MAX_REPLY - slot->said.used) {
            slot->flags |= CURFEW_SCAN_OVERFLOW;
            return -1;
        }
        append(&slot->said, chunk, (size_t)got);
        if (!nonblocking) return 0;
    }
}

/* Starts a scanner of `request` in `slot`: 0, or -1 when it cannot fork. */
static int batch_start(batch_slot *slot, const batch_request *request, int null, uint32_t timeout_ms) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return -1;
    pid_t server = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(pair[0]);
        close(pair[1]);
        return -1;
    }
    if (pid == 0) {
        signal(SIGCHLD, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        setpgid(0, 0);
        /* Its channel is the server's to read: with the server gone, it has no one to answer. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        /* Dumpable again, as the plugin would be anywhere else (its own
         * /proc files readable by it); only the server stays closed. */
        prctl(PR_SET_DUMPABLE, 1);
        if (getppid() != server) _exit(1);
        dup2(pair[1], 3); /* over the server's socket to the host */
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        close_range(4, ~0U, 0);
        scan_path(3, request->path);
    }
    setpgid(pid, pid); /* also here, so a kill right away finds the group */
    close(pair[1]);
    slot->id = request->id;
    slot->pid = pid;
    slot->fd = pair[0];
    slot->said.used = 0;
    slot->flags = 0;
    slot->started = batch_now_ms();
    slot->deadline = slot->started + timeout_ms;
    return 0;
}

/* Whether the child `pid` has exited (it stays unreaped). */
static int batch_exited(pid_t pid) {
    siginfo_t info;
    memset(&info, 0, sizeof info);
    return waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
}

/* The batch role (CURFEW_SCAN_BATCH_ARGUMENT) on the stream socket `sock`:
 * scans every file the host names, each in a scanner forked for it, as many
 * at once as the host said, and reports each (see curfew_shims.h). Leaves once the host has
 * sent all it will and every scanner has been reported, or at once on a
 * stop; either way, and on any failure, with every scanner and what the
 * scanners left behind killed. */
static int scan_batch(int sock) {
    /* Nobody of this uid attaches to the server: a plugin in one scanner
     * could rewrite the reports of other files. */
    prctl(PR_SET_DUMPABLE, 0);
    uint32_t settings[2];
    if (read_all(sock, settings, sizeof settings) != 0) return 0;
    uint32_t timeout_ms = settings[0];
    uint32_t width = settings[1] < 1 ? 1 : settings[1] > BATCH_MAX_WIDTH ? BATCH_MAX_WIDTH : settings[1];
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    int children = curfew_shim_child_pipe();
    if (null < 0 || children < 0) return 1;
    /* What a scanner's plugin started and left behind comes here when the scanner dies. */
    curfew_shim_become_subreaper();
    signal(SIGPIPE, SIG_IGN);

    int code = 0;
    batch_slot slots[BATCH_MAX_WIDTH];
    memset(slots, 0, sizeof slots);
    batch_request *queue = NULL;
    size_t queued = 0, queue_head = 0, queue_capacity = 0;
    buffer incoming = {0};
    batch_held held = {0};
    int all_asked = 0;
    uint32_t running = 0;
    int64_t swept = batch_now_ms();
    for (;;) {
        /* Start what there is room for. */
        while (running < width && queue_head < queued) {
            batch_slot *slot = NULL;
            for (uint32_t i = 0; i < width && !slot; i++)
                if (slots[i].pid == 0) slot = &slots[i];
            batch_request *request = &queue[queue_head++];
            if (batch_start(slot, request, null, timeout_ms) != 0) {
                /* Not forked: reported with status -1, for the host to try another way. */
                batch_slot failed = {.id = request->id, .flags = CURFEW_SCAN_NOT_STARTED};
                batch_report(&held, &failed, -1);
            } else {
                running++;
            }
            free(request->path);
        }
        if (queue_head == queued) queued = queue_head = 0;
        if (batch_send(sock, &held, queued > 0) != 0) {
            code = 1;
            goto leave;
        }
        if (all_asked && queued == 0 && running == 0) break;

        struct pollfd polls[2 + BATCH_MAX_WIDTH];
        int watched[2 + BATCH_MAX_WIDTH];
        int count = 0;
        polls[count++] = (struct pollfd){children, POLLIN, 0};
        /* Read even once all is asked: a stop may still come. */
        int request_poll = count;
        polls[count++] = (struct pollfd){sock, POLLIN, 0};
        int first_channel = count;
        int64_t now = batch_now_ms(), soonest = now + 1000;
        if (held.count) soonest = held.since + BATCH_HOLD_MS;
        for (uint32_t i = 0; i < width; i++) {
            batch_slot *slot = &slots[i];
            /* One killed at its deadline waits for its SIGCHLD alone. */
            if (slot->pid == 0 || (slot->flags & CURFEW_SCAN_HUNG)) continue;
            if (slot->deadline < soonest) soonest = slot->deadline;
            if (slot->fd < 0) continue;
            if (now < slot->started + BATCH_QUIET_MS) {
                if (slot->started + BATCH_QUIET_MS < soonest) soonest = slot->started + BATCH_QUIET_MS;
                continue;
            }
            watched[count] = (int)i;
            polls[count++] = (struct pollfd){slot->fd, POLLIN, 0};
        }
        int wait = soonest > now ? (int)(soonest - now) : 0;
        if (poll(polls, (nfds_t)count, wait) < 0 && errno != EINTR) {
            code = 1;
            goto leave;
        }

        for (int p = first_channel; p < count; p++) {
            if (!polls[p].revents) continue;
            batch_slot *slot = &slots[watched[p]];
            if (batch_read(slot, 0) != 0) {
                /* Not reaped yet: its pid is still its own. */
                if (slot->flags & CURFEW_SCAN_OVERFLOW) kill(-slot->pid, SIGKILL);
                close(slot->fd);
                slot->fd = -1;
            }
        }
        if (polls[request_poll].revents) {
            unsigned char chunk[65536];
            ssize_t got = recv(sock, chunk, sizeof chunk, 0);
            if (got < 0 && errno != EINTR) {
                code = 1;
                goto leave;
            }
            if (got == 0) goto leave; /* the host is gone, or done */
            if (got > 0) append(&incoming, chunk, (size_t)got);
            /* Whole requests: an id, a length and a path; or the end, or a stop. */
            size_t head = 0;
            while (incoming.used - head >= 8) {
                uint32_t fields[2];
                memcpy(fields, incoming.bytes + head, sizeof fields);
                if (fields[0] == CURFEW_SCAN_STOP) goto leave;
                if (fields[0] == CURFEW_SCAN_END) {
                    all_asked = 1;
                    head += 8;
                    continue;
                }
                if (all_asked) {
                    code = 2; /* a request after the end */
                    goto leave;
                }
                if (fields[1] == 0 || fields[1] > CURFEW_SCAN_MAX_PATH) {
                    code = 2;
                    goto leave;
                }
                if (incoming.used - head - 8 < fields[1]) break;
                char *path = malloc(fields[1] + 1);
                if (!path) _exit(3);
                memcpy(path, incoming.bytes + head + 8, fields[1]);
                path[fields[1]] = 0;
                head += 8 + fields[1];
                if (strlen(path) != fields[1]) {
                    code = 2;
                    goto leave;
                }
                if (queued == queue_capacity) {
                    size_t capacity = queue_capacity ? queue_capacity * 2 : 64;
                    batch_request *grown = realloc(queue, capacity * sizeof *queue);
                    if (!grown) _exit(3);
                    queue = grown;
                    queue_capacity = capacity;
                }
                queue[queued++] = (batch_request){fields[0], path};
            }
            memmove(incoming.bytes, incoming.bytes + head, incoming.used - head);
            incoming.used -= head;
        }
        if (polls[0].revents) {
            char drain[64];
            while (read(children, drain, sizeof drain) > 0) {
            }
            /* Reap what ended: what it wrote read, and its group killed,
             * while its pid is still its own; then reaped and reported. */
            for (;;) {
                siginfo_t info;
                memset(&info, 0, sizeof info);
                if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) break;
                pid_t pid = info.si_pid;
                batch_slot *slot = NULL;
                for (uint32_t i = 0; i < width && !slot; i++)
                    if (slots[i].pid == pid) slot = &slots[i];
                if (slot && slot->fd >= 0) {
                    batch_read(slot, 1);
                    close(slot->fd);
                    slot->fd = -1;
                }
                kill(-pid, SIGKILL); /* what it left in its group */
                int status;
                while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
                }
                /* An orphan a scanner left is no scanner: never reported. */
                if (!slot) continue;
                batch_report(&held, slot, status);
                slot->pid = 0;
                running--;
                /* A long answer's room is not kept for the next. */
                if (slot->said.capacity > 65536) {
                    free(slot->said.bytes);
                    slot->said = (buffer){0};
                }
            }
            /* What the scanners' plugins left behind. */
            if (batch_now_ms() - swept >= BATCH_SWEEP_MS) {
                int keep[BATCH_MAX_WIDTH];
                int kept = 0;
                for (uint32_t i = 0; i < width; i++)
                    if (slots[i].pid) keep[kept++] = slots[i].pid;
                curfew_shim_kill_children(keep, kept, 64);
                swept = batch_now_ms();
            }
        }
        now = batch_now_ms();
        for (uint32_t i = 0; i < width; i++) {
            batch_slot *slot = &slots[i];
            if (slot->pid == 0 || now < slot->deadline || (slot->flags & CURFEW_SCAN_HUNG)) continue;
            /* One that ended just now is the reaper's, not a hang. */
            if (batch_exited(slot->pid)) continue;
            slot->flags |= CURFEW_SCAN_HUNG;
            kill(-slot->pid, SIGKILL);
        }
    }
leave:
    for (uint32_t i = 0; i < width; i++)
        if (slots[i].pid) kill(-slots[i].pid, SIGKILL);
    curfew_shim_kill_children(NULL, 0, 64);
    return code;
}

void curfew_shim_scanner_main(int argc, char **argv) {
    if (argc != 2) return;
    int server = strcmp(argv[1], CURFEW_SCAN_SERVER_ARGUMENT) == 0;
    int batch = strcmp(argv[1], CURFEW_SCAN_BATCH_ARGUMENT) == 0;
    if (!server && !batch && strcmp(argv[1], CURFEW_SCAN_FILE_ARGUMENT) != 0) return;
    long page = sysconf(_SC_PAGESIZE);
    if (page > 0 && page <= 65536) page_size = (size_t)page;
    /* A helper dies with the host that started it (a scanner may be stuck in
     * a plugin's constructor, deaf to its channel). Before any other work. */
    const char *host = getenv(CURFEW_PARENT_VARIABLE);
    char *end = NULL;
    long parent = host ? strtol(host, &end, 10) : 0;
    /* Without a host named (started by hand, or by an older host) it goes on. */
    if (host && *host && *end == 0 && parent > 0 && parent <= INT32_MAX && curfew_shim_die_with_parent((int)parent) != 0) _exit(1);
    /* Before any file is opened; a batch or fork server's scanners inherit it. */
    confine();
    if (batch) _exit(scan_batch(3));
    /* In the server, 0 only in a forked child, which scans. */
    if (server && curfew_shim_fork_server(3) != 0) _exit(0);
    scan_file(3);
}
