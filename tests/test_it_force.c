/* test_it_force — bfworker train --force swaps the new run in for the old one
 * without a state that loses both (issue 23; worker/host/force.h), with real
 * bfworker runs and real kills:
 *   - a process SIGKILLed at each step of the swap (BF_TEST_CRASH_AT, which
 *     makes bfworker raise SIGKILL there) leaves a folder the next start
 *     resolves: the old run byte for byte when the swap had not begun, the
 *     new run whole (and resumable) once it had;
 *   - a run that fails after the swap without a metric line leaves no empty
 *     metrics.jsonl nor an event file;
 *   - s2s writes its new stream beside the old one and swaps it in at the
 *     first stage checkpoint: a bad input or a kill before then leaves the
 *     old stream byte for byte, a kill in the swap is finished by the next
 *     start, a good run replaces the stream. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/it_glosses.h"
#include "tests/it_idx.h"
#include "tests/it_proc.h"
#include "worker/io/safetensors.h"

#define GOLDEN BF_SOURCE_DIR "/tests/data/golden"
/* every command runs under a limit: a regression that blocks fails, not hangs */
#define LIMIT_S 120

static void setup(void) { it_glosses_setup("bf-force"); }
static void teardown(void) { it_glosses_teardown(); }
TestSuite(force, .init = setup, .fini = teardown, .timeout = 600);

static char out[1 << 17];

/* Runs cmd in dir (stdout + stderr into out) under LIMIT_S seconds; its exit status
 * (137: killed by SIGKILL, as timeout(1) reports it). */
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = it_glosses_vrun(LIMIT_S, out, sizeof out, fmt, ap);
    va_end(ap);
    return rc;
}

/* bfworker train on the glosses (budgetformer baseline) with extra args */
#define TRAIN                                                                                      \
    BF_BIN_DIR "/bfworker train " GOLDEN "/budget_off.yaml --set data.train=glosses_train.tsv "    \
               "--set data.val=glosses_val.tsv "
/* the new run of the tests: 3 steps, a checkpoint (and so the swap) after each */
#define NEW "--set train.steps=3 --set train.checkpoint_every=1 "

/* ---- a folder's plain files, byte for byte ---- */

typedef struct snapshot {
    int n;
    char name[32][128];
    char *data[32];
    size_t len[32];
} snapshot;

static void snap(const char *sub, snapshot *s) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    memset(s, 0, sizeof *s);
    DIR *d = opendir(p);
    cr_assert_not_null(d, "%s", p);
    struct dirent *e;
    while ((e = readdir(d))) {
        char fp[768];
        snprintf(fp, sizeof fp, "%s/%s", p, e->d_name);
        struct stat st;
        if (lstat(fp, &st) != 0 || !S_ISREG(st.st_mode)) continue; /* folders apart */
        cr_assert_lt(s->n, 32);
        FILE *f = fopen(fp, "rb");
        cr_assert_not_null(f, "%s", fp);
        s->data[s->n] = malloc((size_t)st.st_size + 1);
        cr_assert_eq(fread(s->data[s->n], 1, (size_t)st.st_size, f), (size_t)st.st_size);
        fclose(f);
        s->len[s->n] = (size_t)st.st_size;
        snprintf(s->name[s->n++], 128, "%.127s", e->d_name);
    }
    closedir(d);
}

static void snap_free(snapshot *s) {
    for (int i = 0; i < s->n; i++) free(s->data[i]);
}

/* The folder holds exactly the plain files of a, with the same bytes. */
static void expect_same(const snapshot *a, const char *sub, const char *what) {
    snapshot b;
    snap(sub, &b);
    cr_expect_eq(b.n, a->n, "%s: %d files, were %d", what, b.n, a->n);
    for (int i = 0; i < a->n; i++) {
        int j = 0;
        while (j < b.n && strcmp(a->name[i], b.name[j])) j++;
        if (j == b.n) {
            cr_expect_fail("%s: %s is gone", what, a->name[i]);
            continue;
        }
        cr_expect(a->len[i] == b.len[j] && memcmp(a->data[i], b.data[j], a->len[i]) == 0,
                  "%s: %s changed", what, a->name[i]);
    }
    snap_free(&b);
}

static int exists(const char *fmt, const char *sub) {
    char p[512], q[600];
    snprintf(p, sizeof p, fmt, sub);
    snprintf(q, sizeof q, "%s/%s", dir, p);
    struct stat st;
    return lstat(q, &st) == 0;
}

