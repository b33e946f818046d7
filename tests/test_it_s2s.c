/* bfworker train with pipeline s2s on a tiny IDX image set (tests/it_idx.h):
 * every stage runs and leaves its folder and stage.json; metrics of every
 * stage reach metrics.jsonl under the stage's name; stage 1 lowers the
 * replaced layer's MSE on held data (distill/val/loss_mse before and after)
 * and leaves every tensor but the mixer's bit for bit as the A-ViT teacher
 * had it; the eval stage times the trained checkpoints on the test
 * images (their retention while timed is their test retention) beside the
 * fresh-weights figures; a second run reuses
 * every stage; a config that differs only in distill.mixer, sharing the
 * stage root, reuses teacher, avit and profile and runs the rest; a stage
 * alone (--stage) refuses to run before its parents; bad s2s values are
 * config errors naming the valid ones. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/it_idx.h"
#include "tests/learning.h"
#include "worker/io/safetensors.h"
#include "worker/models/model.h"

/* the fall of the held-out MSE required of stage 1, as a fraction of the
 * MSE before it: a third of the smallest measured (scripts/learning_margins.sh) */
#define S2S_MSE_FALL 0.25

static void write_cfg(void) {
    char p[160];
    snprintf(p, sizeof p, "%s/s2s.yaml", dir);
    FILE *f = fopen(p, "w");
    cr_assert(f != NULL);
    fprintf(f,
            "pipeline: s2s\ndevice: cpu\n"
            "data: {train_images: %s/train-images, train_labels: %s/train-labels,\n"
            "       test_images: %s/test-images, test_labels: %s/test-labels, val_fraction: 0.1}\n"
            "model: {patch: 4, layers: 3, d_model: 16, heads: 2}\n"
            "train: {steps: 60, batch: 16, lr: 3.0e-3, warmup: 5, eval_every: 0, log_every: 10, "
            "seed: %u}\n"
            /* the spend prior settles in 200 steps of a model this small;
             * docs/design.md#a-vit-halting's (the default) swings between layers there */
            "avit: {retention: 0.7, steps: 200, tolerance: 0.15, prior: spend}\n"
            /* stage 1 long enough, and its MSE term weighted enough against
             * the task's CE, that the held-out MSE falls on every build and
             * seed (with lambda_mse 1 and 80 steps a weak teacher's student
             * spends the stage on CE: measured falls 4% .. 30%) */
            "distill: {mixer: bimamba, replace_layers: 'auto:1', stage1_steps: 200, "
            "stage2_steps: 10, lambda_mse: 10}\n"
            /* the bare module grid at its quick setting (the paper's takes hours here) */
            "s2s: {speed_widths: '16,32', speed_batches: '1,2', speed_warmup: 1, speed_reps: 2}\n",
            dir, dir, dir, dir, 1 + learning_seed_shift());
    fclose(f);
}

/* bfworker train DIR/yaml --out DIR/run [--stage-root DIR/root/stages]
 * args, its output (stderr too) in out[n]: its exit status. */
static int train(const char *yaml, const char *run, const char *root, const char *args, char *out,
                 size_t n) {
    char cmd[4096], sr[1200] = "";
    if (root) snprintf(sr, sizeof sr, " --stage-root %s/%s/stages", dir, root);
    snprintf(cmd, sizeof cmd, "%s/bfworker train %s/%s --out %s/%s%s %s 2>&1", BF_BIN_DIR, dir,
             yaml, dir, run, sr, args);
    return run_cmd(cmd, out, n);
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* Every value of metric name in a metrics.jsonl, in order; returns how many. */
static int metric_values(const char *path, const char *name, double *v, int max) {
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "%s", path);
    char key[128], line[1 << 14];
    snprintf(key, sizeof key, "\"%s\": ", name);
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, key);
        if (p && n < max) v[n++] = strtod(p + strlen(key), NULL);
    }
    fclose(f);
    return n;
}

