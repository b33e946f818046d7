/* model.c — the transformer of model.h built from nn/ modules: shapes and
 * mixers, memory planning and fit checks, create/destroy, weight init,
 * forward/backward for training and inference, A-ViT layers. */

#include "worker/models/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* be: the backend the model runs on (its tiled attention), NULL = none. */
static nn_attn_cfg attn_cfg(const model_shape *sh, const bk_backend *be) {
    return (nn_attn_cfg){.C = sh->d_model,
                         .NH = sh->heads,
                         .causal = sh->n_classes == 0 && sh->patch == 0,
                         .hadamard = sh->hadamard,
                         .budget = sh->budget,
                         .scratch_maps = sh->infer_only,
                         .tiled_min_t = be ? be->attention_tiled_min_t : 0};
}

void model_take_counter(model *m, const char *name, uint64_t value) {
    if (!m->sh.avit || strcmp(name, MODEL_COUNTER_GATE) != 0) return;
    uint32_t u = (uint32_t)value;
    memcpy(&m->halt.cf.gate, &u, sizeof u);
}

const char *model_mixer_name(int kind) {
    static const char *names[] = {"attention", "bimamba", "bilstm", "bilstm_wide", "bimamba2"};
    return kind >= 0 && kind <= MODEL_MIXER_LAST ? names[kind] : "?";
}

int model_mixer_kind(const char *name) {
    for (int k = 0; k <= MODEL_MIXER_LAST; k++)
        if (strcmp(name, model_mixer_name(k)) == 0) return k;
    return -1;
}

const char *model_mixer_prefix(int kind) {
    static const char *prefixes[] = {"attn", "mamba", "lstm", "lstm_wide", "mamba2"};
    return kind >= 0 && kind <= MODEL_MIXER_LAST ? prefixes[kind] : "?";
}

int model_shape_mixers(model_shape *sh, const char *list, char *err, size_t errlen) {
    memset(sh->mixer, 0, sizeof sh->mixer);
    if (!list[0]) return 0;
    const char *p = list;
    for (int l = 0;; l++) {
        size_t n = strcspn(p, ",");
        if (l >= sh->layers || l >= MODEL_MAX_LAYERS) {
            snprintf(err, errlen, "model.mixers: more entries than the %d layers", sh->layers);
            return -1;
        }
        int kind = -1;
        for (int k = 0; k <= MODEL_MIXER_LAST; k++)
            if (strlen(model_mixer_name(k)) == n && strncmp(p, model_mixer_name(k), n) == 0)
                kind = k;
        if (kind < 0) {
            snprintf(err, errlen,
                     "model.mixers: entry %d '%.*s' is not a mixer (valid: attention, "
                     "bimamba, bimamba2, bilstm, bilstm_wide)",
                     l, (int)(n < 32 ? n : 32), p);
            return -1;
        }
        sh->mixer[l] = (unsigned char)kind;
        if (!p[n]) break;
        p += n + 1;
    }
    return 0;
}

static int check_shape(const model_shape *sh, char *err, size_t errlen) {
    if (sh->layers < 1 || sh->layers > 64 || sh->d_model < 4 || sh->heads < 1 || sh->heads > 256 ||
        sh->d_model % sh->heads || sh->seq_len < 1 || sh->vocab < 4) {
        snprintf(err, errlen,
                 "invalid model shape: layers %d (1..64), d_model %d (>= 4, divisible by heads), "
                 "heads %d (1..256), seq_len %d, vocab %d",
                 sh->layers, sh->d_model, sh->heads, sh->seq_len, sh->vocab);
        return -1;
    }
    for (int l = 0; l < sh->layers; l++) {
        if (sh->mixer[l] > MODEL_MIXER_LAST) {
            snprintf(err, errlen, "layer %d: unknown mixer kind %d", l, sh->mixer[l]);
            return -1;
        }
        if (sh->mixer[l] != MODEL_MIXER_ATTENTION && sh->n_classes == 0 && sh->patch == 0) {
            snprintf(err, errlen,
                     "layer %d: mixer %s is bidirectional; a causal LM (n_classes 0) takes only "
                     "attention",
                     l, model_mixer_name(sh->mixer[l]));
            return -1;
        }
    }
    return 0;
}

