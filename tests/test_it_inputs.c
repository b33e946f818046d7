/* test_it_inputs — bfworker checks what it is given before it touches a run
 * (issue 23, the worker's side), with real processes and files:
 *   - train --force leaves the old run byte for byte as it was when any
 *     input is bad (data, init.from, the memory estimate, train.freeze),
 *     refuses an init.from inside --out, and starts over when all are good;
 *   - a FIFO (or a device) given as any path the worker reads fails at once,
 *     naming the key or argument, the path and what it is;
 *   - a run that fails before its first point leaves no metrics.jsonl, and
 *     an empty one is no run;
 *   - training needs 2 distinct labels (counted, not the largest + 1);
 *   - messages say what is wrong (NaN/Inf in init.from by tensor, a gzip
 *     CRC, singular/plural, the ViT's memory advice and progress lines, an
 *     s2s root given to profile, a model.safetensors named directly);
 *   - init.from loads BF16, F16 and F64 tensors written by PyTorch. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/it_glosses.h"
#include "tests/it_idx.h"
#include "tests/it_proc.h"
#include "worker/io/safetensors.h"

#define GOLDEN BF_SOURCE_DIR "/tests/data/golden"
/* every command runs under a limit: a regression that blocks fails, not hangs */
#define LIMIT_S 60

static void setup(void) { it_glosses_setup("bf-inputs"); }
static void teardown(void) { it_glosses_teardown(); }
TestSuite(inputs, .init = setup, .fini = teardown, .timeout = 300);

static char out[1 << 17];

/* Runs cmd in dir (stdout + stderr into out) under LIMIT_S seconds; its exit status. */
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = it_glosses_vrun(LIMIT_S, out, sizeof out, fmt, ap);
    va_end(ap);
    return rc;
}

/* bfworker train on the glosses (budgetformer baseline, 4 steps) with extra args */
#define TRAIN                                                                                      \
    BF_BIN_DIR "/bfworker train " GOLDEN "/budget_off.yaml --set data.train=glosses_train.tsv "    \
               "--set data.val=glosses_val.tsv --set train.steps=4 --quiet "

static void write_text(const char *name, const char *text) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    cr_assert_not_null(f, "%s", p);
    fputs(text, f);
    fclose(f);
}

/* Writes a tiny image set and s2s.yaml: a 2-layer S2S run on it, with the
 * A-ViT stage's keys from avit (the inside of its flow mapping). */
static void write_s2s(const char *avit) {
    write_set("train", 60, 1, 0);
    write_set("test", 12, 2, 0);
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "pipeline: s2s\ndevice: cpu\n"
             "data: {train_images: %s/train-images, train_labels: %s/train-labels,\n"
             "       test_images: %s/test-images, test_labels: %s/test-labels, val_fraction: "
             "0.2}\n"
             "model: {patch: 4, layers: 2, d_model: 16, heads: 2}\n"
             "train: {steps: 3, batch: 8, lr: 3.0e-3, warmup: 1, eval_every: 0, log_every: 1}\n"
             "avit: {%s}\n"
             "distill: {mixer: bimamba, replace_layers: [1], stage1_steps: 2, stage2_steps: 2}\n"
             "s2s: {speed_widths: '16', speed_batches: '1', speed_warmup: 0, speed_reps: 1}\n",
             dir, dir, dir, dir, avit);
    write_text("s2s.yaml", cfg);
}

/* ---- a folder's files, byte for byte ---- */

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
        if (e->d_name[0] == '.' && (!e->d_name[1] || e->d_name[1] == '.')) continue;
        if (!strcmp(e->d_name, ".force-new")) continue; /* --force's new run, checked apart */
        cr_assert_lt(s->n, 32);
        char fp[768];
        snprintf(fp, sizeof fp, "%s/%s", p, e->d_name);
        FILE *f = fopen(fp, "rb");
        cr_assert_not_null(f, "%s", fp);
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        s->data[s->n] = malloc((size_t)n + 1);
        cr_assert_eq(fread(s->data[s->n], 1, (size_t)n, f), (size_t)n);
        fclose(f);
        s->len[s->n] = (size_t)n;
        snprintf(s->name[s->n++], 128, "%.127s", e->d_name);
    }
    closedir(d);
}

