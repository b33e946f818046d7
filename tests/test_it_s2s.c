/* bfworker train with pipeline s2s on a tiny IDX image set (tests/it_idx.h):
 * every stage runs and leaves its folder and stage.json; metrics of every
 * stage reach metrics.jsonl under the stage's name; a second run reuses
 * every stage; a config that differs only in distill.mixer, sharing the
 * stage root, reuses teacher, avit and profile and runs the rest; a stage
 * alone (--stage) refuses to run before its parents; bad s2s values are
 * config errors naming the valid ones. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/it_idx.h"

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
            "train: {steps: 60, batch: 16, lr: 3.0e-3, warmup: 5, eval_every: 0, log_every: 10}\n"
            "avit: {retention: 0.7, steps: 200, tolerance: 0.15}\n"
            "distill: {mixer: bimamba, replace_layers: 'auto:1', stage1_steps: 10, "
            "stage2_steps: 10}\n",
            dir, dir, dir, dir);
    fclose(f);
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

Test(it_s2s, runs_every_stage_and_shares_them, .timeout = 600) {
    snprintf(dir, sizeof dir, "/tmp/bf-test-its2s-XXXXXX");
    cr_assert(mkdtemp(dir) != NULL);
    write_set("train", 240, 1, 0);
    write_set("test", 60, 2, 0);
    write_cfg();
    char cmd[1024];
    static char out[1 << 16];
    snprintf(cmd, sizeof cmd, "%s/bfworker train %s/s2s.yaml --out %s/run 2>&1", BF_BIN_DIR, dir,
             dir);
    int rc = run_cmd(cmd, out, sizeof out);
    cr_assert_eq(rc, 0, "s2s failed (%d):\n%s", rc, out);
    cr_assert_eq(count(out, ": running into "), 6, "%s", out);
    snprintf(cmd, sizeof cmd, "ls %s/run/stages/*/stage.json | wc -l", dir);
    run_cmd(cmd, out, sizeof out);
    cr_assert_eq(atoi(out), 6, "stage.json files: %s", out);
    snprintf(cmd, sizeof cmd, "test -s %s/run/stages/profile-*/profile.json", dir);
    cr_assert_eq(system(cmd), 0, "no profile.json");
    static const char *const names[] = {"\"teacher/val/acc\"",        "\"avit/val/retention\"",
                                        "\"distill/train/loss_mse\"", "\"distill/train/loss_halt\"",
                                        "\"finetune/val/acc\"",       "\"eval/student/test/acc\"",
                                        "\"eval/mixer/speedup@577\""};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        snprintf(cmd, sizeof cmd, "grep -c '%s' %s/run/metrics.jsonl", names[k], dir);
        cr_expect_eq(run_cmd(cmd, out, sizeof out), 0, "no %s in metrics.jsonl", names[k]);
    }
    /* again: every stage is reused */
    snprintf(cmd, sizeof cmd, "%s/bfworker train %s/s2s.yaml --out %s/run --resume 2>&1",
             BF_BIN_DIR, dir, dir);
    rc = run_cmd(cmd, out, sizeof out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert_eq(count(out, ": done, reusing "), 6, "%s", out);
    /* another mixer on the same stage root: three stages shared */
    snprintf(cmd, sizeof cmd,
             "%s/bfworker train %s/s2s.yaml --out %s/run2 --stage-root %s/run/stages --set "
             "distill.mixer=bilstm 2>&1",
             BF_BIN_DIR, dir, dir, dir);
    rc = run_cmd(cmd, out, sizeof out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert_eq(count(out, ": done, reusing "), 3, "%s", out);
    cr_assert_eq(count(out, ": running into "), 3, "%s", out);
    snprintf(cmd, sizeof cmd, "grep -c 'eval/mixer/bilstm_ms@577' %s/run2/metrics.jsonl", dir);
    cr_expect_eq(run_cmd(cmd, out, sizeof out), 0, "no bilstm timing");
    /* one stage alone, before its parents */
    snprintf(cmd, sizeof cmd,
             "%s/bfworker train %s/s2s.yaml --out %s/run3 --stage finetune --set train.seed=9 2>&1",
             BF_BIN_DIR, dir, dir);
    rc = run_cmd(cmd, out, sizeof out);
    cr_assert_neq(rc, 0, "%s", out);
    cr_assert(strstr(out, "needs stage teacher") && strstr(out, "stage.json is missing"), "%s",
              out);
    /* bad values */
    static const char *const bad[][2] = {
        {"distill.replace_layers=[1,1]", "listed twice"},
        {"distill.replace_layers=[0,1,2]", "replaces all 3 layers"},
        {"distill.replace_layers=[5]", "valid: 0 .. 2"},
        {"distill.replace_layers=auto:3", "valid: auto:1 .. auto:2"},
        {"distill.mixer=mamba", "bimamba, bilstm"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        snprintf(cmd, sizeof cmd, "%s/bfworker train %s/s2s.yaml --out %s/bad --set '%s' 2>&1",
                 BF_BIN_DIR, dir, dir, bad[k][0]);
        rc = run_cmd(cmd, out, sizeof out);
        cr_expect_neq(rc, 0, "%s was accepted", bad[k][0]);
        cr_expect(strstr(out, bad[k][1]) != NULL, "%s: %s", bad[k][0], out);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
