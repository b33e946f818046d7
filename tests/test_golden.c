/* Same numbers before and after the module rebuild: the training losses of
 * 20 fixed-seed steps of each model kind (tests/data/golden/ configs) were
 * recorded in tests/data/golden/losses.tsv by the code as it was before
 * worker/ became data/nn/models/pipelines. The code of today must reproduce
 * every step's train/loss and train/grad_norm within 1e-5 relative.
 *
 * Re-recording (only when a change is meant to alter the trajectory):
 *   BF_GOLDEN_RECORD=1 build/test_golden   rewrites losses.tsv. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tmpdir.h"

#define GOLDEN_DIR BF_SOURCE_DIR "/tests/data/golden"
#define GOLDEN_STEPS 20
static const char *const CASES[] = {"budget_off", "budget_dense", "budget_hadamard", "lm_dense",
                                    "lm_hadamard"};
#define N_CASES (sizeof CASES / sizeof CASES[0])

typedef struct golden_run {
    double loss[GOLDEN_STEPS], norm[GOLDEN_STEPS];
} golden_run;

/* Trains one case in a fresh folder (with its own copy of the glosses data)
 * and reads train/loss and train/grad_norm of every step from metrics.jsonl. */
static void run_case(const char *name, golden_run *g) {
    char dir[256];
    tmpdir_make(dir, sizeof dir, "/tmp/bf_golden_XXXXXX");
    tmpdir_copy_glosses(dir);
    char cmd[4096];
    int lm = strncmp(name, "lm_", 3) == 0;
    char data[1024];
    if (lm)
        snprintf(data, sizeof data, "--set data.path=%s/glosses_train.tsv", dir);
    else
        snprintf(data, sizeof data,
                 "--set data.train=%s/glosses_train.tsv --set data.val=%s/glosses_val.tsv", dir,
                 dir);
    snprintf(cmd, sizeof cmd, "%s/bfworker train %s/%s.yaml %s --out %s/run --quiet", BF_BIN_DIR,
             GOLDEN_DIR, name, data, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    FILE *f = fopen(tmpdir_path(dir, "run/metrics.jsonl"), "r");
    cr_assert_not_null(f);
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        cr_assert_not_null(o, "metrics.jsonl: %s", je.text);
        json_t *loss = json_object_get(o, "train/loss"),
               *norm = json_object_get(o, "train/grad_norm");
        long step = (long)json_integer_value(json_object_get(o, "step"));
        if (loss && norm && step >= 1 && step <= GOLDEN_STEPS) {
            g->loss[step - 1] = json_number_value(loss);
            g->norm[step - 1] = json_number_value(norm);
            n++;
        }
        json_decref(o);
    }
    fclose(f);
    cr_assert_eq(n, GOLDEN_STEPS, "%s: %d training steps logged, wanted %d", name, n, GOLDEN_STEPS);
    tmpdir_remove(dir);
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-12); }

Test(golden, twenty_steps_of_every_model_kind, .timeout = 600) {
    golden_run runs[N_CASES];
    for (size_t c = 0; c < N_CASES; c++) run_case(CASES[c], &runs[c]);
    const char *path = GOLDEN_DIR "/losses.tsv";
    const char *record = getenv("BF_GOLDEN_RECORD");
    if (record && strcmp(record, "1") == 0) {
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fprintf(f, "case\tstep\ttrain/loss\ttrain/grad_norm\n");
        for (size_t c = 0; c < N_CASES; c++)
            for (int s = 0; s < GOLDEN_STEPS; s++)
                fprintf(f, "%s\t%d\t%.9g\t%.9g\n", CASES[c], s + 1, runs[c].loss[s],
                        runs[c].norm[s]);
        cr_assert_eq(fclose(f), 0);
        return;
    }
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s missing", path);
    char line[512], name[64];
    int step, seen = 0;
    double loss, norm, worst = 0;
    cr_assert_not_null(fgets(line, sizeof line, f)); /* header */
    while (fgets(line, sizeof line, f)) {
        cr_assert_eq(sscanf(line, "%63s %d %lf %lf", name, &step, &loss, &norm), 4, "%s", line);
        size_t c = 0;
        while (c < N_CASES && strcmp(CASES[c], name)) c++;
        cr_assert_lt(c, N_CASES, "unknown case %s", name);
        cr_assert(step >= 1 && step <= GOLDEN_STEPS);
        double el = rel(runs[c].loss[step - 1], loss), en = rel(runs[c].norm[step - 1], norm);
        cr_expect_leq(el, 1e-5, "%s step %d: train/loss %.9g, recorded %.9g (rel %.2g)", name, step,
                      runs[c].loss[step - 1], loss, el);
        cr_expect_leq(en, 1e-5, "%s step %d: train/grad_norm %.9g, recorded %.9g (rel %.2g)", name,
                      step, runs[c].norm[step - 1], norm, en);
        worst = fmax(worst, fmax(el, en));
        seen++;
    }
    fclose(f);
    cr_assert_eq(seen, (int)(N_CASES * GOLDEN_STEPS));
    cr_log_info("golden: %d steps compared, worst relative difference %.3g\n", seen, worst);
}