static void snap_free(snapshot *s) {
    for (int i = 0; i < s->n; i++) free(s->data[i]);
}

/* The folder holds exactly the files of a, with the same bytes. */
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

Test(inputs, force_keeps_the_old_run_until_the_new_one_has_set_up) {
    cr_assert_eq(run(TRAIN "--out run"), 0, "%s", out);
    write_text("notab.tsv", "a line without a tab\nanother\n");
    write_text("garbage.safetensors", "this is not a safetensors file at all, not even close");
    cr_assert_eq(run("mkfifo fifo"), 0);
    snapshot old;
    snap("run", &old);
    cr_assert_geq(old.n, 6, "the first run left %d files", old.n);
    /* every kind of input, each found bad with --force */
    static const struct {
        const char *args, *says;
    } bad[] = {
        {"--set data.val=missing.tsv", "data.val"},
        {"--set data.train=notab.tsv", "notab.tsv"},
        {"--set init.from=missing", "init.from"},
        {"--set init.from=garbage.safetensors", "garbage.safetensors"},
        {"--set init.from=fifo", "is a FIFO"},
        {"--set model.d_model=8192 --set model.layers=24 --set model.heads=64",
         "the model does not fit"},
        {"--set train.freeze=no_such_tensor", "train.freeze"},
        {"--set model.d_model=64 --set init.from=run2", "shape"},
        /* init.from inside --out: refused, however it is spelled */
        {"--set init.from=run", "is in the --out folder"},
        {"--set init.from=run/model.safetensors", "is in the --out folder"},
        {"--set init.from=./run/../run/", "is in the --out folder"},
    };
    cr_assert_eq(run(TRAIN "--out run2"), 0, "%s", out); /* a run of d_model 32 */
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        int rc = run(TRAIN "--force --out run %s", bad[k].args);
        cr_expect(rc == 1 || rc == 64, "%s: status %d\n%s", bad[k].args, rc, out);
        cr_expect(strstr(out, bad[k].says), "%s: want '%s' in:\n%s", bad[k].args, bad[k].says, out);
        expect_same(&old, "run", bad[k].args);
        cr_expect_neq(run("test -e run/.force-new"), 0, "%s: the new run's folder is left",
                      bad[k].args);
    }
    /* good inputs: the old run is replaced by the new one (3 steps, not 4) */
    cr_assert_eq(run(TRAIN "--force --out run --set train.steps=3 --set init.from=run2"), 0, "%s",
                 out);
    cr_assert_eq(run("grep -c '\"step\": ' run/metrics.jsonl"), 0);
    cr_expect_eq(atoi(out), 3, "metrics.jsonl has %s lines: the old run's are kept", out);
    cr_expect_eq(run("grep -q '\"step\": 3,' run/state.json"), 0, "state.json not of step 3");
    cr_expect_eq(run("ls run | grep -c events.out.tfevents"), 0);
    cr_expect_eq(atoi(out), 1, "%s event files: the old one is kept", out);
    snap_free(&old);
}

/* --force writes the new run beside the old one (run/.force-new) and swaps it
 * in when its first checkpoint is written: a run killed before then leaves
 * the old run byte for byte; the next --force clears what the killed one
 * left, and once it writes its checkpoint the old run is replaced whole. */
