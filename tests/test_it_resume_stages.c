/* A resumed run is the run never interrupted, for the stages whose state
 * is more than weights, moments and step: the A-ViT stage (its retention
 * controller's prior shift, and the logging window it reads), stage-1
 * distillation and the finetune stage (the student's own halting and its
 * controller). Real bfworker processes on a tiny IDX set (tests/it_idx.h),
 * one OpenMP thread: an s2s run is SIGTERMed once inside each of the avit,
 * distill and finetune stages and resumed each time; every tensor of those
 * stages' checkpoints (parameters, AdamW m and v) is then bit for bit the
 * uninterrupted run's. test_it_ddp does the same for budgetformer. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/it_idx.h"
#include "tests/it_proc.h"
#include "worker/io/safetensors.h"

static void write_cfg(void) {
    char p[160];
    snprintf(p, sizeof p, "%s/s2s.yaml", dir);
    FILE *f = fopen(p, "w");
    cr_assert(f != NULL);
    /* log_every 7: a cut lands inside a logging window most of the time,
     * which the A-ViT controller reads at the window's end */
    fprintf(f,
            "pipeline: s2s\ndevice: cpu\n"
            "data: {train_images: %s/train-images, train_labels: %s/train-labels,\n"
            "       test_images: %s/test-images, test_labels: %s/test-labels, val_fraction: 0.1}\n"
            "model: {patch: 4, layers: 3, d_model: 16, heads: 2}\n"
            "train: {steps: 30, batch: 16, lr: 3.0e-3, warmup: 5, eval_every: 0, log_every: 7,\n"
            "        checkpoint_every: 0}\n"
            "avit: {retention: 0.7, steps: 400, tolerance: 0.5}\n"
            "distill: {mixer: bimamba, replace_layers: [1], stage1_steps: 400, "
            "stage2_steps: 400}\n"
            "s2s: {speed_widths: '16', speed_batches: '1', speed_warmup: 0, speed_reps: 1}\n",
            dir, dir, dir, dir);
    fclose(f);
}

static void argv_of(char **argv, const char *out, int resume) {
    static char cfg[160], o[160];
    snprintf(cfg, sizeof cfg, "%s/s2s.yaml", dir);
    snprintf(o, sizeof o, "%s/%s", dir, out);
    int k = 0;
    argv[k++] = BF_BIN_DIR "/bfworker";
    argv[k++] = "train";
    argv[k++] = cfg;
    argv[k++] = "--out";
    argv[k++] = o;
    if (resume) argv[k++] = "--resume";
    argv[k] = NULL;
}

/* Starts the cut run (resuming after the first time), waits until `stage`
 * has logged `windows` windows, SIGTERMs it and expects exit 75. Returns
 * the step the checkpoint was written at (from the log). */
static long cut_in(const char *stage, int windows, int resume, const char *log) {
    char *argv[8], metrics[160], needle[64];
    argv_of(argv, "cut", resume);
    long before = 0;
    char *old = it_slurp(log, NULL);
    if (old) before = (long)strlen(old);
    free(old);
    pid_t pid = it_spawn(log, argv, 1);
    snprintf(metrics, sizeof metrics, "%s/cut/metrics.jsonl", dir);
    snprintf(needle, sizeof needle, "\"%s/train/loss\"", stage);
    double end = it_now_s() + 300;
    int status = 0, ended = 0;
    while (it_now_s() < end) {
        struct stat sb;
        if (stat(metrics, &sb) == 0 && it_count_lines_with(metrics, needle) >= windows) break;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            ended = 1;
            break;
        }
        it_sleep_s(0.001);
    }
    cr_assert(!ended, "the run ended before stage %s logged %d windows (see %s)", stage, windows,
              log);
    kill(pid, SIGTERM);
    cr_assert_eq(it_wait_pid(pid, 120, &status), 0, "no exit after SIGTERM");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 75,
              "stage %s: SIGTERM gave status %d, expected exit 75 (see %s)", stage, status, log);
    char *text = it_slurp(log, NULL);
    cr_assert_not_null(text);
    const char *p = strstr(text + before, "preempted: checkpoint written at step ");
    cr_assert_not_null(p, "no preemption line (see %s)", log);
    long step = strtol(p + strlen("preempted: checkpoint written at step "), NULL, 10);
    free(text);
    return step;
}

