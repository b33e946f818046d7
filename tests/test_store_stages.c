/* test_store_stages — the shared-stage table of s2s trials in the SQLite
 * store, on real files: the plan written at submit, claims and waits, the
 * stage following its runner's attempt (done, failed with and without
 * retries, released by a preemption or a cancel), reuse across jobs with
 * the eval metrics copied, durability across a reopen, and the migration
 * from schema 4. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/store.h"

/* pipeline s2s's stages, as declared (common/pipeline_decl.c) */
#define S2S_STAGES (pipeline_stages("s2s")->n)
#include "jobs/sweep.h"
#include "store_submit.h"
#include "tmpdir.h"

static char tmpdir[256];

static void setup(void) { tmpdir_make(tmpdir, sizeof tmpdir, "/tmp/bf_test_stages_XXXXXX"); }
static void teardown(void) { cr_assert_eq(tmpdir_remove(tmpdir), 0); }

TestSuite(store_stages, .init = setup, .fini = teardown);

static store *open_store(void) {
    store *s = NULL;
    char err[512];
    cr_assert_eq(store_open(tmpdir_path(tmpdir, "s.db"), &s, err, sizeof err), 0, "%s", err);
    return s;
}

/* 3 retentions x 2 mixers: 1 teacher, 3 avit, 3 profile, 6 of each student stage */
static const char *GRID = "name: g\npipeline: s2s\n"
                          "base: {data: {set: fashion_mnist}, train: {steps: 10}}\n"
                          "sweep:\n  parameters:\n"
                          "    avit.retention: {values: [0.7, 0.5, 0.3]}\n"
                          "    distill.mixer: {values: [bimamba, bilstm]}\n"
                          "metric: {name: eval/student/test/acc, goal: max}\nretries: %d\n";

static int64_t submit_grid(store *s, int retries) {
    char text[1024];
    snprintf(text, sizeof text, GRID, retries);
    return submit_text(s, text);
}

static int64_t trial_at(store *s, int64_t job, long long index) {
    store_trial *t;
    size_t n;
    char err[512];
    cr_assert_eq(store_job_trials(s, job, &t, &n, err, sizeof err), 0, "%s", err);
    cr_assert(index < (long long)n);
    int64_t id = t[index].id;
    store_trials_free(t, n);
    return id;
}

static trial_state state_of(store *s, int64_t id) {
    store_trial t;
    char err[512];
    cr_assert_eq(store_get_trial(s, id, &t, err, sizeof err), 0, "%s", err);
    trial_state st = t.state;
    store_trial_free(&t);
    return st;
}

static stage_next next_of(store *s, int64_t trial, int *idx, char *reason, int *first) {
    stage_next nx;
    int i, f;
    char err[512], r[512];
    cr_assert_eq(store_stage_next(s, trial, &nx, &i, r, sizeof r, &f, err, sizeof err), 0, "%s",
                 err);
    if (idx) *idx = i;
    if (reason) strcpy(reason, r);
    if (first) *first = f;
    return nx;
}

