/* cmd_dump — `bfworker dump`: one training step of a config, written out for an outside
 * implementation to check against (tests/test_parity_torch.py):
 *   bfworker dump CONFIG.yaml [--set KEY=VALUE ...] --out DIR [--batch N] [--mask holes]
 * opens the data as training does, builds the model from the config's seed
 * (then loads init.from, renamed by init.map, as training does), sets the
 * knobs of step 0 as the pipeline would, takes the first training
 * batch, runs one training-mode forward and backward and writes into DIR:
 *   model.safetensors    the initial weights (after init.from), by name (F32)
 *   batch.safetensors    "ids", "mask" [B,T] and "targets" ([B] encoder,
 *                        [B,T] lm; -1 = ignored) as F32, and with the budget
 *                        "noise.L" [B,H] per layer: the scaled Gumbel noise
 *                        sigma * G the gate added to the head scores
 *   outputs.safetensors  "logits" ([B,n_classes] encoder, [B*T,V] lm)
 *   grads.safetensors    d(total loss)/d(tensor) for every parameter, by its name
 *   dump.json            the losses, the knobs and the shape
 * and with A-ViT halting, from an inference forward of the same batch after
 * the step's (the weights unchanged; halted tokens physically dropped):
 *   infer.safetensors    "logits" [B,n_classes]
 *   infer.json           its retention, task loss and correct count
 * --mask holes (pipeline budgetformer) replaces the batch's padding masks by
 * masks no data file gives: the first sample empty, holes in the others
 * (mask_punch_holes), so that a mixer's skipping of masked tokens is checked.
 * --stage names the S2S step the dump takes (pipeline vit with avit.enabled
 * and mixers in model.mixers, as S2S's stage_config makes the student):
 *   distill   stage 1 (worker/pipelines/s2s.c): the A-ViT teacher, or
 *             without avit.enabled the dense one (distill.teacher dense: no
 *             masks, no halting alignment; "distill"'s teacher_kind) (the
 *             config's shape with attention in every layer, every tensor
 *             from init.from) runs the batch first; the student (the config's
 *             model: seed, then init.from by name, so the mixers keep their
 *             seed's values) trains under the teacher's masks; its loss is the
 *             CE with label smoothing (distill.label_smoothing) + lambda_mse * the replaced layers'
 * tap MSE + the halting alignment of every layer but the last. grads.safetensors is d(that
 * total)/d(tensor) for every student tensor (the optimiser then moves only the mixers unless
 *             distill.unfreeze); dump.json's "distill" holds each term
 *             (loss_mse per replaced layer, loss_halt per layer, loss_ce,
 *             loss), the weights, the halting knobs and the teacher's active
 *             patch tokens per layer; no inference forward.
 *   finetune  stage 2: the student halting on its own, the vit pipeline's
 *             step (CE smoothed by distill.label_smoothing + ponder + prior),
 *             dump.json's "stage" says so.
 * dump.json's "label_smoothing" is the training CE's (0 but in S2S's steps).
 * Nothing is trained and no checkpoint is written. */
#include "worker/cmd/cmd.h"

#define DUMP_MAX_BATCH 4096

/* The step a dump takes (--stage). */
enum { DUMP_TRAIN = 0, DUMP_DISTILL, DUMP_FINETUNE };
static const char *const DUMP_STAGES[] = {"train", "distill", "finetune", NULL};
/* the same names, as --stage's choice (common/opts.h OPT_CHOICE) */
#define DUMP_STAGE_WORDS "train|distill|finetune"

int dump_write(const bf_config *c, const char *out_dir, int batch, int holes, int stage, int quiet,
               char *err, size_t errlen);

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/errbuf.h"
#include "kernels/bk.h"
#include "kernels/bk_rng.h"
#include "worker/pipelines/pipe.h"
#include "worker/pipelines/s2s.h"
#include "worker/io/ckpt.h"
#include "worker/io/safetensors.h"

/* mkdir -p of path (an existing folder is fine). */
static int make_dirs(const char *path, char *err, size_t errlen) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) {
        snprintf(err, errlen, "--out: path longer than %zu bytes", sizeof p - 1);
        return -1;
    }
    for (char *s = p + 1;; s++) {
        int end = *s == '\0';
        if (*s == '/' || end) {
            *s = '\0';
            struct stat st;
            if (mkdir(p, 0755) && errno != EEXIST) {
                snprintf(err, errlen, "cannot create %s: %s", p, strerror(errno));
                return -1;
            }
            if (stat(p, &st) || !S_ISDIR(st.st_mode)) {
                snprintf(err, errlen, "%s exists and is not a folder", p);
                return -1;
            }
            if (end) return 0;
            *s = '/';
        }
    }
}