/* The checkpoint's step in run/state.json (-1 without one). */
static long state_step(const char *sub) {
    if (run("sed -n 's/^ *\"step\": \\([0-9]*\\),$/\\1/p' %s/state.json", sub) != 0) return -1;
    return out[0] ? atol(out) : -1;
}

static int count_lines(const char *pattern, const char *file) {
    if (run("grep -c -- '%s' %s", pattern, file) > 1) return -1;
    return atoi(out);
}

/* The folder holds no swap leftovers. */
static void expect_no_leftovers(const char *sub, const char *what) {
    cr_expect(!exists("%s/.force-new", sub), "%s: %s/.force-new is left", what, sub);
    cr_expect(!exists("%s/.force-old", sub), "%s: %s/.force-old is left", what, sub);
    cr_expect(!exists("%s/.force-old.part", sub), "%s: %s/.force-old.part is left", what, sub);
}

/* A process killed at each point of the swap. The state it leaves is the
 * one that point names, and the next bfworker train into the folder (here
 * one without --resume or --force, which is then refused because the folder
 * holds a run) resolves it: before the swap began, the old run byte for
 * byte; after, the new run whole, which --resume continues. */
Test(force, a_kill_at_any_step_of_the_swap_loses_neither_run) {
    static const struct {
        const char *point;
        const char *left; /* the folder the kill leaves beside the run */
        int new_wins;     /* the swap had begun: the next start finishes it */
    } at[] = {
        {"swap-begin", ".force-new", 0}, /* the new checkpoint whole, nothing moved */
        {"swap-old", ".force-old.part", 1}, {"swap-mid", ".force-old", 1},
        {"swap-new", ".force-old", 1},      {"swap-end", ".force-old", 1},
    };
    for (size_t k = 0; k < sizeof at / sizeof *at; k++) {
        const char *p = at[k].point;
        cr_assert_eq(run("rm -rf run && " TRAIN "--quiet --set train.steps=4 --out run"), 0, "%s",
                     out);
        snapshot old;
        snap("run", &old);
        cr_assert_geq(old.n, 6, "the first run left %d files", old.n);
        int rc = run("env BF_TEST_CRASH_AT=%s " TRAIN "--quiet " NEW "--force --out run", p);
        cr_assert_eq(rc, 137, "%s: the run was not killed there (status %d):\n%s", p, rc, out);
        cr_expect(exists("run/%s", at[k].left), "%s: no run/%s", p, at[k].left);
        if (strcmp(p, "swap-mid") == 0) /* the old run out, nothing of the new one in */
            cr_expect(!exists("%s/metrics.jsonl", "run") && !exists("%s/state.json", "run"),
                      "swap-mid: the folder holds run files");
        if (!at[k].new_wins) expect_same(&old, "run", p);
        /* the next start resolves it, then sees the run the folder holds */
        rc = run(TRAIN NEW "--out run");
        cr_expect_eq(rc, 64, "%s: status %d (the folder holds a run):\n%s", p, rc, out);
        cr_expect(strstr(out, "already holds a run"), "%s:\n%s", p, out);
        cr_expect(strstr(out, at[k].new_wins ? "finished the --force swap" : "removed .force-new"),
                  "%s: the start does not say what it resolved:\n%s", p, out);
        expect_no_leftovers("run", p);
        if (!at[k].new_wins) {
            expect_same(&old, "run", p);
        } else {
            /* the new run whole: its checkpoint of step 1, its config, one
             * line of metrics, one event file, and nothing of the old run */
            cr_expect_eq(state_step("run"), 1, "%s: state.json not of step 1", p);
            cr_expect_eq(run("grep -qx 'train.checkpoint_every: 1' run/config.yaml"), 0,
                         "%s: config.yaml is the old run's", p);
            cr_expect_eq(count_lines("\"step\": ", "run/metrics.jsonl"), 1, "%s: metrics", p);
            cr_expect_eq(run("ls run | grep -c events.out.tfevents"), 0);
            cr_expect_eq(atoi(out), 1, "%s: %s event files", p, out);
            /* and it is a run: --resume continues it to its end */
            cr_expect_eq(run(TRAIN "--quiet " NEW "--resume run"), 0, "%s: %s", p, out);
            cr_expect_eq(state_step("run"), 3, "%s: the resumed run did not end at step 3", p);
            cr_expect_eq(count_lines("\"step\": ", "run/metrics.jsonl"), 3, "%s: metrics", p);
        }
        snap_free(&old);
    }
}

