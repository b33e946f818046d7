/* The error-buffer convention of library code (docs/style.md#errors): a failing call
 * writes one line into the caller's buffer and returns -1. */
#ifndef BF_ERRBUF_H
#define BF_ERRBUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* Formats into err (errlen bytes; err NULL or errlen 0 = no message) and
 * returns -1, so a caller writes `return bf_fail(err, errlen, "...", ...)`. */
static inline int bf_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int bf_fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Exit status of every bf program for a command-line error (an unknown
 * option, a missing or bad option value): sysexits.h's EX_USAGE. */
#define BF_EX_USAGE 64

#endif