/* dir/name into buf (which has room for a path). */
static const char *join(char *buf, size_t n, const char *dir, const char *name) {
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

/* The parameters (grad = 0) or their gradients (grad = 1), copied to the
 * host and written by name. */
static int write_params(const model *m, const char *path, int grad, char *err, size_t errlen) {
    const bk_params *P = &m->np.P;
    float *host = malloc(P->numel * sizeof(float));
    st_entry *t = calloc((size_t)P->n, sizeof *t);
    int64_t *shapes = calloc((size_t)P->n * BK_MAX_DIMS, sizeof *shapes);
    int rc = -1;
    if (!host || !t || !shapes) {
        snprintf(err, errlen, "out of memory writing %s", path);
        goto out;
    }
    m->be->to_host(host, grad ? P->grad : P->data, P->numel * sizeof(float));
    for (int i = 0; i < P->n; i++) {
        const bk_tensor *x = &P->t[i];
        int64_t *sh = shapes + (size_t)i * BK_MAX_DIMS;
        for (int d = 0; d < x->ndim; d++) sh[d] = x->shape[d];
        t[i] = (st_entry){x->name, x->ndim, sh, host + x->offset};
    }
    const char *meta[] = {"format", "bf", "kind", grad ? "gradients" : "model"};
    rc = st_write(path, t, P->n, meta, 2, err, errlen);
out:
    free(host);
    free(t);
    free(shapes);
    return rc;
}

static float *ints_to_f32(const int32_t *v, size_t n) {
    float *f = malloc(n * sizeof(float));
    if (f)
        for (size_t i = 0; i < n; i++) f[i] = (float)v[i];
    return f;
}

/* ids, mask and targets of the batch, and the budget's noise per layer: the
 * same draw as the gate's (nn_attn.c): sigma * gumbel(seed, (step << 8) |
 * layer, (row_offset + b) * H + i), 0 when sigma is 0. */
static int write_batch(const model *m, const data_batch_t *b, const int *targets, int n_targets,
                       const char *path, char *err, size_t errlen) {
    int B = b->rows, T = b->seq_len, H = m->sh.heads, L = m->sh.layers;
    int nl = m->sh.budget ? L : 0;
    size_t BT = (size_t)B * T, BH = (size_t)B * H;
    float *ids = ints_to_f32(b->ids, BT), *tg = ints_to_f32(targets, (size_t)n_targets);
    float *noise = calloc(BH * (size_t)(nl ? nl : 1), sizeof(float));
    st_entry *t = calloc((size_t)(3 + nl), sizeof *t);
    char(*names)[32] = calloc((size_t)(nl ? nl : 1), sizeof *names);
    int rc = -1;
    if (!ids || !tg || !noise || !t || !names) {
        snprintf(err, errlen, "out of memory writing %s", path);
        goto out;
    }
    int64_t bt_shape[2] = {B, T}, tg_shape[2] = {B, T}, bh_shape[2] = {B, H};
    int tg_dims = n_targets == B ? 1 : 2;
    t[0] = (st_entry){"ids", 2, bt_shape, ids};
    t[1] = (st_entry){"mask", 2, bt_shape, b->mask};
    t[2] = (st_entry){"targets", tg_dims, tg_shape, tg};
    const model_knobs *kn = &m->kn;
    for (int l = 0; l < nl; l++) {
        float *z = noise + (size_t)l * BH;
        uint64_t stream = (kn->step << 8) | (uint64_t)l;
        for (int r = 0; r < B && kn->sigma > 0; r++)
            for (int i = 0; i < H; i++)
                z[(size_t)r * H + i] =
                    kn->sigma *
                    bk_rng_gumbel_at(kn->seed, stream, (kn->row_offset + (uint64_t)r) * H + i);
        snprintf(names[l], sizeof names[l], "noise.%d", l);
        t[3 + l] = (st_entry){names[l], 2, bh_shape, z};
    }
    rc = st_write(path, t, 3 + nl, NULL, 0, err, errlen);
out:
    free(ids), free(tg), free(noise), free(t), free(names);
    return rc;
}

static int write_logits(const model *m, int B, const char *path, char *err, size_t errlen) {
    int rows = m->arch->loss_rows(m, B), V = m->arch->logit_width(m);
    float *h = malloc((size_t)rows * V * sizeof(float));
    if (!h) {
        snprintf(err, errlen, "out of memory writing %s", path);
        return -1;
    }
    m->be->to_host(h, m->logits, (size_t)rows * V * sizeof(float));
    int64_t shape[2] = {rows, V};
    st_entry t = {"logits", 2, shape, h};
    int rc = st_write(path, &t, 1, NULL, 0, err, errlen);
    free(h);
    return rc;
}

/* The A-ViT halting of the dumped forward: the gate and loss knobs, the
 * prior's centre this step used (nn_halt_centre of the retention + the
 * pipeline's shift, layers 0..L-1; the shift alone too), the prior's and
 * the output's forms, and the per-layer sums of the forward (active patch
 * tokens, and psum: the sum of their halting scores, or with avit.prior
 * spend what they spent: h while running, the remainder where they halt). */
static json_t *avit_json(const model *m) {
    const nn_halt *h = &m->halt;
    int L = m->sh.layers;
    double *hs = malloc(BK_HALT_STATS(L) * sizeof(double));
    json_t *keep = json_array(), *psum = json_array();
    json_t *o = NULL;
    if (hs && keep && psum) {
        m->be->to_host(hs, h->hstats, BK_HALT_STATS(L) * sizeof(double));
        for (int l = 0; l < L; l++) {
            json_array_append_new(keep, json_real(hs[L + l]));
            json_array_append_new(psum, json_real(hs[l]));
        }
        o = json_pack(
            "{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s, s:s, s:o, s:o}", "gamma",
            (double)h->cf.gamma, "gate_center", (double)nn_halt_gate_centre(&h->cf), "eps",
            (double)h->cf.eps, "ponder_weight", (double)h->cf.ponder_weight, "prior_weight",
            (double)h->cf.prior_weight, "retention_target", (double)h->cf.retention, "prior_centre",
            (double)(nn_halt_centre(h->cf.retention, L, h->cf.sigma) + h->cf.shift), "prior_sigma",
            (double)h->cf.sigma, "prior_shift", (double)h->cf.shift, "remainders", hs[2 * L],
            "prior", nn_halt_prior_name(h->cf.prior), "output", h->cf.freeze ? "freeze" : "act",
            "keep", keep, "psum", psum);
        keep = psum = NULL; /* o owns them */
    }
    json_decref(keep);
    json_decref(psum);
    free(hs);
    return o;
}

static const char *arch_name(const model *m) {
    return m->arch == &MODEL_ENCODER ? "encoder" : m->arch == &MODEL_VIT ? "vit" : "decoder";
}

/* dump.json; stage: DUMP_STAGES' name; distill (nullable, taken): the
 * distill step's object, in place of the halting's (the student does not
 * halt in that step). */
static int write_json(const model *m, const bf_config *c, int B, const char *stage, json_t *distill,
                      const char *path, char *err, size_t errlen) {
    const model_stats *st = &m->st;
    const model_knobs *kn = &m->kn;
    const model_shape *sh = &m->sh;
    json_t *root = json_pack(
        "{s:s, s:s, s:I, s:I, s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f},"
        " s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f},"
        " s:{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:b, s:b, s:i, s:i, s:i,"
        " s:i, s:i, s:i, s:b, s:i, s:b, s:i}}",
        "pipeline", c->pipeline, "device", m->be->name, "seed", (json_int_t)c->train.seed, "step",
        (json_int_t)kn->step, "loss", "loss", st->loss, "loss_task", st->loss_task, "loss_budget",
        st->loss_budget, "loss_entropy", st->loss_entropy, "loss_ponder", st->loss_ponder,
        "loss_prior", st->loss_prior, "retention", st->retention, "mean_s", st->mean_s,
        "heads_used", st->heads_used, "counted", st->counted, "correct", st->correct, "knobs",
        "tau", (double)kn->tau, "sigma", (double)kn->sigma, "tau_r", (double)kn->tau_r, "s_min",
        (double)kn->s_min, "s_max", (double)kn->s_max, "lambda_budget", (double)kn->lambda_budget,
        "lambda_entropy", (double)kn->lambda_entropy, "progress", (double)kn->progress, "shape",
        "model", arch_name(m), "layers", sh->layers, "d_model", sh->d_model, "heads", sh->heads,
        "seq_len", sh->seq_len, "vocab", sh->vocab, "n_classes", sh->n_classes, "hadamard",
        sh->hadamard, "budget", sh->budget, "causal", sh->n_classes == 0, "batch", B, "rows",
        m->arch->loss_rows(m, B), "logit_width", m->arch->logit_width(m), "patch", sh->patch,
        "image_h", sh->image_h, "image_w", sh->image_w, "avit", sh->avit, "aug_pad", m->aug_pad,
        "aug_flip", m->aug_flip, "d_state", sh->d_state);
    if (root) json_object_set_new(root, "label_smoothing", json_real((double)m->label_smoothing));
    json_t *mixers = json_array();
    for (int l = 0; root && mixers && l < sh->layers; l++)
        json_array_append_new(mixers, json_string(model_mixer_name(sh->mixer[l])));
    int halts = sh->avit && !distill;
    json_t *avit = halts ? avit_json(m) : NULL;
    if (!root || !mixers || json_object_set_new(json_object_get(root, "shape"), "mixers", mixers) ||
        json_object_set_new(root, "stage", json_string(stage)) ||
        (halts && (!avit || json_object_set_new(root, "avit", avit))) ||
        (distill && json_object_set_new(root, "distill", distill))) {
        json_decref(root);
        snprintf(err, errlen, "out of memory building %s", path);
        return -1;
    }
    int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (rc) snprintf(err, errlen, "cannot write %s", path);
    return rc ? -1 : 0;
}

/* infer.json of an inference forward: its retention (mean fraction of patch
 * tokens active per layer), task loss and correct count. */
static int write_infer_json(const model *m, const char *path, char *err, size_t errlen) {
    json_t *root = json_pack("{s:f, s:f, s:f}", "retention", m->st.retention, "loss_task",
                             m->st.loss_task, "correct", m->st.correct);
    int rc = root ? json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) : -1;
    json_decref(root);
    if (rc) snprintf(err, errlen, "cannot write %s", path);
    return rc ? -1 : 0;
}