Test(inputs, force_swaps_the_new_run_in_at_its_first_checkpoint) {
    cr_assert_eq(run(TRAIN "--out run"), 0, "%s", out);
    snapshot old;
    snap("run", &old);
    char cfg[512], tr[512], va[512], outd[512], log[512], staged[600];
    snprintf(cfg, sizeof cfg, "%s/budget_off.yaml", GOLDEN);
    snprintf(tr, sizeof tr, "data.train=%s/glosses_train.tsv", dir);
    snprintf(va, sizeof va, "data.val=%s/glosses_val.tsv", dir);
    snprintf(outd, sizeof outd, "%s/run", dir);
    snprintf(log, sizeof log, "%s/force.log", dir);
    snprintf(staged, sizeof staged, "%s/run/.force-new/metrics.jsonl", dir);
    char *argv[] = {BF_BIN_DIR "/bfworker",
                    "train",
                    cfg,
                    "--set",
                    tr,
                    "--set",
                    va,
                    "--set",
                    "train.steps=100000000",
                    "--set",
                    "train.log_every=1",
                    "--set",
                    "train.eval_every=0",
                    "--set",
                    "train.checkpoint_every=0",
                    "--quiet",
                    "--force",
                    "--out",
                    outd,
                    NULL};
    pid_t pid = it_spawn(log, argv, 0);
    /* training, and writing its metrics beside the old run */
    double t0 = it_now_s();
    struct stat st;
    while (!(stat(staged, &st) == 0 && st.st_size > 0)) {
        int status;
        cr_assert_eq(it_wait_pid(pid, 0, &status), 1, "the --force run ended: see %s", log);
        cr_assert_lt(it_now_s() - t0, 60, "no metrics in %s after 60 s", staged);
        it_sleep_s(0.05);
    }
    it_stop(&pid, SIGKILL);
    expect_same(&old, "run", "a --force run killed before its first checkpoint");
    cr_expect_eq(run("test -d run/.force-new"), 0, "the killed run wrote elsewhere");
    /* the next --force: the leftover goes, the new run replaces the old */
    cr_assert_eq(run(TRAIN "--force --out run --set train.steps=3"), 0, "%s", out);
    cr_expect_neq(run("test -e run/.force-new"), 0, "the new run's folder is left");
    cr_assert_eq(run("grep -c '\"step\": ' run/metrics.jsonl"), 0);
    cr_expect_eq(atoi(out), 3, "metrics.jsonl has %s lines: the old run's are kept", out);
    cr_expect_eq(run("grep -q '\"step\": 3,' run/state.json"), 0, "state.json not of step 3");
    cr_expect_eq(run("grep -qx 'train.steps: 3' run/config.yaml"), 0,
                 "config.yaml is the old run's");
    cr_expect_eq(run("ls run | grep -c events.out.tfevents"), 0);
    cr_expect_eq(atoi(out), 1, "%s event files", out);
    /* the new run is a run: --resume continues it (nothing left to do) */
    cr_expect_eq(run(TRAIN "--resume run --set train.steps=3"), 0, "%s", out);
    snap_free(&old);
}

