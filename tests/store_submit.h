/* store_submit — a sweep's YAML text submitted to a store, for unit tests that
 * open the store directly. Header-only (static inline): every tests/test_*.c
 * is a program of its own. Failures are Criterion assertions. */
#ifndef BF_TESTS_STORE_SUBMIT_H
#define BF_TESTS_STORE_SUBMIT_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "jobs/store.h"
#include "jobs/sweep.h"

/* Loads text as a sweep and submits it to s; returns the job's id. */
static inline int64_t submit_text(store *s, const char *text) {
    sweep_spec *sp = NULL;
    sweep_errors e = {0};
    cr_assert_eq(sweep_load_string(text, strlen(text), "t.yaml", &sp, &e), 0, "%s",
                 e.n ? e.msgs[0] : "?");
    sweep_errors_free(&e);
    int64_t job = 0;
    char err[512];
    cr_assert_eq(store_submit(s, sp, text, &job, err, sizeof err), 0, "%s", err);
    sweep_spec_destroy(&sp);
    return job;
}

#endif
