/* Shared stages of s2s, end to end: a real bfd, real bfworker processes
 * (pipeline s2s on a tiny IDX image set this test writes: 12 x 12 images,
 * three classes), the real SQLite store and stage folders read back.
 *   - a 2-trial sweep over distill.mixer shares its teacher, avit and
 *     profile stages: each runs once (the stage table, the attempts and the
 *     folders say so), the other trial waits with the reason, both complete
 *     with their eval metric, and `bfctl show` reports it;
 *   - bfd killed with SIGKILL while a shared stage runs, then restarted: the
 *     sweep finishes, no stage runs twice, every metric point is stored
 *     exactly once;
 *   - a later job with the same config reuses every stage and completes
 *     without a run, with the eval metric copied;
 *   - a stage killed past its checkpoint and run again from it: the
 *     retry's points supersede the killed attempt's (tail, export). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "it_bfd.h"
#include "tests/it_idx.h"

static char g_dir[256], g_home[320];
static pid_t g_bfd = -1;

static void setup(void) {
    it_worker_env();
    it_bfd_home(g_dir, sizeof g_dir, g_home, sizeof g_home, "/tmp/bf-its-XXXXXX");
    it_idx_write(g_dir, "train", 240, 1, 0);
    it_idx_write(g_dir, "test", 60, 2, 0);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"),
                  "slots: 2\nheartbeat_timeout: 20\nheartbeat_interval: 0.2\nkill_grace: 2\n",
                  0644);
}

static void teardown(void) {
    it_stop(&g_bfd, SIGKILL);
    it_kill_workers(g_home);
    if (getenv("BF_TEST_KEEP")) return; /* to look at a failure */
    if (tmpdir_remove(g_dir)) {         /* nothing left to clean is fine */
    }
}

TestSuite(it_stages, .init = setup, .fini = teardown, .timeout = 300);

/* g_dir/NAME.yaml: two trials (bimamba, bilstm) of one tiny s2s config;
 * avit_steps sizes the shared avit stage, tolerance its avit.tolerance
 * (wide: a tiny model misses 0.7 by about 0.07 on the stratified
 * validation images) with the spend prior, which settles in a run this
 * short (docs/design.md#a-vit-halting's, the default, swings between layers there; see
 * test_it_vit). Returns the path. */
static const char *write_sweep_tol(const char *name, int avit_steps, const char *mixers,
                                   double tolerance) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s.yaml", g_dir, name);
    FILE *f = fopen(p, "w");
    cr_assert(f != NULL);
    fprintf(f,
            "name: %s\npipeline: s2s\ndevice: cpu\n"
            "data: {train_images: %s/train-images, train_labels: %s/train-labels,\n"
            "       test_images: %s/test-images, test_labels: %s/test-labels, val_fraction: 0.1}\n"
            "model: {patch: 4, layers: 3, d_model: 16, heads: 2}\n"
            "train: {steps: 60, batch: 16, lr: 3.0e-3, warmup: 5, eval_every: 0, log_every: 10}\n"
            "avit: {steps: %d, retention: 0.7, tolerance: %g, prior: spend}\n"
            "distill: {replace_layers: 'auto:1', stage1_steps: 10, stage2_steps: 10}\n"
            "s2s: {speed_widths: '16', speed_batches: '1', speed_warmup: 0, speed_reps: 1}\n"
            "sweep:\n  parameters:\n    distill.mixer: {values: %s}\n"
            "metric: {name: eval/student/test/acc, goal: max}\n",
            name, g_dir, g_dir, g_dir, g_dir, avit_steps, tolerance, mixers);
    cr_assert_eq(fclose(f), 0);
    return p;
}

static const char *write_sweep(const char *name, int avit_steps, const char *mixers) {
    return write_sweep_tol(name, avit_steps, mixers, 0.15);
}

static long long db_int(const char *sql, long long arg) { return it_db_int(g_home, sql, arg); }

static int wait_job(long long job) {
    char args[64];
    snprintf(args, sizeof args, "wait %lld", job);
    return it_bfctl(g_dir, NULL, 0, args);
}