/* Runs the same allocation sequence for planning and for real. */
static int plan_arena(model *m) {
    bk_arena *a = &m->A;
    int B = m->B, T = m->sh.seq_len, C = m->sh.d_model, L = m->sh.layers;
    size_t BT = (size_t)B * T;
    int rc = 0;
    for (int l = 0; l <= L; l++) m->x[l] = bk_arena_floats(a, BT * C);
    for (int l = 0; l < L; l++) rc |= nn_block_plan(&m->blocks[l], a, B, T);
    nn_block_ws_plan(&m->ws, a, BT, C);
    nn_ln_acts_plan(&m->af, a, BT, C);
    size_t rows = (size_t)m->arch->loss_rows(m, B), V = (size_t)m->arch->logit_width(m);
    m->logits = bk_arena_floats(a, rows * V);
    m->probs = bk_arena_floats(a, rows * V);
    m->losses = bk_arena_floats(a, rows);
    m->dlogits = bk_arena_floats(a, rows * V);
    m->dlosses = bk_arena_floats(a, rows);
    m->dres = bk_arena_floats(a, BT * C);
    m->dlnf = bk_arena_floats(a, BT * C);
    m->ids = bk_arena_ints(a, BT);
    m->targets = bk_arena_ints(a, BT);
    m->mask = bk_arena_floats(a, BT);
    if (m->sh.avit) {
        rc |= nn_halt_plan(&m->halt, a, L, B, T, C);
        m->xc = bk_arena_floats(a, BT * C);
        m->yc = bk_arena_floats(a, BT * C);
        m->cmask = bk_arena_floats(a, BT);
        m->cidx = bk_arena_ints(a, BT);
    }
    m->arch->plan_head(m, a);
    return rc;
}

/* The first part of model_create: checks the shape and declares every
 * tensor (names, shapes); no buffer of the model's size exists yet. Returns
 * 0, or -1 with a message (m destroyed). */
static int declare_model(model *m, const model_shape *sh, const bk_backend *be, int batch_capacity,
                         char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    if (check_shape(sh, err, errlen)) return -1;
    if (batch_capacity < 1) {
        snprintf(err, errlen, "batch capacity must be >= 1");
        return -1;
    }
    m->sh = *sh;
    m->be = be;
    m->B = batch_capacity;
    m->arch = sh->patch > 0 ? &MODEL_VIT : sh->n_classes ? &MODEL_ENCODER : &MODEL_DECODER;
    m->kn = (model_knobs){.tau = 1,
                          .sigma = 0,
                          .tau_r = 0.5f,
                          .s_min = 0,
                          .s_max = 1,
                          .lambda_budget = 1,
                          .lambda_entropy = 0.01f};
    int C = sh->d_model, L = sh->layers;
    nn_params_init(&m->np);
    m->env = (nn_env){be, &m->np, 0};
    m->blocks = calloc((size_t)L, sizeof *m->blocks);
    m->x = calloc((size_t)L + 1, sizeof *m->x);
    if (!m->blocks || !m->x) goto oom;
    const float std = 0.02f, resid_std = std * (1.0f / sqrtf(2.0f * L));
    if (m->arch->declare_input) {
        if (m->arch->declare_input(m, err, errlen)) {
            model_destroy(m);
            return -1;
        }
    } else if (nn_embed_declare(&m->emb, &m->np, sh->vocab, sh->seq_len, C, std)) {
        goto oom;
    }
    nn_block_cfg bc = {.C = C,
                       .hidden = 4 * C,
                       .mixer = "attention",
                       .d_state = sh->d_state,
                       .attn = attn_cfg(sh, be),
                       .std = std,
                       .resid_std = resid_std};
    for (int l = 0; l < L; l++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "blocks.%d", l);
        bc.mixer = model_mixer_name(sh->mixer[l]);
        if (nn_block_declare(&m->blocks[l], &m->np, prefix, &bc, err, errlen)) {
            model_destroy(m);
            return -1;
        }
    }
    if (nn_layernorm_declare(&m->lnf, &m->np, "ln_f", C)) goto oom;
    if (m->arch->declare_head(m, err, errlen)) {
        model_destroy(m);
        return -1;
    }
    return 0;
oom:
    snprintf(err, errlen, "out of memory building the model");
    model_destroy(m);
    return -1;
}

/* Sizes of a declared model (declare_model), from the planning passes of
 * its arena and scratch; allocates nothing. */