/* The one folder matching pattern (a shell glob) into out. */
static void one_folder(const char *pattern, char *out, size_t n) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls -d %s", pattern);
    cr_assert_eq(run_cmd(cmd, out, n), 0, "no %s", pattern);
    out[strcspn(out, "\n")] = 0;
}

/* Stage 1 trains only the mixers: every tensor of the student that the
 * teacher has is the teacher's, bit for bit; the mixer's are new. */
static void expect_frozen_through_stage1(void) {
    char avit[512], distill[512], err[256];
    snprintf(avit, sizeof avit, "%s/run/stages/avit-*", dir);
    one_folder(avit, avit, sizeof avit);
    snprintf(distill, sizeof distill, "%s/run/stages/distill-*", dir);
    one_folder(distill, distill, sizeof distill);
    strcat(avit, "/model.safetensors");
    strcat(distill, "/model.safetensors");
    st_file t, s;
    cr_assert_eq(st_open(&t, avit, err, sizeof err), 0, "%s", err);
    cr_assert_eq(st_open(&s, distill, err, sizeof err), 0, "%s", err);
    int same = 0, mixer = 0;
    for (int i = 0; i < s.n; i++) {
        int j = st_find(&t, s.t[i].name);
        if (j < 0) { /* the mixer's own */
            cr_expect(strstr(s.t[i].name, ".mamba.") != NULL, "new tensor %s", s.t[i].name);
            mixer++;
            continue;
        }
        cr_assert_eq(s.t[i].numel, t.t[j].numel, "%s", s.t[i].name);
        float *a = malloc(s.t[i].numel * sizeof(float)), *b = malloc(t.t[j].numel * sizeof(float));
        cr_assert(a && b);
        cr_assert_eq(st_read_f32(&s, i, a, err, sizeof err), 0, "%s", err);
        cr_assert_eq(st_read_f32(&t, j, b, err, sizeof err), 0, "%s", err);
        cr_expect_eq(memcmp(a, b, s.t[i].numel * sizeof(float)), 0,
                     "%s changed in stage 1 (frozen)", s.t[i].name);
        free(a), free(b);
        same++;
    }
    cr_expect_gt(mixer, 0, "no mixer tensors in %s", distill);
    cr_expect_gt(same, 10, "only %d tensors shared with the teacher", same);
    st_close(&t);
    st_close(&s);
}

/* The one value of metric name in metrics.jsonl at path. */
static double one_value(const char *path, const char *name) {
    double v[4];
    int n = metric_values(path, name, v, 4);
    cr_assert_eq(n, 1, "%s logged %d times in %s", name, n, path);
    return v[0];
}

/* The eval stage timed the trained models (the checkpoints, their own
 * halting) on the test images: positive images/s, the ratio of those, and
 * the retention each reached while timed is the one its own stage measured
 * on the test split (avit/test/retention, finetune/test/retention) and the
 * eval's pipe_evaluate too. Fresh weights with a bisected gate centre
 * would land near it, not on it. */