Test(inputs, a_fifo_or_device_is_refused_at_once_naming_its_key) {
    cr_assert_eq(run("mkfifo fifo && mkdir fifodir && mkfifo fifodir/model.safetensors"), 0);
    cr_assert_eq(run(TRAIN "--out run"), 0, "%s", out);
    cr_assert_eq(run("cp -r run statefifo && rm statefifo/state.json && mkfifo "
                     "statefifo/state.json"),
                 0);
    write_set("train", 30, 1, 0);
    write_text("empty.yaml", "device: cpu\n");
    char vit[1024];
    snprintf(vit, sizeof vit,
             BF_BIN_DIR "/bfworker train empty.yaml --set pipeline=vit --set device=cpu "
                        "--set model.patch=4 --set model.layers=1 --set model.d_model=16 "
                        "--set model.heads=2 --set train.steps=2 --set train.batch=8 "
                        "--set data.train_images=%s/train-images --set "
                        "data.train_labels=%s/train-labels",
             dir, dir);
    static const struct {
        const char *cmd, *key, *kind;
    } cases[] = {
        {TRAIN "--out r1 --set data.train=fifo", "data.train: ", "is a FIFO"},
        {TRAIN "--out r2 --set data.val=fifo", "data.val: ", "is a FIFO"},
        {TRAIN "--out r3 --set data.test=fifo", "data.test: ", "is a FIFO"},
        {TRAIN "--out r4 --set data.train=/dev/zero", "data.train: /dev/zero",
         "is a character device"},
        {TRAIN "--out r5 --set init.from=fifo", "init.from fifo is a FIFO",
         "expected a run folder"},
        {TRAIN "--out r6 --set init.from=fifodir",
         "init.from fifodir: ", "model.safetensors: cannot open: is a FIFO"},
        {BF_BIN_DIR "/bfworker train " GOLDEN "/lm_dense.yaml --quiet --out r7 --set "
                    "data.path=fifo",
         "data.path: ", "is a FIFO"},
        {BF_BIN_DIR "/bfworker profile fifo", "bfworker profile: fifo", "is a FIFO"},
        {BF_BIN_DIR "/bfworker eval fifo", "bfworker eval: fifo", "is a FIFO"},
        {BF_BIN_DIR "/bfworker generate fifo --prompt x", "bfworker generate: fifo", "is a FIFO"},
        {BF_BIN_DIR "/bfworker eval statefifo", "statefifo/state.json", "is a FIFO"},
        {BF_BIN_DIR "/bfworker eval fifodir/model.safetensors", "fifodir/model.safetensors",
         "is a FIFO"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        double t0 = it_now_s();
        int rc = run("%s", cases[k].cmd);
        cr_expect(rc == 1 || rc == 64, "%s: status %d (137: it blocked)\n%s", cases[k].cmd, rc,
                  out);
        cr_expect(strstr(out, cases[k].key) && strstr(out, cases[k].kind),
                  "%s: want '%s' and '%s' in:\n%s", cases[k].cmd, cases[k].key, cases[k].kind, out);
        cr_expect_lt(it_now_s() - t0, 30, "%s took %.0f s", cases[k].cmd, it_now_s() - t0);
    }
    /* vit: each IDX key */
    static const char *const idx_keys[] = {"data.train_images", "data.train_labels",
                                           "data.test_images", "data.test_labels"};
    for (size_t k = 0; k < 4; k++) {
        int rc = run("%s --out v%zu --set %s=fifo%s", vit, k, idx_keys[k],
                     k >= 2 ? (k == 2 ? " --set data.test_labels=train-labels"
                                      : " --set data.test_images=train-images")
                            : "");
        char want[128];
        snprintf(want, sizeof want, "%s: fifo is a FIFO", idx_keys[k]);
        cr_expect(rc == 1 && strstr(out, want), "%s: status %d, want '%s':\n%s", idx_keys[k], rc,
                  want, out);
    }
}

/* An IDX labels file NAME-labels of the given labels (images from it_idx). */
static void write_labels(const char *name, const int *labels, int n) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s-labels", dir, name);
    FILE *f = fopen(p, "wb");
    cr_assert_not_null(f);
    unsigned char m[4] = {0, 0, 8, 1};
    fwrite(m, 1, 4, f);
    be32(f, (unsigned)n);
    for (int i = 0; i < n; i++) fputc(labels[i], f);
    fclose(f);
}

/* bfworker train of a tiny ViT on NAME-images / NAME-labels in dir, with extra args */
static int train_vit(const char *name, const char *extra) {
    write_text("vit.yaml", "pipeline: vit\ndevice: cpu\n"
                           "model: {patch: 4, layers: 1, d_model: 16, heads: 2}\n"
                           "train: {steps: 4, batch: 8, lr: 3.0e-3, warmup: 1, eval_every: 0, "
                           "log_every: 2, checkpoint_every: 0}\n");
    return run(BF_BIN_DIR "/bfworker train vit.yaml --set data.train_images=%s/%s-images --set "
                          "data.train_labels=%s/%s-labels --set data.val_fraction=0.2 %s",
               dir, name, dir, name, extra);
}