/* Every float of DIR/FILE, concatenated by tensor order. */
static unsigned char *read_set(const char *folder, const char *file, size_t *len) {
    char p[512], err[1024];
    snprintf(p, sizeof p, "%s/%s", folder, file);
    st_file f;
    cr_assert_eq(st_open(&f, p, err, sizeof err), 0, "%s", err);
    unsigned char *all = NULL;
    *len = 0;
    for (int i = 0; i < f.n; i++) {
        size_t n = f.t[i].numel;
        all = realloc(all, *len + n * sizeof(float));
        cr_assert_not_null(all);
        cr_assert_eq(st_read_f32(&f, i, (float *)(all + *len), err, sizeof err), 0, "%s", err);
        *len += n * sizeof(float);
    }
    st_close(&f);
    return all;
}

static void one_folder(const char *pattern, char *out, size_t n) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls -d %s", pattern);
    cr_assert_eq(run_cmd(cmd, out, n), 0, "no %s", pattern);
    out[strcspn(out, "\n")] = 0;
}

static void expect_same_stage(const char *stage, long cut_step) {
    static const char *const files[] = {"model.safetensors", "optimizer.safetensors"};
    char a[512], b[512], pat[256];
    snprintf(pat, sizeof pat, "%s/full/stages/%s-*", dir, stage);
    one_folder(pat, a, sizeof a);
    snprintf(pat, sizeof pat, "%s/cut/stages/%s-*", dir, stage);
    one_folder(pat, b, sizeof b);
    for (int k = 0; k < 2; k++) {
        size_t la, lb;
        unsigned char *x = read_set(a, files[k], &la), *y = read_set(b, files[k], &lb);
        cr_assert_eq(la, lb, "%s %s: sizes %zu vs %zu", stage, files[k], la, lb);
        size_t first = la;
        for (size_t i = 0; i < la && first == la; i++)
            if (x[i] != y[i]) first = i;
        cr_expect_eq(first, la,
                     "stage %s cut at step %ld and resumed: %s differs from the uninterrupted "
                     "run's at byte %zu of %zu",
                     stage, cut_step, files[k], first, la);
        free(x), free(y);
    }
    cr_log_info("stage %s: cut at step %ld (log_every 7), resumed", stage, cut_step);
}

Test(it_resume, avit_distill_finetune_resume_bit_for_bit, .timeout = 900) {
    it_worker_env();
    snprintf(dir, sizeof dir, "/tmp/bf-test-resume-XXXXXX");
    cr_assert(mkdtemp(dir) != NULL);
    write_set("train", 240, 1, 0);
    write_set("test", 60, 2, 0);
    write_cfg();
    char *argv[8], log[160];
    snprintf(log, sizeof log, "%s/full.log", dir);
    argv_of(argv, "full", 0);
    pid_t pid = it_spawn(log, argv, 1);
    int status = 0;
    cr_assert_eq(it_wait_pid(pid, 600, &status), 0, "the uninterrupted run hangs");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "uninterrupted run failed (see %s)",
              log);
    snprintf(log, sizeof log, "%s/cut.log", dir);
    long at_avit = cut_in("avit", 3, 0, log);
    long at_distill = cut_in("distill", 3, 1, log);
    long at_finetune = cut_in("finetune", 3, 1, log);
    argv_of(argv, "cut", 1);
    pid = it_spawn(log, argv, 1);
    cr_assert_eq(it_wait_pid(pid, 600, &status), 0, "the resumed run hangs");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "resumed run failed (see %s)", log);
    expect_same_stage("avit", at_avit);
    expect_same_stage("distill", at_distill);
    expect_same_stage("finetune", at_finetune);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
