/* Same numbers as recorded: the training losses and gradient norms of 20
 * fixed-seed steps of each model kind (tests/data/golden/ configs) were
 * recorded in tests/data/golden/losses.tsv (its first lines say by which
 * build), first when worker/ became data/nn/models/pipelines. Today's code
 * must reproduce every step's train/loss and train/grad_norm within
 * golden_bound(step) relative, on any x86-64 CPU bf builds for.
 *
 * Why a bound and not the bits: another CPU, or another -march, sums in
 * another order (vector width, FMA contraction, the OpenBLAS kernels picked
 * at run time), so the last bits differ. How far they may differ:
 *
 *   - fp32 rounds each operation to within u = 2^-24 = 5.96e-8 relative. One
 *     forward and backward whose reductions run in another order (blocked
 *     and pairwise sums of up to a few thousand terms, each build's own
 *     blocking) differ by a few u: measured 2u at step 1.
 *   - Each later step adds a like error to the weights and carries the
 *     earlier ones forward; AdamW divides each gradient entry by its own
 *     running scale, so a relative change of a small entry becomes the same
 *     relative change of its update, and the weights' difference feeds the
 *     next step's gradients. The difference of step s is a sum of s
 *     injected errors each grown over the steps since: an envelope of about
 *     c u s^2, with c = 1 .. 2 measured (scripts/golden_spread.sh: the worst
 *     over the 5 cases, both metrics, seeds own/1/2, builds x86-64-v2, -v3
 *     and native of one machine: 1.2e-7 at step 1 (2.0 u), 2.0e-6 at step 5
 *     (1.4 u s^2), 9.2e-6 at step 11 (1.3 u s^2); and the AVX-512 machine of
 *     issue 35 against this file: 1.1e-5 at step 11).
 *   - The bound is 16 u s^2: 8x the largest c measured. A change that
 *     alters the trajectory (a different formula, a lost term) moves the
 *     loss by 1e-3 or more within a few steps, far past it.
 *
 * Bits are promised only within one build and thread count: the resume and
 * 1-vs-N-ranks tests compare those exactly.
 *
 * Re-recording (only when a change is meant to alter the trajectory), with
 * the portable build of scripts/test_arches.sh, so that any x86-64-v2 CPU
 * with the same compiler and OpenBLAS recomputes it bit for bit:
 *   sh scripts/test_arches.sh --levels x86-64-v2 -R test_golden
 *   BF_GOLDEN_RECORD=1 OPENBLAS_CORETYPE=Nehalem build-arch/x86-64-v2/test_golden
 * BF_GOLDEN_OUT=FILE writes the trajectories to FILE instead (comparing
 * nothing), BF_GOLDEN_SEED=N trains with train.seed N: scripts/golden_spread.sh
 * uses both. */
#include <cblas.h>
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
    /* BF_GOLDEN_SEED=N: another trajectory (for measuring the spread
     * between builds; the recording is of the configs' own seeds) */
    const char *seed = getenv("BF_GOLDEN_SEED");
    char seedset[64] = "";
    if (seed && *seed) {
        char *end;
        long v = strtol(seed, &end, 10);
        cr_assert(*end == 0 && v >= 0 && v < 1000000, "BF_GOLDEN_SEED=%s: want 0 .. 999999", seed);
        snprintf(seedset, sizeof seedset, "--set train.seed=%ld", v);
    }
    snprintf(cmd, sizeof cmd, "%s/bfworker train %s/%s.yaml %s %s --out %s/run --quiet", BF_BIN_DIR,
             GOLDEN_DIR, name, data, seedset, dir);
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

/* The relative difference allowed at step s (1-based): 16 u s^2, derived
 * above. scripts/golden_spread.sh prints the measured spread against it. */
static double golden_bound(int s) { return 16.0 * 0x1p-24 * (double)s * (double)s; }

/* The comment lines that open a recording: which build made it. */
static void write_provenance(FILE *f) {
    const char *threads = getenv("OMP_NUM_THREADS"), *core = getenv("OPENBLAS_CORETYPE");
    char cpu[256] = "unknown";
    FILE *ci = fopen("/proc/cpuinfo", "r");
    if (ci) {
        char line[512];
        int family = -1, model = -1;
        while (fgets(line, sizeof line, ci)) {
            if (!strncmp(line, "model name", 10) && strchr(line, ':') && !strcmp(cpu, "unknown")) {
                snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') + 2);
                cpu[strcspn(cpu, "\n")] = 0;
            } else if (!strncmp(line, "cpu family", 10) && family < 0)
                family = atoi(strchr(line, ':') + 1);
            else if (!strncmp(line, "model\t", 6) && model < 0)
                model = atoi(strchr(line, ':') + 1);
        }
        fclose(ci);
        size_t n = strlen(cpu);
        snprintf(cpu + n, sizeof cpu - n, " (family %d model %d)", family, model);
    }
    char *cfg = openblas_get_config();
    fprintf(f,
            "# recorded by: -march=%s, OPENBLAS_CORETYPE=%s (OpenBLAS: %s, core %s), "
            "gcc %s, OMP_NUM_THREADS=%s, on %s\n",
            BF_MARCH_DESC, core ? core : "(its own choice)", cfg ? cfg : "?",
            openblas_get_corename(), __VERSION__, threads ? threads : "(unset)", cpu);
    fprintf(f, "# compared within golden_bound(step) relative (tests/test_golden.c)\n");
}

Test(golden, twenty_steps_of_every_model_kind, .timeout = 600) {
    golden_run runs[N_CASES];
    for (size_t c = 0; c < N_CASES; c++) run_case(CASES[c], &runs[c]);
    const char *path = GOLDEN_DIR "/losses.tsv";
    const char *record = getenv("BF_GOLDEN_RECORD"), *dump = getenv("BF_GOLDEN_OUT");
    if ((record && strcmp(record, "1") == 0) || (dump && *dump)) {
        FILE *f = fopen(dump && *dump ? dump : path, "w");
        cr_assert_not_null(f);
        write_provenance(f);
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
    do /* the provenance comments, then the header */
        cr_assert_not_null(fgets(line, sizeof line, f), "%s: no header", path);
    while (line[0] == '#');
    double worst_ratio = 0;
    while (fgets(line, sizeof line, f)) {
        cr_assert_eq(sscanf(line, "%63s %d %lf %lf", name, &step, &loss, &norm), 4, "%s", line);
        size_t c = 0;
        while (c < N_CASES && strcmp(CASES[c], name)) c++;
        cr_assert_lt(c, N_CASES, "unknown case %s", name);
        cr_assert(step >= 1 && step <= GOLDEN_STEPS);
        double el = rel(runs[c].loss[step - 1], loss), en = rel(runs[c].norm[step - 1], norm);
        double b = golden_bound(step);
        cr_expect_leq(el, b, "%s step %d: train/loss %.9g, recorded %.9g (rel %.2g, bound %.2g)",
                      name, step, runs[c].loss[step - 1], loss, el, b);
        cr_expect_leq(en, b,
                      "%s step %d: train/grad_norm %.9g, recorded %.9g (rel %.2g, bound %.2g)",
                      name, step, runs[c].norm[step - 1], norm, en, b);
        worst = fmax(worst, fmax(el, en));
        worst_ratio = fmax(worst_ratio, fmax(el, en) / b);
        seen++;
    }
    fclose(f);
    cr_assert_eq(seen, (int)(N_CASES * GOLDEN_STEPS));
    cr_log_info("golden: %d steps compared, worst relative difference %.3g, %.3g of its bound\n",
                seen, worst, worst_ratio);
}