/* init.from (renamed by init.map) into m's weights, as the training loop's
 * host does (host/host.c); the report to stderr unless quiet. 0 or -1. */
static int load_init_from(model *m, const bf_config *c, int quiet, char *err, size_t errlen) {
    if (!c->init.from[0] && c->init.map[0]) {
        snprintf(err, errlen, "init.map %s: set without init.from (the map renames its tensors)",
                 c->init.map);
        return -1;
    }
    if (!c->init.from[0]) return 0;
    size_t n = m->np.P.numel;
    float *hp = malloc(n * sizeof(float));
    char *text = malloc(8192);
    int rc = -1;
    if (!hp || !text) {
        snprintf(err, errlen, "out of memory reading init.from");
    } else {
        m->be->to_host(hp, m->np.P.data, n * sizeof(float));
        ckpt_init_report r;
        if (ckpt_init_from_map(c->init.from, c->init.map, &m->np.P, hp, &r, text, 8192, err,
                               errlen) == 0) {
            m->be->to_device(m->np.P.data, hp, n * sizeof(float));
            if (!quiet) fprintf(stderr, "%s\n", text);
            rc = 0;
        }
    }
    free(hp);
    free(text);
    return rc;
}

/* The masks of --mask holes, within the batch's own (a padding token stays
 * masked): row 0 empty; in row r >= 1, token t masked when (t + 2r) % 5 == 0
 * and a run of three from T/3 (a hole longer than the conv window of 4). */