/* `bfctl show ARG --json`, parsed. */
static json_t *show_json(const char *arg) {
    static char out[1 << 20];
    char args[128];
    snprintf(args, sizeof args, "show %s --json", arg);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, args), 0, "bfctl %s", args);
    json_error_t je;
    json_t *r = json_loads(out, 0, &je);
    cr_assert(r, "bfctl %s: %s", args, je.text);
    return r;
}

/* Every line of the trial's metrics.jsonl is stored exactly once. */
static void check_exactly_once(long long trial) {
    long long lines, values;
    it_metrics_file(g_home, trial, 1, &lines, &values);
    cr_assert_gt(lines, 0);
    long long rows = db_int("SELECT COUNT(*) FROM metrics WHERE trial = ?1", trial);
    long long mx = db_int("SELECT MAX(seq) FROM metrics WHERE trial = ?1", trial);
    cr_assert_eq(rows, values, "trial %lld: %lld rows stored, %lld values in metrics.jsonl", trial,
                 rows, values);
    cr_assert_eq(mx, lines, "trial %lld: last seq %lld, %lld lines", trial, mx, lines);
}

/* The invariants of a finished 2-trial sweep of job (trials t1, t2): nine
 * stages, each done and run once, each with its folder and stage.json;
 * teacher, avit and profile shared; both trials completed with the metric. */
static void check_shared_once(long long job) {
    cr_assert_eq(db_int("SELECT COUNT(*) FROM trials WHERE job = ?1 AND state = 'COMPLETED'", job),
                 2);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM stages WHERE ?1 > 0", 1), 9);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM stages WHERE state = 'done' AND ?1 > 0", 1), 9);
    cr_assert_eq(db_int("SELECT MAX(attempts) FROM stages WHERE ?1 > 0", 1), 1,
                 "a stage ran twice");
    cr_assert_eq(db_int("SELECT COUNT(*) FROM stages WHERE name = 'teacher' AND ?1 > 0", 1), 1);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM stages WHERE name = 'distill' AND ?1 > 0", 1), 2);
    /* nine launches in all: seven ended a stage, two completed their trial */
    cr_assert_eq(db_int("SELECT COUNT(*) FROM attempts a JOIN trials t ON t.id = a.trial"
                        " WHERE t.job = ?1",
                        job),
                 9);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM attempts a JOIN trials t ON t.id = a.trial"
                        " WHERE t.job = ?1 AND a.outcome = 'STAGE_DONE'",
                        job),
                 7);
    /* the folders say the same: one of each shared stage, two of each other */
    sqlite3 *db = it_db_open(g_home);
    int rc;
    sqlite3_stmt *st = it_db_query(db, "SELECT dir, key, name FROM stages WHERE ?1 > 0", 1, &rc);
    for (; rc == SQLITE_ROW; rc = sqlite3_step(st)) {
        char p[1024];
        snprintf(p, sizeof p, "%s/stages/%s/stage.json", g_home, sqlite3_column_text(st, 0));
        json_error_t je;
        json_t *o = json_load_file(p, 0, &je);
        cr_assert(o, "%s: %s", p, je.text);
        cr_assert_str_eq(json_string_value(json_object_get(o, "key")),
                         (const char *)sqlite3_column_text(st, 1));
        cr_assert_str_eq(json_string_value(json_object_get(o, "stage")),
                         (const char *)sqlite3_column_text(st, 2));
        json_decref(o);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    char cmd[600], out[64];
    snprintf(cmd, sizeof cmd, "ls %s/stages | grep -c '^teacher-'", g_home);
    FILE *p = popen(cmd, "r");
    cr_assert(p && fgets(out, sizeof out, p));
    pclose(p);
    cr_assert_eq(atoi(out), 1, "teacher folders: %s", out);
    /* the final metric of both trials, from their eval stages */
    for (int t = 0; t < 2; t++) {
        long long id = db_int(t ? "SELECT id FROM trials WHERE job = ?1 ORDER BY idx DESC LIMIT 1"
                                : "SELECT id FROM trials WHERE job = ?1 ORDER BY idx LIMIT 1",
                              job);
        cr_assert_eq(db_int("SELECT COUNT(*) FROM metric_latest l JOIN metric_names n"
                            " ON n.id = l.name WHERE l.trial = ?1"
                            " AND n.name = 'eval/student/test/acc'",
                            id),
                     1, "trial %lld has no eval/student/test/acc", id);
        check_exactly_once(id);
    }
}