static void mem_of(model *m, model_mem *mm) {
    memset(mm, 0, sizeof *mm);
    for (int i = 0; i < m->np.P.n; i++) mm->params += m->np.P.t[i].numel;
    mm->param_bytes = 2 * mm->params * sizeof(float); /* values + gradients */
    bk_arena_plan(&m->A);
    plan_arena(m);
    mm->act_bytes = m->A.peak;
    bk_arena_plan(&m->A);
    nn_scratch S;
    memset(&S, 0, sizeof S);
    for (int l = 0; l < m->sh.layers; l++) nn_block_scratch(&m->blocks[l], &S);
    mm->scratch_bytes = S.need;
    size_t BT = (size_t)m->B * m->sh.seq_len, rows = (size_t)m->arch->loss_rows(m, m->B);
    mm->host_bytes = (2 * BT + 2 * rows + rows * (size_t)m->arch->logit_width(m)) * sizeof(float);
    mm->patch = m->sh.patch;
}

/* model_plan for the backend be (whose attention may keep no maps). */
static int plan_on(model *m, const model_shape *sh, const bk_backend *be, int batch_capacity,
                   model_mem *mm, char *err, size_t errlen) {
    if (declare_model(m, sh, be, batch_capacity, err, errlen)) return -1;
    mem_of(m, mm);
    return 0;
}

int model_plan(model *m, const model_shape *sh, int batch_capacity, model_mem *mm, char *err,
               size_t errlen) {
    return plan_on(m, sh, bk_cpu(), batch_capacity, mm, err, errlen);
}