static void mask_punch_holes(data_batch_t *b) {
    int T = b->seq_len;
    for (int r = 0; r < b->rows; r++)
        for (int t = 0; t < T; t++)
            if (r == 0 || (t + 2 * r) % 5 == 0 || (t >= T / 3 && t < T / 3 + 3))
                b->mask[(size_t)r * T + t] = 0.0f;
}

/* The S2S stage checks of --stage (the student's shape sh of c): pipeline
 * vit, avit.enabled, mixers of one kind in some layers (their kind in
 * *kind); distill also needs init.from (the teacher). 0 or -1 with a
 * message. */
static int stage_check(const bf_config *c, const model_shape *sh, int stage, int *kind, char *err,
                       size_t errlen) {
    const char *name = DUMP_STAGES[stage];
    /* stage 1 without halting is distill.teacher dense's: the dense teacher */
    if (strcmp(c->pipeline, pipe_vit.name) != 0 || (!sh->avit && stage != DUMP_DISTILL)) {
        snprintf(err, errlen,
                 "--stage %s: pipeline '%s'%s; an S2S stage's step is a vit student's "
                 "(valid: pipeline vit, avit.enabled: true, mixers in model.mixers; --stage "
                 "distill also without avit: the dense teacher's)",
                 name, c->pipeline, sh->avit ? "" : " without avit.enabled");
        return -1;
    }
    *kind = 0;
    for (int l = 0; l < sh->layers; l++) {
        if (!sh->mixer[l]) continue;
        if (*kind && sh->mixer[l] != *kind) {
            snprintf(err, errlen,
                     "--stage %s: model.mixers holds %s and %s; S2S's student has one "
                     "distill.mixer (valid: one of bimamba, bimamba2, bilstm, bilstm_wide beside "
                     "attention)",
                     name, model_mixer_name(*kind), model_mixer_name(sh->mixer[l]));
            return -1;
        }
        *kind = sh->mixer[l];
    }
    if (!*kind) {
        snprintf(err, errlen,
                 "--stage %s: model.mixers replaces no layer; the student has a mixer in the "
                 "replaced layers (e.g. model.mixers: bimamba,attention,...)",
                 name);
        return -1;
    }
    if (stage == DUMP_DISTILL && !c->init.from[0]) {
        snprintf(err, errlen,
                 "--stage distill: init.from is not set; it names the A-ViT teacher (a run "
                 "folder or a .safetensors file with attention in every layer)");
        return -1;
    }
    return 0;
}