Test(it_stages, a_sweep_runs_each_shared_stage_once) {
    g_bfd = it_bfd_start(g_dir, g_home);
    long long job = it_submit(g_dir, write_sweep("two", 200, "[bimamba, bilstm]"));
    cr_assert_eq(wait_job(job), 0, "a trial did not complete (see %s/bfd.log)", g_dir);
    check_shared_once(job);
    /* one trial waited for the other's stage, and said so */
    cr_assert_geq(db_int("SELECT COUNT(*) FROM events WHERE job = ?1 AND kind = 'stage'"
                         " AND message LIKE 'waiting for stage %'",
                         job),
                  1);
    json_t *r = show_json("1");
    json_t *sc = json_object_get(r, "stages");
    cr_assert_eq(json_integer_value(json_object_get(sc, "uses")), 12);
    cr_assert_eq(json_integer_value(json_object_get(sc, "distinct")), 9);
    cr_assert_eq(json_integer_value(json_object_get(sc, "shared")), 3);
    cr_assert_eq(json_integer_value(json_object_get(sc, "reused")), 3);
    /* attempts per stage and retries apart: one trial ran all six stages,
     * the other only its three own ones, and nothing was retried */
    json_t *trs = json_object_get(r, "trials");
    long long r0 = json_integer_value(json_object_get(json_array_get(trs, 0), "stage_runs"));
    long long r1 = json_integer_value(json_object_get(json_array_get(trs, 1), "stage_runs"));
    cr_assert(r0 + r1 == 9 && (r0 == 6 || r1 == 6), "stage runs %lld and %lld", r0, r1);
    for (size_t i = 0; i < 2; i++)
        cr_assert_eq(json_integer_value(json_object_get(json_array_get(trs, i), "retries")), 0);
    json_decref(r);
    {
        static char txt[1 << 16];
        cr_assert_eq(it_bfctl(g_dir, txt, sizeof txt, "show 1"), 0, "%s", txt);
        cr_assert(strstr(txt, "RUNS RETRY") && !strstr(txt, " ATT "), "%s", txt);
    }
    r = show_json("t2");
    json_t *stages = json_object_get(r, "stages");
    cr_assert_eq(json_array_size(stages), 6);
    const char *names[] = {"teacher", "avit", "profile", "distill", "finetune", "eval"};
    int shared = 0;
    for (size_t i = 0; i < 6; i++) {
        json_t *o = json_array_get(stages, i);
        cr_assert_str_eq(json_string_value(json_object_get(o, "name")), names[i]);
        cr_assert_str_eq(json_string_value(json_object_get(o, "state")), "done");
        shared += json_is_true(json_object_get(o, "shared"));
    }
    cr_assert_eq(shared, 3, "t1 and t2: one ran teacher, avit, profile for both");
    json_decref(r);
    /* the results table of an s2s job: student, teacher, retention, speed-up */
    static char out[1 << 16];
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "results 1"), 0, "%s", out);
    cr_assert(strstr(out, "TEACHER") && strstr(out, "RETENTION") && strstr(out, "SPEEDUP@577") &&
                  strstr(out, "(eval)"),
              "%s", out);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "results 1 --json"), 0, "%s", out);
    json_error_t je;
    r = json_loads(out, 0, &je);
    cr_assert(r, "results --json: %s", je.text);
    json_t *rows = json_object_get(r, "trials");
    cr_assert_eq(json_array_size(rows), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *o = json_array_get(rows, i);
        cr_assert_str_eq(json_string_value(json_object_get(o, "accuracy_from")),
                         "eval/student/test/acc");
        static const char *const keys[] = {"accuracy", "teacher_accuracy", "retention",
                                           "speedup_vs_teacher@577"};
        for (size_t k = 0; k < 4; k++)
            cr_assert(json_is_number(json_object_get(o, keys[k])), "trial %zu: no %s", i, keys[k]);
        double ret = json_number_value(json_object_get(o, "retention"));
        cr_assert(ret > 0 && ret <= 1, "retention %g", ret);
    }
    json_decref(r);
    /* the job's tail names each point's stage and shows its values */
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "tail 1"), 0, "%s", out);
    cr_assert(strstr(out, "[teacher] | loss ") && strstr(out, "[distill] | loss ") &&
                  strstr(out, " mse ") && strstr(out, "[eval] | student/acc ") &&
                  !strstr(out, "other values"),
              "%s", out);
    /* a later job with the same config reuses everything: no run at all */
    long long job2 = it_submit(g_dir, write_sweep("again", 200, "[bimamba]"));
    cr_assert_eq(wait_job(job2), 0);
    long long t3 = db_int("SELECT id FROM trials WHERE job = ?1", job2);
    cr_assert_eq(db_int("SELECT state = 'COMPLETED' FROM trials WHERE id = ?1", t3), 1);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM stages WHERE ?1 > 0", 1), 9);
    cr_assert_eq(db_int("SELECT MAX(attempts) FROM stages WHERE ?1 > 0", 1), 1);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM metric_latest l JOIN metric_names n"
                        " ON n.id = l.name WHERE l.trial = ?1"
                        " AND n.name = 'eval/student/test/acc'",
                        t3),
                 1);
    r = show_json("2");
    cr_assert_eq(
        json_integer_value(json_object_get(json_object_get(r, "stages"), "from_other_jobs")), 6);
    json_decref(r);
}

