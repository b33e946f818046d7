/* test_sched — adaptive sweeps without a daemon: the early-stopping policy
 * (ASHA rungs and cutoffs, the median rule, the reason texts), its keys in
 * sweep files, its durable decisions in a real SQLite store (recorded once,
 * resume), and the TPE sampler on known functions against random search
 * (numbers printed; the medians are asserted). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/pareto.h"
#include "jobs/sched_stop.h"
#include "jobs/sched_tpe.h"
#include "jobs/store.h"
#include "jobs/sweep.h"
#include "tmpdir.h"

static char tmpdir[256];
static void setup(void) { tmpdir_make(tmpdir, sizeof tmpdir, "/tmp/bf_test_sched_XXXXXX"); }
static void teardown(void) { cr_assert_eq(tmpdir_remove(tmpdir), 0); }
TestSuite(sched, .init = setup, .fini = teardown);

static sched_stop asha(int maximize, long long r, double eta, long long max_steps) {
    sched_stop c;
    memset(&c, 0, sizeof c);
    c.method = SWEEP_STOP_ASHA;
    snprintf(c.metric, sizeof c.metric, "val/acc");
    c.maximize = maximize;
    c.min_steps = r;
    c.eta = eta;
    c.max_steps = max_steps;
    return c;
}

Test(sched, asha_rungs) {
    sched_stop c = asha(1, 100, 3, 2700);
    cr_assert_eq(sched_asha_n_rungs(&c), 3); /* 100, 300, 900: a rung is below max_steps */
    c.max_steps = 2701;
    cr_assert_eq(sched_asha_n_rungs(&c), 4);
    cr_assert_eq(sched_asha_rung_step(&c, 1), 100);
    cr_assert_eq(sched_asha_rung_step(&c, 2), 300);
    cr_assert_eq(sched_asha_rung_step(&c, 4), 2700);
    c = asha(1, 400, 3, 400);
    cr_assert_eq(sched_asha_n_rungs(&c), 0, "no rung below max_steps");
}

Test(sched, asha_cutoff_and_reason) {
    sched_stop c = asha(1, 400, 3, 3600);
    /* 8 values already at rung 1; the 9th trial comes with 0.612 */
    double others[8] = {0.70, 0.655, 0.68, 0.50, 0.60, 0.61, 0.40, 0.30};
    sched_verdict v;
    sched_asha_judge(&c, 1, 400, 0.612, others, 8, &v);
    cr_assert_eq(v.stop, 1);
    cr_assert_eq(v.n, 9);
    cr_assert_eq(v.keep, 3);
    cr_assert_float_eq(v.cutoff, 0.655, 1e-12);
    cr_assert_str_eq(v.reason, "asha: val/acc 0.612 at step 400 is below the rung-1 cutoff 0.655 "
                               "(top 1/3 of 9 trials)");
    /* the third best continues; a tie with the cutoff continues */
    sched_asha_judge(&c, 1, 410, 0.655, others, 8, &v);
    cr_assert_eq(v.stop, 0, "%s", v.reason);
    /* the first trial at a rung always continues */
    sched_asha_judge(&c, 2, 1200, 0.1, NULL, 0, &v);
    cr_assert_eq(v.stop, 0);
    cr_assert_eq(v.keep, 1);
    /* min goal: lower is better, the word is "above" */
    sched_stop m = asha(0, 10, 2, 100);
    snprintf(m.metric, sizeof m.metric, "val/loss");
    double lo[3] = {1.0, 1.2, 2.0};
    sched_asha_judge(&m, 1, 10, 1.5, lo, 3, &v); /* n 4, keep 2: cutoff 1.2 */
    cr_assert_eq(v.stop, 1);
    cr_assert_float_eq(v.cutoff, 1.2, 1e-12);
    cr_assert(strstr(v.reason, "is above the rung-1 cutoff 1.2 (top 1/2 of 4 trials)"), "%s",
              v.reason);
    sched_asha_judge(&m, 1, 10, 1.1, lo, 3, &v);
    cr_assert_eq(v.stop, 0);
}

/* The paper's formulas, computed here independently (integer eta: exact). */
static void check_brackets(long long R, long long rmin, int eta) {
    sched_hb_bracket b[SCHED_MAX_RUNGS];
    int nb = sched_hyperband_brackets(R, rmin, eta, b, SCHED_MAX_RUNGS);
    long long smax = 0, p = rmin;
    while (p * eta <= R) p *= eta, smax++; /* floor(log_eta(R / r_min)) */
    cr_assert_eq(nb, smax + 1, "R %lld r_min %lld eta %d", R, rmin, eta);
    for (int i = 0; i < nb; i++) {
        int s = (int)smax - i;
        long long es = 1;
        for (int k = 0; k < s; k++) es *= eta;
        long long n = ((smax + 1) * es + s) / (s + 1); /* ceil((s_max+1)/(s+1) * eta^s) */
        cr_assert_eq(b[i].s, s);
        cr_assert_eq(b[i].n, n, "R %lld eta %d s %d: n %lld, want %lld", R, eta, s, b[i].n, n);
        cr_assert_float_eq(b[i].r, (double)R / (double)es, 1e-9);
        cr_assert(b[i].r >= (double)rmin - 1e-9, "no bracket starts below r_min");
        cr_assert_eq(b[i].n_rungs, s + 1);
        for (int k = 0; k <= s; k++) {
            long long ek = 1;
            for (int j = 0; j < k; j++) ek *= eta;
            cr_assert_eq(b[i].rungs[k], llround((double)R * (double)ek / (double)es));
        }
        cr_assert_eq(b[i].rungs[s], R, "every bracket ends at R");
    }
}

