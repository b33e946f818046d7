/* Learning checks that hold on any CPU bf builds for (docs/style.md#tests).
 *
 * A test that asserts "training improves X" compares X after training with
 * a control (X before training, or the same run that cannot learn: learning
 * rate 0, chance accuracy) and asks for an effect of at least `required`.
 * The required effect is set at most a third of the smallest effect measured
 * over the four builds of scripts/test_arches.sh and three seeds
 * (scripts/learning_margins.sh prints the table), so the last bits that one
 * CPU rounds differently from another never decide the outcome.
 *
 * Each check prints one line to stderr,
 *   learning: NAME control C value V effect E required R margin E/R
 * which scripts/learning_margins.sh collects.
 *
 * BF_TEST_SEED=N shifts the seeds of every learning test by N (0 when
 * unset), for measuring those margins over seeds. */
#ifndef BF_TESTS_LEARNING_H
#define BF_TESTS_LEARNING_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

/* The seed shift of BF_TEST_SEED (0 .. 999), 0 when unset. */
static inline unsigned learning_seed_shift(void) {
    const char *s = getenv("BF_TEST_SEED");
    if (!s || !*s) return 0;
    char *end;
    long v = strtol(s, &end, 10);
    cr_assert(*end == 0 && v >= 0 && v < 1000, "BF_TEST_SEED=%s: want 0 .. 999", s);
    return (unsigned)v;
}

/* Expects value to have moved from control by at least required, down when
 * falls is 1 (a loss), up when 0 (an accuracy). Returns the effect. */
static inline double learning_expect(const char *name, double control, double value,
                                     double required, int falls) {
    double effect = falls ? control - value : value - control;
    fprintf(stderr, "learning: %s control %.6g value %.6g effect %.6g required %.6g margin %.3g\n",
            name, control, value, effect, required, required > 0 ? effect / required : 0.0);
    cr_expect(effect >= required,
              "%s: %.6g against the control's %.6g, an effect of %.6g (%s); "
              "at least %.6g wanted",
              name, value, control, effect, falls ? "fall" : "rise", required);
    return effect;
}

#endif