/* The distill step's teacher t: the student's shape with attention in every
 * layer, every tensor from init.from (as s2s_chain.c loads the avit stage's
 * checkpoint; a tensor left out is an error, a teacher is whole). 0 or -1. */
static int open_teacher(model *t, const model_shape *student, const bf_config *c,
                        const bk_backend *be, int B, char *err, size_t errlen) {
    model_shape sh = *student;
    memset(sh.mixer, 0, sizeof sh.mixer);
    sh.infer_only = 1;
    if (model_create(t, &sh, be, B, err, errlen)) return -1;
    pipe_model_config(t, c);
    if (model_init_weights(t, c->train.seed, err, errlen)) return -1;
    size_t n = t->np.P.numel;
    float *hp = malloc(n * sizeof(float));
    char text[1024];
    ckpt_init_report rep;
    int rc = -1;
    if (!hp) {
        snprintf(err, errlen, "out of memory for the teacher");
    } else {
        t->be->to_host(hp, t->np.P.data, n * sizeof(float));
        if (ckpt_init_from(c->init.from, &t->np.P, hp, &rep, text, sizeof text, err, errlen)) {
            /* err says why */
        } else if (rep.missing > 0) {
            snprintf(err, errlen,
                     "--stage distill: init.from %s holds %d of the teacher's %d tensors; the "
                     "teacher is a ViT of this shape with attention in every layer (A-ViT with "
                     "avit.enabled, else the dense one)",
                     c->init.from, rep.loaded, t->np.P.n);
        } else {
            t->be->to_device(t->np.P.data, hp, n * sizeof(float));
            rc = 0;
        }
    }
    free(hp);
    return rc;
}

/* The distill spec over d's teacher for student m (replaced layers: those
 * with a mixer of `kind`), its per-layer alignment losses kept apart
 * (d->hlayer). 0 or -1. */
static int open_distill(s2s_distill *d, pipe_spec *sp, const model *m, const bf_config *c, int kind,
                        char *err, size_t errlen) {
    int layers[MODEL_MAX_LAYERS], n = 0, L = m->sh.layers;
    for (int l = 0; l < L; l++)
        if (m->sh.mixer[l]) layers[n++] = l;
    d->mean_h = strcmp(c->distill.halt_align, "mean_h") == 0;
    if (s2s_distill_spec(d, sp, layers, n, c->distill.lambda_mse, c->distill.lambda_halt,
                         c->distill.label_smoothing, c->distill.unfreeze, kind, err, errlen))
        return -1;
    if (!(d->hlayer = d->be->alloc((size_t)L * sizeof(double)))) {
        snprintf(err, errlen, "out of memory for the distillation losses");
        return -1;
    }
    d->be->zero(d->hlayer, (size_t)L * sizeof(double));
    return 0;
}

/* dump.json's "distill" of the step just taken: the weights and knobs,
 * loss_mse per replaced layer (the plain masked MSE, before lambda_mse),
 * loss_halt per layer but the last (lambda_halt included), loss_ce (the
 * smoothed CE), loss (their total: ce + lambda_mse sum mse + sum halt), and
 * the teacher's active patch tokens per layer. NULL when out of memory. */
