/* Exits 0 where this process may call clone3 (it exists and no filter
 * refuses it: too small a size is EINVAL), 1 where it may not. */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void) {
    return syscall(SYS_clone3, NULL, 0) == -1 && errno == EINVAL ? 0 : 1;
}
