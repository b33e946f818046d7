/* test_it_parity_torch — bf against an outside implementation: `bfworker
 * dump` writes one training step (weights, batch, budget noise, logits,
 * gradients, losses) of tiny configs over a copy of tests/data, and
 * tests/test_parity_torch.py, a PyTorch model written from docs/design.md#algorithms's
 * equations (Debian's python3-torch, safetensors from build/pydeps), loads
 * the weights by name and must reproduce the logits (1e-4), the losses and
 * every tensor's gradient (1e-3). Cases: the encoder baseline, the budget
 * gate in training mode with Gumbel noise (dense and Hadamard W_O), the
 * bilstm and bimamba mixers in an encoder layer, the causal LM (dense and
 * Hadamard), and over a tiny IDX image set (tests/it_idx.h) the ViT and the
 * ViT with A-ViT halting (its ponder and prior losses, retention and
 * per-layer halting sums too, and the inference forward with halted tokens
 * dropped). What S2S runs beyond these: BiMamba and BiLSTM at d_h 20 (BiMamba:
 * delta rank 2, a group of 40 channels = two 16-lane tiles and a partial
 * one) under masks with holes and an empty sample (dump --mask holes), and
 * in A-ViT ViTs under the halting masks, BiMamba over 145 tokens (more than
 * two scan chunks); the S2S authors' BiLSTM layout (bilstm_wide) unmasked
 * and with holes; their BiMamba (bimamba2, Mamba-2's SSD) unmasked, with
 * holes and over 145 tokens under the halting masks. A missing torch fails the test (CI installs
 * it). A gradient file with one element moved by 0.5% must then fail the check, as must an
 * inference logit moved so; the reference's six deliberate departures from the halting equations
 * must each fail against the A-ViT dump, and its departures in the mixers (masked tokens run, the
 * state's gradient cut at chunk boundaries, delta rank 1, the partial tile's state dropped) each
 * against the mixer dumps where they can show: the comparison is shown to be able to fail. S2S's
 * distill and finetune steps (`dump
 * --stage`): parity::s2s_distill_and_finetune_match_pytorch. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/it_idx.h" /* dir, write_set (the tiny IDX image set), run_cmd */
#include "tests/tmpdir.h"
#include "worker/io/safetensors.h"

/* Debian's python3-torch; BF_PYTHON names another (the GPU machine's, for
 * scripts/gpu_check.sh). BF_PARITY_DEVICE (e.g. cuda) makes every dump on
 * that device: the whole-model check of a backend against PyTorch. */
#define PYTHON (getenv("BF_PYTHON") ? getenv("BF_PYTHON") : "/usr/bin/python3")
#define SCRIPT BF_SOURCE_DIR "/tests/test_parity_torch.py"
#define TIMM_SCRIPT BF_SOURCE_DIR "/tests/test_timm_torch.py"

static void setup(void) {
    tmpdir_make(dir, sizeof dir, "/tmp/bf-parity-XXXXXX");
    tmpdir_copy_glosses(dir);
    write_set("train", 60, 1, 0);
    write_set("test", 30, 2, 0);
}
static void teardown(void) { tmpdir_remove(dir); }
TestSuite(parity, .init = setup, .fini = teardown, .timeout = 300);

/* Tiny shapes; seq_len 24 leaves padding in most glosses (key masks). s
 * starts at the middle of budget.range clamped to [0.02, 0.98], so the
 * ranges [0.99, 1] and [0, 0.01] put every sample 0.01 outside them at step
 * 0: the hinge and its gradient are exercised on both sides, far from the
 * kink where float32 rounding of s would dominate. The entropy weight is
 * raised so that its term weighs in the gradients. */
static const char *const COMMON =
    "device: cpu\n"
    "model: {layers: 2, d_model: 32, heads: 4, seq_len: 24, vocab: 300}\n"
    "train: {steps: 20, batch: 6, lr: 3.0e-3, seed: 11, eval_every: 0, checkpoint_every: 0}\n";

/* The ViT cases: 12 x 12 images of tests/it_idx.h in 4 x 4 patches (9 + 1
 * tokens), 4 layers, no augmentation (the reference sees the images as they
 * are). With A-ViT the gate centre -0.5 opens the gate at init so that the 54
 * patch tokens halt at layers 1, 2 and 3 (retention 0.75, between 1/L and 1:
 * the reference refuses a dump where no token halts mid-depth); retention
 * 0.6 puts the prior's centre at layer 1.37 and the ponder weight is raised so
 * that its term weighs in the gradients. */