static store_stage stage_of(store *s, int64_t trial, int idx) {
    store_stage plan[STAGE_MAX];
    int n;
    char err[512];
    cr_assert_eq(store_trial_stages(s, trial, plan, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, S2S_STAGES);
    return plan[idx];
}

static void launch(store *s, int64_t trial, int idx) {
    char err[512];
    cr_assert_eq(store_stage_launch(s, trial, idx, "launched", err, sizeof err), 0, "%s", err);
}

static void stage_done(store *s, int64_t trial) {
    char err[512];
    cr_assert_eq(store_trial_stage_done(s, trial, "stage done", err, sizeof err), 0, "%s", err);
}

/* Runs trial's stages from `from` to the end as their runner. */
static void run_rest(store *s, int64_t trial) {
    char err[512];
    int idx;
    while (next_of(s, trial, &idx, NULL, NULL) == STAGE_NEXT_RUN) {
        launch(s, trial, idx);
        if (idx == S2S_STAGES - 1)
            cr_assert_eq(store_trial_transition(s, trial, TRIAL_COMPLETED, "done", err, sizeof err),
                         0, "%s", err);
        else
            stage_done(s, trial);
    }
}

Test(store_stages, plan_at_submit_and_what_a_grid_shares) {
    store *s = open_store();
    int64_t job = submit_grid(s, 0);
    store_stage_counts c;
    char err[512];
    cr_assert_eq(store_job_stage_counts(s, job, &c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.uses, 36);
    cr_assert_eq(c.distinct, 1 + 3 + 3 + 6 + 6 + 6);
    cr_assert_eq(c.shared, 1 + 3 + 3);
    cr_assert_eq(c.reused, 0);
    cr_assert_eq(c.by_state[STAGE_PENDING], 25);
    /* trials 0 and 1 differ only in the mixer: the same teacher, avit, profile */
    store_stage a = stage_of(s, trial_at(s, job, 0), 1), b = stage_of(s, trial_at(s, job, 1), 1);
    cr_assert_str_eq(a.key, b.key);
    cr_assert_str_eq(a.name, "avit");
    cr_assert_eq(a.known, 0);
    store_stage d0 = stage_of(s, trial_at(s, job, 0), 3), d1 = stage_of(s, trial_at(s, job, 1), 3);
    cr_assert_str_neq(d0.key, d1.key);
    char dir[64];
    snprintf(dir, sizeof dir, "distill-%s", d0.key);
    cr_assert_str_eq(d0.dir, dir);
    cr_assert_str_eq(d0.parent, stage_of(s, trial_at(s, job, 0), 2).key);
    /* a trial of another pipeline has no plan */
    const char *bf = "name: b\nbase: {train: {steps: 5}}\nmetric: {name: val/acc, goal: max}\n";
    sweep_spec *sp = NULL;
    sweep_errors e = {0};
    cr_assert_eq(sweep_load_string(bf, strlen(bf), "b.yaml", &sp, &e), 0);
    int64_t bj;
    cr_assert_eq(store_submit(s, sp, bf, &bj, err, sizeof err), 0, "%s", err);
    sweep_spec_destroy(&sp);
    int idx;
    cr_assert_eq(next_of(s, trial_at(s, bj, 0), &idx, NULL, NULL), STAGE_NEXT_NONE);
    cr_assert_eq(store_job_stage_counts(s, bj, &c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.uses, 0);
    store_close(&s);
}

/* The sweep: 3 retentions x 3 layer sets x 2 mixers trains one
 * teacher, three A-ViT fine-tunes (three profiles) and 18 students. */
Test(store_stages, the_paper_sweep_needs_one_teacher_three_avit_18_students) {
    store *s = open_store();
    int64_t job = submit_text(s, "name: p\npipeline: s2s\nbase: {train: {steps: 10}}\n"
                                 "sweep:\n  parameters:\n"
                                 "    avit.retention: {values: [0.7, 0.5, 0.3]}\n"
                                 "    distill.replace_layers: {values: [[1, 2, 3], [0, 1, 2], "
                                 "auto:3]}\n"
                                 "    distill.mixer: {values: [bimamba, bilstm]}\n"
                                 "metric: {name: eval/student/test/acc, goal: max}\n");
    store_stage_counts c;
    char err[512];
    cr_assert_eq(store_job_stage_counts(s, job, &c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.uses, 18 * 6);
    cr_assert_eq(c.distinct, 1 + 3 + 3 + 18 * 3);
    cr_assert_eq(c.shared, 1 + 3 + 3);
    /* by name: one teacher key, three avit keys, 18 distill keys */
    const char *names[] = {"teacher", "avit", "profile", "distill", "finetune", "eval"};
    const int want[] = {1, 3, 3, 18, 18, 18};
    for (int i = 0; i < S2S_STAGES; i++) {
        char keys[18][17];
        int nk = 0;
        for (long long t = 0; t < 18; t++) {
            store_stage st = stage_of(s, trial_at(s, job, t), i);
            cr_assert_str_eq(st.name, names[i]);
            int seen = 0;
            for (int k = 0; k < nk; k++) seen |= !strcmp(keys[k], st.key);
            if (!seen) strcpy(keys[nk++], st.key);
        }
        cr_assert_eq(nk, want[i], "%s: %d keys", names[i], nk);
    }
    store_close(&s);
}

Test(store_stages, one_runs_the_others_wait_then_reuse) {
    store *s = open_store();
    int64_t job = submit_grid(s, 0);
    int64_t t1 = trial_at(s, job, 0), t2 = trial_at(s, job, 1);
    int idx, first;
    char reason[512], err[512];
    cr_assert_eq(next_of(s, t1, &idx, NULL, NULL), STAGE_NEXT_RUN);
    cr_assert_eq(idx, 0);
    launch(s, t1, 0);
    cr_assert_eq(state_of(s, t1), TRIAL_RUNNING);
    store_stage ts = stage_of(s, t2, 0);
    cr_assert_eq(ts.state, STAGE_RUNNING);
    cr_assert_eq(ts.trial, t1);
    cr_assert_eq(ts.attempts, 1);
    /* t2 waits, with the reason, and the first wait is reported once */
    cr_assert_eq(next_of(s, t2, &idx, reason, &first), STAGE_NEXT_WAIT);
    cr_assert_eq(idx, 0);
    cr_assert_eq(first, 1);
    char want[128];
    snprintf(want, sizeof want, "waiting for stage teacher %.8s", ts.key);
    cr_assert(strstr(reason, want), "%s", reason);
    snprintf(want, sizeof want, "of t%lld", (long long)t1);
    cr_assert(strstr(reason, want), "%s", reason);
    cr_assert_eq(next_of(s, t2, &idx, NULL, &first), STAGE_NEXT_WAIT);
    cr_assert_eq(first, 0);
    /* t2 cannot start the stage beside t1 */
    cr_assert_eq(store_stage_launch(s, t2, 0, "x", err, sizeof err), -1);
    cr_assert(strstr(err, "running"), "%s", err);
    cr_assert_eq(state_of(s, t2), TRIAL_PENDING);
    /* teacher done: t1 PENDING for avit, no retry spent */
    stage_done(s, t1);
    cr_assert_eq(state_of(s, t1), TRIAL_PENDING);
    cr_assert_eq(stage_of(s, t1, 0).state, STAGE_DONE);
    cr_assert_eq(store_trial_running_stage(s, t1, &ts, err, sizeof err), 1);
    /* done is reused: both now want avit; t2 takes it first, t1 waits */
    cr_assert_eq(next_of(s, t2, &idx, NULL, NULL), STAGE_NEXT_RUN);
    cr_assert_eq(idx, 1);
    launch(s, t2, 1);
    cr_assert_eq(store_trial_running_stage(s, t2, &ts, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(ts.name, "avit");
    cr_assert_eq(ts.idx, 1);
    cr_assert_eq(next_of(s, t1, &idx, reason, NULL), STAGE_NEXT_WAIT);
    cr_assert_eq(idx, 1);
    stage_done(s, t2);
    /* the rest; t1 and t2 part at distill */
    run_rest(s, t2);
    cr_assert_eq(state_of(s, t2), TRIAL_COMPLETED);
    cr_assert_eq(next_of(s, t1, &idx, NULL, NULL), STAGE_NEXT_RUN);
    cr_assert_eq(idx, 2 + 1, "profile is shared too: t1 goes on at distill");
    run_rest(s, t1);
    cr_assert_eq(state_of(s, t1), TRIAL_COMPLETED);
    store_stage_counts c;
    cr_assert_eq(store_job_stage_counts(s, job, &c, err, sizeof err), 0, "%s", err);
    /* t1's teacher serves the 5 other trials; t2's avit and profile serve t1 */
    cr_assert_eq(c.reused, 5 + 1 + 1);
    cr_assert_eq(c.run, 1 + 2 + 3 * 2);
    cr_assert_eq(c.by_state[STAGE_DONE], 9);
    store_close(&s);
}

Test(store_stages, a_failed_stage_retries_once_then_fails_its_dependants) {
    store *s = open_store();
    int64_t job = submit_grid(s, 1);
    int64_t t1 = trial_at(s, job, 0), t2 = trial_at(s, job, 1);
    char err[512], reason[512];
    int rq, idx;
    launch(s, t1, 0);
    cr_assert_eq(store_trial_fail(s, t1, "exit status 1", &rq, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rq, 1);
    store_stage st = stage_of(s, t1, 0);
    cr_assert_eq(st.state, STAGE_PENDING, "one retry left");
    cr_assert_eq(st.failures, 1);
    cr_assert_str_eq(st.message, "exit status 1");
    /* the retry is the stage's, whoever makes it: t2 takes it over */
    cr_assert_eq(next_of(s, t2, &idx, NULL, NULL), STAGE_NEXT_RUN);
    launch(s, t2, 0);
    cr_assert_eq(next_of(s, t1, &idx, NULL, NULL), STAGE_NEXT_WAIT);
    cr_assert_eq(store_trial_fail(s, t2, "killed by signal 9", &rq, err, sizeof err), 0, "%s", err);
    st = stage_of(s, t1, 0);
    cr_assert_eq(st.state, STAGE_FAILED);
    cr_assert_eq(st.failures, 2);
    cr_assert_eq(st.attempts, 2);
    /* every dependant of this job fails with it, not one more run */
    for (long long k = 0; k < 6; k++) {
        int64_t t = trial_at(s, job, k);
        if (state_of(s, t) != TRIAL_PENDING) continue;
        cr_assert_eq(next_of(s, t, &idx, reason, NULL), STAGE_NEXT_FAILED);
        cr_assert(strstr(reason, "stage teacher"), "%s", reason);
        cr_assert(strstr(reason, "killed by signal 9"), "%s", reason);
        cr_assert_eq(store_trial_stage_failed(s, t, reason, err, sizeof err), 0, "%s", err);
        cr_assert_eq(state_of(s, t), TRIAL_FAILED);
    }
    /* a job submitted after the failure tries again */
    int64_t job2 = submit_grid(s, 0);
    int64_t t3 = trial_at(s, job2, 0);
    cr_assert_eq(next_of(s, t3, &idx, NULL, NULL), STAGE_NEXT_RUN);
    cr_assert_eq(idx, 0);
    launch(s, t3, 0);
    st = stage_of(s, t3, 0);
    cr_assert_eq(st.state, STAGE_RUNNING);
    cr_assert_eq(st.failures, 0);
    cr_assert_eq(st.attempts, 3);
    store_close(&s);
}

Test(store_stages, stage_runs_do_not_use_retries) {
    store *s = open_store();
    int64_t job = submit_grid(s, 0);
    int64_t t1 = trial_at(s, job, 0);
    char err[512];
    int rq;
    for (int i = 0; i < 3; i++) {
        launch(s, t1, i);
        stage_done(s, t1);
    }
    /* four attempts, no retries: the first failure is still the first */
    launch(s, t1, 3);
    cr_assert_eq(store_trial_fail(s, t1, "boom", &rq, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rq, 0);
    cr_assert_eq(state_of(s, t1), TRIAL_FAILED);
    cr_assert_eq(stage_of(s, t1, 3).state, STAGE_FAILED);
    cr_assert_eq(stage_of(s, t1, 2).state, STAGE_DONE);
    store_close(&s);
}

Test(store_stages, preempt_stop_and_cancel_release_the_stage) {
    store *s = open_store();
    int64_t job = submit_grid(s, 0), job2 = submit_grid(s, 0);
    int64_t t1 = trial_at(s, job, 0), t2 = trial_at(s, job, 1), u1 = trial_at(s, job2, 0);
    char err[512];
    int idx, n;
    launch(s, t1, 0);
    cr_assert_eq(store_trial_preempt(s, t1, "preempted", err, sizeof err), 0, "%s", err);
    store_stage st = stage_of(s, t1, 0);
    cr_assert_eq(st.state, STAGE_PENDING);
    cr_assert_eq(st.failures, 0);
    launch(s, t2, 0);
    cr_assert_eq(store_trial_transition(s, t2, TRIAL_STOPPED, "early stop", err, sizeof err), 0,
                 "%s", err);
    cr_assert_eq(stage_of(s, t1, 0).state, STAGE_PENDING);
    launch(s, t1, 0);
    cr_assert_eq(store_job_cancel(s, job, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(stage_of(s, t1, 0).state, STAGE_PENDING);
    /* another job's trial goes on with it */
    cr_assert_eq(next_of(s, u1, &idx, NULL, NULL), STAGE_NEXT_RUN);
    launch(s, u1, 0);
    st = stage_of(s, u1, 0);
    cr_assert_eq(st.trial, u1);
    cr_assert_eq(st.attempts, 4);
    store_close(&s);
}

Test(store_stages, survives_a_reopen) {
    store *s = open_store();
    int64_t job = submit_grid(s, 0);
    int64_t t1 = trial_at(s, job, 0), t2 = trial_at(s, job, 1);
    launch(s, t1, 0);
    store_close(&s);
    s = open_store();
    int idx;
    cr_assert_eq(next_of(s, t2, &idx, NULL, NULL), STAGE_NEXT_WAIT);
    store_stage st;
    char err[512];
    cr_assert_eq(store_trial_running_stage(s, t1, &st, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(st.name, "teacher");
    stage_done(s, t1);
    cr_assert_eq(next_of(s, t2, &idx, NULL, NULL), STAGE_NEXT_RUN);
    cr_assert_eq(idx, 1);
    store_close(&s);
}

Test(store_stages, a_later_job_reuses_every_stage_and_gets_the_eval_metric) {
    store *s = open_store();
    const char *one = "name: one\npipeline: s2s\nbase: {train: {steps: 10}}\n"
                      "metric: {name: eval/student/test/acc, goal: max}\n";
    int64_t j1 = submit_text(s, one);
    int64_t t1 = trial_at(s, j1, 0);
    char err[512];
    int idx;
    for (int i = 0; i < S2S_STAGES; i++) {
        launch(s, t1, i);
        store_metric m[2] = {{.seq = 2 * i + 1, .step = 10, .name = "train/loss", .value = 1.0},
                             {.seq = 2 * i + 2,
                              .step = 10,
                              .name = "eval/student/test/acc",
                              .value = 0.5 + 0.01 * i}};
        /* only the eval stage writes eval/ names; the others write their own */
        cr_assert_eq(store_metrics_insert(s, t1, m, i == S2S_STAGES - 1 ? 2 : 1, err, sizeof err),
                     0, "%s", err);
        if (i < S2S_STAGES - 1)
            stage_done(s, t1);
        else
            cr_assert_eq(store_trial_transition(s, t1, TRIAL_COMPLETED, "ok", err, sizeof err), 0,
                         "%s", err);
    }
    int64_t j2 = submit_text(s, one);
    int64_t t2 = trial_at(s, j2, 0);
    cr_assert_eq(next_of(s, t2, &idx, NULL, NULL), STAGE_NEXT_REUSED);
    cr_assert_eq(idx, S2S_STAGES);
    cr_assert_eq(store_trial_stages_reused(s, t2, "reused", err, sizeof err), 0, "%s", err);
    cr_assert_eq(state_of(s, t2), TRIAL_COMPLETED);
    store_point *p;
    size_t n;
    cr_assert_eq(store_metric_history(s, t2, 0, 100, &p, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 1, "only the eval point, not the training curves");
    cr_assert_str_eq(p[0].name, "eval/student/test/acc");
    cr_assert_float_eq(p[0].value, 0.55, 1e-12);
    cr_assert_eq(p[0].seq, 1);
    free(p);
    store_trial *ts;
    cr_assert_eq(store_job_trials(s, j2, &ts, &n, err, sizeof err), 0, "%s", err);
    cr_assert(strstr(ts[0].latest_json, "eval/student/test/acc"), "%s", ts[0].latest_json);
    store_trials_free(ts, n);
    store_stage_counts c;
    cr_assert_eq(store_job_stage_counts(s, j2, &c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.reused, 6);
    cr_assert_eq(c.from_other_jobs, 6);
    cr_assert_eq(c.run, 0);
    cr_assert_eq(c.by_state[STAGE_DONE], 6);
    store_close(&s);
}

Test(store_stages, migrates_from_schema_4) {
    char err[512];
    cr_assert_eq(store_create_at_version(tmpdir_path(tmpdir, "s.db"), 4, err, sizeof err), 0, "%s",
                 err);
    store *s = open_store();
    cr_assert_eq(store_schema_version(s), STORE_SCHEMA_VERSION);
    int64_t job = submit_grid(s, 0);
    launch(s, trial_at(s, job, 0), 0);
    store_close(&s);
}

/* Removing a job (store_prune_mark, store_prune_step to the end): its rows
 * go chunk by chunk; a stage another job's trial plans stays (done, its
 * removed runner forgotten), but not a last stage (eval) one of its trials
 * ran, whose points go with it; a stage only it planned goes; the folders
 * of the stages that go are named for removal. */
Test(store_stages, removing_a_job_keeps_a_stage_a_kept_job_plans) {
    store *s = open_store();
    char err[512];
    int64_t a = submit_grid(s, 0);
    int64_t b = submit_text(s, "name: b\npipeline: s2s\n"
                               "base: {data: {set: fashion_mnist}, train: {steps: 10}}\n"
                               "sweep:\n  parameters:\n    avit.retention: {values: [0.7]}\n"
                               "    distill.mixer: {values: [bimamba]}\n"
                               "metric: {name: eval/student/test/acc, goal: max}\n");
    int64_t a0 = trial_at(s, a, 0), b0 = trial_at(s, b, 0);
    store_stage teacher = stage_of(s, a0, 0);
    cr_assert_str_eq(teacher.key, stage_of(s, b0, 0).key, "the two jobs share the teacher");
    launch(s, a0, 0);
    stage_done(s, a0);
    /* a trial of a whose avit stage b does not plan, running it */
    int64_t other = 0;
    for (long long i = 0; i < 6 && !other; i++) {
        int64_t t = trial_at(s, a, i);
        if (strcmp(stage_of(s, t, 1).key, stage_of(s, b0, 1).key)) other = t;
    }
    cr_assert(other);
    store_stage only_a = stage_of(s, other, 1);
    launch(s, other, 1);
    /* a trial of a with b's plan, running its last stage (eval): b0 would
     * reuse it and copy the runner's eval points, which go with a */
    int last = S2S_STAGES - 1;
    int64_t same = 0;
    for (long long i = 0; i < 6 && !same; i++) {
        int64_t t = trial_at(s, a, i);
        if (!strcmp(stage_of(s, t, last).key, stage_of(s, b0, last).key)) same = t;
    }
    cr_assert(same);
    store_stage eval = stage_of(s, same, last);
    launch(s, same, last);
    cr_assert_eq(store_prune_mark(s, a, 0, err, sizeof err), 0, "%s", err);
    store_job j;
    cr_assert_eq(store_job_get(s, a, &j, err, sizeof err), 1, "a job being removed is hidden");
    int steps = 0, saw_only_a = 0, saw_teacher = 0, saw_eval = 0;
    long long trials = 0;
    for (;;) {
        store_pruned p;
        cr_assert_eq(store_prune_step(s, 4, &p, err, sizeof err), 0, "%s", err);
        if (!p.job) break;
        cr_assert_eq(p.job, a);
        cr_assert_leq(p.n_trials, 4);
        trials += (long long)p.n_trials;
        for (size_t k = 0; k < p.n_stage_dirs; k++) {
            saw_only_a |= !strcmp(p.stage_dirs[k], only_a.dir);
            saw_teacher |= !strcmp(p.stage_dirs[k], teacher.dir);
            saw_eval |= !strcmp(p.stage_dirs[k], eval.dir);
        }
        store_pruned_free(&p);
        cr_assert_lt(++steps, 10);
    }
    cr_assert_eq(trials, 6);
    cr_assert(saw_only_a, "the stage only job a planned is removed, its folder named");
    cr_assert_not(saw_teacher, "the teacher job b plans is kept");
    cr_assert(saw_eval, "the eval stage a's trial ran goes, b0 runs it again");
    cr_assert_not(stage_of(s, b0, last).known, "b0's eval stage is claimable");
    store_stage kept = stage_of(s, b0, 0);
    cr_assert(kept.known);
    cr_assert_eq(kept.state, STAGE_DONE);
    cr_assert_eq(kept.trial, 0, "its removed runner is forgotten");
    cr_assert_eq(store_job_get(s, b, &j, err, sizeof err), 0);
    long long n;
    cr_assert_eq(store_count_trials(s, a, -1, &n, err, sizeof err), 0);
    cr_assert_eq(n, 0);
    cr_assert_eq(store_count_jobs(s, &n, err, sizeof err), 0);
    cr_assert_eq(n, 1);
    store_close(&s);
}
