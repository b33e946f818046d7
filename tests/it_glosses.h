/* it_glosses — the folder the worker-input tests (test_it_inputs,
 * test_it_force) run in: a fresh /tmp/PREFIX-XXXXXX holding the glosses
 * TSVs (tests/data), removed after, and a command run in it under a time
 * limit, its stdout + stderr in out. Header-only (static inline): every
 * tests/test_*.c is a program of its own; dir is it_idx.h's. */
#ifndef BF_TESTS_IT_GLOSSES_H
#define BF_TESTS_IT_GLOSSES_H

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/it_idx.h"

/* dir = a new folder /tmp/PREFIX-XXXXXX with glosses_{train,val}.tsv in it */
static inline void it_glosses_setup(const char *prefix) {
    snprintf(dir, sizeof dir, "/tmp/%s-XXXXXX", prefix);
    cr_assert(mkdtemp(dir) != NULL);
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "cp %s/tests/data/glosses_train.tsv %s/tests/data/glosses_val.tsv %s/", BF_SOURCE_DIR,
             BF_SOURCE_DIR, dir);
    cr_assert_eq(system(cmd), 0);
}

static inline void it_glosses_teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}

/* Runs the command in dir under `timeout -s KILL limit_s` (stdout + stderr
 * into out); its exit status (137: killed by SIGKILL, as timeout(1) says). */
static inline int it_glosses_vrun(int limit_s, char *out, size_t n, const char *fmt, va_list ap) {
    char body[4096], full[4400];
    vsnprintf(body, sizeof body, fmt, ap);
    snprintf(full, sizeof full, "cd %s && timeout -s KILL %d %s 2>&1", dir, limit_s, body);
    return run_cmd(full, out, n);
}
#endif