Test(sched, hyperband_brackets) {
    /* the paper's worked example (Li et al. 2018, Table 1): R 81, eta 3 */
    sched_hb_bracket b[SCHED_MAX_RUNGS];
    cr_assert_eq(sched_hyperband_brackets(81, 1, 3, b, SCHED_MAX_RUNGS), 5);
    static const long long n[5] = {81, 34, 15, 8, 5}, r[5] = {1, 3, 9, 27, 81};
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(b[i].s, 4 - i);
        cr_assert_eq(b[i].n, n[i], "s %d: n %lld", b[i].s, b[i].n);
        cr_assert_float_eq(b[i].r, (double)r[i], 1e-9);
        cr_assert_eq(b[i].rungs[0], r[i]);
    }
    cr_assert_eq(b[0].rungs[1], 3);
    cr_assert_eq(b[0].rungs[4], 81);
    cr_assert_eq(b[2].rungs[1], 27);
    check_brackets(81, 1, 3);
    check_brackets(27, 1, 3);
    check_brackets(8100, 100, 3);
    check_brackets(100, 1, 3); /* not a power of eta: s_max 4, r_4 = 100/81 */
    check_brackets(1000, 10, 2);
    check_brackets(1000, 7, 4);
    check_brackets(64, 1, 4);
    check_brackets(2, 1, 2);
    cr_assert_eq(sched_hyperband_brackets(100, 1, 3, b, SCHED_MAX_RUNGS), 5);
    cr_assert_eq(b[0].rungs[0], 1); /* 1.23 */
    cr_assert_eq(b[0].rungs[1], 4); /* 3.70 */
    cr_assert_eq(b[0].rungs[2], 11);
    cr_assert_eq(b[0].rungs[3], 33);
    cr_assert_eq(b[4].n, 5);
    /* refused: eta < 2, r_min >= R, r_min < 1, too small a table */
    cr_assert_eq(sched_hyperband_brackets(81, 1, 1.5, b, SCHED_MAX_RUNGS), -1);
    cr_assert_eq(sched_hyperband_brackets(81, 81, 3, b, SCHED_MAX_RUNGS), -1);
    cr_assert_eq(sched_hyperband_brackets(81, 0, 3, b, SCHED_MAX_RUNGS), -1);
    cr_assert_eq(sched_hyperband_brackets(81, 1, 3, b, 4), -1);
    cr_assert_eq(sched_hyperband_s_max(80, 1, 3), 3);
    cr_assert_eq(sched_hyperband_s_max(81, 1, 3), 4);
}

/* The rule: trials go round-robin over the brackets (s_max first), a bracket
 * skipped once it holds n_s trials of the round; a round holds sum n_s and
 * the next trial starts round 1. Checked against the counts, for several
 * (R, r_min, eta), over more than two rounds. */
static void check_placement(long long R, long long rmin, double eta) {
    sched_stop c = asha(1, rmin, eta, R);
    c.method = SWEEP_STOP_HYPERBAND;
    sched_hb_bracket b[SCHED_MAX_RUNGS];
    int nb = sched_hyperband_brackets(R, rmin, eta, b, SCHED_MAX_RUNGS);
    cr_assert_gt(nb, 0);
    long long total = 0;
    for (int i = 0; i < nb; i++) total += b[i].n;
    long long count[8][SCHED_MAX_RUNGS] = {{0}}; /* rounds 0..6 (total >= 2) */
    int last = -1; /* the bracket of the previous trial, as an index into b */
    for (long long idx = 0; idx < 2 * total + 7; idx++) {
        long long round = -1;
        sched_stop p;
        int s = sched_hyperband_bracket_of(&c, idx, &round, &p);
        cr_assert(s >= 0 && s < nb, "R %lld: index %lld in bracket %d", R, idx, s);
        cr_assert_eq(round, idx / total, "R %lld: index %lld in round %lld", R, idx, round);
        int i = nb - 1 - s;
        count[round][i]++;
        cr_assert_leq(count[round][i], b[i].n, "R %lld eta %g: bracket %d holds more than n_s %lld",
                      R, eta, s, b[i].n);
        cr_assert_float_eq(p.rung0, (double)R / pow(eta, s), 1e-9);
        /* round-robin: the next bracket (in s_max..0 order, wrapping) that is not full */
        if (idx % total != 0) {
            int want = last;
            do want = (want + 1) % nb;
            while (count[round][want] - (want == i) >= b[want].n);
            cr_assert_eq(i, want, "R %lld: index %lld in bracket %d, want %d", R, idx, s,
                         b[want].s);
        } else {
            cr_assert_eq(s, nb - 1, "a round starts at bracket s_max");
        }
        last = i;
    }
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < nb; i++)
            cr_assert_eq(count[r][i], b[i].n, "round %d: bracket %d holds %lld, n_s %lld", r,
                         b[i].s, count[r][i], b[i].n);
}