static double gib(size_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

int model_mem_check(const model_mem *mm, const bk_backend *be, char *err, size_t errlen) {
    size_t dev = mm->param_bytes + mm->optimizer_bytes + mm->act_bytes + mm->scratch_bytes;
    size_t host = mm->host_bytes + (be->device == BK_CPU ? dev : 0), avail;
    /* the device first; on a GPU the host copies are small beside it */
    size_t need = be->device == BK_CPU ? host : dev;
    if (!be->mem_available || be->mem_available(&avail) != 0 || need <= avail) return 0;
    snprintf(err, errlen,
             "the model does not fit: it needs %.2f GiB on %s (parameters %zu: %.2f GiB with "
             "their gradients%s%.2f GiB; activations %.2f GiB; scratch %.2f GiB%s) but %.2f GiB "
             "is available; %s",
             gib(need), be->name, mm->params, gib(mm->param_bytes),
             mm->optimizer_bytes ? "; AdamW moments " : "",
             mm->optimizer_bytes ? gib(mm->optimizer_bytes) : 0.0, gib(mm->act_bytes),
             gib(mm->scratch_bytes), be->device == BK_CPU ? "; host copies" : "", gib(avail),
             mm->patch > 0 /* a ViT's tokens are its patches: a larger patch, fewer tokens */
                 ? "make model.d_model, model.layers or train.batch smaller, or model.patch "
                   "larger (fewer tokens per image)"
                 : "make model.d_model, model.layers, model.seq_len or train.batch smaller");
    return -1;
}

int model_fits(const model_shape *sh, const bk_backend *be, int batch_capacity, int training,
               char *err, size_t errlen) {
    model m;
    model_mem mm;
    if (plan_on(&m, sh, be, batch_capacity, &mm, err, errlen)) return -1;
    model_destroy(&m);
    if (training) {
        mm.optimizer_bytes = 2 * mm.params * sizeof(float);
        /* a checkpoint is staged on the host: parameters and both moments */
        mm.host_bytes += 3 * mm.params * sizeof(float);
    }
    return model_mem_check(&mm, be, err, errlen);
}

int model_create(model *m, const model_shape *sh, const bk_backend *be, int batch_capacity,
                 char *err, size_t errlen) {
    if (declare_model(m, sh, be, batch_capacity, err, errlen)) return -1;
    model_mem mm;
    mem_of(m, &mm);
    if (model_mem_check(&mm, be, err, errlen)) {
        model_destroy(m);
        return -1;
    }
    const int L = sh->layers;
    if (bk_params_alloc(&m->np.P, be, err, errlen)) {
        model_destroy(m);
        return -1;
    }
    bk_arena_plan(&m->A);
    plan_arena(m);
    if (bk_arena_reserve(&m->A, be, err, errlen)) {
        model_destroy(m);
        return -1;
    }
    if (plan_arena(m)) goto oom;
    for (int l = 0; l < L; l++) nn_block_scratch(&m->blocks[l], &m->S);
    if (nn_scratch_reserve(&m->S, be, err, errlen)) {
        model_destroy(m);
        return -1;
    }
    size_t BT = (size_t)m->B * sh->seq_len, rows = (size_t)m->arch->loss_rows(m, m->B);
    m->h_mask = calloc(BT, sizeof(float));
    m->h_targets = calloc(BT, sizeof(int));
    m->h_losses = calloc(rows, sizeof(float));
    m->h_logits = calloc(rows * (size_t)m->arch->logit_width(m), sizeof(float));
    if (!m->h_mask || !m->h_targets || !m->h_losses || !m->h_logits) goto oom;
    if (m->arch->setup && m->arch->setup(m, err, errlen)) {
        model_destroy(m);
        return -1;
    }
    m->dstats = be->alloc(BK_STAT_SLOTS * sizeof(double));
    if (!m->dstats) goto oom;
    be->zero(m->dstats, BK_STAT_SLOTS * sizeof(double));
    m->stats_per_forward = 1;
    if (sh->avit) {
        if (!m->arch->declare_input) {
            snprintf(err, errlen, "A-ViT halting needs the vit model (a class token)");
            model_destroy(m);
            return -1;
        }
        m->h_cmask = malloc(BT * sizeof(float));
        m->h_cidx = malloc(BT * sizeof(int));
        if (!m->h_cmask || !m->h_cidx) goto oom;
        m->halt.cf = (nn_halt_cfg){.gamma = 10,
                                   .centre = 3,
                                   .eps = 0.01f,
                                   .ponder_weight = 5e-4f,
                                   .prior_weight = 0.1f,
                                   .retention = 0.7f,
                                   .sigma = 1};
        m->drop = 1;
    }
    return 0;
oom:
    snprintf(err, errlen, "out of memory building the model");
    model_destroy(m);
    return -1;
}

void model_destroy(model *m) {
    for (int l = 0; m->blocks && l < m->sh.layers; l++) nn_block_destroy(&m->blocks[l]);
    free(m->blocks);
    free(m->x);
    nn_params_free(&m->np);
    bk_arena_free(&m->A);
    nn_scratch_free(&m->S);
    free(m->h_mask), free(m->h_targets), free(m->h_logits), free(m->h_losses);
    free(m->h_patches), free(m->h_gather);
    free(m->h_cmask), free(m->h_cidx);
    nn_halt_free(&m->halt);
    if (m->be && m->dstats) m->be->release(m->dstats);
    memset(m, 0, sizeof *m);
}

size_t model_count(const model *m, const char *prefix) {
    size_t n = 0, len = strlen(prefix);
    for (int i = 0; i < m->np.P.n; i++)
        if (strncmp(m->np.P.t[i].name, prefix, len) == 0) n += m->np.P.t[i].numel;
    return n;
}

int model_init_weights(model *m, uint64_t seed, char *err, size_t errlen) {
    for (int l = 0; l < m->sh.layers; l++) {
        nn_attn *a = model_attn(m, l);
        if (a) nn_attn_budget_init(a, &m->np, m->kn.s_min, m->kn.s_max);
    }
    return nn_params_init_weights(&m->np, seed, err, errlen);
}

nn_attn *model_attn(const model *m, int l) { return nn_block_attn(&m->blocks[l]); }

int model_selected_heads(const model *m, int l, int b, int *heads) {
    return nn_attn_selected_heads(model_attn(m, l), b, heads);
}

float model_budget_s(const model *m, int l, int b) {
    const nn_attn *a = model_attn(m, l);
    return a && a->h_s ? a->h_s[b] : NAN;
}

int model_prediction(const model *m, int r) {
    int V = m->arch->logit_width(m);
    const float *lg = m->h_logits + (size_t)r * V;
    int best = 0;
    for (int v = 1; v < V; v++)
        if (lg[v] > lg[best]) best = v;
    return best;
}

double model_row_loss(const model *m, int r) { return m->h_losses[r]; }

static nn_call model_call(model *m, int B, int training, int layer) {
    return (nn_call){.B = B,
                     .T = m->sh.seq_len,
                     .training = training,
                     .layer = layer,
                     .layers = m->sh.layers,
                     .mask = m->mask,
                     .h_mask = m->h_mask,
                     .kn = &m->kn,
                     .st = &m->st,
                     .dstats = m->dstats,
                     .time_mixer = m->time_attention};
}

void model_stats_reset(model *m) { m->be->zero(m->dstats, BK_STAT_SLOTS * sizeof(double)); }

void model_stats_fetch(const model *m, double *raw) {
    m->be->to_host(raw, m->dstats, BK_STAT_SLOTS * sizeof(double));
}

void model_stats_means(const model *m, const double *raw, double steps, model_stats *st) {
    memset(st, 0, sizeof *st);
    double rows = raw[BK_STAT_GATE_ROWS], n = steps > 0 ? steps : 1;
    st->counted = raw[BK_STAT_COUNTED];
    st->correct = raw[BK_STAT_CORRECT];
    st->loss_task = st->counted > 0 ? raw[BK_STAT_LOSS_SUM] / st->counted : 0;
    st->loss_budget = raw[BK_STAT_BUDGET_LOSS] / n;
    st->loss_entropy = raw[BK_STAT_ENTROPY_LOSS] / n;
    st->loss_ponder = raw[MODEL_STAT_PONDER] / n;
    st->loss_prior = raw[MODEL_STAT_PRIOR] / n;
    st->retention = raw[MODEL_STAT_KEEP] / n;
    st->loss =
        st->loss_task + st->loss_budget + st->loss_entropy + st->loss_ponder + st->loss_prior;
    st->mean_s = m->sh.budget && rows > 0 ? raw[BK_STAT_S_SUM] / rows : 0;
    st->heads_used = m->sh.budget && rows > 0 ? raw[BK_STAT_HEADS_SUM] / rows : 1.0;
}

/* Training: the statistics stay on the device; the host knows how many
 * targets count (it has them), which is all the backward needs. */
static void training_stats(model *m, int rows, int V) {
    m->be->crossentropy_stats(m->dstats, m->logits, m->losses, m->targets, rows, V);
    double counted = 0;
    for (int r = 0; r < rows; r++) counted += m->h_targets[r] >= 0;
    if (m->stats_per_forward) {
        double raw[BK_STAT_SLOTS];
        model_stats_fetch(m, raw);
        model_stats_means(m, raw, 1, &m->st);
    }
    m->st.counted = counted;
}

/* Inference: logits and per-row losses come to the host (evaluation reads
 * them per sample). */
static void inference_stats(model *m, int rows, int V) {
    const bk_backend *be = m->be;
    float *hl = m->h_losses;
    be->to_host(hl, m->losses, (size_t)rows * sizeof(float));
    be->to_host(m->h_logits, m->logits, (size_t)rows * V * sizeof(float));
    double sum = 0, counted = 0, correct = 0;
    for (int r = 0; r < rows; r++) {
        int t = m->h_targets[r];
        if (t < 0) continue;
        sum += hl[r];
        counted += 1;
        correct += model_prediction(m, r) == t;
    }
    m->st.counted = counted;
    m->st.correct = correct;
    m->st.loss_task = counted > 0 ? sum / counted : 0;
    m->st.loss = m->st.loss_task + m->st.loss_budget + m->st.loss_entropy;
}

/* Inference of A-ViT layer l on the active tokens only: each sample's
 * active rows (by the host mask of layer l) are gathered into a compacted
 * [B, Tc] sequence (Tc = the most any sample has; shorter samples are
 * padded with their class token's row, masked), the block runs on it, and
 * what it changed is scattered back: x[l+1] = x[l] + (y - x) on the active
 * rows. A halted row is frozen, so it is x[l] unchanged, as in training. */
static void forward_dropped(model *m, int l, int B) {
    const bk_backend *be = m->be;
    int T = m->sh.seq_len, C = m->sh.d_model, Tc = 1;
    const float *hm = m->halt.h_mask[l];
    for (int b = 0; b < B; b++) {
        int n = 0;
        for (int t = 0; t < T; t++) n += hm[(size_t)b * T + t] > 0;
        if (n > Tc) Tc = n;
    }
    nn_block *blk = &m->blocks[l];
    if (Tc == T) { /* a sample with every token still running: nothing to drop */
        nn_call c = model_call(m, B, 0, l);
        nn_block_forward(blk, &m->env, &m->S, &c, m->x[l + 1], m->x[l]);
        return;
    }
    int padded = 0;
    for (int b = 0; b < B; b++) {
        int j = 0;
        for (int t = 0; t < T; t++)
            if (hm[(size_t)b * T + t] > 0) {
                m->h_cidx[(size_t)b * Tc + j] = b * T + t;
                m->h_cmask[(size_t)b * Tc + j++] = 1;
            }
        for (; j < Tc; j++, padded = 1) {
            m->h_cidx[(size_t)b * Tc + j] = b * T;
            m->h_cmask[(size_t)b * Tc + j] = 0;
        }
    }
    size_t rows = (size_t)B * Tc;
    be->to_device(m->cidx, m->h_cidx, rows * sizeof(int));
    be->to_device(m->cmask, m->h_cmask, rows * sizeof(float));
    be->embedding_forward(m->xc, m->cidx, m->x[l], (int)rows, C);
    blk->mask = m->cmask;
    blk->h_mask = m->h_cmask;
    blk->mask_ones = !padded;
    nn_call c = model_call(m, B, 0, l);
    c.T = Tc;
    nn_block_forward(blk, &m->env, &m->S, &c, m->yc, m->xc);
    be->axpy(m->yc, m->xc, -1.0f, rows * C);
    be->copy(m->x[l + 1], m->x[l], (size_t)B * T * C * sizeof(float));
    be->embedding_backward(m->x[l + 1], m->yc, m->cidx, (int)rows, C);
    blk->mask = m->halt.mask[l];
    blk->h_mask = m->halt.h_mask[l];
    blk->mask_ones = m->halt.ones[l];
}

int model_forward(model *m, const int *ids, const float *mask, const int *targets, int batch,
                  int training, char *err, size_t errlen) {
    const bk_backend *be = m->be;
    int B = batch, T = m->sh.seq_len, L = m->sh.layers;
    size_t BT = (size_t)B * T;
    if (B < 1 || B > m->B) {
        snprintf(err, errlen, "batch %d outside 1..%d", B, m->B);
        return -1;
    }
    if (training && m->sh.infer_only) {
        snprintf(err, errlen,
                 "this model was built for inference only (model_shape.infer_only): "
                 "it keeps no attention maps for a backward");
        return -1;
    }
    int own_input = m->arch->embed_forward != NULL;
    for (size_t i = 0; !own_input && i < BT; i++)
        if (ids[i] < 0 || ids[i] >= m->sh.vocab) {
            snprintf(err, errlen, "token id %d at position %zu outside the vocabulary 0..%d",
                     ids[i], i, m->sh.vocab - 1);
            return -1;
        }
    if (own_input) mask = NULL; /* the input's mask is over its own positions, not tokens */
    int rows = m->arch->loss_rows(m, B), V = m->arch->logit_width(m);
    for (int r = 0; r < rows; r++)
        if (targets[r] < -1 || targets[r] >= V) {
            snprintf(err, errlen, "target %d of row %d outside 0..%d (or -1 = ignore)", targets[r],
                     r, V - 1);
            return -1;
        }
    m->batch = B;
    memset(&m->st, 0, sizeof m->st);
    if (training && m->stats_per_forward) model_stats_reset(m);
    for (size_t i = 0; i < BT; i++) m->h_mask[i] = mask ? mask[i] : 1.0f;
    memcpy(m->h_targets, targets, (size_t)rows * sizeof(int));
    /* the step's uploads are its batch's own data; an all-ones mask is
     * made on the device */
    if (!own_input) be->to_device(m->ids, ids, BT * sizeof(int));
    if (mask)
        be->to_device(m->mask, m->h_mask, BT * sizeof(float));
    else
        be->fill32(m->mask, 0x3f800000u /* 1.0f */, BT);
    if (!m->trunk_only) be->to_device(m->targets, targets, (size_t)rows * sizeof(int));

    if (!own_input)
        nn_embed_forward(&m->emb, &m->env, m->x[0], m->ids, B, T);
    else if (m->arch->embed_forward(m, ids, B, training, err, errlen))
        return -1;
    /* halting given, not computed */
    int ext = m->sh.avit && m->ext_mask && (training || m->ext_infer);
    int halting = m->sh.avit && !ext;
    if (halting) nn_halt_begin(&m->halt, &m->env, B);
    for (int l = 0; l < L; l++) {
        nn_call c = model_call(m, B, training, l);
        nn_block *blk = &m->blocks[l];
        if (m->sh.avit) {
            blk->mask = ext ? m->ext_mask[l] : m->halt.mask[l];
            blk->mask_ones = ext ? m->ext_ones && m->ext_ones[l] : m->halt.ones[l];
            blk->h_mask = training || ext ? NULL : m->halt.h_mask[l];
        }
        if (m->sh.avit && !training && !ext && m->drop && l > 0)
            forward_dropped(m, l, B);
        else
            nn_block_forward(blk, &m->env, &m->S, &c, m->x[l + 1], m->x[l]);
        /* its last argument asks for no host copy of the masks: a training or
         * trunk-only forward reads them on the device only */
        if (halting)
            nn_halt_layer(&m->halt, &m->env, l, m->x[l + 1], B, m->sh.d_model,
                          training || m->trunk_only);
    }
    m->ext_used = ext;
    if (m->trunk_only) return 0;
    if (halting && training)
        nn_halt_loss(&m->halt, &m->env, m->dstats, B, MODEL_STAT_PONDER, MODEL_STAT_PRIOR,
                     MODEL_STAT_KEEP);
    if (m->sh.avit && !training && !ext) m->st.retention = nn_halt_retention(&m->halt, B, -1);
    m->st.heads_used /= (double)B * L;
    m->st.attn_flops /= (double)B;
    if (m->sh.budget) m->st.mean_s /= (double)B * L; /* inference; training: device stats */

    /* the trunk's output: with halting, the ACT weighted output (nn_halt.h) */
    const float *top =
        halting ? nn_halt_output(&m->halt, &m->env, m->x, B, m->sh.d_model) : m->x[L];
    nn_layernorm_forward(&m->lnf, &m->env, &m->af, top, (int)BT);
    m->arch->head_forward(m, B);
    be->crossentropy_forward(m->losses, m->probs, m->logits, m->targets, rows, V);
    if (training && m->label_smoothing > 0)
        be->label_smooth_forward(m->losses, m->logits, m->targets, rows, V, m->label_smoothing);
    if (training)
        training_stats(m, rows, V);
    else
        inference_stats(m, rows, V);
    return 0;
}

void model_backward(model *m) {
    const bk_backend *be = m->be;
    int B = m->batch, T = m->sh.seq_len, C = m->sh.d_model, L = m->sh.layers;
    size_t BT = (size_t)B * T;
    int rows = m->arch->loss_rows(m, B), V = m->arch->logit_width(m);
    be->zero(m->np.P.grad, m->np.P.numel * sizeof(float));

    /* d loss_task / d losses[r] = 1/counted for counted rows */
    float inv = m->st.counted > 0 ? (float)(1.0 / m->st.counted) : 0.0f;
    be->crossentropy_dlosses(m->dlosses, m->targets, inv, rows, V);
    be->zero(m->dlogits, (size_t)rows * V * sizeof(float));
    be->crossentropy_backward(m->dlogits, m->probs, m->targets, m->dlosses, rows, V);
    if (m->label_smoothing > 0)
        be->label_smooth_backward(m->dlogits, m->targets, m->dlosses, rows, V, m->label_smoothing);
    be->zero(m->dlnf, BT * C * sizeof(float));
    m->arch->head_backward(m, B);
    be->zero(m->dres, BT * C * sizeof(float));
    int act = m->sh.avit && !m->ext_used && !m->halt.cf.freeze;
    if (act) { /* d loss / d (the ACT output), spread over the layers below */
        be->zero(m->halt.dout, BT * C * sizeof(float));
        nn_layernorm_backward(&m->lnf, &m->env, &m->af, m->halt.dout, m->dlnf, m->halt.out,
                              (int)BT);
    } else {
        nn_layernorm_backward(&m->lnf, &m->env, &m->af, m->dres, m->dlnf, m->x[L], (int)BT);
    }
    for (int l = L - 1; l >= 0; l--) {
        nn_call c = model_call(m, B, 1, l);
        if (act) nn_halt_output_backward(&m->halt, &m->env, l, m->dres, m->x, B, C);
        if (m->sh.avit && !m->ext_used) nn_halt_backward(&m->halt, &m->env, l, m->dres, B, C);
        nn_block_backward(&m->blocks[l], &m->env, &m->S, &m->ws, &c, m->dres);
    }
    if (m->arch->embed_backward)
        m->arch->embed_backward(m, m->dres, B);
    else
        nn_embed_backward(&m->emb, &m->env, m->dres, m->ids, B, T);
}
