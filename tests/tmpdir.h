/* tmpdir — a test's own temporary directory and the files it writes there.
 * Header-only (static inline): every tests/test_*.c is a program of its own.
 * Failures are Criterion assertions, so these are for test code only. */
#ifndef BF_TESTS_TMPDIR_H
#define BF_TESTS_TMPDIR_H

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Creates a fresh directory from tmpl (ending in XXXXXX) and leaves its path
 * in dir[len]. */
static inline void tmpdir_make(char *dir, size_t len, const char *tmpl) {
    snprintf(dir, len, "%s", tmpl);
    cr_assert_not_null(mkdtemp(dir), "mkdtemp %s: %s", tmpl, strerror(errno));
}

/* Removes dir and everything below it; returns the status of `rm -rf`
 * (0 when it is gone). */
static inline int tmpdir_remove(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

/* "dir/name", in one of 4 static buffers used in turn (so a few paths can be
 * held at once). */
static inline const char *tmpdir_path(const char *dir, const char *name) {
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* Writes the len bytes of data to path (created or truncated). */
static inline void tmpdir_write(const char *path, const void *data, size_t len) {
    FILE *fp = fopen(path, "wb");
    cr_assert_not_null(fp, "cannot write %s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(data, 1, len, fp), len, "write %s", path);
    cr_assert_eq(fclose(fp), 0, "close %s", path);
}

/* Writes data to dir/name; returns the path (a tmpdir_path buffer). */
static inline const char *tmpdir_write_file(const char *dir, const char *name, const void *data,
                                            size_t len) {
    const char *path = tmpdir_path(dir, name);
    tmpdir_write(path, data, len);
    return path;
}

#ifdef BF_SOURCE_DIR
/* Copies the small glosses data set of tests/data (train and val TSV and
 * the 300-piece tokenizer trained on them) into dir, so a run there writes
 * its caches beside its own copy. */
static inline void tmpdir_copy_glosses(const char *dir) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cp %s/tests/data/glosses_train.tsv %s/tests/data/glosses_train.tsv.tok300.model "
             "%s/tests/data/glosses_val.tsv %s/",
             BF_SOURCE_DIR, BF_SOURCE_DIR, BF_SOURCE_DIR, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}
#endif

#endif
