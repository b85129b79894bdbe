#define _GNU_SOURCE
/* Jobs that each say what their scratch folder held when they started and
 * its mode, then leave what a careless or hostile job would: files, a
 * read-only folder with a file in it, a folder mode of 0777 and, with the
 * parameter `xattr`, an extended attribute (the sandbox refuses the last
 * three; they are tried all the same). The next job of the run must find
 * none of it. Each also says how many O_PATH descriptors it holds. */
#include <curfew.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

static const curfew_host *host;

#include "fixture_util.h"

static curfew_chunk_result leave_chunk(curfew_context *ctx, void *state) {
    (void)state;
    const char *scratch = host->scratch_dir(ctx);
    if (scratch == NULL) {
        host->log(ctx, CURFEW_LOG_ERROR, "no scratch folder");
        return CURFEW_CHUNK_FAILED;
    }
    int held = 0;
    DIR *folder = opendir(scratch);
    if (folder == NULL) return CURFEW_CHUNK_FAILED;
    for (struct dirent *entry; (entry = readdir(folder)) != NULL;) {
        if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0) held++;
    }
    closedir(folder);
    struct stat info;
    if (stat(scratch, &info) != 0) return CURFEW_CHUNK_FAILED;
    char attributes[256];
    ssize_t listed = listxattr(scratch, attributes, sizeof attributes);
    int user_attributes = 0;
    for (ssize_t at = 0; listed > 0 && at < listed; at += (ssize_t)strlen(attributes + at) + 1) {
        if (strncmp(attributes + at, "user.", 5) == 0) user_attributes++;
    }
    /* O_PATH descriptors the job was handed (its fork server opens some for its sandbox's rules). */
    int paths = 0;
    DIR *fds = opendir("/proc/self/fdinfo");
    if (fds == NULL) return CURFEW_CHUNK_FAILED;
    for (struct dirent *entry; (entry = readdir(fds)) != NULL;) {
        if (entry->d_name[0] == '.') continue;
        char fdinfo[300], text[256];
        snprintf(fdinfo, sizeof fdinfo, "/proc/self/fdinfo/%s", entry->d_name);
        int fd = open(fdinfo, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t length = read(fd, text, sizeof text - 1);
        close(fd);
        if (length <= 0) continue;
        text[length] = 0;
        const char *flags = strstr(text, "flags:");
        if (flags != NULL && (strtoul(flags + 6, NULL, 8) & O_PATH)) paths++;
    }
    closedir(fds);
    char line[4400];
    snprintf(line, sizeof line, "scratch %s held %d mode %o xattrs %d paths %d", scratch, held, (unsigned)(info.st_mode & 07777),
             user_attributes, paths);
    host->log(ctx, CURFEW_LOG_INFO, line);

    char inner[4200];
    snprintf(inner, sizeof inner, "%s/inner", scratch);
    if (write_file(scratch, "left") != 0 || mkdir(inner, 0700) != 0 || write_file(inner, "deeper") != 0) {
        host->log(ctx, CURFEW_LOG_ERROR, strerror(errno));
        return CURFEW_CHUNK_FAILED;
    }
    /* The sandbox's call filter refuses these; were it not to, they must not reach the next job. */
    if (chmod(inner, 0500) != 0 || chmod(scratch, 0777) != 0) {
        snprintf(line, sizeof line, "chmod: %s", strerror(errno));
        host->log(ctx, CURFEW_LOG_WARNING, line);
    }
    const char *xattr = host->param(ctx, "xattr");
    if (xattr != NULL && setxattr(scratch, "user.left", xattr, strlen(xattr), 0) != 0) {
        snprintf(line, sizeof line, "setxattr: %s", strerror(errno));
        host->log(ctx, CURFEW_LOG_WARNING, line);
    }
    return CURFEW_CHUNK_DONE;
}

static void leave_expire(curfew_context *ctx, void *state, curfew_expire_reason reason) {
    (void)ctx; (void)state; (void)reason;
}

CURFEW_JOB(leave_1, "leave-1", "Leaves things in its scratch folder.", .chunk = leave_chunk, .expire = leave_expire);
CURFEW_JOB(leave_2, "leave-2", "Leaves things in its scratch folder.", .chunk = leave_chunk, .expire = leave_expire);
CURFEW_JOB(leave_3, "leave-3", "Leaves things in its scratch folder.", .chunk = leave_chunk, .expire = leave_expire);
CURFEW_JOB(leave_4, "leave-4", "Leaves things in its scratch folder.", .chunk = leave_chunk, .expire = leave_expire);
CURFEW_JOB(leave_5, "leave-5", "Leaves things in its scratch folder.", .chunk = leave_chunk, .expire = leave_expire);
CURFEW_JOB(leave_6, "leave-6", "Leaves things in its scratch folder.", .chunk = leave_chunk, .expire = leave_expire);

CURFEW_PLUGIN(host, &leave_1, &leave_2, &leave_3, &leave_4, &leave_5, &leave_6)