Test(inputs, a_run_that_fails_before_its_first_point_leaves_no_run) {
    /* an init.from that is not there: no folder at all */
    cr_expect_eq(run(TRAIN "--out r --set init.from=missing"), 1, "%s", out);
    cr_expect_neq(run("test -e r/metrics.jsonl"), 0, "a failed run left metrics.jsonl");
    cr_expect_eq(run(TRAIN "--out r"), 0, "the next run is refused:\n%s", out);
    /* an empty metrics.jsonl (an older bf left one) without a checkpoint is no run */
    cr_assert_eq(run("mkdir old && touch old/metrics.jsonl"), 0);
    cr_expect_eq(run(TRAIN "--out old"), 0, "an empty run counted:\n%s", out);
    /* s2s: a stage whose parents are not done fails, and leaves nothing that
     * refuses the next run into the folder */
    write_s2s("retention: 0.7, steps: 3, tolerance: 0.5");
    int rc = run(BF_BIN_DIR "/bfworker train s2s.yaml --quiet --out s --stage distill");
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "needs stage"), "%s", out);
    cr_expect_neq(run("test -e s/metrics.jsonl"), 0, "a failed stage left metrics.jsonl");
    cr_expect_neq(run("ls s | grep -q events.out"), 0, "a failed stage left an event file");
    rc = run(BF_BIN_DIR "/bfworker train s2s.yaml --quiet --out s --stage teacher");
    cr_expect_eq(rc, 0, "the next run into the folder is refused:\n%s", out);
    /* a vit run that fails in its setup: no folder */
    int one[8] = {5, 5, 5, 5, 5, 5, 5, 5};
    it_idx_write(dir, "same", 8, 3, 0);
    write_labels("same", one, 8);
    cr_expect_eq(train_vit("same", "--quiet --out v"), 1, "%s", out);
    cr_expect_neq(run("test -e v"), 0, "a run refused for its data left its folder");
}

Test(inputs, training_needs_two_distinct_labels) {
    /* TSV: labels are names; one name is one class, whatever it is */
    static const char *const tsv_one[] = {"200", "3", "pos"};
    for (size_t k = 0; k < 3; k++) {
        char text[1024] = "", name[64];
        for (int i = 0; i < 12; i++)
            snprintf(text + strlen(text), sizeof text - strlen(text), "%s\tline number %d\n",
                     tsv_one[k], i);
        snprintf(name, sizeof name, "one%zu.tsv", k);
        write_text(name, text);
        int rc = run(TRAIN "--out t%zu --set data.train=%s", k, name);
        char want[256];
        snprintf(want, sizeof want,
                 "%s/%s: all 12 training examples have the label '%s' (1 distinct label)", dir,
                 name, tsv_one[k]);
        cr_expect(rc == 1 && strstr(out, want), "status %d, want '%s':\n%s", rc, want, out);
    }
    write_text("two.tsv", "3\ta\n200\tb\n3\tc\n200\td\n3\te\n200\tf\n");
    cr_expect_eq(run(TRAIN "--out t9 --set data.train=two.tsv --set data.val=two.tsv"), 0, "%s",
                 out);
    /* IDX: labels are numbers; 200 everywhere is one class, not 201 */
    static const int idx_one[] = {200, 3, 0};
    for (size_t k = 0; k < 3; k++) {
        int l[12];
        for (int i = 0; i < 12; i++) l[i] = idx_one[k];
        char name[32], want[256];
        snprintf(name, sizeof name, "one%zu", k);
        it_idx_write(dir, name, 12, 1, 0);
        write_labels(name, l, 12);
        int rc = train_vit(name, "--quiet --out vrun");
        snprintf(want, sizeof want,
                 "%s/%s-labels: 12 training images with 1 distinct label (every label is %d)", dir,
                 name, idx_one[k]);
        cr_expect(rc == 1 && strstr(out, want), "status %d, want '%s':\n%s", rc, want, out);
    }
    int two[12];
    for (int i = 0; i < 12; i++) two[i] = i % 2 ? 200 : 3;
    it_idx_write(dir, "two", 12, 1, 0);
    write_labels("two", two, 12);
    cr_expect_eq(train_vit("two", "--quiet --out vtwo"), 0, "%s", out);
    /* singular and plural: one image */
    int single[1] = {1};
    it_idx_write(dir, "single", 1, 1, 0);
    write_labels("single", single, 1);
    cr_expect_eq(train_vit("single", "--quiet --out vs"), 1, "%s", out);
    cr_expect(strstr(out, "1 training image with 1 distinct label") && !strstr(out, "(s)"), "%s",
              out);
}

/* Copies SRC's safetensors file to DST with element `at` of tensor `name`
 * set to v. */