static json_t *distill_json(const s2s_distill *d, const model *m, const bf_config *c) {
    const bk_backend *be = d->be;
    int L = m->sh.layers, B = m->batch, T = m->sh.seq_len;
    float mse[MODEL_MAX_LAYERS];
    double hl[MODEL_MAX_LAYERS];
    float *mask = malloc((size_t)B * T * sizeof(float));
    json_t *o = json_pack(
        "{s:s, s:s, s:f, s:f, s:s, s:f, s:f, s:f, s:f, s:b}", "teacher", c->init.from, "mixer",
        model_mixer_name(m->sh.mixer[d->layers[0]]), "lambda_mse", (double)d->lambda_mse,
        "lambda_halt", (double)d->lambda_halt, "halt_align", d->mean_h ? "mean_h" : "keep",
        "label_smoothing", (double)m->label_smoothing, "gamma", (double)m->halt.cf.gamma,
        "gate_center", (double)nn_halt_gate_centre(&m->halt.cf), "eps", (double)m->halt.cf.eps,
        "unfreeze", c->distill.unfreeze);
    json_t *rep = json_array(), *jm = json_array(), *jh = json_array(), *tk = json_array();
    if (!mask || !o || !rep || !jm || !jh || !tk) goto oom;
    be->to_host(mse, d->mse, (size_t)d->n * sizeof(float));
    be->to_host(hl, d->hlayer, (size_t)L * sizeof(double));
    double total = m->st.loss;
    for (int i = 0; i < d->n; i++) {
        json_array_append_new(rep, json_integer(d->layers[i]));
        json_array_append_new(jm, json_real(mse[i]));
        total += (double)d->lambda_mse * mse[i];
    }
    for (int l = 0; l < L - 1; l++) {
        json_array_append_new(jh, json_real(hl[l]));
        total += hl[l];
    }
    for (int l = 0; l < L; l++) {
        int k = B * (T - 1); /* a dense teacher runs every token */
        if (d->teacher.sh.avit) {
            be->to_host(mask, d->teacher.halt.mask[l], (size_t)B * T * sizeof(float));
            k = 0;
            for (int b = 0; b < B; b++)
                for (int t = 1; t < T; t++) k += mask[(size_t)b * T + t] > 0;
        }
        json_array_append_new(tk, json_integer(k));
    }
    free(mask);
    json_object_set_new(o, "teacher_kind", json_string(d->teacher.sh.avit ? "avit" : "dense"));
    json_object_set_new(o, "replaced", rep);
    json_object_set_new(o, "loss_mse", jm);
    json_object_set_new(o, "loss_halt", jh);
    json_object_set_new(o, "teacher_keep", tk);
    json_object_set_new(o, "loss_ce", json_real(m->st.loss));
    json_object_set_new(o, "loss", json_real(total));
    return o;
oom:
    free(mask);
    json_decref(o), json_decref(rep), json_decref(jm), json_decref(jh), json_decref(tk);
    return NULL;
}

/* Runs the step of c over `batch` rows (0 = c->train.batch) and writes the
 * files into out_dir (created when missing; files there of the same names
 * are replaced); holes: the batch's masks as mask_punch_holes makes them;
 * stage: DUMP_TRAIN, or the S2S step DUMP_DISTILL / DUMP_FINETUNE.
 * Progress goes to stderr unless quiet. Returns 0, or -1 with a message.
 * (External linkage only so that its messages are checked against any
 * caller's buffer, not main's.) */
