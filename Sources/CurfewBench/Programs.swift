// The C the CLI-path benchmarks compile at run time: plugins shaped for each
// case, and the fresh-process baselines they are compared with.

enum Programs {
    /// A plugin whose jobs (one per name) each run one chunk that spins for
    /// the `spin-ns` parameter (default 1 ms) of CPU, then are done.
    static func spinPlugin(names: [String]) -> String {
        let source = """
            #define _POSIX_C_SOURCE 200809L
            #include <curfew.h>
            #include <stdlib.h>
            #include <time.h>
            static const curfew_host *host;
            static int64_t now_ns(void) {
                struct timespec t;
                clock_gettime(CLOCK_MONOTONIC, &t);
                return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
            }
            static curfew_status create(curfew_context *ctx, void **state) {
                const char *text = host->param(ctx, "spin-ns");
                *state = (void *)(intptr_t)(text ? strtoll(text, NULL, 10) : 1000000);
                return CURFEW_OK;
            }
            static curfew_chunk_result chunk(curfew_context *ctx, void *state) {
                (void)ctx;
                int64_t end = now_ns() + (int64_t)(intptr_t)state;
                while (now_ns() < end) {}
                return CURFEW_CHUNK_DONE;
            }
            static void expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
                (void)ctx; (void)state; (void)reason;
            }

            """
        return source + jobTable(names: names, summary: "Spins.", hooks: ".create = create, .chunk = chunk, .expire = expire")
    }

    /// A plugin's job table: a job of each name with the same hooks, and
    /// the entry that keeps the host's services in `host`.
    private static func jobTable(names: [String], summary: String, hooks: String) -> String {
        var source = ""
        for (index, name) in names.enumerated() {
            source += "static const curfew_job job\(index) = {.struct_size = sizeof(curfew_job), .name = \"\(name)\", "
                + ".summary = \"\(summary)\", \(hooks)};\n"
        }
        source += "static const curfew_job *const jobs[] = {" + names.indices.map { "&job\($0)" }.joined(separator: ", ") + "};\n"
        source += """
            static const curfew_plugin plugin = {
                .abi_version = CURFEW_ABI_VERSION, .struct_size = sizeof(curfew_plugin), .job_count = \(names.count), .jobs = jobs};
            const curfew_plugin *curfew_plugin_entry(const curfew_host *services) {
                host = services;
                return &plugin;
            }

            """
        return source
    }

    /// Jobs that watch the race contract from inside: each chunk spins
    /// `spin-ns` (default 200 µs) with a flag up; `expire` logs an error if
    /// it finds the flag up, and a chunk logs one if it is called after
    /// `expire` began. Both lines start with "race:".
    static func racePlugin(names: [String]) -> String {
        let source = """
            #define _POSIX_C_SOURCE 200809L
            #include <curfew.h>
            #include <stdatomic.h>
            #include <stdlib.h>
            #include <time.h>
            static const curfew_host *host;
            typedef struct { atomic_int in_chunk; atomic_int expired; int64_t spin; } race_state;
            static int64_t now_ns(void) {
                struct timespec t;
                clock_gettime(CLOCK_MONOTONIC, &t);
                return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
            }
            static curfew_status create(curfew_context *ctx, void **state) {
                race_state *race = calloc(1, sizeof *race);
                if (!race) return CURFEW_ERROR;
                const char *text = host->param(ctx, "spin-ns");
                race->spin = text ? strtoll(text, NULL, 10) : 200000;
                *state = race;
                return CURFEW_OK;
            }
            static curfew_chunk_result chunk(curfew_context *ctx, void *state) {
                race_state *race = state;
                /* Flag first, then look (both sequentially consistent, as in expire): one of the two sees the other. */
                atomic_store(&race->in_chunk, 1);
                if (atomic_load(&race->expired)) host->log(ctx, CURFEW_LOG_ERROR, "race: a chunk after expire");
                int64_t end = now_ns() + race->spin;
                while (now_ns() < end) {}
                atomic_store(&race->in_chunk, 0);
                return CURFEW_CHUNK_CONTINUE;
            }
            static void expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
                (void)reason;
                race_state *race = state;
                atomic_store(&race->expired, 1);
                if (atomic_load(&race->in_chunk)) host->log(ctx, CURFEW_LOG_ERROR, "race: expire while a chunk ran");
            }
            static void destroy(curfew_context *ctx, void *state) {
                (void)ctx;
                free(state);
            }

            """
        return source + jobTable(names: names, summary: "Races.", hooks: ".create = create, .chunk = chunk, .expire = expire, .destroy = destroy")
    }

    /// The same work as a spin job, as a program: spins 1 ms, exits 0.
    static let spinProgram = """
        #define _POSIX_C_SOURCE 200809L
        #include <stdint.h>
        #include <time.h>
        static int64_t now_ns(void) {
            struct timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
        }
        int main(void) {
            int64_t end = now_ns() + 1000000;
            while (now_ns() < end) {}
            return 0;
        }

        """

    /// What a scan does at the least: list a folder, dlopen each *.so in it
    /// and look up its entry. A fresh process, as `curfew list` is.
    static let dlopenAll = """
        #define _GNU_SOURCE
        #include <dirent.h>
        #include <dlfcn.h>
        #include <stdio.h>
        #include <string.h>
        int main(int argc, char **argv) {
            if (argc != 2) return 64;
            DIR *folder = opendir(argv[1]);
            if (!folder) return 1;
            struct dirent *entry;
            char path[4096];
            int loaded = 0;
            while ((entry = readdir(folder))) {
                size_t length = strlen(entry->d_name);
                if (length < 4 || strcmp(entry->d_name + length - 3, ".so") != 0) continue;
                snprintf(path, sizeof path, "%s/%s", argv[1], entry->d_name);
                void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
                if (!handle || !dlsym(handle, "curfew_plugin_entry")) return 2;
                loaded++;
            }
            closedir(folder);
            printf("%d\\n", loaded);
            return 0;
        }

        """

