/* clock_log — bfd's clock and its log line, used by every file of the
 * daemon. It knows no socket, no request and no trial. */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "daemon/bfd_priv.h"

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int quiet;

void bfd_log_quiet(int on) { quiet = on; }

void bfd_log(const char *fmt, ...) {
    if (quiet) return;
    char when[32];
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s bfd: ", when);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