/* bfd started, the 2-trial sweep NAME (a 20,000-step shared avit stage)
 * submitted, and `after` seconds past the stage's first stored point;
 * returns the job. The stage must still be running then on any machine: at
 * this tiny shape a quiet 2-core VM trains ~2,800 steps/s (1,500 steps, as
 * this once had, were over in half a second, before a stop could land), so
 * the stage is long and the moment is taken from its progress, not from a
 * fixed sleep after it started. */
static long long sweep_into_the_shared_avit(const char *name, double after) {
    g_bfd = it_bfd_start(g_dir, g_home);
    long long job = it_submit(g_dir, write_sweep(name, 20000, "[bimamba, bilstm]"));
    it_db_wait(g_dir, g_home, "the shared avit stage running",
               "SELECT COUNT(*) FROM stages WHERE name = 'avit' AND state = 'running' AND ?1 > 0",
               1, 1, 120);
    it_db_wait(g_dir, g_home, "the shared avit stage's first point",
               "SELECT COUNT(*) FROM metrics m JOIN metric_names n ON n.id = m.name"
               " WHERE n.name = 'avit/train/loss' AND ?1 > 0",
               1, 1, 120);
    it_sleep_s(after);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM stages WHERE name = 'avit' AND state = 'running'"
                        " AND ?1 > 0",
                        1),
                 1, "the avit stage ended before the test could act on it (see %s/bfd.log)", g_dir);
    return job;
}

Test(it_stages, bfd_killed_during_a_shared_stage) {
    long long job = sweep_into_the_shared_avit("kill", 0.2);
    it_stop(&g_bfd, SIGKILL);
    it_sleep_s(1.0);
    g_bfd = it_bfd_start(g_dir, g_home);
    cr_assert_eq(wait_job(job), 0, "a trial did not complete (see %s/bfd.log)", g_dir);
    check_shared_once(job);
}

/* A trial stopped (bfctl stop) while it runs a shared stage leaves the
 * stage's checkpoint; the other trial, whose config differs only in a key
 * the stage does not read (distill.mixer), takes the stage over and
 * continues it from that checkpoint instead of refusing it as another
 * run's; resumed, the stopped trial completes on the stages done. */