static void expect_trained_speeds(const char *metrics) {
    static const char *const who[] = {"dense", "teacher", "student"};
    static const char *const stage_ret[] = {NULL, "avit/test/retention", "finetune/test/retention"};
    double ips[3];
    for (int k = 0; k < 3; k++) {
        char name[96];
        snprintf(name, sizeof name, "eval/trained/%s/images_per_s", who[k]);
        ips[k] = one_value(metrics, name);
        cr_expect(ips[k] > 0 && ips[k] < 1e9, "%s = %g", name, ips[k]);
        snprintf(name, sizeof name, "eval/trained/%s/retention", who[k]);
        double r = one_value(metrics, name);
        snprintf(name, sizeof name, "eval/%s/test/retention", who[k]);
        double e = one_value(metrics, name);
        cr_expect(fabs(r - e) < 1e-6, "%s timed at retention %.9g, its test retention %.9g", who[k],
                  r, e);
        if (k == 0) {
            cr_expect_eq(r, 1.0, "the dense model halts (retention %g)", r);
            continue;
        }
        double s = one_value(metrics, stage_ret[k]);
        cr_expect(fabs(r - s) < 1e-6, "%s timed at retention %.9g, %s %.9g", who[k], r,
                  stage_ret[k], s);
        cr_expect(r > 0.2 && r < 0.99, "%s: retention %g while timed (no halting?)", who[k], r);
    }
    cr_expect_eq(one_value(metrics, "eval/trained/images"), 60, "timed on the 60 test images");
    double x = one_value(metrics, "eval/trained/student/speedup_vs_teacher");
    cr_expect(fabs(x - ips[2] / ips[1]) < 1e-6 * x, "speedup %g, images/s %g / %g", x, ips[2],
              ips[1]);
    x = one_value(metrics, "eval/trained/teacher/speedup_vs_dense");
    cr_expect(fabs(x - ips[1] / ips[0]) < 1e-6 * x, "speedup %g, images/s %g / %g", x, ips[1],
              ips[0]);
    x = one_value(metrics, "eval/trained/student/speedup_vs_dense");
    cr_expect(fabs(x - ips[2] / ips[0]) < 1e-6 * x, "speedup %g, images/s %g / %g", x, ips[2],
              ips[0]);
    /* the fresh-weights figures stay beside them */
    cr_expect_gt(one_value(metrics, "eval/student/speedup_vs_teacher@577"), 0);
    cr_expect_gt(one_value(metrics, "eval/student/speedup_vs_dense@577"), 0);
}

/* Speed as the paper states it (docs/s2s.md), at the quick grid of
 * write_cfg: for every width and batch of it and every length, the bare
 * attention module and every mixer of the table, once each, at N = round(T
 * x the student's retention) tokens (1 < N <= T); the estimated whole-model
 * speed-up over the dense ViT at 577 tokens for every mixer. */
static void expect_module_speeds(const char *metrics) {
    static const int widths[] = {16, 32}, batches[] = {1, 2}, lengths[] = {197, 577, 1025};
    char name[160];
    for (int t = 0; t < 3; t++) {
        snprintf(name, sizeof name, "eval/module/tokens@%d", lengths[t]);
        double n = one_value(metrics, name);
        cr_expect(n >= 2 && n <= lengths[t] && n == floor(n), "%s %g", name, n);
    }
    for (int w = 0; w < 2; w++)
        for (int b = 0; b < 2; b++) {
            for (int t = 0; t < 3; t++) {
                snprintf(name, sizeof name, "eval/module/d%d/b%d/attention_ms@%d", widths[w],
                         batches[b], lengths[t]);
                cr_expect_gt(one_value(metrics, name), 0, "%s", name);
                for (int k = MODEL_MIXER_ATTENTION + 1; k <= MODEL_MIXER_LAST; k++) {
                    snprintf(name, sizeof name, "eval/module/d%d/b%d/%s_ms@%d", widths[w],
                             batches[b], model_mixer_name(k), lengths[t]);
                    cr_expect_gt(one_value(metrics, name), 0, "%s", name);
                    snprintf(name, sizeof name, "eval/module/d%d/b%d/%s_speedup@%d", widths[w],
                             batches[b], model_mixer_name(k), lengths[t]);
                    cr_expect_gt(one_value(metrics, name), 0, "%s", name);
                }
            }
            for (int k = MODEL_MIXER_ATTENTION + 1; k <= MODEL_MIXER_LAST; k++) {
                snprintf(name, sizeof name, "eval/estimate/d%d/b%d/%s/speedup_vs_dense@577",
                         widths[w], batches[b], model_mixer_name(k));
                double x = one_value(metrics, name);
                cr_expect(x > 0 && isfinite(x), "%s %g", name, x);
            }
        }
}

