/* bfworker train with pipeline vit on a tiny IDX image set this test writes
 * (12 x 12 images, three classes: a bar at the top, at the bottom, or down
 * the middle, over noise): the ViT learns it (test/acc far above the 1/3 of
 * chance), and a bad IDX file fails the run with its name. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];

static void be32(FILE *f, unsigned v) {
    unsigned char b[4] = {v >> 24, v >> 16, v >> 8, v};
    fwrite(b, 1, 4, f);
}

/* n images of class i % 3 with noise from seed into NAME-images / NAME-labels
 * (the images gzipped through gzip(1) when gz: both kinds are read). */
static void write_set(const char *name, int n, unsigned seed, int gz) {
    char p[160];
    snprintf(p, sizeof p, "%s/%s-images", dir, name);
    FILE *f = fopen(p, "wb");
    cr_assert(f != NULL);
    unsigned char m[4] = {0, 0, 8, 3};
    fwrite(m, 1, 4, f);
    be32(f, (unsigned)n), be32(f, 12), be32(f, 12);
    for (int i = 0; i < n; i++)
        for (int y = 0; y < 12; y++)
            for (int x = 0; x < 12; x++) {
                seed = seed * 1103515245u + 12345u;
                int k = i % 3, on = k == 0   ? (y == 1 || y == 2)
                                    : k == 1 ? (y == 9 || y == 10)
                                             : (x == 5 || x == 6);
                fputc(on ? 200 + (int)(seed >> 26) : (int)(seed >> 26), f);
            }
    fclose(f);
    if (gz) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "gzip %s", p);
        cr_assert_eq(system(cmd), 0);
    }
    snprintf(p, sizeof p, "%s/%s-labels", dir, name);
    f = fopen(p, "wb");
    cr_assert(f != NULL);
    unsigned char ml[4] = {0, 0, 8, 1};
    fwrite(ml, 1, 4, f);
    be32(f, (unsigned)n);
    for (int i = 0; i < n; i++) fputc(i % 3, f);
    fclose(f);
}

static int run_cmd(const char *cmd, char *out, size_t outlen) {
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL, "popen %s", cmd);
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void write_cfg(const char *train_im) {
    char p[160];
    snprintf(p, sizeof p, "%s/vit.yaml", dir);
    FILE *f = fopen(p, "w");
    cr_assert(f != NULL);
    fprintf(f,
            "pipeline: vit\ndevice: cpu\n"
            "data: {train_images: %s/%s, train_labels: %s/train-labels,\n"
            "       test_images: %s/test-images, test_labels: %s/test-labels, val_fraction: 0.1}\n"
            "model: {patch: 4, layers: 1, d_model: 32, heads: 2}\n"
            "aug: {crop_pad: 1, hflip: true}\n"
            "train: {steps: 120, batch: 16, lr: 3.0e-3, warmup: 10, eval_every: 0, log_every: "
            "40, checkpoint_every: 0}\n",
            dir, train_im, dir, dir, dir);
    fclose(f);
}

Test(it_vit, learns_a_tiny_idx_set, .timeout = 300) {
    snprintf(dir, sizeof dir, "/tmp/bf-test-itvit-XXXXXX");
    cr_assert(mkdtemp(dir) != NULL);
    write_set("train", 300, 1, 1);
    write_set("test", 90, 2, 0);
    write_cfg("train-images.gz");
    char cmd[1024];
    static char out[1 << 16];
    snprintf(cmd, sizeof cmd, "%s/bfworker train %s/vit.yaml --quiet --out %s/run 2>&1", BF_BIN_DIR,
             dir, dir);
    int rc = run_cmd(cmd, out, sizeof out);
    cr_assert_eq(rc, 0, "train failed (%d):\n%s", rc, out);
    snprintf(cmd, sizeof cmd, "grep -o '\"test/acc\": [0-9.e-]*' %s/run/metrics.jsonl", dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "no test/acc in metrics.jsonl");
    double acc = atof(strchr(out, ':') + 1);
    cr_assert_gt(acc, 0.8, "test/acc %g (chance 0.33)", acc);
    cr_log_info("test/acc %g", acc);
    snprintf(cmd, sizeof cmd, "grep -c '\"val/acc\"' %s/run/metrics.jsonl", dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "no val/acc in metrics.jsonl");

    /* a truncated training file: the run fails naming it */
    snprintf(cmd, sizeof cmd, "head -c 1000 %s/test-images > %s/cut-images", dir, dir);
    cr_assert_eq(system(cmd), 0);
    write_cfg("cut-images");
    snprintf(cmd, sizeof cmd, "%s/bfworker train %s/vit.yaml --quiet --out %s/run2 2>&1",
             BF_BIN_DIR, dir, dir);
    rc = run_cmd(cmd, out, sizeof out);
    cr_assert_neq(rc, 0, "a truncated IDX file trained:\n%s", out);
    cr_assert(strstr(out, "cut-images: truncated") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