/* Every weight of dir/src's model.safetensors set to v, into dir/dst. */
static void fill_weights(const char *src, const char *dst, float v) {
    char err[1024], ps[256], pd[256];
    snprintf(ps, sizeof ps, "%s/%s", dir, src);
    snprintf(pd, sizeof pd, "%s/%s", dir, dst);
    st_file f;
    cr_assert_eq(st_open(&f, ps, err, sizeof err), 0, "%s", err);
    st_entry *e = calloc((size_t)f.n, sizeof *e);
    int64_t(*shape)[ST_MAX_DIMS] = calloc((size_t)f.n, sizeof *shape);
    float **data = calloc((size_t)f.n, sizeof *data);
    for (int i = 0; i < f.n; i++) {
        data[i] = malloc(f.t[i].numel * sizeof(float));
        for (uint64_t j = 0; j < f.t[i].numel; j++) data[i][j] = v;
        for (int d = 0; d < f.t[i].ndim; d++) shape[i][d] = (int64_t)f.t[i].shape[d];
        e[i] = (st_entry){f.t[i].name, f.t[i].ndim, shape[i], data[i]};
    }
    cr_assert_eq(st_write(pd, e, f.n, NULL, 0, err, sizeof err), 0, "%s", err);
    for (int i = 0; i < f.n; i++) free(data[i]);
    free(data), free(shape), free(e);
    st_close(&f);
}

/* A --force run that fails after its swap (weights of 1e30 overflow: the
 * gradient norms are not finite, found at the first log, at the last step)
 * with no metric line written leaves its checkpoint (a run --resume can
 * take up), and neither an empty metrics.jsonl nor an event file. */
Test(force, a_run_that_fails_after_the_swap_leaves_no_empty_metrics) {
    cr_assert_eq(run(TRAIN "--quiet --set train.steps=4 --out run"), 0, "%s", out);
    fill_weights("run/model.safetensors", "huge.safetensors", 1e30f);
    int rc = run(TRAIN "--quiet " NEW "--set train.log_every=100 --set train.eval_every=0 "
                       "--set init.from=huge.safetensors --force --out run");
    cr_assert_eq(rc, 1, "status %d:\n%s", rc, out);
    cr_expect(strstr(out, "not finite"), "%s", out);
    cr_expect_eq(state_step("run"), 2, "the swapped-in run's last checkpoint is not of step 2");
    cr_expect(!exists("%s/metrics.jsonl", "run"), "the failed run left metrics.jsonl");
    cr_expect_neq(run("ls run | grep -q events.out.tfevents"), 0, "the failed run left %s", out);
    expect_no_leftovers("run", "failed after the swap");
    /* the control: the same failure before any checkpoint leaves the old run */
    cr_assert_eq(run("rm -rf run && " TRAIN "--quiet --set train.steps=4 --out run"), 0, "%s", out);
    snapshot old;
    snap("run", &old);
    rc = run(TRAIN "--quiet --set train.steps=3 --set train.checkpoint_every=0 "
                   "--set train.log_every=1 --set init.from=huge.safetensors --force --out run");
    cr_expect_eq(rc, 1, "status %d:\n%s", rc, out);
    expect_same(&old, "run", "a --force run that failed before its swap");
    expect_no_leftovers("run", "failed before the swap");
    snap_free(&old);
}

/* ---- s2s ---- */

static void write_s2s(const char *name, int teacher_steps) {
    char cfg[1200], p[256];
    snprintf(cfg, sizeof cfg,
             "pipeline: s2s\ndevice: cpu\n"
             "data: {train_images: %s/train-images, train_labels: %s/train-labels,\n"
             "       test_images: %s/test-images, test_labels: %s/test-labels, val_fraction: "
             "0.2}\n"
             "model: {patch: 4, layers: 2, d_model: 16, heads: 2}\n"
             "train: {steps: %d, batch: 8, lr: 3.0e-3, warmup: 1, eval_every: 0, log_every: 1,\n"
             "        checkpoint_every: 0}\n"
             "avit: {retention: 0.7, steps: 3, tolerance: 0.5, prior: spend}\n"
             "distill: {mixer: bimamba, replace_layers: [1], stage1_steps: 2, stage2_steps: 2}\n"
             "s2s: {speed_widths: '16', speed_batches: '1', speed_warmup: 0, speed_reps: 1}\n",
             dir, dir, dir, dir, teacher_steps);
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s", p);
    fputs(cfg, f);
    fclose(f);
}