static const char *const VIT_COMMON =
    "pipeline: vit\ndevice: cpu\ndata: {val_fraction: 0.1}\n"
    "model: {patch: 4, layers: 4, d_model: 32, heads: 4}\n"
    "aug: {crop_pad: 0, hflip: false}\n"
    "train: {steps: 20, batch: 6, lr: 3.0e-3, seed: 11, eval_every: 0, checkpoint_every: 0}\n";

/* A-ViT for the mixer cases: tokens halt mid-depth, so the mixers of the
 * deeper layers run under masks with holes. */
#define VIT_AVIT_MIXERS                                                                            \
    "avit: {enabled: true, gate_center: 0.5, retention: 0.6, ponder_weight: 0.01,\n"               \
    "       prior_weight: 0.1}\n"

typedef struct parity_case {
    const char *name, *yaml;
    const char *set; /* extra --set options (nullable) */
} parity_case;

static const parity_case CASES[] = {
    {"encoder_baseline", "pipeline: budgetformer\nattn: {out_proj: dense}\n"
                         "budget: {enabled: false}\n"},
    {"encoder_budget_dense",
     "pipeline: budgetformer\nattn: {out_proj: dense}\n"
     "budget: {enabled: true, range: [0.99, 1.0], lambda_budget: 1.0,\n"
     "         lambda_entropy: 0.5, noise: {schedule: linear, start: 1.0, end: 0.0},\n"
     "         temperature: {schedule: exp, start: 0.7, end: 0.1}}\n"},
    {"encoder_budget_hadamard",
     "pipeline: budgetformer\nattn: {out_proj: hadamard}\n"
     "budget: {enabled: true, range: [0.0, 0.01], lambda_budget: 1.0,\n"
     "         lambda_entropy: 0.5, noise: {schedule: linear, start: 0.5, end: 0.0}}\n"},
    {"encoder_bilstm",
     "pipeline: budgetformer\nattn: {out_proj: dense}\nbudget: {enabled: false}\n",
     "--set model.mixers=bilstm,attention"},
    {"encoder_bimamba",
     "pipeline: budgetformer\nattn: {out_proj: dense}\nbudget: {enabled: false}\n",
     "--set model.mixers=bimamba,attention"},
    {"lm_dense", "pipeline: lm\nattn: {out_proj: dense}\ndata: {val_fraction: 0.1}\n"},
    {"lm_hadamard", "pipeline: lm\nattn: {out_proj: hadamard}\ndata: {val_fraction: 0.1}\n"},
    {"vit", "", NULL},
    {"vit_avit", "avit: {enabled: true, gate_center: -0.5, retention: 0.6, ponder_weight: 0.01,\n"
                 "       prior_weight: 0.1}\n"},
    /* NVlabs' form of q: a halted token scores the gate of a zeroed row */
    {"vit_avit_nvlabs",
     "avit: {enabled: true, gate_center: -0.5, retention: 0.6, ponder_weight: 0.01,\n"
     "       prior_weight: 0.1, prior: nvlabs}\n"},
    /* what S2S runs beyond the cases above: d_h 20 (a group of 2 d_h = 40
     * channels is two 16-lane tiles and a partial one; delta rank
     * ceil(20/16) = 2), masks with holes and an empty sample (dump --mask
     * holes), and in a ViT of 1-pixel patches (145 tokens, more than two
     * scan chunks of 64) mixers under A-ViT's halting masks */
    {"encoder_bimamba_holes",
     "pipeline: budgetformer\nattn: {out_proj: dense}\nbudget: {enabled: false}\n",
     "--set model.mixers=bimamba,attention --set model.d_model=40 --set model.heads=2 "
     "--mask holes"},
    {"encoder_bilstm_holes",
     "pipeline: budgetformer\nattn: {out_proj: dense}\nbudget: {enabled: false}\n",
     "--set model.mixers=attention,bilstm --set model.d_model=40 --set model.heads=2 "
     "--mask holes"},
    /* the S2S authors' BiLSTM layout (d_h 20 per direction, per-head
     * pre-projection slices and head projection), unmasked and with holes */
    {"encoder_bilstm_wide",
     "pipeline: budgetformer\nattn: {out_proj: dense}\nbudget: {enabled: false}\n",
     "--set model.mixers=attention,bilstm_wide --set model.d_model=40 --set model.heads=2"},
    {"encoder_bilstm_wide_holes",
     "pipeline: budgetformer\nattn: {out_proj: dense}\nbudget: {enabled: false}\n",
     "--set model.mixers=bilstm_wide,attention --set model.d_model=40 --set model.heads=2 "
     "--mask holes"},
    /* the S2S authors' BiMamba (two Mamba-2 blocks, d_h 20, state 128),
     * unmasked and with holes; and in the A-ViT ViT of 145 tokens (three SSD
     * chunks: the backward passes the state's gradient between them) */
    {"encoder_bimamba2",
     "pipeline: budgetformer\nattn: {out_proj: dense}\nbudget: {enabled: false}\n",
     "--set model.mixers=attention,bimamba2 --set model.d_model=40 --set model.heads=2"},
    {"encoder_bimamba2_holes",
     "pipeline: budgetformer\nattn: {out_proj: dense}\nbudget: {enabled: false}\n",
     "--set model.mixers=bimamba2,attention --set model.d_model=40 --set model.heads=2 "
     "--mask holes"},
    {"vit_avit_bimamba2", VIT_AVIT_MIXERS,
     "--set model.patch=1 --set model.d_model=40 --set model.heads=2 "
     "--set model.mixers=bimamba2,attention,bimamba2,attention"},
    {"vit_avit_bimamba", VIT_AVIT_MIXERS,
     "--set model.patch=1 --set model.d_model=40 --set model.heads=2 "
     "--set model.mixers=bimamba,attention,bimamba,attention"},
    {"vit_avit_bilstm", VIT_AVIT_MIXERS,
     "--set model.patch=2 --set model.d_model=40 --set model.heads=2 "
     "--set model.mixers=attention,bilstm,bilstm,attention"},
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

static const char *log_text(const char *path) {
    static char buf[32768];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
    return buf;
}

/* Dumps case c into dir/NAME. */
static void dump_case(const parity_case *c) {
    char yaml[2048], name[128], cmd[4096];
    int lm = strncmp(c->name, "lm_", 3) == 0, vit = strncmp(c->name, "vit", 3) == 0;
    snprintf(yaml, sizeof yaml, "%s%s", vit ? VIT_COMMON : COMMON, c->yaml);
    snprintf(name, sizeof name, "%s.yaml", c->name);
    const char *cfg = tmpdir_write_file(dir, name, yaml, strlen(yaml));
    char data[1024];
    if (vit)
        snprintf(data, sizeof data,
                 "--set data.train_images=%s/train-images --set data.train_labels=%s/train-labels "
                 "--set data.test_images=%s/test-images --set data.test_labels=%s/test-labels",
                 dir, dir, dir, dir);
    else if (lm)
        snprintf(data, sizeof data, "--set data.path=%s/glosses_train.tsv", dir);
    else
        snprintf(data, sizeof data,
                 "--set data.train=%s/glosses_train.tsv --set data.val=%s/glosses_val.tsv", dir,
                 dir);
    const char *dev = getenv("BF_PARITY_DEVICE");
    char devset[64] = "";
    if (dev && dev[0]) {
        cr_assert(strspn(dev, "abcdefghijklmnopqrstuvwxyz") == strlen(dev),
                  "BF_PARITY_DEVICE '%s': a device name (cpu, cuda)", dev);
        snprintf(devset, sizeof devset, "--set device=%s", dev);
    }
    snprintf(cmd, sizeof cmd, "%s/bfworker dump '%s' %s %s %s --out '%s/%s' --quiet 2>&1",
             BF_BIN_DIR, cfg, data, c->set ? c->set : "", devset, dir, c->name);
    static char out[16384];
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s\n%s", cmd, out);
}

/* Runs the PyTorch script with args; its exit status, output in dir/py.log. */
static int python_script(const char *script, const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s -c 'import torch' 2>&1", PYTHON);
    cr_assert_eq(system(cmd), 0,
                 "%s cannot import torch: install Debian's python3-torch (sh scripts/setup.sh "
                 "does); this test does not skip without it",
                 PYTHON);
    /* build/pydeps (safetensors) goes after Debian's packages: the script
     * appends BF_PYDEPS to sys.path, so torch keeps the numpy it was built for */
    snprintf(cmd, sizeof cmd,
             "BF_PYDEPS='%s/pydeps' OMP_NUM_THREADS=1 %s '%s' %s >'%s/py.log' 2>&1", BF_BIN_DIR,
             PYTHON, script, args, dir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The PyTorch check over the dump folders in args. */
static int python(const char *args) { return python_script(SCRIPT, args); }

/* Rewrites dir/NAME/FILE with tensor `tensor`'s largest element scaled by
 * factor (the "wrong value" the check must catch). */
static void perturb_tensor(const char *name, const char *file, const char *tensor, float factor) {
    char path[512], err[1024];
    snprintf(path, sizeof path, "%s/%s/%s", dir, name, file);
    st_file f;
    cr_assert_eq(st_open(&f, path, err, sizeof err), 0, "%s", err);
    st_entry *e = calloc((size_t)f.n, sizeof *e);
    float **data = calloc((size_t)f.n, sizeof *data);
    int64_t(*shape)[ST_MAX_DIMS] = calloc((size_t)f.n, sizeof *shape);
    cr_assert(e && data && shape);
    int hit = 0;
    for (int i = 0; i < f.n; i++) {
        data[i] = malloc(f.t[i].numel * sizeof(float));
        cr_assert_eq(st_read_f32(&f, i, data[i], err, sizeof err), 0, "%s", err);
        for (int k = 0; k < f.t[i].ndim; k++) shape[i][k] = (int64_t)f.t[i].shape[k];
        e[i] = (st_entry){f.t[i].name, f.t[i].ndim, shape[i], data[i]};
        if (strcmp(f.t[i].name, tensor) == 0) {
            size_t best = 0;
            for (size_t k = 1; k < f.t[i].numel; k++)
                if (fabsf(data[i][k]) > fabsf(data[i][best])) best = k;
            data[i][best] *= factor;
            hit = 1;
        }
    }
    cr_assert(hit, "no tensor %s in %s", tensor, path);
    cr_assert_eq(st_write(path, e, f.n, NULL, 0, err, sizeof err), 0, "%s", err);
    for (int i = 0; i < f.n; i++) free(data[i]);
    free(e), free(data), free(shape);
    st_close(&f);
}

/* ... of a gradient */
static void perturb_gradient(const char *name, const char *tensor, float factor) {
    perturb_tensor(name, "grads.safetensors", tensor, factor);
}

/* The script's line for case NAME ("ok NAME: ..."), "" when it has none. */
static const char *case_line(const char *out, const char *name) {
    static char line[4096];
    char key[160];
    snprintf(key, sizeof key, "ok %s: ", name);
    const char *p = strstr(out, key);
    size_t n = p ? strcspn(p, "\n") : 0;
    if (n >= sizeof line) n = sizeof line - 1;
    memcpy(line, p ? p : "", n);
    line[n] = '\0';
    return line;
}

Test(parity, bf_matches_pytorch) {
    char args[2048] = "";
    size_t n = 0;
    for (size_t c = 0; c < N_CASES; c++) {
        dump_case(&CASES[c]);
        n += (size_t)snprintf(args + n, sizeof args - n, "'%s/%s' ", dir, CASES[c].name);
    }
    int rc = python(args);
    const char *out = log_text(tmpdir_path(dir, "py.log"));
    cr_log_info("%s", out);
    cr_assert_eq(rc, 0, "PyTorch parity failed:\n%s", out);
    cr_expect(strstr(out, "19 of 19 dumps match bf"), "%s", out);
    cr_expect(strstr(out, "ok vit: vit, 56 tensors"), "%s", out);
    /* the halting exercised (the reference refuses a dump where no token
     * halts mid-depth) and every deliberate departure of the reference from
     * it caught */
    cr_expect(strstr(out, "ok vit_avit: vit avit, 56 tensors") &&
                  strstr(out, "halting depths [0, ") && strstr(out, "mutants caught 6 of 6"),
              "%s", out);
    cr_expect(strstr(case_line(out, "vit_avit_nvlabs"), "halting depths [0, "), "%s", out);
    cr_expect(strstr(out, "ok encoder_bilstm: encoder dense bilstm"), "%s", out);
    /* bf's inference path, halted tokens dropped, gives the reference's logits */
    cr_expect(strstr(case_line(out, "vit_avit"), "inference with dropping: logits within"), "%s",
              out);
    /* the masks no data file gives (an empty sample, holes), and each of the
     * mixer reference's deliberate departures that can show on a dump caught:
     * skipping masked tokens, the delta rank 2 and the partial tile (d_h 20) */
    const char *l = case_line(out, "encoder_bimamba_holes");
    cr_expect(strstr(l, "mask: 1 samples empty, 5 with holes") &&
                  strstr(l, "mixer mutants caught 3 of 3: mask_carry") && strstr(l, "delta_rank") &&
                  strstr(l, "partial_tile"),
              "%s", out);
    l = case_line(out, "encoder_bilstm_holes");
    cr_expect(strstr(l, "mask: 1 samples empty, 5 with holes") &&
                  strstr(l, "mixer mutants caught 1 of 1: mask_carry"),
              "%s", out);
    /* under A-ViT's halting masks, with 145-token scans (three chunks: the
     * backward restarts from saved chunk states) and tokens halting mid-depth */
    cr_expect(strstr(out, "ok encoder_bilstm_wide: encoder dense bilstm_wide"), "%s", out);
    l = case_line(out, "encoder_bilstm_wide_holes");
    cr_expect(strstr(l, "mask: 1 samples empty, 5 with holes") &&
                  strstr(l, "mixer mutants caught 1 of 1: mask_carry"),
              "%s", out);
    cr_expect(strstr(out, "ok encoder_bimamba2: encoder dense bimamba2"), "%s", out);
    l = case_line(out, "encoder_bimamba2_holes");
    cr_expect(strstr(l, "mask: 1 samples empty, 5 with holes") &&
                  strstr(l, "mixer mutants caught 1 of 1: mask_carry"),
              "%s", out);
    l = case_line(out, "vit_avit_bimamba2");
    cr_expect(strstr(l, "vit avit bimamba2") && strstr(l, "halting depths [0, ") &&
                  strstr(l, "mixer mutants caught 2 of 2: mask_carry") && strstr(l, "chunk_grad"),
              "%s", out);
    l = case_line(out, "vit_avit_bimamba");
    cr_expect(strstr(l, "vit avit bimamba") && strstr(l, "halting depths [0, ") &&
                  strstr(l, "mixer mutants caught 4 of 4: mask_carry") && strstr(l, "chunk_grad") &&
                  strstr(l, "longest scan 145 tokens") && strstr(l, "inference with dropping"),
              "%s", out);
    l = case_line(out, "vit_avit_bilstm");
    cr_expect(strstr(l, "vit avit bilstm") && strstr(l, "halting depths [0, ") &&
                  strstr(l, "mixer mutants caught 1 of 1: mask_carry") &&
                  strstr(l, "inference with dropping"),
              "%s", out);
    cr_expect(strstr(out, "ok encoder_bimamba: encoder dense bimamba"), "%s", out);
    /* the hinge exercised on both sides (every sample, both layers) */
    cr_expect(strstr(out, "s outside the range 12+0 of 12") &&
                  strstr(out, "s outside the range 0+12 of 12"),
              "%s", out);

    /* the check can fail: the largest gradient of the head scorer (reached only
     * through the gate's straight-through path and the entropy term) 0.5% off */
    perturb_gradient(CASES[1].name, "blocks.1.attn.scorer.weight", 1.005f);
    snprintf(args, sizeof args, "'%s/%s'", dir, CASES[1].name);
    cr_expect_eq(python(args), 1, "%s", log_text(tmpdir_path(dir, "py.log")));
    out = log_text(tmpdir_path(dir, "py.log"));
    cr_expect(strstr(out, "FAIL") && strstr(out, "gradient of blocks.1.attn.scorer.weight"), "%s",
              out);
    /* and in the mixer: the backward direction's decay rates, 0.5% off */
    perturb_gradient("encoder_bimamba", "blocks.0.mamba.bwd.A_log", 1.005f);
    snprintf(args, sizeof args, "'%s/encoder_bimamba'", dir);
    cr_expect_eq(python(args), 1, "%s", log_text(tmpdir_path(dir, "py.log")));
    out = log_text(tmpdir_path(dir, "py.log"));
    cr_expect(strstr(out, "FAIL") && strstr(out, "gradient of blocks.0.mamba.bwd.A_log"), "%s",
              out);
    /* and in the A-ViT: the class token's gradient (it carries the halting
     * losses' share), 0.5% off */
    perturb_gradient("vit_avit", "cls_token", 1.005f);
    snprintf(args, sizeof args, "'%s/vit_avit'", dir);
    cr_expect_eq(python(args), 1, "%s", log_text(tmpdir_path(dir, "py.log")));
    out = log_text(tmpdir_path(dir, "py.log"));
    cr_expect(strstr(out, "FAIL") && strstr(out, "gradient of cls_token"), "%s", out);
    /* and the inference path's largest logit (halted tokens dropped), 0.5% off
     * (the training step's files untouched) */
    perturb_tensor("vit_avit_bilstm", "infer.safetensors", "logits", 1.005f);
    snprintf(args, sizeof args, "'%s/vit_avit_bilstm'", dir);
    cr_expect_eq(python(args), 1, "%s", log_text(tmpdir_path(dir, "py.log")));
    out = log_text(tmpdir_path(dir, "py.log"));
    cr_expect(strstr(out, "FAIL") && strstr(out, "inference logits (halted tokens dropped)"), "%s",
              out);
}

/* S2S's two training stages against PyTorch (tests/test_parity_torch.py,
 * distill_reference and finetune_note): an A-ViT teacher trained by bf (60
 * steps of VIT_COMMON with halting, one thread: the same weights on every
 * machine) is the init.from of students with BiMamba or BiLSTM in two
 * layers; `bfworker dump --stage distill` takes stage 1's step (the teacher's
 * masks, tap MSE per replaced layer, the halting alignment per layer in its
 * keep and its mean_h form, the CE smoothed by distill.label_smoothing (0.1,
 * 0.3), their total, every student gradient) and `--stage finetune` stage
 * 2's (the student halting on its own: CE smoothed by 0.1 or 0 + ponder +
 * prior). The reference recomputes each term from
 * docs/design.md#distillation-loss's formulas; its deliberate departures (the other alignment
 * form, another smoothing, an unmasked MSE; another smoothing in stage 2) must each
 * fail, and so must a student gradient moved by 0.5%. The gate centre -0.5
 * makes the teacher halt tokens at layers 1 and 2 (its scores at least 2e-3
 * from 1 - eps), -0.7 the finetuned students (at least 1e-3). */
#define S2S_TEACHER_AVIT                                                                           \
    "avit: {enabled: true, gate_center: -0.5, retention: 0.6, ponder_weight: 0.01,\n"              \
    "       prior_weight: 0.1, tolerance: 1.0}\n"

Test(parity, s2s_distill_and_finetune_match_pytorch) {
    static const char *const students[][3] = {
        /* name, --stage and model.mixers, extra --set */
        {"vit_distill_bimamba_keep",
         "distill --set model.mixers=bimamba,attention,bimamba,attention", ""},
        {"vit_distill_bimamba_mean_h",
         "distill --set model.mixers=bimamba,attention,bimamba,attention",
         "--set distill.halt_align=mean_h"},
        {"vit_distill_bilstm_keep", "distill --set model.mixers=attention,bilstm,bilstm,attention",
         "--set distill.lambda_halt=0.5"},
        {"vit_distill_bilstm_mean_h",
         "distill --set model.mixers=attention,bilstm,bilstm,attention",
         "--set distill.halt_align=mean_h --set distill.lambda_mse=2 --set "
         "distill.label_smoothing=0.3"},
        {"vit_finetune_bimamba", "finetune --set model.mixers=bimamba,attention,bimamba,attention",
         "--set avit.gate_center=-0.7"},
        {"vit_finetune_bilstm", "finetune --set model.mixers=attention,bilstm,bilstm,attention",
         "--set avit.gate_center=-0.7 --set distill.label_smoothing=0"},
    };
    size_t n_students = sizeof students / sizeof students[0];
    /* the teacher: bf's A-ViT training, the checkpoint a run folder */
    char yaml[2048], cmd[4096], teacher[256];
    static char out[16384];
    snprintf(yaml, sizeof yaml, "%s%s", VIT_COMMON, S2S_TEACHER_AVIT);
    const char *cfg = tmpdir_write_file(dir, "teacher.yaml", yaml, strlen(yaml));
    snprintf(teacher, sizeof teacher, "%s/teacher", dir);
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 %s/bfworker train '%s' --set data.train_images=%s/train-images "
             "--set data.train_labels=%s/train-labels --set data.test_images=%s/test-images "
             "--set data.test_labels=%s/test-labels --set train.steps=60 --out '%s' --quiet 2>&1",
             BF_BIN_DIR, cfg, dir, dir, dir, dir, teacher);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s\n%s", cmd, out);
    char args[2048] = "", set[1024];
    size_t n = 0;
    for (size_t i = 0; i < n_students; i++) {
        snprintf(set, sizeof set, "--stage %s --set init.from='%s' %s", students[i][1], teacher,
                 students[i][2]);
        const parity_case c = {students[i][0], S2S_TEACHER_AVIT, set};
        dump_case(&c);
        n += (size_t)snprintf(args + n, sizeof args - n, "'%s/%s' ", dir, students[i][0]);
    }
    /* distill.teacher dense's stage 1: a dense teacher (60 steps of
     * VIT_COMMON, no halting), the student with no masks and no halting
     * term (dump.json's teacher_kind; the reference's alignment is 0) */
    char dense[256];
    snprintf(dense, sizeof dense, "%s/dense_teacher", dir);
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 %s/bfworker train '%s' --set data.train_images=%s/train-images "
             "--set data.train_labels=%s/train-labels --set data.test_images=%s/test-images "
             "--set data.test_labels=%s/test-labels --set train.steps=60 --out '%s' --quiet 2>&1",
             BF_BIN_DIR, tmpdir_write_file(dir, "dense.yaml", VIT_COMMON, strlen(VIT_COMMON)), dir,
             dir, dir, dir, dense);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s\n%s", cmd, out);
    snprintf(set, sizeof set,
             "--stage distill --set model.mixers=bimamba,attention,bimamba,attention --set "
             "init.from='%s'",
             dense);
    const parity_case dc = {"vit_distill_dense_bimamba", "", set};
    dump_case(&dc);
    n += (size_t)snprintf(args + n, sizeof args - n, "'%s/%s' ", dir, dc.name);
    int rc = python(args);
    const char *log = log_text(tmpdir_path(dir, "py.log"));
    cr_log_info("%s", log);
    cr_assert_eq(rc, 0, "PyTorch parity of the S2S stages failed:\n%s", log);
    cr_expect(strstr(log, "7 of 7 dumps match bf"), "%s", log);
    const char *dl = case_line(log, "vit_distill_dense_bimamba");
    cr_expect(strstr(dl, "s2s distill bimamba, dense teacher, replaced layers [0, 2]") &&
                  strstr(dl, "CE smoothed by 0.1 ") &&
                  strstr(dl, "distill mutants caught 1 of 1: smoothing"),
              "%s", log);
    static const char *const want[] = {
        "s2s distill bimamba, A-ViT teacher, replaced layers [0, 2], halt_align keep",
        "s2s distill bimamba, A-ViT teacher, replaced layers [0, 2], halt_align mean_h",
        "s2s distill bilstm, A-ViT teacher, replaced layers [1, 2], halt_align keep",
        "s2s distill bilstm, A-ViT teacher, replaced layers [1, 2], halt_align mean_h"};
    /* distill.label_smoothing reaches both stages' CE: the default 0.1, and
     * the values the cases set (the reference smooths by the dump's value,
     * and another smoothing must fail) */
    static const char *const smooth[] = {"CE smoothed by 0.1 ",
                                         "CE smoothed by 0.1 ",
                                         "CE smoothed by 0.1 ",
                                         "CE smoothed by 0.3 ",
                                         "finetune: the CE smoothed by 0.1, control (smoothing 0) "
                                         "caught",
                                         "finetune: the CE smoothed by 0, control (smoothing 0.1) "
                                         "caught"};
    for (size_t i = 0; i < 4; i++) {
        const char *l = case_line(log, students[i][0]);
        cr_expect(strstr(l, want[i]) && strstr(l, "distill mutants caught 3 of 3: align_form") &&
                      strstr(l, "smoothing") && strstr(l, "mse_unmasked") && strstr(l, smooth[i]),
                  "%s: %s", students[i][0], log);
    }
    for (size_t i = 4; i < 6; i++) {
        const char *l = case_line(log, students[i][0]);
        cr_expect(strstr(l, "halting depths [") && strstr(l, smooth[i]) &&
                      strstr(l, "inference with dropping"),
                  "%s: %s", students[i][0], log);
    }
    /* the check can fail: a mixer's gradient in stage 1, 0.5% off */
    perturb_gradient("vit_distill_bimamba_keep", "blocks.2.mamba.out.weight", 1.005f);
    snprintf(args, sizeof args, "'%s/vit_distill_bimamba_keep'", dir);
    cr_expect_eq(python(args), 1, "%s", log_text(tmpdir_path(dir, "py.log")));
    log = log_text(tmpdir_path(dir, "py.log"));
    cr_expect(strstr(log, "FAIL") && strstr(log, "gradient of blocks.2.mamba.out.weight"), "%s",
              log);

    /* refusals: a teacher file that is not whole (a student's: no qkv in the
     * replaced layers), no init.from, a student without a mixer, a stage
     * that is not one */
    static const char *const bad[][3] = {
        {"--stage distill --set model.mixers=bimamba,attention,bimamba,attention --set "
         "init.from=%s/vit_distill_bimamba_keep/model.safetensors",
         "1", "holds 52 of the teacher's 56 tensors"},
        {"--stage distill --set model.mixers=bimamba,attention,bimamba,attention%s", "1",
         "init.from is not set"},
        {"--stage finetune%s", "1", "model.mixers replaces no layer"},
        {"--stage distil%s", "64", "--stage takes one of train, distill, finetune; got 'distil'"},
    };
    snprintf(yaml, sizeof yaml, "%s%s", VIT_COMMON, S2S_TEACHER_AVIT);
    cfg = tmpdir_write_file(dir, "bad.yaml", yaml, strlen(yaml));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char opt[1024];
        snprintf(opt, sizeof opt, bad[i][0], i == 0 ? dir : "");
        snprintf(cmd, sizeof cmd,
                 "%s/bfworker dump '%s' --set data.train_images=%s/train-images "
                 "--set data.train_labels=%s/train-labels %s --out '%s/bad' --quiet 2>&1",
                 BF_BIN_DIR, cfg, dir, dir, opt, dir);
        cr_expect_eq(run_cmd(cmd, out, sizeof out), atoi(bad[i][1]), "%s\n%s", cmd, out);
        cr_expect(strstr(out, bad[i][2]), "%s\n%s", cmd, out);
    }
}