    /// The floor of a scan where each verdict comes from a process that
    /// loaded that file alone: a child per file `dlopen`s it and looks up the
    /// entry, twice as many at once as there are cores (as the scanner runs).
    static let forkPerFile = """
        #define _GNU_SOURCE
        #include <dirent.h>
        #include <dlfcn.h>
        #include <stdio.h>
        #include <string.h>
        #include <sys/wait.h>
        #include <unistd.h>
        static int reap(void) {
            int status;
            if (wait(&status) < 0) return -1;
            return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 1 : 0;
        }
        int main(int argc, char **argv) {
            if (argc != 2) return 64;
            DIR *folder = opendir(argv[1]);
            if (!folder) return 1;
            long cores = sysconf(_SC_NPROCESSORS_ONLN);
            int most = cores > 0 ? 2 * (int)cores : 2, running = 0, loaded = 0;
            struct dirent *entry;
            char path[4096];
            while ((entry = readdir(folder))) {
                size_t length = strlen(entry->d_name);
                if (length < 4 || strcmp(entry->d_name + length - 3, ".so") != 0) continue;
                snprintf(path, sizeof path, "%s/%s", argv[1], entry->d_name);
                if (running == most) { loaded += reap(); running--; }
                pid_t child = fork();
                if (child < 0) return 3;
                if (child == 0) {
                    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
                    _exit(handle && dlsym(handle, "curfew_plugin_entry") ? 0 : 2);
                }
                running++;
            }
            while (running > 0) { loaded += reap(); running--; }
            closedir(folder);
            printf("%d\\n", loaded);
            return 0;
        }

        """

    /// One job, `print`, whose every chunk writes 1 MiB of 1 KiB lines to
    /// stdout; done after the `chunks` parameter's count (default 64).
    static let printPlugin = """
        #define _POSIX_C_SOURCE 200809L
        #include <curfew.h>
        #include <stdio.h>
        #include <stdlib.h>
        #include <string.h>
        static const curfew_host *host;
        typedef struct { int64_t left; char line[1024]; } print_state;
        static curfew_status create(curfew_context *ctx, void **state) {
            print_state *s = malloc(sizeof *s);
            if (!s) return CURFEW_ERROR;
            const char *text = host->param(ctx, "chunks");
            s->left = text ? strtoll(text, NULL, 10) : 64;
            memset(s->line, 'x', sizeof s->line - 1);
            s->line[sizeof s->line - 1] = '\\n';
            *state = s;
            return CURFEW_OK;
        }
        static curfew_chunk_result chunk(curfew_context *ctx, void *state) {
            (void)ctx;
            print_state *s = state;
            for (int i = 0; i < 1024; i++) fwrite(s->line, 1, sizeof s->line, stdout);
            fflush(stdout);
            return --s->left <= 0 ? CURFEW_CHUNK_DONE : CURFEW_CHUNK_CONTINUE;
        }
        static void expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
            (void)ctx; (void)state; (void)reason;
        }
        static void destroy(curfew_context *ctx, void *state) {
            (void)ctx;
            free(state);
        }
        static const curfew_job job = {.struct_size = sizeof(curfew_job), .name = "print", .summary = "Prints.",
            .create = create, .chunk = chunk, .expire = expire, .destroy = destroy};
        static const curfew_job *const jobs[] = {&job};
        static const curfew_plugin plugin = {
            .abi_version = CURFEW_ABI_VERSION, .struct_size = sizeof(curfew_plugin), .job_count = 1, .jobs = jobs};
        const curfew_plugin *curfew_plugin_entry(const curfew_host *services) {
            host = services;
            return &plugin;
        }

        """

    /// The mechanism `timeout` waits on: a POSIX timer's signal. Arms a
    /// 20 ms timer `argv[1]` times, one after another, waits for its signal
    /// and prints each lateness (signal received minus timer due) in ns.
    static let timerProbe = """
        #define _POSIX_C_SOURCE 200809L
        #include <signal.h>
        #include <stdint.h>
        #include <stdio.h>
        #include <stdlib.h>
        #include <time.h>
        static int64_t now_ns(void) {
            struct timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
        }
        int main(int argc, char **argv) {
            int count = argc > 1 ? atoi(argv[1]) : 10;
            sigset_t set;
            sigemptyset(&set);
            sigaddset(&set, SIGALRM);
            sigprocmask(SIG_BLOCK, &set, NULL);
            struct sigevent event = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGALRM};
            timer_t timer;
            if (timer_create(CLOCK_MONOTONIC, &event, &timer) != 0) return 1;
            for (int i = 0; i < count; i++) {
                int64_t due = now_ns() + 20000000;
                struct itimerspec when = {.it_value = {.tv_sec = due / 1000000000, .tv_nsec = due % 1000000000}};
                timer_settime(timer, TIMER_ABSTIME, &when, NULL);
                int signal;
                sigwait(&set, &signal);
                printf("%lld\\n", (long long)(now_ns() - due));
            }
            return 0;
        }

        """
}
