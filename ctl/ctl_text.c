/* ctl_text — the sweep text bfctl reads and sends: a file or standard input
 * ("-"), capped (`--set KEY=VALUE` is applied by jobs/sweep_sets.c). */
#include "ctl/bfctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ctl_read_text(const char *path, char **out, size_t *len, char *err, size_t errlen) {
    *out = NULL;
    int is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) return bf_fail(err, errlen, "cannot open %s: %s", path, strerror(errno));
    char *text = malloc(CTL_TEXT_MAX + 1);
    size_t n = text ? fread(text, 1, CTL_TEXT_MAX + 1, f) : 0;
    int rerr = text && ferror(f);
    if (!is_stdin) fclose(f);
    const char *name = is_stdin ? "standard input" : path;
    if (!text) return bf_fail(err, errlen, "out of memory reading %s", name);
    if (rerr || n > CTL_TEXT_MAX || memchr(text, '\0', n)) {
        free(text);
        if (rerr) return bf_fail(err, errlen, "reading %s: %s", name, strerror(errno));
        if (n > CTL_TEXT_MAX)
            return bf_fail(err, errlen, "%s is over %u bytes (the most a sweep may be)", name,
                           CTL_TEXT_MAX);
        return bf_fail(err, errlen, "%s holds NUL bytes", name);
    }
    text[n] = '\0';
    *out = text;
    *len = n;
    return 0;
}