/* S2S's --force: the run folder's own files (its stream: metrics.jsonl and
 * the event file) are swapped like a run's, at the first checkpoint a stage
 * writes; the stage folders (keyed, shared by runs) stay where they are. */
Test(force, s2s_keeps_the_old_stream_until_its_first_stage_checkpoint) {
    write_set("train", 60, 1, 0);
    write_set("test", 12, 2, 0);
    write_s2s("a.yaml", 3);
    cr_assert_eq(run(BF_BIN_DIR "/bfworker train a.yaml --quiet --out s"), 0, "%s", out);
    cr_assert_eq(count_lines("eval/student/test/acc", "s/metrics.jsonl"), 1);
    snapshot old;
    snap("s", &old);
    cr_assert_geq(old.n, 2, "the s2s run left %d files in its folder", old.n);
    /* a bad input: found before anything is written */
    cr_assert_eq(run("sed 's|/test-images|/missing-images|' a.yaml > bad.yaml"), 0);
    int rc = run(BF_BIN_DIR "/bfworker train bad.yaml --quiet --force --out s");
    cr_expect_eq(rc, 1, "status %d:\n%s", rc, out);
    cr_expect(strstr(out, "missing-images"), "%s", out);
    expect_same(&old, "s", "s2s --force with a missing data file");
    expect_no_leftovers("s", "s2s, bad input");
    /* killed before the first stage checkpoint (a new teacher: its key
     * changes with train.steps; no checkpoint until its last step) */
    write_s2s("long.yaml", 100000000);
    char cfg[256], outd[256], log[256], staged[300];
    snprintf(cfg, sizeof cfg, "%s/long.yaml", dir);
    snprintf(outd, sizeof outd, "%s/s", dir);
    snprintf(log, sizeof log, "%s/s2s-force.log", dir);
    snprintf(staged, sizeof staged, "%s/s/.force-new/metrics.jsonl", dir);
    char *argv[] = {
        BF_BIN_DIR "/bfworker", "train", cfg, "--quiet", "--force", "--out", outd, NULL};
    pid_t pid = it_spawn(log, argv, 0);
    double t0 = it_now_s();
    struct stat st;
    while (!(stat(staged, &st) == 0 && st.st_size > 0)) {
        int status;
        cr_assert_eq(it_wait_pid(pid, 0, &status), 1, "the --force run ended: see %s", log);
        cr_assert_lt(it_now_s() - t0, 60, "no metrics in %s after 60 s", staged);
        it_sleep_s(0.05);
    }
    it_stop(&pid, SIGKILL);
    expect_same(&old, "s", "s2s --force killed before its first stage checkpoint");
    /* killed in the swap at the first stage checkpoint: the next start
     * finishes the swap, and --resume ends the run with the new stream only */
    write_s2s("b.yaml", 4);
    rc = run("env BF_TEST_CRASH_AT=swap-mid " BF_BIN_DIR "/bfworker train b.yaml --quiet --force "
             "--out s");
    cr_assert_eq(rc, 137, "status %d:\n%s", rc, out);
    cr_expect(!exists("%s/metrics.jsonl", "s"), "swap-mid: the old stream is still in s");
    rc = run(BF_BIN_DIR "/bfworker train b.yaml --resume s");
    cr_expect_eq(rc, 0, "status %d:\n%s", rc, out);
    cr_expect(strstr(out, "finished the --force swap"), "%s", out);
    expect_no_leftovers("s", "s2s, killed in the swap");
    cr_expect_eq(count_lines("eval/student/test/acc", "s/metrics.jsonl"), 1,
                 "the old run's lines are in the stream");
    cr_expect_eq(count_lines("\"teacher/train/loss\"", "s/metrics.jsonl"), 4,
                 "the new teacher's 4 steps are not all in the stream");
    /* a good --force: the stream replaced by the new run's (a new teacher
     * of 5 steps, the stages after it run again) */
    write_s2s("c.yaml", 5);
    rc = run(BF_BIN_DIR "/bfworker train c.yaml --quiet --force --out s");
    cr_expect_eq(rc, 0, "status %d:\n%s", rc, out);
    expect_no_leftovers("s", "s2s, a good --force");
    cr_expect_eq(count_lines("eval/student/test/acc", "s/metrics.jsonl"), 1, "the old lines kept");
    cr_expect_eq(count_lines("\"teacher/train/loss\"", "s/metrics.jsonl"), 5,
                 "the stream is not the new teacher's");
    snap_free(&old);
}