/* init.from + init.map timm: a ViT written the way timm writes one (its
 * names, a conv patch embedding, [1, 1, D] and [1, N+1, D] tokens), by
 * PyTorch in BF16 (tests/test_timm_torch.py, which imports neither timm nor
 * bf), loads into bf's ViT and bf's logits are PyTorch's from that
 * state_dict: within 1e-4 of the largest, where one BF16 rounding of the
 * weights moves them by more than ten times that (the script checks). The
 * dump of bf's own initial weights is the control: the same check fails. */
Test(parity, timm_vit_in_bf16_gives_pytorchs_logits) {
    const parity_case control = {"vit_timm_control", "", NULL};
    dump_case(&control); /* its dump.json gives the shape the file is written for */
    char args[2048];
    snprintf(args, sizeof args, "write '%s/vit_timm_control' '%s/timm.safetensors'", dir, dir);
    cr_assert_eq(python_script(TIMM_SCRIPT, args), 0, "%s", log_text(tmpdir_path(dir, "py.log")));
    char set[1024];
    snprintf(set, sizeof set, "--set init.from='%s/timm.safetensors' --set init.map=timm", dir);
    const parity_case timm = {"vit_timm", "", set};
    dump_case(&timm);
    snprintf(args, sizeof args, "check '%s/vit_timm' '%s/timm.safetensors'", dir, dir);
    int rc = python_script(TIMM_SCRIPT, args);
    const char *out = log_text(tmpdir_path(dir, "py.log"));
    cr_log_info("%s", out);
    cr_assert_eq(rc, 0, "bf's logits are not PyTorch's:\n%s", out);
    cr_expect(strstr(out, "ok timm vit"), "%s", out);
    snprintf(args, sizeof args, "check '%s/vit_timm_control' '%s/timm.safetensors'", dir, dir);
    rc = python_script(TIMM_SCRIPT, args);
    out = log_text(tmpdir_path(dir, "py.log"));
    cr_expect_eq(rc, 1, "the check passes bf's own initial weights:\n%s", out);
    cr_expect(strstr(out, "FAIL logits["), "%s", out);
}