Test(it_s2s, runs_every_stage_and_shares_them, .timeout = 600) {
    snprintf(dir, sizeof dir, "/tmp/bf-test-its2s-XXXXXX");
    cr_assert(mkdtemp(dir) != NULL);
    write_set("train", 240, 1, 0);
    write_set("test", 60, 2, 0);
    write_cfg();
    char cmd[1024];
    static char out[1 << 16];
    int rc = train("s2s.yaml", "run", NULL, "", out, sizeof out);
    cr_assert_eq(rc, 0, "s2s failed (%d):\n%s", rc, out);
    cr_assert_eq(count(out, ": running into "), 6, "%s", out);
    cr_assert(strstr(out, "stage distill: auto:1 replaces layer "), "%s", out);
    snprintf(cmd, sizeof cmd, "ls %s/run/stages/*/stage.json | wc -l", dir);
    run_cmd(cmd, out, sizeof out);
    cr_assert_eq(atoi(out), 6, "stage.json files: %s", out);
    snprintf(cmd, sizeof cmd, "test -s %s/run/stages/profile-*/profile.json", dir);
    cr_assert_eq(system(cmd), 0, "no profile.json");
    /* the student's stages name the layers auto:1 chose */
    snprintf(cmd, sizeof cmd,
             "grep -l '\"mixer\": \"bimamba\", \"replaced_layers\": \\[[0-2]\\]' "
             "%s/run/stages/*/stage.json | wc -l",
             dir);
    run_cmd(cmd, out, sizeof out);
    cr_assert_eq(atoi(out), 3, "distill, finetune and eval stage.json with the layers: %s", out);
    static const char *const names[] = {"\"teacher/val/acc\"",        "\"avit/val/retention\"",
                                        "\"distill/train/loss_mse\"", "\"distill/train/loss_halt\"",
                                        "\"finetune/val/acc\"",       "\"eval/student/test/acc\"",
                                        "\"eval/mixer/speedup@577\""};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        snprintf(cmd, sizeof cmd, "grep -c '%s' %s/run/metrics.jsonl", names[k], dir);
        cr_expect_eq(run_cmd(cmd, out, sizeof out), 0, "no %s in metrics.jsonl", names[k]);
    }
    /* stage 1 on held data: the MSE before its first step and after its last */
    double mse[8];
    snprintf(cmd, sizeof cmd, "%s/run/metrics.jsonl", dir);
    int nm = metric_values(cmd, "distill/val/loss_mse", mse, 8);
    cr_assert_eq(nm, 2, "distill/val/loss_mse logged %d times", nm);
    /* the control is the MSE before stage 1 (the fresh mixer); the fall
     * required is a third of the smallest measured over builds and seeds
     * (tests/learning.h, docs/results.md) */
    cr_assert_gt(mse[0], 0, "held-out layer MSE %g before stage 1", mse[0]);
    learning_expect("it_s2s/stage1_heldout_mse_fraction", 1.0, mse[1] / mse[0], S2S_MSE_FALL, 1);
    expect_frozen_through_stage1();
    expect_trained_speeds(cmd);
    expect_module_speeds(cmd);
    /* stage 2 reads its own lr, distill.finetune_lr's default 0.1 x train.lr
     * (3e-4): its one logged lr is at its 10th step of 10, warmup 1 (capped
     * at a tenth of the steps), on the cosine from lr to lr / 10: lr (0.1 +
     * 0.45 (1 + cos(pi 8/9))). Within float rounding of those few ops; the
     * former recipe (train.lr itself) logs 10 times as much */
    double ft = one_value(cmd, "finetune/train/lr");
    double want = 3e-4 * (0.1 + 0.45 * (1 + cos(3.14159265358979 * 8 / 9)));
    cr_expect(fabs(ft - want) <= 1e-5 * want, "stage 2's lr %g, not %g", ft, want);
    /* again: every stage is reused */
    rc = train("s2s.yaml", "run", NULL, "--resume", out, sizeof out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert_eq(count(out, ": done, reusing "), 6, "%s", out);
    /* another mixer on the same stage root: three stages shared */
    rc = train("s2s.yaml", "run2", "run", "--set distill.mixer=bilstm", out, sizeof out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert_eq(count(out, ": done, reusing "), 3, "%s", out);
    cr_assert_eq(count(out, ": running into "), 3, "%s", out);
    snprintf(cmd, sizeof cmd, "grep -c 'eval/mixer/bilstm_ms@577' %s/run2/metrics.jsonl", dir);
    cr_expect_eq(run_cmd(cmd, out, sizeof out), 0, "no bilstm timing");
    /* one stage alone, before its parents */
    rc = train("s2s.yaml", "run3", NULL, "--stage finetune --set train.seed=9", out, sizeof out);
    cr_assert_neq(rc, 0, "%s", out);
    cr_assert(strstr(out, "needs stage teacher") && strstr(out, "stage.json is missing"), "%s",
              out);
    /* bad values */
    static const char *const bad[][2] = {
        {"distill.replace_layers=[1,1]", "listed twice"},
        {"distill.replace_layers=[0,1,2]", "replaces all 3 layers"},
        {"distill.replace_layers=[5]", "valid: 0 .. 2"},
        {"distill.replace_layers=auto:3", "valid: auto:1 .. auto:2"},
        {"distill.mixer=mamba", "bimamba, bimamba2, bilstm, bilstm_wide"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        snprintf(cmd, sizeof cmd, "--set '%s'", bad[k][0]);
        rc = train("s2s.yaml", "bad", NULL, cmd, out, sizeof out);
        cr_expect_neq(rc, 0, "%s was accepted", bad[k][0]);
        cr_expect(strstr(out, bad[k][1]) != NULL, "%s: %s", bad[k][0], out);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* distill.teacher: dense (FAR's replacement): no A-ViT stage; the profile
 * reads the dense teacher and ranks by entropy alone; stage 1 and 2 run
 * with no masks and no halting term (metrics.jsonl holds loss_mse and the
 * task loss, no loss_halt, ponder, prior or retention of training); a
 * dense run that differs only in A-ViT's keys reuses every stage, and an
 * A-ViT run on the same root reuses only the teacher. Tiny: a few steps a
 * stage (it checks the plumbing, not what the student learns). */
Test(it_s2s, a_dense_teacher_runs_no_halting, .timeout = 600) {
    snprintf(dir, sizeof dir, "/tmp/bf-test-its2sd-XXXXXX");
    cr_assert(mkdtemp(dir) != NULL);
    write_set("train", 120, 1, 0);
    write_set("test", 30, 2, 0);
    char p[160];
    snprintf(p, sizeof p, "%s/dense.yaml", dir);
    FILE *f = fopen(p, "w");
    cr_assert(f != NULL);
    fprintf(f,
            "pipeline: s2s\ndevice: cpu\n"
            "data: {train_images: %s/train-images, train_labels: %s/train-labels,\n"
            "       test_images: %s/test-images, test_labels: %s/test-labels, val_fraction: 0.1}\n"
            "model: {patch: 4, layers: 3, d_model: 16, heads: 2}\n"
            "train: {steps: 10, batch: 8, eval_every: 0, log_every: 5}\n"
            "avit: {steps: 10, tolerance: 1}\n"
            "distill: {teacher: dense, mixer: bimamba, replace_layers: 'auto:1', "
            "stage1_steps: 10, stage2_steps: 10}\n"
            /* the bare module grid at its smallest (the default is the paper's) */
            "s2s: {speed_widths: '16', speed_batches: '1', speed_warmup: 0, speed_reps: 1}\n",
            dir, dir, dir, dir);
    fclose(f);
    char cmd[1024];
    static char out[1 << 16];
    int rc = train("dense.yaml", "run", NULL, "", out, sizeof out);
    cr_assert_eq(rc, 0, "s2s dense failed (%d):\n%s", rc, out);
    cr_assert_eq(count(out, ": running into "), 5, "%s", out);
    cr_expect(strstr(out, "stage avit") == NULL, "an A-ViT stage ran: %s", out);
    cr_expect(strstr(out, "score: entropy (the attention's own sparsity)"), "%s", out);
    snprintf(cmd, sizeof cmd, "ls -d %s/run/stages/avit-* 2>/dev/null | wc -l", dir);
    run_cmd(cmd, out, sizeof out);
    cr_expect_eq(atoi(out), 0, "avit folders: %s", out);
    snprintf(cmd, sizeof cmd,
             "grep -c '\"score\": \"entropy\"' %s/run/stages/profile-*/profile.json", dir);
    cr_expect_eq(run_cmd(cmd, out, sizeof out), 0, "profile.json ranks by: %s", out);
    snprintf(cmd, sizeof cmd, "grep -l '\"teacher\": \"dense\"' %s/run/stages/*/stage.json | wc -l",
             dir);
    run_cmd(cmd, out, sizeof out);
    cr_expect_eq(atoi(out), 3, "distill, finetune and eval name the dense teacher: %s", out);
    /* the losses per term: the MSE and the task, no halting term anywhere */
    snprintf(p, sizeof p, "%s/run/metrics.jsonl", dir);
    double v[8];
    cr_expect_gt(metric_values(p, "distill/train/loss_mse", v, 8), 0, "no stage-1 MSE");
    cr_expect_gt(metric_values(p, "distill/train/loss_task", v, 8), 0, "no stage-1 CE");
    cr_expect_gt(metric_values(p, "finetune/train/loss_task", v, 8), 0, "no stage-2 CE");
    static const char *const none[] = {"loss_halt",       "loss_ponder",   "loss_prior",
                                       "train/retention", "val/retention", "\"avit/"};
    for (size_t k = 0; k < sizeof none / sizeof *none; k++) {
        snprintf(cmd, sizeof cmd, "grep -c '%s' %s", none[k], p);
        run_cmd(cmd, out, sizeof out);
        cr_expect_eq(atoi(out), 0, "%s in a dense run's metrics (%s lines)", none[k], out);
    }
    /* the model's own loss in both stages is the CE alone (the MSE is the
     * distillation's extra term, logged apart): no ponder or prior in it */
    for (int s = 0; s < 2; s++) {
        double tot[8], task[8];
        char a[64], t[80];
        snprintf(a, sizeof a, "%s/train/loss", s ? "finetune" : "distill");
        snprintf(t, sizeof t, "%s_task", a);
        int nt = metric_values(p, a, tot, 8);
        cr_assert_eq(metric_values(p, t, task, 8), nt);
        for (int i = 0; i < nt; i++)
            cr_expect_eq(tot[i], task[i], "%s window %d: loss %g, task %g", a, i, tot[i], task[i]);
    }
    cr_expect_eq(one_value(p, "eval/student/test/retention"), 1.0, "the student halts");
    /* A-ViT's keys move no dense stage: all five reused */
    rc = train("dense.yaml", "run2", "run", "--set avit.retention=0.4 --set distill.lambda_halt=2",
               out, sizeof out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect_eq(count(out, ": done, reusing "), 5, "%s", out);
    /* the A-ViT teacher's chain on the same root shares only the teacher */
    rc = train("dense.yaml", "run3", "run", "--set distill.teacher=avit", out, sizeof out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect_eq(count(out, ": done, reusing "), 1, "%s", out);
    cr_expect_eq(count(out, ": running into "), 5, "%s", out);
    cr_expect(strstr(out, "stage teacher") && strstr(out, ": done, reusing "), "%s", out);
    cr_expect(strstr(out, "score: keep*entropy"), "%s", out);
    /* a dense chain has no A-ViT stage to run alone */
    rc = train("dense.yaml", "bad", NULL, "--stage avit", out, sizeof out);
    cr_expect_neq(rc, 0, "%s", out);
    cr_expect(strstr(out, "distill.teacher dense runs no avit stage"), "%s", out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