Test(it_stages, a_stopped_trial_s_shared_stage_is_continued_by_the_other) {
    long long job = sweep_into_the_shared_avit("stop", 0.2);
    long long runner = db_int("SELECT trial FROM stages WHERE name = 'avit' AND ?1 > 0", 1);
    long long other = db_int("SELECT id FROM trials WHERE id != ?1 ORDER BY id LIMIT 1", runner);
    /* the other trial's log holds the 20,000-step stage's progress lines */
    static char out[1 << 21];
    char args[64];
    snprintf(args, sizeof args, "stop t%lld", runner);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, args), 0, "%s", out);
    it_db_wait(g_dir, g_home, "the other trial ended",
               "SELECT COUNT(*) FROM trials WHERE id = ?1 AND state IN ('COMPLETED', 'FAILED')",
               other, 1, 200);
    cr_assert_eq(db_int("SELECT state = 'COMPLETED' FROM trials WHERE id = ?1", other), 1,
                 "the other trial did not complete (see %s/bfd.log)", g_dir);
    cr_assert_eq(db_int("SELECT state = 'STOPPED' FROM trials WHERE id = ?1", runner), 1);
    cr_assert_eq(db_int("SELECT failures FROM stages WHERE name = 'avit' AND ?1 > 0", 1), 0);
    cr_assert_eq(db_int("SELECT attempts FROM stages WHERE name = 'avit' AND ?1 > 0", 1), 2);
    snprintf(args, sizeof args, "logs t%lld", other);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, args), 0, "%s", out);
    cr_assert(strstr(out, "resume: continuing from step"),
              "the other trial did not continue the stopped stage:\n%s", out);
    snprintf(args, sizeof args, "resume t%lld", runner);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, args), 0, "%s", out);
    cr_assert_eq(wait_job(job), 0, "a trial did not complete (see %s/bfd.log)", g_dir);
    cr_assert_eq(db_int("SELECT attempts FROM stages WHERE name = 'teacher' AND ?1 > 0", 1), 1);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM stages WHERE state = 'done' AND ?1 > 0", 1), 9);
}

/* 20 A-ViT steps cannot reach retention 0.7 (the worker fails the stage,
 * as it must): with retries 1 the shared avit stage runs twice in all, not
 * twice per dependant, and both trials fail with it. */
Test(it_stages, a_failed_shared_stage_retries_once_for_all) {
    g_bfd = it_bfd_start(g_dir, g_home);
    const char *p = write_sweep_tol("fail", 20, "[bimamba, bilstm]", 0.05);
    FILE *f = fopen(p, "a");
    cr_assert(f != NULL);
    fprintf(f, "retries: 1\n");
    fclose(f);
    long long job = it_submit(g_dir, p);
    cr_assert_neq(wait_job(job), 0, "the sweep should fail");
    cr_assert_eq(db_int("SELECT COUNT(*) FROM trials WHERE job = ?1 AND state = 'FAILED'", job), 2);
    cr_assert_eq(db_int("SELECT attempts FROM stages WHERE name = 'teacher' AND ?1 > 0", 1), 1);
    cr_assert_eq(db_int("SELECT attempts FROM stages WHERE name = 'avit' AND ?1 > 0", 1), 2);
    cr_assert_eq(db_int("SELECT failures FROM stages WHERE name = 'avit' AND ?1 > 0", 1), 2);
    cr_assert_eq(db_int("SELECT state = 'failed' FROM stages WHERE name = 'avit' AND ?1 > 0", 1),
                 1);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM stages WHERE ?1 > 0", 1), 2, "nothing past avit ran");
    cr_assert_eq(db_int("SELECT COUNT(*) FROM events WHERE job = ?1 AND kind = 'state'"
                        " AND message LIKE '%stage avit % failed (run by t%'",
                        job),
                 1, "the dependant that did not run it fails with the stage's reason");
    json_t *r = show_json("t1");
    json_t *av = json_array_get(json_object_get(r, "stages"), 1);
    cr_assert_str_eq(json_string_value(json_object_get(av, "state")), "failed");
    cr_assert(strstr(json_string_value(json_object_get(av, "message")), "retention"), "%s",
              json_string_value(json_object_get(av, "message")));
    json_decref(r);
}

/* The step of the teacher stage's checkpoint (its state.json), -1 when it
 * has none yet. */