int dump_write(const bf_config *conf, const char *out_dir, int batch, int holes, int stage,
               int quiet, char *err, size_t errlen) {
    bf_config c = *conf;
    if (batch < 0 || batch > DUMP_MAX_BATCH) {
        snprintf(err, errlen, "--batch %d outside 1..%d", batch, DUMP_MAX_BATCH);
        return -1;
    }
    if (holes && strcmp(c.pipeline, pipe_budgetformer.name) != 0) {
        snprintf(err, errlen,
                 "--mask holes: pipeline '%s' has no token mask to punch (valid: pipeline %s)",
                 c.pipeline, pipe_budgetformer.name);
        return -1;
    }
    if (batch > 0) c.train.batch = batch;
    const pipe_spec *sp = pipe_find(c.pipeline);
    if (!sp) {
        char names[128];
        snprintf(err, errlen, "dump: pipeline '%s' has no training step to dump (valid: %s)",
                 c.pipeline, pipe_names(names, sizeof names));
        return -1;
    }
    if (stage < DUMP_TRAIN || stage > DUMP_FINETUNE) {
        snprintf(err, errlen, "--stage %d: valid: train, distill, finetune", stage);
        return -1;
    }
    if (make_dirs(out_dir, err, errlen)) return -1;
    const bk_backend *be;
    if (bk_select(c.device, &be, err, errlen)) return -1;
    data_sets d;
    if (data_sets_open(&c, &d, quiet, err, errlen)) return -1;
    model m;
    memset(&m, 0, sizeof m);
    s2s_distill dd; /* stage 1's teacher and losses (--stage distill) */
    memset(&dd, 0, sizeof dd);
    pipe_spec dsp;
    json_t *djson = NULL;
    data_batcher_t *bt = NULL;
    data_batch_t b;
    memset(&b, 0, sizeof b);
    int rc = -1;
    /* values per item: tokens, or an image's pixels (vit) */
    int B = c.train.batch, T = pipe_input_len(&c, &d);
    model_shape sh = pipe_model_shape(&c, &d);
    int kind = 0;
    if (stage != DUMP_TRAIN && stage_check(&c, &sh, stage, &kind, err, errlen)) goto out;
    /* the model as the training loop builds it (pipe_loop.c, loop_model) */
    if (model_create(&m, &sh, be, B, err, errlen)) goto out;
    pipe_model_config(&m, &c); /* augmentation, budget range, halting knobs */
    if (model_init_weights(&m, c.train.seed, err, errlen) ||
        load_init_from(&m, &c, quiet, err, errlen))
        goto out;
    /* and its first batch (loop_data, train_step) on one rank */
    data_batcher_opts bo = {.global_batch = B,
                            .seq_len = T,
                            .rank = 0,
                            .world = 1,
                            .seed = c.train.seed,
                            .shuffle = 1,
                            .wrap = 1,
                            .split = 0};
    if (data_batcher_new(d.train, &bo, &bt, err, errlen)) goto out;
    if (data_batch_alloc(&b, B, T)) {
        snprintf(err, errlen, "out of memory for a batch of %d", B);
        goto out;
    }
    if (data_batch_at(bt, 0, &b, err, errlen)) goto out;
    if (holes) mask_punch_holes(&b);
    sp->knobs(&m, &c, 0);
    m.kn.row_offset = 0;
    const int *targets = sp->classify ? b.labels : b.targets;
    int n_targets = sp->classify ? b.rows : b.rows * T;
    char path[4200];
    /* the weights before the step changes them (the forward reads them only) */
    if (write_params(&m, join(path, sizeof path, out_dir, "model.safetensors"), 0, err, errlen))
        goto out;
    /* stage 1 as the loop runs it (pipe_loop.c, train_step): the teacher's
     * forward before the student's, the tap and alignment gradients
     * registered before the backward */
    if (stage == DUMP_DISTILL &&
        (open_teacher(&dd.teacher, &sh, &c, be, B, err, errlen) ||
         open_distill(&dd, &dsp, &m, &c, kind, err, errlen) ||
         dsp.before_forward(dsp.ctx, &m, b.ids, targets, b.rows, err, errlen)))
        goto out;
    if (stage == DUMP_DISTILL) m.label_smoothing = dsp.label_smoothing; /* as the loop sets it */
    if (stage == DUMP_FINETUNE) m.label_smoothing = c.distill.label_smoothing; /* s2s_chain.c's */
    if (model_forward(&m, b.ids, b.mask, targets, b.rows, 1, err, errlen)) goto out;
    if (stage == DUMP_DISTILL) dsp.extra_backward(dsp.ctx, &m);
    model_backward(&m);
    if (stage == DUMP_DISTILL && !(djson = distill_json(&dd, &m, &c))) {
        snprintf(err, errlen, "out of memory building dump.json");
        goto out;
    }
    if (write_batch(&m, &b, targets, n_targets,
                    join(path, sizeof path, out_dir, "batch.safetensors"), err, errlen) ||
        write_logits(&m, b.rows, join(path, sizeof path, out_dir, "outputs.safetensors"), err,
                     errlen) ||
        write_params(&m, join(path, sizeof path, out_dir, "grads.safetensors"), 1, err, errlen))
        goto out;
    double dtotal = djson ? json_real_value(json_object_get(djson, "loss")) : 0;
    json_t *dj = djson;
    djson = NULL; /* write_json takes it */
    if (write_json(&m, &c, b.rows, DUMP_STAGES[stage], dj,
                   join(path, sizeof path, out_dir, "dump.json"), err, errlen))
        goto out;
    if (!quiet && stage == DUMP_DISTILL)
        fprintf(stderr, "dump: s2s distill, %d rows, loss %.6f (smoothed CE %.6f) -> %s\n", b.rows,
                dtotal, m.st.loss, out_dir);
    else if (!quiet && sh.avit)
        fprintf(stderr,
                "dump: %s, %d rows, loss %.6f (task %.6f ponder %.6f prior %.6f), retention "
                "%.4f -> %s\n",
                c.pipeline, b.rows, m.st.loss, m.st.loss_task, m.st.loss_ponder, m.st.loss_prior,
                m.st.retention, out_dir);
    else if (!quiet)
        fprintf(stderr,
                "dump: %s, %d rows, loss %.6f (task %.6f budget %.6f entropy %+.6f) -> %s\n",
                c.pipeline, b.rows, m.st.loss, m.st.loss_task, m.st.loss_budget, m.st.loss_entropy,
                out_dir);
    /* the inference path (with A-ViT, halted tokens dropped), after every
     * training-step file is written: it replaces m's logits and statistics */
    if (sh.avit && stage != DUMP_DISTILL &&
        (model_forward(&m, b.ids, b.mask, targets, b.rows, 0, err, errlen) ||
         write_logits(&m, b.rows, join(path, sizeof path, out_dir, "infer.safetensors"), err,
                      errlen) ||
         write_infer_json(&m, join(path, sizeof path, out_dir, "infer.json"), err, errlen)))
        goto out;
    rc = 0;
out:
    json_decref(djson);
    s2s_distill_free(&dd);
    data_batch_free(&b);
    data_batcher_destroy(&bt);
    model_destroy(&m);
    data_sets_close(&d);
    return rc;
}