Test(sched, hyperband_brackets_hold_n_s_trials) {
    check_placement(81, 1, 3);
    check_placement(100, 1, 3);
    check_placement(360, 40, 3);
    check_placement(1000, 10, 2);
    check_placement(64, 1, 4);
    check_placement(2, 1, 2);
    /* R 81, eta 3 (n = 81, 34, 15, 8, 5): five at once, then bracket 0
     * (5 trials) is full after 25, bracket 1 (8) after 38 */
    sched_stop c = asha(1, 1, 3, 81);
    c.method = SWEEP_STOP_HYPERBAND;
    sched_stop b;
    cr_assert_eq(sched_hyperband_bracket_of(&c, 24, NULL, &b), 0);
    cr_assert_eq(sched_hyperband_bracket_of(&c, 25, NULL, &b), 4);
    cr_assert_eq(sched_hyperband_bracket_of(&c, 28, NULL, &b), 1);
    cr_assert_eq(sched_hyperband_bracket_of(&c, 29, NULL, &b), 4, "bracket 0 is full");
    long long round = -1;
    cr_assert_eq(sched_hyperband_bracket_of(&c, 142, &round, &b), 4, "the last of round 0");
    cr_assert_eq(round, 0);
    cr_assert_eq(sched_hyperband_bracket_of(&c, 143, &round, &b), 4);
    cr_assert_eq(round, 1, "143 = 81 + 34 + 15 + 8 + 5 trials fill round 0");
}

Test(sched, hyperband_bracket_policy) {
    sched_stop c = asha(1, 1, 3, 81);
    c.method = SWEEP_STOP_HYPERBAND;
    sched_stop b;
    /* round-robin over trial indices, most aggressive bracket first */
    static const int want[7] = {4, 3, 2, 1, 0, 4, 3};
    for (int i = 0; i < 7; i++) cr_assert_eq(sched_hyperband_bracket_of(&c, i, NULL, &b), want[i]);
    /* bracket 2: ASHA on rungs 9, 27 (81 is R, where the trial ends) */
    cr_assert_eq(sched_hyperband_bracket_of(&c, 2, NULL, &b), 2);
    cr_assert_eq(sched_asha_n_rungs(&b), 2);
    cr_assert_eq(sched_asha_rung_step(&b, 1), 9);
    cr_assert_eq(sched_asha_rung_step(&b, 2), 27);
    /* bracket 0 never stops a trial; bracket 4 judges at 1, 3, 9, 27 */
    cr_assert_eq(sched_hyperband_bracket_of(&c, 4, NULL, &b), 0);
    cr_assert_eq(sched_asha_n_rungs(&b), 0);
    cr_assert_eq(sched_hyperband_bracket_of(&c, 5, NULL, &b), 4);
    cr_assert_eq(sched_asha_n_rungs(&b), 4);
    cr_assert_eq(sched_asha_rung_step(&b, 4), 27);
    /* its verdicts are ASHA's */
    double others[2] = {0.9, 0.8};
    sched_verdict v;
    sched_asha_judge(&b, 1, 1, 0.5, others, 2, &v);
    cr_assert_eq(v.stop, 1);
    cr_assert_eq(v.keep, 1);
}

Test(sched, median_rule) {
    sched_stop c;
    memset(&c, 0, sizeof c);
    c.method = SWEEP_STOP_MEDIAN;
    snprintf(c.metric, sizeof c.metric, "val/acc");
    c.maximize = 1;
    c.min_steps = 100;
    c.min_trials = 3;
    /* running means: a series that has not reached the step does not count */
    int64_t st[4] = {50, 100, 150, 200};
    double va[4] = {0.2, 0.4, 0.6, 0.8}, mean = 0;
    cr_assert_eq(sched_running_mean(st, va, 4, 150, &mean), 1);
    cr_assert_float_eq(mean, 0.4, 1e-12);
    cr_assert_eq(sched_running_mean(st, va, 4, 250, &mean), 0);
    double others[3] = {0.5, 0.6, 0.7};
    sched_verdict v;
    sched_median_judge(&c, 150, 0.55, others, 3, &v);
    cr_assert_eq(v.stop, 1);
    cr_assert_float_eq(v.cutoff, 0.6, 1e-12);
    cr_assert_str_eq(v.reason, "median: val/acc best 0.55 by step 150 is below the median 0.6 of "
                               "3 other trials' running averages");
    sched_median_judge(&c, 150, 0.6, others, 3, &v);
    cr_assert_eq(v.stop, 0, "equal to the median goes on");
    sched_median_judge(&c, 150, 0.1, others, 2, &v);
    cr_assert_eq(v.stop, 0, "fewer than min_trials others");
    sched_median_judge(&c, 90, 0.1, others, 3, &v);
    cr_assert_eq(v.stop, 0, "before min_steps");
    double four[4] = {0.1, 0.5, 0.7, 0.9}; /* even count: mean of the middle two */
    sched_median_judge(&c, 150, 0.55, four, 4, &v);
    cr_assert_float_eq(v.cutoff, 0.6, 1e-12);
}