static long long teacher_checkpoint_step(void) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "find %s/stages -path '*/teacher-*' -name state.json 2>/dev/null",
             g_home);
    FILE *pp = popen(cmd, "r");
    cr_assert(pp);
    char path[1024];
    long long step = -1;
    while (fgets(path, sizeof path, pp)) {
        path[strcspn(path, "\n")] = '\0';
        json_t *o = json_load_file(path, 0, NULL);
        json_t *s = o ? json_object_get(o, "step") : NULL;
        if (json_is_integer(s) && json_integer_value(s) > step) step = json_integer_value(s);
        json_decref(o);
    }
    pclose(pp);
    return step;
}

/* The last step of a teacher/train/loss line in trial's metrics.jsonl. */
static long long teacher_last_logged(long long trial) {
    char p[512], line[8192];
    snprintf(p, sizeof p, "%s/trials/%lld/metrics.jsonl", g_home, trial);
    FILE *f = fopen(p, "r");
    long long step = -1;
    while (f && fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        if (o && json_object_get(o, "teacher/train/loss"))
            step = json_integer_value(json_object_get(o, "step"));
        json_decref(o);
    }
    if (f) fclose(f);
    return step;
}

/* An S2S stage run again from its checkpoint (its worker killed after
 * logging past the checkpoint, the stage retried: the retry resumes as
 * `--resume` does and logs those steps again) stores its points under the
 * new attempt, and they supersede the killed attempt's at the same steps:
 * the current curve (`bfctl tail`) has each step once with the retry's
 * value, and `export --csv` keeps the killed attempt's points, marked not
 * current. */