/* What `bfworker dump` is told (cmd_dump_opts). */
typedef struct dump_args {
    opt_list sets;
    const char *out;
    int batch, mask, stage, quiet;
} dump_args;

#define DU(f) OPT_AT(dump_args, f)
const opt_spec cmd_dump_opts[] = {
    {"out", 0, OPT_STR, 0, 0, DU(out), "DIR", "where the files go (required)"},
    {"set", 0, OPT_LIST, 0, 0, DU(sets), "KEY=VALUE",
     "override one config key (dotted path; repeatable)"},
    {"batch", 0, OPT_INT, 1, DUMP_MAX_BATCH, DU(batch), "N",
     "rows of the batch (default train.batch)"},
    {"mask", 0, OPT_CHOICE, 0, 0, DU(mask), "holes",
     "(pipeline budgetformer) the first sample fully masked, holes in the others: masks no data "
     "file gives, for the mixers"},
    {"stage", 0, OPT_CHOICE, 0, 0, DU(stage), DUMP_STAGE_WORDS,
     "the step of an S2S stage (pipeline vit, avit.enabled, the student's mixers in "
     "model.mixers): train (default: the pipeline's own step), distill (stage 1: the teacher, "
     "every tensor from init.from with attention in every layer, runs first; the student, "
     "init.from by name, trains under its masks; dump.json's \"distill\" holds each loss term: "
     "tap MSE per replaced layer, halting alignment per layer, smoothed CE, total; no inference "
     "files), finetune (stage 2: the student halting on its own, CE + ponder + prior)"},
    {"quiet", 0, OPT_FLAG, 0, 0, DU(quiet), NULL, "no progress lines"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int cmd_dump(int argc, char **argv) {
    const char *sets[CMD_MAX_SETS], *cfg_path = NULL;
    dump_args a = {.sets = {sets, 0, CMD_MAX_SETS}, .mask = -1, .stage = DUMP_TRAIN};
    int prc = cmd_parse(
        argc, argv,
        "one training-mode forward and backward of step 0 (the config's seed and its init.from / "
        "init.map, the first training batch, the knobs of step 0), written for an outside "
        "implementation to check: DIR/model.safetensors (weights), batch.safetensors (ids, mask, "
        "targets, budget noise.L; vit: ids are the pixels), outputs.safetensors (logits), "
        "grads.safetensors (every parameter's gradient by name), dump.json (losses, knobs, shape; "
        "with avit.enabled the halting knobs, the prior centre used and the per-layer keep and "
        "psum sums); with avit.enabled also the inference forward of the batch, halted tokens "
        "dropped: DIR/infer.safetensors (logits), infer.json (retention, task loss, correct).",
        &a, &cfg_path);
    if (prc >= 0) return prc;
    if (!a.out) return cmd_usage_error("--out DIR is required");
    const char *out = a.out;
    int batch = a.batch, holes = a.mask == 0, stage = a.stage, quiet = a.quiet;
    char err[2048];
    bf_config c;
    cfg_defaults(&c);
    if (cfg_load_file(&c, cfg_path, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        return BF_EX_USAGE;
    }
    for (int i = 0; i < a.sets.n; i++)
        if (cfg_set(&c, sets[i], err, sizeof err)) {
            fprintf(stderr, "bfworker: %s\n", err);
            return BF_EX_USAGE;
        }
    /* --stage distill reads the keys of the distill section that stage 1's
     * loss reads, --stage finetune its label smoothing, which pipeline vit
     * does not: the rest is checked as vit's */
    bf_config v = c;
    bf_config def;
    cfg_defaults(&def);
    if (stage != DUMP_TRAIN) v.distill.label_smoothing = def.distill.label_smoothing;
    if (stage == DUMP_DISTILL) {
        v.distill.lambda_mse = def.distill.lambda_mse;
        v.distill.lambda_halt = def.distill.lambda_halt;
        v.distill.unfreeze = def.distill.unfreeze;
        memcpy(v.distill.halt_align, def.distill.halt_align, sizeof v.distill.halt_align);
    }
    if (cfg_validate(&v, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        return BF_EX_USAGE;
    }
    if (dump_write(&c, out, batch, holes, stage, quiet, err, sizeof err)) {
        fprintf(stderr, "bfworker dump: %s\n", err);
        return 1;
    }
    return 0;
}
