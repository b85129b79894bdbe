/* curfew-scanner: the plugin scanner as a program of its own, a few pages
 * of C, installed beside `curfew`. The host runs its batch server from here
 * rather than from its own image: the server forks once per file, and a
 * fork and an exit of this program copy and free a fraction of what the
 * host's would. It has the same roles as the `curfew` commands of the same
 * names (see curfew_shims.h) and nothing else. */
#include <stdio.h>

#include "curfew_shims.h"

int main(int argc, char **argv) {
    curfew_shim_scanner_main(argc, argv);
    fprintf(stderr,
        "curfew-scanner: no such role%s%s. It is started by the curfew of the same build (roles %s, %s, %s);\n"
        "one from another build is refused, and that curfew scans in its own processes instead.\n",
        argc > 1 ? ": " : "", argc > 1 ? argv[1] : "", CURFEW_SCAN_BATCH_ARGUMENT, CURFEW_SCAN_SERVER_ARGUMENT,
        CURFEW_SCAN_FILE_ARGUMENT);
    return 64;
}