Test(it_stages, a_stage_run_again_from_its_checkpoint_supersedes_its_points) {
    g_bfd = it_bfd_start(g_dir, g_home);
    char p[512];
    snprintf(p, sizeof p, "%s/again.yaml", g_dir);
    FILE *f = fopen(p, "w");
    cr_assert(f != NULL);
    fprintf(f,
            "name: again\npipeline: s2s\ndevice: cpu\n"
            "data: {train_images: %s/train-images, train_labels: %s/train-labels,\n"
            "       test_images: %s/test-images, test_labels: %s/test-labels, val_fraction: 0.1}\n"
            "model: {patch: 4, layers: 3, d_model: 16, heads: 2}\n"
            "train: {steps: 3000, batch: 16, lr: 3.0e-3, warmup: 5, eval_every: 0, log_every: 10,"
            " checkpoint_every: 100}\n"
            "avit: {steps: 200, retention: 0.7, tolerance: 0.15, prior: spend}\n"
            "distill: {replace_layers: 'auto:1', stage1_steps: 10, stage2_steps: 10}\n"
            "s2s: {speed_widths: '16', speed_batches: '1', speed_warmup: 0, speed_reps: 1}\n"
            "sweep:\n  parameters:\n    distill.mixer: {values: [bimamba]}\n"
            "metric: {name: eval/student/test/acc, goal: max}\nretries: 1\n",
            g_dir, g_dir, g_dir, g_dir);
    cr_assert_eq(fclose(f), 0);
    long long job = it_submit(g_dir, p);
    /* the teacher stage has a checkpoint; the worker is stopped where it
     * has logged past it (so its retry logs those steps again), then killed */
    it_db_wait(g_dir, g_home, "the teacher stage's worker",
               "SELECT COUNT(*) FROM bfd_runs WHERE trial = ?1 AND pid > 0", 1, 1, 120);
    long long pid = db_int("SELECT pid FROM bfd_runs WHERE trial = ?1", 1);
    cr_assert_gt(pid, 0);
    long long ck = -1, last = -1;
    double t0 = it_now_s();
    for (;;) {
        cr_assert_eq(kill((pid_t)-pid, SIGSTOP), 0, "the teacher stage ended before the kill");
        ck = teacher_checkpoint_step();
        last = teacher_last_logged(1);
        if (ck > 0 && last > ck) break;
        cr_assert_eq(kill((pid_t)-pid, SIGCONT), 0);
        cr_assert(it_now_s() - t0 < 120, "no checkpoint of the teacher stage (see %s)", g_home);
        it_sleep_s(0.02);
    }
    cr_assert_eq(kill((pid_t)-pid, SIGKILL), 0);
    cr_assert_eq(wait_job(job), 0, "the trial did not complete (see %s/bfd.log)", g_dir);
    long long killed = db_int("SELECT MIN(attempt) FROM metrics m JOIN metric_names n"
                              " ON n.id = m.name WHERE n.name = 'teacher/train/loss'"
                              " AND m.trial = ?1",
                              1);
    cr_assert_eq(killed, 1);
    cr_assert_eq(db_int("SELECT failures FROM stages WHERE name = 'teacher' AND ?1 > 0", 1), 1);
    /* the retry resumed from the checkpoint, not from step 0 */
    char logp[512];
    snprintf(logp, sizeof logp, "%s/logs/1.log", g_home);
    cr_assert_gt(it_count_lines_with(logp, "resume: continuing from step"), 0,
                 "the retry did not resume from the stage's checkpoint (see %s)", logp);
    /* the killed attempt's points past the checkpoint are superseded, none
     * before it; every (name, step) is current once */
    sqlite3 *db = it_db_open(g_home);
    int rc;
    sqlite3_stmt *st = it_db_query(db,
                                   "SELECT COUNT(*), MIN(m.step), MAX(m.step) FROM metrics m"
                                   " JOIN metric_names n ON n.id = m.name WHERE m.trial = 1"
                                   " AND n.name = 'teacher/train/loss' AND m.superseded = 1"
                                   " AND m.attempt = ?1",
                                   killed, &rc);
    cr_assert_eq(rc, SQLITE_ROW);
    long long n_sup = sqlite3_column_int64(st, 0), lo = sqlite3_column_int64(st, 1),
              hi = sqlite3_column_int64(st, 2);
    sqlite3_finalize(st);
    sqlite3_close(db);
    cr_assert_gt(n_sup, 0, "nothing of attempt %lld superseded (checkpoint %lld, logged %lld)",
                 killed, ck, last);
    /* the retry resumed at the checkpoint and logged from the next window on */
    cr_assert(lo == ck + 10 && hi == last,
              "superseded steps %lld..%lld; checkpoint %lld, last logged %lld", lo, hi, ck, last);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM (SELECT name, step FROM metrics WHERE trial = ?1"
                        " AND superseded = 0 GROUP BY name, step HAVING COUNT(*) > 1)",
                        1),
                 0, "a (name, step) twice in the current curve");
    cr_assert_eq(db_int("SELECT COUNT(*) FROM metrics m JOIN metric_names n ON n.id = m.name"
                        " WHERE m.trial = 1 AND n.name = 'teacher/train/loss' AND m.step = ?1"
                        " AND m.superseded = 0 AND m.attempt = 2",
                        hi),
                 1, "step %lld of the current curve is not the retry's", hi);
    /* tail shows step hi once, with the retry's value */
    static char out[1 << 22];
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "tail t1"), 0);
    char want[64];
    snprintf(want, sizeof want, " step %lld ", hi);
    int seen = 0;
    for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n"))
        if (strstr(l, want) && strstr(l, "teacher/train/loss")) seen++;
    cr_assert_eq(seen, 1, "tail t1 shows step %lld of teacher/train/loss %d times", hi, seen);
    /* export keeps both attempts' points: the killed one's marked not current */
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "export 1 --csv"), 0);
    int old_rows = 0, new_rows = 0;
    for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
        if (!strstr(l, ",teacher/train/loss,")) continue;
        size_t n = strlen(l);
        if (n > 4 && !strcmp(l + n - 4, ",1,0")) old_rows++;
        if (n > 4 && !strcmp(l + n - 4, ",2,1")) new_rows++;
    }
    cr_assert_eq(old_rows, n_sup, "export: %d superseded rows of attempt 1, the store has %lld",
                 old_rows, n_sup);
    cr_assert_gt(new_rows, 0, "export: no current rows of attempt 2");
    fprintf(stderr,
            "teacher stage killed at step %lld (checkpoint %lld): %lld points of attempt %lld "
            "superseded (steps %lld..%lld)\n",
            last, ck, n_sup, killed, lo, hi);
}