static void poison(const char *src, const char *dst, const char *name, size_t at, float v) {
    char err[1024], ps[256], pd[256];
    snprintf(ps, sizeof ps, "%s/%s", dir, src);
    snprintf(pd, sizeof pd, "%s/%s", dir, dst);
    st_file f;
    cr_assert_eq(st_open(&f, ps, err, sizeof err), 0, "%s", err);
    st_entry *e = calloc((size_t)f.n, sizeof *e);
    int64_t(*shape)[ST_MAX_DIMS] = calloc((size_t)f.n, sizeof *shape);
    float **data = calloc((size_t)f.n, sizeof *data);
    int hit = 0;
    for (int i = 0; i < f.n; i++) {
        data[i] = malloc(f.t[i].numel * sizeof(float));
        cr_assert_eq(st_read_f32(&f, i, data[i], err, sizeof err), 0, "%s", err);
        for (int d = 0; d < f.t[i].ndim; d++) shape[i][d] = (int64_t)f.t[i].shape[d];
        if (strcmp(f.t[i].name, name) == 0) data[i][at] = v, hit = 1;
        e[i] = (st_entry){f.t[i].name, f.t[i].ndim, shape[i], data[i]};
    }
    cr_assert(hit, "no tensor %s", name);
    cr_assert_eq(st_write(pd, e, f.n, NULL, 0, err, sizeof err), 0, "%s", err);
    for (int i = 0; i < f.n; i++) free(data[i]);
    free(data), free(shape), free(e);
    st_close(&f);
}

/* Inverts the byte `from_end` bytes before the end of dir/name. */
static void flip_byte(const char *name, long from_end) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "r+b");
    cr_assert_not_null(f, "%s", p);
    cr_assert_eq(fseek(f, -from_end, SEEK_END), 0);
    int c = fgetc(f);
    cr_assert_eq(fseek(f, -from_end, SEEK_END), 0);
    fputc(c ^ 0xff, f);
    fclose(f);
}