static sweep_errors load_errs(const char *text, sweep_spec **sp) {
    sweep_errors e = {0};
    sweep_load_string(text, strlen(text), "s.yaml", sp, &e);
    return e;
}

static int has_err(const sweep_errors *e, const char *needle) {
    for (int i = 0; i < e->n; i++)
        if (strstr(e->msgs[i], needle)) return 1;
    return 0;
}

Test(sched, hyperband_keys) {
    sweep_spec *sp = NULL;
    sweep_errors e = load_errs("train: {steps: 810}\nsweep:\n  method: random\n  trials: 10\n"
                               "  parameters:\n    train.lr: {min: 1.0e-4, max: 1.0e-2}\n"
                               "early_stop: {method: hyperband, min_steps: 10}\n",
                               &sp);
    cr_assert_eq(e.total, 0, "%s", e.n ? e.msgs[0] : "");
    cr_assert_eq(sp->early_stop.method, SWEEP_STOP_HYPERBAND);
    cr_assert_float_eq(sp->early_stop.reduction_factor, 3.0, 0);
    cr_assert_eq(sp->early_stop.max_steps, 810, "R defaults to train.steps");
    char json[512], err[256];
    cr_assert_eq(sched_stop_json(sp, json, sizeof json), 0);
    cr_assert(strstr(json, "\"method\": \"hyperband\""), "%s", json);
    sched_stop c;
    cr_assert_eq(sched_stop_parse(json, 1, &c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.method, SWEEP_STOP_HYPERBAND);
    cr_assert_eq(c.min_steps, 10);
    cr_assert_eq(c.max_steps, 810);
    sched_stop b;
    cr_assert_eq(sched_hyperband_bracket_of(&c, 0, NULL, &b), 4); /* 810 / 10 = 3^4 */
    cr_assert_eq(sched_asha_rung_step(&b, 1), 10);
    sweep_spec_destroy(&sp);
    sweep_errors_free(&e);
    cr_assert_eq(sched_stop_parse("{\"method\": \"hyperband\", \"min_steps\": 10, "
                                  "\"max_steps\": 10}",
                                  1, &c, err, sizeof err),
                 -1);
    cr_assert(strstr(err, "hyperband needs 1 <= min_steps < max_steps"), "%s", err);
}

Test(sched, sweep_keys) {
    sweep_spec *sp = NULL;
    sweep_errors e = load_errs("train: {steps: 900}\nsweep:\n  method: tpe\n  trials: 12\n"
                               "  parallel: 3\n  startup_trials: 5\n  seed: 9\n  parameters:\n"
                               "    train.lr: {min: 1.0e-4, max: 1.0e-2, distribution: "
                               "log_uniform}\n    model.heads: {values: [2, 4, 8]}\n"
                               "early_stop: {method: asha, min_steps: 100}\n",
                               &sp);
    cr_assert_eq(e.total, 0, "%s", e.n ? e.msgs[0] : "");
    cr_assert_eq(sp->method, SWEEP_TPE);
    cr_assert_eq(sp->n_trials, 12);
    cr_assert_eq(sp->parallel, 3);
    cr_assert_eq(sp->startup_trials, 5);
    cr_assert_eq(sp->seed, 9);
    cr_assert_eq(sp->early_stop.method, SWEEP_STOP_ASHA);
    cr_assert_float_eq(sp->early_stop.reduction_factor, 3.0, 0);
    cr_assert_eq(sp->early_stop.max_steps, 900, "max_steps defaults to train.steps");
    cr_assert_str_eq(sp->early_stop.metric, "val/acc", "the job's metric by default");
    char json[512], err[256];
    cr_assert_eq(sched_stop_json(sp, json, sizeof json), 0);
    sched_stop c;
    cr_assert_eq(sched_stop_parse(json, 1, &c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.method, SWEEP_STOP_ASHA);
    cr_assert_eq(c.min_steps, 100);
    cr_assert_eq(c.max_steps, 900);
    sched_tpe_space space;
    cr_assert_eq(sched_tpe_space_from(sp, &space, err, sizeof err), 0);
    cr_assert_eq(space.n, 2);
    cr_assert_eq(space.dim[0].kind, TPE_LOG_UNIFORM);
    cr_assert_eq(space.dim[1].kind, TPE_CATEGORICAL);
    cr_assert_eq(space.dim[1].n_choices, 3);
    sweep_spec_destroy(&sp);
    sweep_errors_free(&e);

    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"early_stop: {method: asha}\n", "method asha needs 'min_steps: R' >= 1"},
        {"early_stop: {method: asha, min_steps: 10, reduction_factor: 1}\n",
         "early_stop.reduction_factor: 1 is out of range; valid range is [1.5, 100]"},
        {"early_stop: {method: median, reduction_factor: 3}\n",
         "early_stop.reduction_factor applies only to method: asha or hyperband"},
        {"early_stop: {method: asha, min_steps: 10, min_trials: 3}\n",
         "early_stop.min_trials applies only to method: median"},
        {"train: {steps: 50}\nearly_stop: {method: asha, min_steps: 50}\n",
         "min_steps 50 is not below max_steps 50"},
        {"early_stop: {method: hyperbands}\n",
         "'hyperbands' is not valid; expected one of: none, median, threshold, asha, hyperband"},
        {"early_stop: {method: hyperband}\n", "method hyperband needs 'min_steps: r_min' >= 1"},
        {"early_stop: {method: hyperband, min_steps: 10, reduction_factor: 1.5}\n",
         "early_stop.reduction_factor: 1.5 is below 2; method hyperband needs eta >= 2"},
        {"train: {steps: 50}\nearly_stop: {method: hyperband, min_steps: 50}\n",
         "min_steps 50 is not below max_steps 50"},
        {"early_stop: {method: hyperband, min_steps: 10, max_steps: 100, min_trials: 3}\n",
         "early_stop.min_trials applies only to method: median"},
        {"early_stop: {method: hyperband, min_steps: 10, threshold: 0.5}\n",
         "early_stop.threshold applies only to method: threshold"},
        {"early_stop: {method: median, max_steps: 300}\n",
         "early_stop.max_steps applies only to method: asha or hyperband"},
        {"sweep:\n  method: tpe\n  parameters: {train.seed: {values: [1]}}\n",
         "method tpe needs 'trials: N'"},
        {"sweep:\n  method: random\n  trials: 3\n  parallel: 2\n  parameters: {train.seed: "
         "{values: [1]}}\n",
         "sweep.parallel applies only to method: tpe"},
        {"sweep:\n  method: tpe\n  trials: 3\n  parallel: 0\n  parameters: {train.seed: "
         "{values: [1]}}\n",
         "sweep.parallel: 0 is out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sp = NULL;
        e = load_errs(bad[i].text, &sp);
        cr_assert_null(sp, "accepted: %s", bad[i].text);
        cr_assert(has_err(&e, bad[i].needle), "no '%s' for %s (first: %s)", bad[i].needle,
                  bad[i].text, e.n ? e.msgs[0] : "none");
        sweep_errors_free(&e);
    }
}

Test(sched, decisions_are_durable_once_and_resume) {
    char err[512];
    store *s = NULL;
    const char *path = tmpdir_path(tmpdir, "d.db");
    cr_assert_eq(store_open(path, &s, err, sizeof err), 0, "%s", err);
    const char *text =
        "train: {steps: 300, eval_every: 10}\nsweep:\n  parameters:\n    train.seed: {values: [1, "
        "2]}\nearly_stop: {method: asha, min_steps: 20}\n";
    sweep_spec *sp = NULL;
    sweep_errors e = load_errs(text, &sp);
    cr_assert_eq(e.total, 0);
    int64_t job;
    cr_assert_eq(store_submit(s, sp, text, &job, err, sizeof err), 0, "%s", err);
    sweep_spec_destroy(&sp);
    store_trial *ts;
    size_t n;
    cr_assert_eq(store_job_trials(s, job, &ts, &n, err, sizeof err), 0);
    int64_t t = ts[1].id;
    store_trials_free(ts, n);
    cr_assert_eq(store_trial_transition(s, t, TRIAL_RUNNING, NULL, err, sizeof err), 0);
    store_decision d = {.job = job,
                        .trial = t,
                        .rung = 1,
                        .rung_step = 20,
                        .step = 20,
                        .value = 0.2,
                        .cutoff = 0.5,
                        .n = 2,
                        .stop = 1};
    snprintf(d.method, sizeof d.method, "asha");
    snprintf(d.reason, sizeof d.reason, "asha: val/acc 0.2 at step 20 is below ...");
    int added;
    cr_assert_eq(store_decision_add(s, &d, &added, err, sizeof err), 0, "%s", err);
    cr_assert_eq(added, 1);
    d.value = 0.9; /* the same rung again (a restart, a resend): nothing changes */
    cr_assert_eq(store_decision_add(s, &d, &added, err, sizeof err), 0, "%s", err);
    cr_assert_eq(added, 0);
    store_close(&s);
    /* reopened, as a restarted bfd would: one decision, the reason on the trial */
    cr_assert_eq(store_open(path, &s, err, sizeof err), 0, "%s", err);
    store_decision *ds;
    size_t nd;
    cr_assert_eq(store_decisions(s, job, 0, &ds, &nd, err, sizeof err), 0);
    cr_assert_eq(nd, 1);
    cr_assert_float_eq(ds[0].value, 0.2, 0);
    cr_assert_eq(ds[0].stop, 1);
    free(ds);
    double *vals;
    cr_assert_eq(store_rung_values(s, job, "asha", 1, &vals, &n, err, sizeof err), 0);
    cr_assert_eq(n, 1);
    free(vals);
    /* an MO-ASHA decision keeps the trial's point, read back per rung */
    store_decision mo = d;
    mo.rung_step = 60, mo.rung = 2, mo.stop = 0, mo.n_point = 2;
    mo.point[0] = 0.25, mo.point[1] = 0.1 + 0.2; /* every digit kept */
    cr_assert_eq(store_decision_add(s, &mo, &added, err, sizeof err), 0, "%s", err);
    cr_assert_eq(store_rung_points(s, job, "asha", 2, 2, &vals, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 1);
    cr_assert(vals[0] == 0.25 && vals[1] == 0.1 + 0.2);
    free(vals);
    cr_assert_eq(store_rung_points(s, job, "asha", 1, 2, &vals, &n, err, sizeof err), 0);
    cr_assert_eq(n, 0, "a decision of one value has no point");
    free(vals);
    store_trial tr;
    cr_assert_eq(store_get_trial(s, t, &tr, err, sizeof err), 0);
    cr_assert_str_eq(tr.stop_reason, "asha: val/acc 0.2 at step 20 is below ...");
    store_trial_free(&tr);
    cr_assert_eq(store_trial_resume(s, t, "resume", err, sizeof err), -1, "RUNNING: not resumed");
    cr_assert(strstr(err, "only a STOPPED trial can be resumed"), "%s", err);
    cr_assert_eq(store_trial_transition(s, t, TRIAL_STOPPED, "stopped", err, sizeof err), 0);
    cr_assert_eq(store_trial_resume(s, t, "resumed by request", err, sizeof err), 0, "%s", err);
    cr_assert_eq(store_get_trial(s, t, &tr, err, sizeof err), 0);
    cr_assert_eq(tr.state, TRIAL_PENDING);
    cr_assert_null(tr.stop_reason, "a resumed trial has no stop reason");
    store_trial_free(&tr);
    store_close(&s);
}

Test(sched, migrates_v3_store) {
    char err[512];
    const char *path = tmpdir_path(tmpdir, "old.db");
    cr_assert_eq(store_create_at_version(path, 3, err, sizeof err), 0, "%s", err);
    store *s = NULL;
    cr_assert_eq(store_open(path, &s, err, sizeof err), 0, "%s", err);
    cr_assert_eq(store_schema_version(s), STORE_SCHEMA_VERSION); /* through 4 and on */
    store_decision *ds;
    size_t nd;
    cr_assert_eq(store_decisions(s, 0, 0, &ds, &nd, err, sizeof err), 0, "%s", err);
    cr_assert_eq(nd, 0);
    free(ds);
    store_close(&s);
}

/* ------------------------------------------------------------------- TPE */

static double branin(const double *x) {
    const double pi = 3.14159265358979323846;
    double b = 5.1 / (4 * pi * pi), c = 5 / pi, t = 1 / (8 * pi);
    double u = x[1] - b * x[0] * x[0] + c * x[0] - 6;
    return u * u + 10 * (1 - t) * cos(x[0]) + 10; /* minimum 0.397887 */
}

/* 5 categories (one best) + a log-uniform and a uniform number; minimum 0 */
static double mixed(const double *x) {
    static const double offset[5] = {2.0, 0.0, 1.0, 3.0, 1.5};
    double a = log10(x[1]) + 3, b = x[2] - 0.3;
    return offset[(int)x[0]] + a * a + 4 * b * b;
}

static double run_search(const sched_tpe_space *sp, double (*f)(const double *), int startup,
                         uint64_t seed, int n_trials) {
    double xs[64 * 3], ys[64], best = INFINITY;
    sched_tpe_opts o = {.seed = seed, .startup = startup, .n_candidates = 24, .maximize = 0};
    for (int i = 0; i < n_trials; i++) {
        int rc = sched_tpe_propose(sp, xs, ys, (size_t)i, i, &o, &xs[i * sp->n]);
        cr_assert_eq(rc, i >= startup ? 1 : 0);
        for (int d = 0; d < sp->n; d++) {
            double v = xs[i * sp->n + d];
            if (sp->dim[d].kind == TPE_CATEGORICAL)
                cr_assert(v == floor(v) && v >= 0 && v < sp->dim[d].n_choices);
            else
                cr_assert(v >= sp->dim[d].lo && v <= sp->dim[d].hi, "%g", v);
        }
        ys[i] = f(&xs[i * sp->n]);
        if (ys[i] < best) best = ys[i];
    }
    return best;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median20(double *v) {
    qsort(v, 20, sizeof *v, cmp_d);
    return 0.5 * (v[9] + v[10]);
}

static void compare(const char *name, const sched_tpe_space *sp, double (*f)(const double *),
                    double factor) {
    double tpe[20], rnd[20];
    for (int s = 0; s < 20; s++) {
        tpe[s] = run_search(sp, f, 10, (uint64_t)s + 1, 40);
        rnd[s] = run_search(sp, f, 1000, (uint64_t)s + 1, 40);
    }
    double mt = median20(tpe), mr = median20(rnd);
    printf("tpe vs random, %s, 20 seeds, best after 40 trials: median tpe %.4f, random %.4f\n",
           name, mt, mr);
    cr_assert_lt(mt, factor * mr, "%s: tpe median %.4f is not below %.2f x random %.4f", name, mt,
                 factor, mr);
}

Test(sched, tpe_beats_random_search) {
    sched_tpe_space b = {.n = 2, .dim = {{TPE_UNIFORM, -5, 10, 0}, {TPE_UNIFORM, 0, 15, 0}}};
    compare("branin", &b, branin, 0.75);
    sched_tpe_space m = {.n = 3,
                         .dim = {{TPE_CATEGORICAL, 0, 0, 5},
                                 {TPE_LOG_UNIFORM, 1e-5, 1e-1, 0},
                                 {TPE_UNIFORM, -1, 1, 0}}};
    compare("5 categories + 2 numbers", &m, mixed, 0.5);
}

Test(sched, tpe_is_reproducible) {
    sched_tpe_space m = {
        .n = 3, .dim = {{TPE_CATEGORICAL, 0, 0, 5}, {TPE_INT, 1, 8, 0}, {TPE_UNIFORM, -1, 1, 0}}};
    double xs[2][20 * 3], ys[20];
    for (int rep = 0; rep < 2; rep++) {
        sched_tpe_opts o = {.seed = 42, .startup = 5, .n_candidates = 24, .maximize = 1};
        for (int i = 0; i < 20; i++) {
            sched_tpe_propose(&m, xs[rep], ys, (size_t)i, i, &o, &xs[rep][i * 3]);
            cr_assert_eq(xs[rep][i * 3 + 1], floor(xs[rep][i * 3 + 1]), "integers stay integers");
            ys[i] = -mixed((double[]){xs[rep][i * 3], 1e-3, xs[rep][i * 3 + 2]});
        }
    }
    cr_assert_eq(memcmp(xs[0], xs[1], sizeof xs[0]), 0, "same seed, same order: same proposals");
    sched_tpe_opts o = {.seed = 43, .startup = 5, .n_candidates = 24, .maximize = 1};
    double other[3];
    sched_tpe_propose(&m, xs[0], ys, 0, 0, &o, other);
    cr_assert(memcmp(other, xs[0], sizeof other) != 0, "another seed, another first proposal");
}

/* ZDT1 in two parameters, both objectives minimised: the Pareto front is
 * x1 = 0, f2 = 1 - sqrt(f1) */
static void zdt1(const double *x, double *f) {
    double g = 1 + 9 * x[1];
    f[0] = x[0];
    f[1] = g * (1 - sqrt(x[0] / g));
}

/* Hypervolume up to (1.1, 11) after n trials of MOTPE (startup 10) or of
 * random search (startup past n). */
static double run_motpe(int startup, uint64_t seed, int n) {
    sched_tpe_space sp = {.n = 2, .dim = {{TPE_UNIFORM, 0, 1, 0}, {TPE_UNIFORM, 0, 1, 0}}};
    double xs[40 * 2], ys[40 * 2], ref[] = {1.1, 11};
    int mins[] = {0, 0};
    sched_tpe_opts o = {.seed = seed, .startup = startup, .n_candidates = 24};
    for (int i = 0; i < n; i++) {
        int rc = sched_tpe_propose_mo(&sp, xs, ys, 2, mins, (size_t)i, i, &o, &xs[2 * i]);
        cr_assert_eq(rc, i >= startup ? 1 : 0);
        zdt1(&xs[2 * i], &ys[2 * i]);
    }
    return pareto_hypervolume(ys, (size_t)n, 2, mins, ref);
}

Test(sched, motpe_beats_random_search_on_zdt1) {
    double mo[20], rnd[20];
    for (int s = 0; s < 20; s++) {
        mo[s] = run_motpe(10, (uint64_t)s + 1, 40);
        rnd[s] = run_motpe(1000, (uint64_t)s + 1, 40);
    }
    double mm = median20(mo), mr = median20(rnd);
    printf("motpe vs random, zdt1, 20 seeds, hypervolume after 40 trials: median motpe %.4f, "
           "random %.4f (the front's: %.4f)\n",
           mm, mr, 1.1 * 11 - 1.0 / 3);
    cr_assert_gt(mm, mr, "motpe's median hypervolume %.4f is not above random's %.4f", mm, mr);
}

Test(sched, motpe_of_one_objective_is_tpe) {
    /* one objective: fronts are the values in order and ties contribute
     * nothing, so the good split, and every proposal, is TPE's */
    sched_tpe_space m = {
        .n = 3, .dim = {{TPE_CATEGORICAL, 0, 0, 5}, {TPE_INT, 1, 8, 0}, {TPE_UNIFORM, -1, 1, 0}}};
    double a[20 * 3], b[20 * 3], ys[20];
    int maxi[] = {1};
    sched_tpe_opts o = {.seed = 9, .startup = 5, .n_candidates = 24, .maximize = 1};
    for (int i = 0; i < 20; i++) {
        sched_tpe_propose(&m, a, ys, (size_t)i, i, &o, &a[i * 3]);
        sched_tpe_propose_mo(&m, b, ys, 1, maxi, (size_t)i, i, &o, &b[i * 3]);
        cr_assert_eq(memcmp(&a[i * 3], &b[i * 3], 3 * sizeof *a), 0, "proposal %d", i);
        ys[i] = -mixed((double[]){a[i * 3], 1e-3, a[i * 3 + 2]});
        if (i % 4 == 0) ys[i] = i > 0 ? ys[i - 1] : ys[i]; /* ties */
    }
}

/* A synthetic two-objective problem, both minimised: trial i's final
 * values F = (x0, 1 - sqrt(x0) + x1), its front x1 = 0; at step r of R
 * each value is worse by c_k (R - r) / R, c_k its own draw in [0, 0.2].
 * x1 is drawn as u^3, so that some trials lie near the front. */
typedef struct synth {
    double F[2], c[2];
} synth;

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unit(uint64_t *s) { return (double)(splitmix(s) >> 11) * 0x1.0p-53; }

static void synth_make(synth *t, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) {
        double x0 = unit(&seed), u = unit(&seed), x1 = u * u * u;
        t[i].F[0] = x0;
        t[i].F[1] = 1 - sqrt(x0) + x1;
        t[i].c[0] = 0.2 * unit(&seed);
        t[i].c[1] = 0.2 * unit(&seed);
    }
}

/* Runs the trials one after another through the rungs of c (asha):
 * judged by MO-ASHA over both objectives, or (mo = 0) by ASHA on the first
 * alone, the wrong policy the test must tell apart. kept[i] = 1 when trial
 * i was never stopped. Returns how many were kept. */
static int synth_asha(const sched_stop *c, const synth *t, int n, int mo, int *kept) {
    static const sweep_objective obj[2] = {{"f1", 0}, {"f2", 0}};
    int nr = sched_asha_n_rungs(c), n_kept = 0;
    static double rung_pts[SCHED_MAX_RUNGS][400 * 2];
    size_t at[SCHED_MAX_RUNGS] = {0};
    cr_assert_leq(n, 400);
    for (int i = 0; i < n; i++) {
        kept[i] = 1;
        for (int k = 1; k <= nr && kept[i]; k++) {
            long long r = sched_asha_rung_step(c, k);
            double f = (double)(c->max_steps - r) / (double)c->max_steps, v[2];
            for (int j = 0; j < 2; j++) v[j] = t[i].F[j] + t[i].c[j] * f;
            sched_verdict vd;
            if (mo) {
                sched_mo_asha_judge(c, obj, 2, k, r, v, rung_pts[k - 1], at[k - 1], &vd);
            } else {
                double one[400];
                for (size_t q = 0; q < at[k - 1]; q++) one[q] = rung_pts[k - 1][2 * q];
                sched_asha_judge(c, k, r, v[0], one, at[k - 1], &vd);
            }
            memcpy(&rung_pts[k - 1][2 * at[k - 1]++], v, sizeof v);
            if (vd.stop) kept[i] = 0;
        }
        n_kept += kept[i];
    }
    return n_kept;
}

Test(sched, mo_asha_keeps_trials_that_cover_the_front) {
    /* the true front f2 = 1 - sqrt(f1), f1 in [0, 1], up to (1.1, 1.1):
     * the integral of 1.1 - f2 over [0, 1] plus 0.1 x 1.1 */
    const double true_hv = 0.1 + 2.0 / 3 + 0.11, ref[] = {1.1, 1.1};
    int mins[] = {0, 0};
    sched_stop c = {.method = SWEEP_STOP_ASHA, .min_steps = 1, .max_steps = 9, .eta = 3};
    cr_assert_eq(sched_asha_n_rungs(&c), 2, "rungs at 1 and 3");
    for (uint64_t seed = 1; seed <= 3; seed++) {
        enum { N = 300 };
        static synth t[N];
        static double fin[N * 2];
        int kept[N];
        synth_make(t, N, seed);
        double hv[2];
        int nk[2];
        for (int mo = 1; mo >= 0; mo--) {
            nk[mo] = synth_asha(&c, t, N, mo, kept);
            int w = 0;
            for (int i = 0; i < N; i++)
                if (kept[i]) memcpy(&fin[2 * w++], t[i].F, sizeof t[i].F);
            hv[mo] = pareto_hypervolume(fin, (size_t)w, 2, mins, ref);
        }
        for (int i = 0; i < N; i++) memcpy(&fin[2 * i], t[i].F, sizeof t[i].F);
        double all = pareto_hypervolume(fin, N, 2, mins, ref);
        printf("mo-asha, seed %llu: %d of %d kept, hypervolume %.4f (asha on f1 alone: %d kept, "
               "%.4f; all trials %.4f; the true front %.4f)\n",
               (unsigned long long)seed, nk[1], N, hv[1], nk[0], hv[0], all, true_hv);
        cr_assert_lt(nk[1], N / 3, "MO-ASHA stops most trials");
        cr_assert_gt(hv[1], 0.9 * true_hv,
                     "seed %llu: the kept trials' hypervolume %.4f is not "
                     "within 10%% of the true front's %.4f",
                     (unsigned long long)seed, hv[1], true_hv);
        /* the control: ASHA on one objective keeps one end of the front */
        cr_assert_lt(hv[0], hv[1], "seed %llu", (unsigned long long)seed);
    }
}