Test(parity, dump_refuses_bad_input) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/bfworker dump 2>'%s/e.log'", BF_BIN_DIR, dir);
    int st = system(cmd);
    cr_expect_eq(WEXITSTATUS(st), 64);
    cr_expect(strstr(log_text(tmpdir_path(dir, "e.log")), "missing CONFIG.yaml"));
    const char *cfg = tmpdir_write_file(dir, "c.yaml", "pipeline: lm\n", 13);
    snprintf(cmd, sizeof cmd, "%s/bfworker dump '%s' --batch 0 --out '%s/x' 2>'%s/e.log'",
             BF_BIN_DIR, cfg, dir, dir);
    st = system(cmd);
    cr_expect_eq(WEXITSTATUS(st), 64);
    cr_expect(strstr(log_text(tmpdir_path(dir, "e.log")),
                     "--batch takes an integer in [1, 4096], got '0'"),
              "%s", log_text(tmpdir_path(dir, "e.log")));
    snprintf(cmd, sizeof cmd, "%s/bfworker dump '%s' --mask stripes --out '%s/x' 2>'%s/e.log'",
             BF_BIN_DIR, cfg, dir, dir);
    st = system(cmd);
    cr_expect_eq(WEXITSTATUS(st), 64);
    cr_expect(
        strstr(log_text(tmpdir_path(dir, "e.log")), "--mask takes one of holes; got 'stripes'"),
        "%s", log_text(tmpdir_path(dir, "e.log")));
    snprintf(cmd, sizeof cmd, "%s/bfworker dump '%s' 2>'%s/e.log'", BF_BIN_DIR, cfg, dir);
    st = system(cmd);
    cr_expect_eq(WEXITSTATUS(st), 64);
    cr_expect(strstr(log_text(tmpdir_path(dir, "e.log")), "--out DIR is required"));
}