Test(inputs, messages_say_what_is_wrong) {
    cr_assert_eq(run(TRAIN "--out run"), 0, "%s", out);
    /* NaN / Inf weights through init.from: the tensor is named, no lr advice */
    poison("run/model.safetensors", "nan.safetensors", "blocks.1.mlp.fc.weight", 7, NAN);
    poison("run/model.safetensors", "inf.safetensors", "ln_f.bias", 0, INFINITY);
    static const char *const which[][2] = {{"nan", "blocks.1.mlp.fc.weight"}, {"inf", "ln_f.bias"}};
    for (int k = 0; k < 2; k++) {
        int rc = run(TRAIN "--out n%d --set init.from=%s.safetensors", k, which[k][0]);
        char want[256];
        snprintf(want, sizeof want, "tensor \"%s\" holds 1 NaN/Inf value", which[k][1]);
        cr_expect(rc == 1 && strstr(out, want) && !strstr(out, "train.lr"),
                  "status %d, want '%s':\n%s", rc, want, out);
    }
    /* the key is said once */
    cr_expect_eq(run(BF_BIN_DIR "/bfworker train " GOLDEN "/budget_off.yaml --set "
                                "data.train=glosses_train.tsv --set data.val=glosses_val.tsv "
                                "--set train.steps=1 --out i1 --set init.from=run"),
                 0, "%s", out);
    cr_expect(strstr(out, "init.from run/model.safetensors: 30 of 30") &&
                  !strstr(out, "init.from: init.from"),
              "%s", out);
    cr_expect_eq(run(TRAIN "--out i2 --set init.from=missing"), 1);
    cr_expect(!strstr(out, "init.from: init.from") && !strstr(out, "init.from init.from"), "%s",
              out);

    /* a gzip whose CRC is wrong says so; one cut short says truncated */
    it_idx_write(dir, "gz", 30, 1, 1);
    cr_assert_eq(run("cp gz-images.gz crc-images.gz && cp gz-labels crc-labels && "
                     "cp gz-labels cut-labels && "
                     "head -c $(($(stat -c %%s gz-images.gz) - 40)) gz-images.gz > cut-images.gz"),
                 0, "%s", out);
    flip_byte("crc-images.gz", 8); /* the first byte of the gzip trailer's CRC-32 */
    write_text("vit.yaml", "pipeline: vit\ndevice: cpu\n"
                           "model: {patch: 4, layers: 1, d_model: 16, heads: 2}\n"
                           "train: {steps: 2, batch: 8, eval_every: 0, log_every: 1}\n");
    int rc = run(BF_BIN_DIR "/bfworker train vit.yaml --quiet --out g1 --set "
                            "data.train_images=crc-images.gz --set data.train_labels=crc-labels");
    cr_expect(rc == 1 && strstr(out, "CRC") && !strstr(out, "truncated"), "%d:\n%s", rc, out);
    rc = run(BF_BIN_DIR "/bfworker train vit.yaml --quiet --out g2 --set "
                        "data.train_images=cut-images.gz --set data.train_labels=cut-labels");
    cr_expect(rc == 1 && strstr(out, "truncated") && !strstr(out, "CRC"), "%d:\n%s", rc, out);

    /* the ViT's memory advice names its knobs, not model.seq_len */
    rc = run(BF_BIN_DIR "/bfworker train vit.yaml --out big --set data.train_images=gz-images.gz "
                        "--set data.train_labels=gz-labels --set model.d_model=8192 --set "
                        "model.layers=24 --set model.heads=64");
    cr_expect(rc == 1 && strstr(out, "does not fit") && strstr(out, "model.patch") &&
                  strstr(out, "train.batch") && !strstr(out, "model.seq_len"),
              "%d:\n%s", rc, out);

    /* progress lines: the ViT's own fields */
    rc = run(BF_BIN_DIR "/bfworker train vit.yaml --out p1 --set data.train_images=gz-images.gz "
                        "--set data.train_labels=gz-labels");
    cr_expect_eq(rc, 0, "%s", out);
    const char *step = strstr(out, "step ");
    cr_assert_not_null(step, "%s", out);
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)strcspn(step, "\n"), step);
    cr_expect(strstr(line, "images/s") && !strstr(line, "tok/s") && !strstr(line, "heads") &&
                  !strstr(line, "retention"),
              "%s", line);
    cr_expect(strstr(out, "patch 4, A-ViT off") && !strstr(out, "budget off"), "%s", out);
    rc = run(BF_BIN_DIR
             "/bfworker train vit.yaml --out p2 --set data.train_images=gz-images.gz "
             "--set data.train_labels=gz-labels --set avit.enabled=true --set model.layers=2 --set "
             "avit.tolerance=1"); /* its retention is reported, not judged */
    step = strstr(out, "step ");
    cr_assert_not_null(step, "%s", out);
    snprintf(line, sizeof line, "%.*s", (int)strcspn(step, "\n"), step);
    cr_expect(strstr(line, "images/s") && strstr(line, "| retention "), "%s", line);
    /* budgetformer keeps its own */
    cr_expect_eq(run(BF_BIN_DIR "/bfworker train " GOLDEN "/budget_off.yaml --set "
                                "data.train=glosses_train.tsv --set data.val=glosses_val.tsv "
                                "--set train.steps=1 --out b1"),
                 0);
    cr_expect(strstr(out, "tok/s") && strstr(out, "heads 1.000") && strstr(out, "budget off"), "%s",
              out);

    /* profile on an s2s run root names the stage folders that exist (avit
     * first); a model.safetensors named directly is its run */
    cr_assert_eq(run("mkdir -p root/stages && cp -r p2 root/stages/avit-0123 && "
                     "cp -r p1 root/stages/teacher-4567 && mkdir root/stages/profile-89ab"),
                 0);
    rc = run(BF_BIN_DIR "/bfworker profile root");
    char want[512];
    snprintf(want, sizeof want,
             "give one of them: root/stages/avit-0123, root/stages/teacher-4567");
    cr_expect(rc == 1 && strstr(out, want) && !strstr(out, "checkpoint.bin"), "%d:\n%s", rc, out);
    rc = run(BF_BIN_DIR "/bfworker profile p2/model.safetensors --samples 4");
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "sparsest first:"), "%s", out);
    rc = run("sh -c 'cd run && " BF_BIN_DIR "/bfworker eval model.safetensors'");
    cr_expect(rc == 0 && strstr(out, "accuracy"), "%d:\n%s", rc, out);
    rc = run(BF_BIN_DIR "/bfworker eval nan.safetensors");
    cr_expect(rc == 1 && strstr(out, "give the run folder") && !strstr(out, "bad magic"), "%d:\n%s",
              rc, out);
}

/* init.from of tensors PyTorch wrote in BF16, F16 and F64: loaded converted
 * (equal to torch's own .float() of them), with a note. */
Test(inputs, init_from_loads_bf16_f16_f64_from_pytorch) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "PYTHONPATH='%s/pydeps' /usr/bin/python3 -c 'import torch, safetensors.torch' "
             "2>/dev/null",
             BF_BIN_DIR);
    cr_assert_eq(system(cmd), 0,
                 "/usr/bin/python3 cannot import torch and safetensors (from %s/pydeps: "
                 "run sh scripts/setup.sh)",
                 BF_BIN_DIR);
    cr_assert_eq(run(TRAIN "--out run"), 0, "%s", out);
    static const char *const types[][2] = {
        {"bf16", "bfloat16"}, {"f16", "float16"}, {"f64", "float64"}};
    for (int k = 0; k < 3; k++) {
        int rc = run("env PYTHONPATH='%s/pydeps' /usr/bin/python3 -c \"import torch, "
                     "safetensors.torch as st; t = st.load_file('run/model.safetensors'); "
                     "st.save_file({k: v.to(torch.%s) for k, v in t.items()}, '%s.safetensors')\"",
                     BF_BIN_DIR, types[k][1], types[k][0]);
        cr_assert_eq(rc, 0, "%s", out);
        /* one step at lr 1e-9 moves no weight by more than 1e-8 */
        rc = run(BF_BIN_DIR "/bfworker train " GOLDEN "/budget_off.yaml --set "
                            "data.train=glosses_train.tsv --set data.val=glosses_val.tsv --set "
                            "train.steps=1 --set train.lr=1e-9 --out %s --set "
                            "init.from=%s.safetensors",
                 types[k][0], types[k][0]);
        cr_assert_eq(rc, 0, "%s", out);
        char note[128];
        snprintf(note, sizeof note, "init.from: note: 30 tensors converted from %s to F32",
                 k == 0   ? "BF16"
                 : k == 1 ? "F16"
                          : "F64");
        cr_expect(strstr(out, note), "want '%s':\n%s", note, out);
        rc = run("env PYTHONPATH='%s/pydeps' /usr/bin/python3 -c \"import torch, "
                 "safetensors.torch as st; a = st.load_file('%s.safetensors'); "
                 "b = st.load_file('%s/model.safetensors'); "
                 "print(max((a[k].float() - b[k]).abs().max().item() for k in a))\"",
                 BF_BIN_DIR, types[k][0], types[k][0]);
        cr_assert_eq(rc, 0, "%s", out);
        cr_expect_lt(atof(out), 1e-8, "%s: loaded weights differ by %s", types[k][0], out);
    }
}

/* --quiet silences progress, not the result: a run with no test split
 * still ends with its last validation ("result STEP | val/loss ..."). */
Test(inputs, quiet_still_prints_the_result) {
    int rc = run(TRAIN "--out quiet_run");
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "result      4 | val/loss "), "no result line under --quiet:\n%s", out);
    cr_assert_null(strstr(out, "step "), "--quiet printed progress:\n%s", out);
}

/* s2s's A-ViT stage that misses its retention advises training it longer
 * by its own length, avit.steps (it used to say train.steps, the
 * teacher's). */
Test(inputs, s2s_avit_stage_advice_names_avit_steps) {
    write_s2s("retention: 0.55, steps: 2, tolerance: 0.01");
    int rc = run(BF_BIN_DIR "/bfworker train s2s.yaml --quiet --out s");
    cr_assert_neq(rc, 0, "2 steps reached retention 0.55 within 0.01:\n%s", out);
    cr_assert(strstr(out, "or train longer (avit.steps, this stage's length)"), "%s", out);
}
