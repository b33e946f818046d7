#include "worker/models/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk_rng.h"

#include <time.h>

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct layer_ids {
    int ln1w, ln1b, wqkv, bqkv, wo, bo, ha, hb, ln2w, ln2b, w1, b1, w2, b2;
    int bw1, bb1, bw2, bb2, sw, sb; /* budget MLP d -> d/4 -> 1, head scorer d -> H */
};

struct layer_acts {
    float *resid; /* [B,T,C] block input */
    float *ln1, *ln1_mean, *ln1_rstd;
    float *qkv, *att, *atty; /* [B,T,3C], [B,NH,T,T], [B,T,C] gated head outputs */
    float *mid;              /* [B,T,C] after the attention residual */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch, *fchg;              /* [B,T,4C] pre- and post-GELU */
    float *xbar, *bh, *bg, *bf, *z; /* budget: [B,C], [B,C/4], [B,C/4], [B], [B,H] */
    float *gate;                    /* [B,H] head weights w on the device */
};

#define P_(m, id) ((m)->P.t[(id)].data)
#define G_(m, id) (bk_params_grad(&(m)->P, (id)))

static int add_param(model *m, const char *name, int d0, int d1, int decay) {
    int shape[2] = {d0, d1};
    return bk_params_add(&m->P, name, d1 > 0 ? 2 : 1, shape, decay);
}

double model_attn_flops(const model_shape *sh, int k, int n) {
    double C = sh->d_model, HS = (double)sh->d_model / sh->heads;
    double proj = 2.0 * n * C * 3.0 * HS * k;           /* Q, K, V rows of the used heads */
    double scores = 2.0 * 2.0 * (double)n * n * HS * k; /* QK^T and PV */
    double out;
    if (sh->hadamard) {
        int lg = 0;
        while ((1 << (lg + 1)) <= sh->d_model) lg++;
        out = (double)n * C * (lg + 2); /* butterflies + scale + shift */
    } else {
        out = 2.0 * n * HS * k * C; /* only the used heads' columns of W_O */
    }
    return proj + scores + out;
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
    if (sh->hadamard && !bk_fwht_valid(sh->d_model)) {
        snprintf(err, errlen,
                 "attn.out_proj: hadamard needs d_model = 2^n or 12*2^n (e.g. 64, 128, 256, 384, "
                 "512, 768, 1024), got %d",
                 sh->d_model);
        return -1;
    }
    if (sh->budget && sh->d_model < 4) {
        snprintf(err, errlen, "budget needs d_model >= 4");
        return -1;
    }
    return 0;
}

/* Runs the same allocation sequence for planning and for real. */
static void plan_arena(model *m) {
    bk_arena *a = &m->A;
    int B = m->B, T = m->sh.seq_len, C = m->sh.d_model, NH = m->sh.heads, L = m->sh.layers;
    int V = m->sh.n_classes ? m->sh.n_classes : m->sh.vocab;
    int HS = C / NH;
    size_t BT = (size_t)B * T;
    for (int l = 0; l < L; l++) {
        layer_acts *x = &m->la[l];
        x->resid = bk_arena_floats(a, BT * C);
        x->ln1 = bk_arena_floats(a, BT * C);
        x->ln1_mean = bk_arena_floats(a, BT);
        x->ln1_rstd = bk_arena_floats(a, BT);
        x->qkv = bk_arena_floats(a, BT * 3 * C);
        x->att = bk_arena_floats(a, (size_t)B * NH * T * T);
        x->atty = bk_arena_floats(a, BT * C);
        x->mid = bk_arena_floats(a, BT * C);
        x->ln2 = bk_arena_floats(a, BT * C);
        x->ln2_mean = bk_arena_floats(a, BT);
        x->ln2_rstd = bk_arena_floats(a, BT);
        x->fch = bk_arena_floats(a, BT * 4 * C);
        x->fchg = bk_arena_floats(a, BT * 4 * C);
        if (m->sh.budget) {
            x->xbar = bk_arena_floats(a, (size_t)B * C);
            x->bh = bk_arena_floats(a, (size_t)B * (C / 4));
            x->bg = bk_arena_floats(a, (size_t)B * (C / 4));
            x->bf = bk_arena_floats(a, (size_t)B);
            x->z = bk_arena_floats(a, (size_t)B * NH);
            x->gate = bk_arena_floats(a, (size_t)B * NH);
        }
    }
    size_t rows = m->sh.n_classes ? (size_t)B : BT;
    m->resid_out = bk_arena_floats(a, BT * C);
    m->lnf = bk_arena_floats(a, BT * C);
    m->lnf_mean = bk_arena_floats(a, BT);
    m->lnf_rstd = bk_arena_floats(a, BT);
    m->pooled = bk_arena_floats(a, (size_t)B * C);
    m->logits = bk_arena_floats(a, rows * V);
    m->probs = bk_arena_floats(a, rows * V);
    m->losses = bk_arena_floats(a, rows);
    m->scratch_proj = bk_arena_floats(a, BT * C);
    m->ids = bk_arena_ints(a, BT);
    m->targets = bk_arena_ints(a, BT);
    m->mask = bk_arena_floats(a, BT);
    m->dres = bk_arena_floats(a, BT * C);
    m->dln = bk_arena_floats(a, BT * C);
    m->dqkv = bk_arena_floats(a, BT * 3 * C);
    m->datty = bk_arena_floats(a, BT * C);
    m->dfch = bk_arena_floats(a, BT * 4 * C);
    m->dfchg = bk_arena_floats(a, BT * 4 * C);
    m->datt = bk_arena_floats(a, (size_t)B * NH * T * T);
    m->dpooled = bk_arena_floats(a, (size_t)B * C);
    m->dlogits = bk_arena_floats(a, rows * V);
    m->dlosses = bk_arena_floats(a, rows);
    m->dlnf = bk_arena_floats(a, BT * C);
    m->fwht_scratch = bk_arena_floats(a, BT * C);
    if (m->sh.budget) {
        m->dxbar = bk_arena_floats(a, (size_t)B * C);
        m->dbh = bk_arena_floats(a, (size_t)B * (C / 4));
        m->dbg = bk_arena_floats(a, (size_t)B * (C / 4));
        m->dbf = bk_arena_floats(a, (size_t)B);
        m->dz = bk_arena_floats(a, (size_t)B * NH);
        m->dgate = bk_arena_floats(a, (size_t)B * NH);
        m->sel_scratch = bk_arena_floats(a, (size_t)B * NH * T * (3 * HS + T));
        m->sel_x = bk_arena_floats(a, BT * C);
        m->sel_out = bk_arena_floats(a, BT * C);
        m->sel_proj = bk_arena_floats(a, BT * C);
        m->sel_mask = bk_arena_floats(a, BT);
        m->sel_heads = bk_arena_ints(a, (size_t)B * NH);
    }
}

int model_create(model *m, const model_shape *sh, const bk_backend *be, int batch_capacity,
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
    int C = sh->d_model, NH = sh->heads, L = sh->layers;
    char name[64];
    bk_params_init(&m->P);
    m->lp = calloc((size_t)L, sizeof *m->lp);
    m->la = calloc((size_t)L, sizeof *m->la);
    if (!m->lp || !m->la) goto oom;
    m->wte = add_param(m, "wte", sh->vocab, C, 1);
    m->wpe = add_param(m, "wpe", sh->seq_len, C, 1);
    for (int l = 0; l < L; l++) {
        layer_ids *p = &m->lp[l];
#define ADD(field, suffix, d0, d1, decay)                                                          \
    snprintf(name, sizeof name, "h%d.%s", l, suffix);                                              \
    p->field = add_param(m, name, d0, d1, decay);                                                  \
    if (p->field < 0) goto oom;
        ADD(ln1w, "ln1.w", C, 0, 0);
        ADD(ln1b, "ln1.b", C, 0, 0);
        ADD(wqkv, "attn.qkv.w", 3 * C, C, 1);
        ADD(bqkv, "attn.qkv.b", 3 * C, 0, 0);
        if (sh->hadamard) {
            ADD(ha, "attn.had.alpha", C, 0, 0);
            ADD(hb, "attn.had.beta", C, 0, 0);
            p->wo = p->bo = -1;
        } else {
            ADD(wo, "attn.out.w", C, C, 1);
            ADD(bo, "attn.out.b", C, 0, 0);
            p->ha = p->hb = -1;
        }
        ADD(ln2w, "ln2.w", C, 0, 0);
        ADD(ln2b, "ln2.b", C, 0, 0);
        ADD(w1, "mlp.fc.w", 4 * C, C, 1);
        ADD(b1, "mlp.fc.b", 4 * C, 0, 0);
        ADD(w2, "mlp.proj.w", C, 4 * C, 1);
        ADD(b2, "mlp.proj.b", C, 0, 0);
        if (sh->budget) {
            ADD(bw1, "budget.fc.w", C / 4, C, 1);
            ADD(bb1, "budget.fc.b", C / 4, 0, 0);
            ADD(bw2, "budget.out.w", 1, C / 4, 1);
            ADD(bb2, "budget.out.b", 1, 0, 0);
            ADD(sw, "scorer.w", NH, C, 1);
            ADD(sb, "scorer.b", NH, 0, 0);
        } else {
            p->bw1 = p->bb1 = p->bw2 = p->bb2 = p->sw = p->sb = -1;
        }
#undef ADD
    }
    m->lnfw = add_param(m, "lnf.w", C, 0, 0);
    m->lnfb = add_param(m, "lnf.b", C, 0, 0);
    if (sh->n_classes) {
        m->wc = add_param(m, "cls.w", sh->n_classes, C, 1);
        m->bc = add_param(m, "cls.b", sh->n_classes, 0, 0);
    } else {
        m->wc = m->bc = -1; /* tied: logits = lnf(x) @ wte^T */
    }
    if (m->wte < 0 || m->wpe < 0 || m->lnfw < 0 || m->lnfb < 0) goto oom;
    if (bk_params_alloc(&m->P, be, err, errlen)) return -1;

    bk_arena_plan(&m->A);
    plan_arena(m);
    if (bk_arena_reserve(&m->A, be, err, errlen)) return -1;
    plan_arena(m);

    size_t BH = (size_t)m->B * NH * L, BL = (size_t)m->B * L;
    m->h_s = calloc(BL, sizeof(float));
    m->h_f = calloc(BL, sizeof(float));
    m->h_ds = calloc(BL, sizeof(float));
    m->h_df = calloc(BL, sizeof(float));
    m->h_k = calloc(BL, sizeof(int));
    m->h_z = calloc(BH, sizeof(float));
    m->h_zn = calloc(BH, sizeof(float));
    m->h_p = calloc(BH, sizeof(float));
    m->h_m = calloc(BH, sizeof(float));
    m->h_gate = calloc(BH, sizeof(float));
    m->h_rank = calloc(BH, sizeof(int));
    m->h_dz = calloc(BH, sizeof(float));
    m->h_dgate = calloc(BH, sizeof(float));
    m->h_heads = calloc(BH, sizeof(int));
    m->h_mask = calloc((size_t)m->B * sh->seq_len, sizeof(float));
    m->h_targets = calloc((size_t)m->B * sh->seq_len, sizeof(int));
    size_t rows = sh->n_classes ? (size_t)m->B : (size_t)m->B * sh->seq_len;
    m->h_losses = calloc(rows, sizeof(float));
    m->h_logits = calloc(rows * (size_t)(sh->n_classes ? sh->n_classes : sh->vocab), sizeof(float));
    if (!m->h_s || !m->h_f || !m->h_ds || !m->h_df || !m->h_k || !m->h_z || !m->h_zn || !m->h_p ||
        !m->h_m || !m->h_gate || !m->h_rank || !m->h_dz || !m->h_dgate || !m->h_heads ||
        !m->h_mask || !m->h_targets || !m->h_logits || !m->h_losses)
        goto oom;
    m->kn = (model_knobs){.tau = 1,
                          .sigma = 0,
                          .tau_r = 0.5f,
                          .s_min = 0,
                          .s_max = 1,
                          .lambda_budget = 1,
                          .lambda_entropy = 0.01f};
    return 0;
oom:
    snprintf(err, errlen, "out of memory building the model");
    return -1;
}

void model_destroy(model *m) {
    bk_params_free(&m->P);
    bk_arena_free(&m->A);
    free(m->lp);
    free(m->la);
    free(m->h_s), free(m->h_f), free(m->h_ds), free(m->h_df), free(m->h_k);
    free(m->h_z), free(m->h_zn), free(m->h_p), free(m->h_m), free(m->h_gate);
    free(m->h_rank), free(m->h_dz), free(m->h_dgate), free(m->h_heads);
    free(m->h_mask), free(m->h_targets), free(m->h_logits), free(m->h_losses);
    memset(m, 0, sizeof *m);
}

size_t model_count(const model *m, const char *prefix) {
    size_t n = 0, len = strlen(prefix);
    for (int i = 0; i < m->P.n; i++)
        if (strncmp(m->P.t[i].name, prefix, len) == 0) n += m->P.t[i].numel;
    return n;
}

void model_init_weights(model *m, uint64_t seed) {
    float *host = malloc(m->P.numel * sizeof(float));
    if (!host) return;
    float resid_scale = 1.0f / sqrtf(2.0f * m->sh.layers);
    for (int i = 0; i < m->P.n; i++) {
        const bk_tensor *t = &m->P.t[i];
        float *w = host + t->offset;
        const char *suffix = strrchr(t->name, '.');
        int is_ln_w = strstr(t->name, "ln") && suffix && strcmp(suffix, ".w") == 0;
        int is_alpha = strstr(t->name, "had.alpha") != NULL;
        if (is_ln_w || is_alpha) {
            for (size_t j = 0; j < t->numel; j++) w[j] = 1.0f;
        } else if (t->ndim == 1) {
            memset(w, 0, t->numel * sizeof(float));
        } else {
            float scale = 0.02f;
            if (strstr(t->name, "attn.out.w") || strstr(t->name, "mlp.proj.w"))
                scale *= resid_scale;
            for (size_t j = 0; j < t->numel; j++)
                w[j] = scale * bk_rng_normal_at(seed, (uint64_t)i, j);
        }
        if (strstr(t->name, "budget.out.b")) {
            /* start s in the middle of the budget range */
            float s0 = 0.5f * (m->kn.s_min + m->kn.s_max);
            if (s0 < 0.02f) s0 = 0.02f;
            if (s0 > 0.98f) s0 = 0.98f;
            w[0] = logf(s0 / (1.0f - s0));
        }
    }
    m->be->to_device(m->P.data, host, m->P.numel * sizeof(float));
    free(host);
}

/* ---- the host-side head gate (design.md, "BudgetFormer") ---- */

static float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Ranks (1 = best) of H scores; ties go to the lower index. */
static void rank_heads(const float *zn, int H, int *rank) {
    for (int i = 0; i < H; i++) {
        int r = 1;
        for (int j = 0; j < H; j++)
            if (zn[j] > zn[i] || (zn[j] == zn[i] && j < i)) r++;
        rank[i] = r;
    }
}

static int budget_k(float s, int H, int force_k) {
    if (force_k > 0) return force_k < H ? force_k : H;
    int k = (int)floorf(s * (float)H);
    return k < 1 ? 1 : (k > H ? H : k);
}

/* Training gate for layer l from s (host) and z (host). Writes p, rank, m, w. */
static void gate_forward(model *m, int l, int B) {
    int H = m->sh.heads;
    const model_knobs *kn = &m->kn;
    for (int b = 0; b < B; b++) {
        size_t o = ((size_t)l * m->B + b) * H;
        float s = m->h_s[(size_t)l * m->B + b];
        float *z = m->h_z + o, *zn = m->h_zn + o, *p = m->h_p + o, *g = m->h_m + o;
        int *r = m->h_rank + o;
        uint64_t stream = (kn->step << 8) | (uint64_t)l;
        float mx = -INFINITY;
        for (int i = 0; i < H; i++) {
            float noise = kn->sigma > 0
                              ? kn->sigma * bk_rng_gumbel_at(kn->seed, stream,
                                                             (kn->row_offset + (uint64_t)b) * H + i)
                              : 0;
            zn[i] = z[i] + noise;
            if (zn[i] / kn->tau > mx) mx = zn[i] / kn->tau;
        }
        double sum = 0;
        for (int i = 0; i < H; i++) sum += (p[i] = expf(zn[i] / kn->tau - mx));
        for (int i = 0; i < H; i++) p[i] = (float)(p[i] / sum);
        rank_heads(zn, H, r);
        for (int i = 0; i < H; i++) {
            g[i] = r[i] == 1 ? 1.0f : sigmoidf_((s * H - (float)r[i]) / kn->tau_r);
            m->h_gate[o + i] = g[i]; /* forward value of m * (1 + p - sg(p)) */
        }
        m->h_k[(size_t)l * m->B + b] = budget_k(s, H, 0);
    }
}

/* Budget losses of layer l added into st; their gradients into h_ds / h_dz. */
static void gate_losses(model *m, int l, int B) {
    int H = m->sh.heads, L = m->sh.layers;
    const model_knobs *kn = &m->kn;
    double norm = 1.0 / ((double)B * L);
    float ent_w = kn->lambda_entropy * (2.0f * kn->progress - 1.0f);
    for (int b = 0; b < B; b++) {
        size_t bi = (size_t)l * m->B + b, o = bi * H;
        float s = m->h_s[bi];
        float lo = fmaxf(0.0f, kn->s_min - s), hi = fmaxf(0.0f, s - kn->s_max);
        m->st.loss_budget += kn->lambda_budget * norm * (lo * lo + hi * hi);
        m->h_ds[bi] = (float)(kn->lambda_budget * norm * (-2.0 * lo + 2.0 * hi));
        double ent = 0;
        const float *p = m->h_p + o;
        for (int i = 0; i < H; i++) ent -= p[i] > 0 ? p[i] * log(p[i]) : 0;
        m->st.loss_entropy += ent_w * norm * ent;
        /* d/dp of ent_w*norm*H(p) = -ent_w*norm*(log p + 1); kept in h_dz as dp */
        for (int i = 0; i < H; i++)
            m->h_dz[o + i] = (float)(-ent_w * norm * (p[i] > 0 ? log(p[i]) + 1.0 : 0.0));
    }
}

/* Gate backward for layer l: dgate (host, from attention) plus the loss
 * gradients already in h_ds (ds) and h_dz (dp) -> h_df (d pre-sigmoid f) and
 * h_dz (d z). */
static void gate_backward(model *m, int l, int B) {
    int H = m->sh.heads;
    const model_knobs *kn = &m->kn;
    for (int b = 0; b < B; b++) {
        size_t bi = (size_t)l * m->B + b, o = bi * H;
        const float *p = m->h_p + o, *g = m->h_m + o, *dw = m->h_dgate + o;
        const int *r = m->h_rank + o;
        float *dp = m->h_dz + o;
        float ds = m->h_ds[bi];
        for (int i = 0; i < H; i++) {
            if (!kn->exact_gradient) dp[i] += dw[i] * g[i]; /* straight-through: dw/dp = m */
            if (r[i] != 1) ds += dw[i] * g[i] * (1.0f - g[i]) * (float)H / kn->tau_r;
        }
        /* softmax((z + noise)/tau) backward */
        double dot = 0;
        for (int i = 0; i < H; i++) dot += (double)p[i] * dp[i];
        for (int i = 0; i < H; i++) dp[i] = (float)(p[i] * (dp[i] - dot) / kn->tau);
        float s = m->h_s[bi];
        m->h_df[bi] = ds * s * (1.0f - s);
    }
}

/* ---- forward ---- */

static void attn_args(const model *m, bk_attn_args *a, int B, const float *gate) {
    a->B = B;
    a->T = m->sh.seq_len;
    a->C = m->sh.d_model;
    a->NH = m->sh.heads;
    a->causal = m->sh.n_classes == 0;
    a->mask = m->mask;
    a->gate = gate;
}

/* Budget network and scorer for layer l on device; s and z copied to host. */
static void budget_forward(model *m, int l, int B) {
    const bk_backend *be = m->be;
    layer_acts *x = &m->la[l];
    layer_ids *p = &m->lp[l];
    int C = m->sh.d_model, NH = m->sh.heads, T = m->sh.seq_len;
    be->meanpool_forward(x->xbar, x->ln1, m->mask, B, T, C);
    be->linear_forward(x->bh, x->xbar, P_(m, p->bw1), P_(m, p->bb1), B, C, C / 4);
    be->gelu_forward(x->bg, x->bh, (size_t)B * (C / 4));
    be->linear_forward(x->bf, x->bg, P_(m, p->bw2), P_(m, p->bb2), B, C / 4, 1);
    be->linear_forward(x->z, x->xbar, P_(m, p->sw), P_(m, p->sb), B, C, NH);
    float *f = m->h_f + (size_t)l * m->B, *s = m->h_s + (size_t)l * m->B;
    be->to_host(f, x->bf, (size_t)B * sizeof(float));
    be->to_host(m->h_z + (size_t)l * m->B * NH, x->z, (size_t)B * NH * sizeof(float));
    for (int b = 0; b < B; b++) s[b] = sigmoidf_(f[b]);
}

int model_selected_heads(const model *m, int l, int b, int *heads) {
    int H = m->sh.heads;
    const float *z = m->h_z + ((size_t)l * m->B + b) * H;
    int rank[256];
    rank_heads(z, H, rank);
    int k = m->h_k[(size_t)l * m->B + b], n = 0;
    for (int r = 1; r <= k; r++)
        for (int i = 0; i < H; i++)
            if (rank[i] == r) heads[n++] = i;
    return k;
}

/* Inference attention with only the selected heads: samples grouped by k so
 * that each group is one op call. Writes the output projection into proj. */
static void attention_selected(model *m, int l, int B, float *proj) {
    const bk_backend *be = m->be;
    layer_acts *x = &m->la[l];
    layer_ids *p = &m->lp[l];
    int C = m->sh.d_model, NH = m->sh.heads, T = m->sh.seq_len;
    size_t TC = (size_t)T * C;
    for (int b = 0; b < B; b++) {
        float s = m->h_s[(size_t)l * m->B + b];
        m->h_k[(size_t)l * m->B + b] = budget_k(s, NH, m->kn.force_k);
    }
    for (int k = 1; k <= NH; k++) {
        int nb = 0;
        for (int b = 0; b < B; b++) nb += m->h_k[(size_t)l * m->B + b] == k;
        if (!nb) continue;
        /* every sample runs k heads: no gather or scatter, the op reads and
         * writes the batch in place */
        int whole = nb == B;
        nb = 0;
        for (int b = 0; b < B; b++) {
            if (m->h_k[(size_t)l * m->B + b] != k) continue;
            model_selected_heads(m, l, b, m->h_heads + (size_t)nb * k);
            if (!whole) {
                be->copy(m->sel_x + nb * TC, x->ln1 + b * TC, TC * sizeof(float));
                be->copy(m->sel_mask + (size_t)nb * T, m->mask + (size_t)b * T,
                         (size_t)T * sizeof(float));
            }
            nb++;
        }
        be->to_device(m->sel_heads, m->h_heads, (size_t)nb * k * sizeof(int));
        bk_attn_args a;
        attn_args(m, &a, nb, NULL);
        a.mask = whole ? m->mask : m->sel_mask;
        float *out_proj = whole ? proj : m->sel_proj;
        be->attention_selected_forward(m->sel_out, m->sel_scratch, whole ? x->ln1 : m->sel_x,
                                       P_(m, p->wqkv), P_(m, p->bqkv), m->sel_heads, k, &a);
        if (m->sh.hadamard)
            be->fwht_forward(out_proj, m->sel_out, P_(m, p->ha), P_(m, p->hb), nb * T, C);
        else
            be->linear_selected_forward(out_proj, m->sel_out, P_(m, p->wo), P_(m, p->bo),
                                        m->sel_heads, k, nb, T, C, NH, C);
        if (whole) continue;
        nb = 0;
        for (int b = 0; b < B; b++) {
            if (m->h_k[(size_t)l * m->B + b] != k) continue;
            be->copy(proj + b * TC, m->sel_proj + nb * TC, TC * sizeof(float));
            nb++;
        }
    }
}

static int active_tokens(const model *m, int b) {
    int n = 0, T = m->sh.seq_len;
    for (int t = 0; t < T; t++) n += m->h_mask[(size_t)b * T + t] > 0;
    return n;
}

int model_forward(model *m, const int *ids, const float *mask, const int *targets, int batch,
                  int training, char *err, size_t errlen) {
    const bk_backend *be = m->be;
    int B = batch, T = m->sh.seq_len, C = m->sh.d_model, NH = m->sh.heads, L = m->sh.layers;
    size_t BT = (size_t)B * T;
    if (B < 1 || B > m->B) {
        snprintf(err, errlen, "batch %d outside 1..%d", B, m->B);
        return -1;
    }
    for (size_t i = 0; i < BT; i++)
        if (ids[i] < 0 || ids[i] >= m->sh.vocab) {
            snprintf(err, errlen, "token id %d at position %zu outside the vocabulary 0..%d",
                     ids[i], i, m->sh.vocab - 1);
            return -1;
        }
    m->batch = B;
    memset(&m->st, 0, sizeof m->st);
    for (size_t i = 0; i < BT; i++) m->h_mask[i] = mask ? mask[i] : 1.0f;
    size_t ntarg = m->sh.n_classes ? (size_t)B : BT;
    memcpy(m->h_targets, targets, ntarg * sizeof(int));
    be->to_device(m->ids, ids, BT * sizeof(int));
    be->to_device(m->mask, m->h_mask, BT * sizeof(float));
    be->to_device(m->targets, targets, ntarg * sizeof(int));

    be->embedding_forward(m->la[0].resid, m->ids, P_(m, m->wte), (int)BT, C);
    be->posadd_forward(m->la[0].resid, m->la[0].resid, P_(m, m->wpe), B, T, C);
    for (int l = 0; l < L; l++) {
        layer_acts *x = &m->la[l];
        layer_ids *p = &m->lp[l];
        float *next = l + 1 < L ? m->la[l + 1].resid : m->resid_out;
        double t_attn = 0;
        if (m->time_attention) {
            be->sync();
            t_attn = wall_s();
        }
        be->layernorm_forward(x->ln1, x->ln1_mean, x->ln1_rstd, x->resid, P_(m, p->ln1w),
                              P_(m, p->ln1b), (int)BT, C);
        const float *gate = NULL;
        if (m->sh.budget) {
            budget_forward(m, l, B);
            for (int b = 0; b < B; b++) m->st.mean_s += m->h_s[(size_t)l * m->B + b];
        }
        if (m->sh.budget && !training) {
            attention_selected(m, l, B, m->scratch_proj);
        } else {
            if (m->sh.budget) {
                gate_forward(m, l, B);
                gate_losses(m, l, B);
                be->to_device(x->gate, m->h_gate + (size_t)l * m->B * NH,
                              (size_t)B * NH * sizeof(float));
                gate = x->gate;
            }
            be->linear_forward(x->qkv, x->ln1, P_(m, p->wqkv), P_(m, p->bqkv), (int)BT, C, 3 * C);
            bk_attn_args a;
            attn_args(m, &a, B, gate);
            be->attention_forward(x->atty, x->att, x->qkv, &a);
            if (m->sh.hadamard)
                be->fwht_forward(m->scratch_proj, x->atty, P_(m, p->ha), P_(m, p->hb), (int)BT, C);
            else
                be->linear_forward(m->scratch_proj, x->atty, P_(m, p->wo), P_(m, p->bo), (int)BT, C,
                                   C);
        }
        be->add(x->mid, x->resid, m->scratch_proj, BT * C);
        if (m->time_attention) {
            be->sync();
            m->st.attn_seconds += wall_s() - t_attn;
        }
        be->layernorm_forward(x->ln2, x->ln2_mean, x->ln2_rstd, x->mid, P_(m, p->ln2w),
                              P_(m, p->ln2b), (int)BT, C);
        be->linear_forward(x->fch, x->ln2, P_(m, p->w1), P_(m, p->b1), (int)BT, C, 4 * C);
        be->gelu_forward(x->fchg, x->fch, BT * 4 * C);
        be->linear_forward(m->scratch_proj, x->fchg, P_(m, p->w2), P_(m, p->b2), (int)BT, 4 * C, C);
        be->add(next, x->mid, m->scratch_proj, BT * C);
        /* heads used and attention FLOPs by the inference rule */
        for (int b = 0; b < B; b++) {
            int k = m->sh.budget ? m->h_k[(size_t)l * m->B + b] : NH;
            m->st.heads_used += (double)k / NH;
            m->st.attn_flops += model_attn_flops(&m->sh, k, active_tokens(m, b));
        }
    }
    m->st.heads_used /= (double)B * L;
    m->st.attn_flops /= (double)B;
    if (m->sh.budget) m->st.mean_s /= (double)B * L;

    be->layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, m->resid_out, P_(m, m->lnfw),
                          P_(m, m->lnfb), (int)BT, C);
    int V, rows;
    if (m->sh.n_classes) {
        V = m->sh.n_classes;
        rows = B;
        be->meanpool_forward(m->pooled, m->lnf, m->mask, B, T, C);
        be->linear_forward(m->logits, m->pooled, P_(m, m->wc), P_(m, m->bc), B, C, V);
    } else {
        V = m->sh.vocab;
        rows = (int)BT;
        be->linear_forward(m->logits, m->lnf, P_(m, m->wte), NULL, rows, C, V);
    }
    be->crossentropy_forward(m->losses, m->probs, m->logits, m->targets, rows, V);
    float *hl = m->h_losses;
    be->to_host(hl, m->losses, (size_t)rows * sizeof(float));
    be->to_host(m->h_logits, m->logits, (size_t)rows * V * sizeof(float));
    double sum = 0, counted = 0, correct = 0;
    for (int r = 0; r < rows; r++) {
        int t = m->h_targets[r];
        if (t < 0) continue;
        sum += hl[r];
        counted += 1;
        const float *lg = m->h_logits + (size_t)r * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (lg[v] > lg[best]) best = v;
        correct += best == t;
    }
    m->st.counted = counted;
    m->st.correct = correct;
    m->st.loss_task = counted > 0 ? sum / counted : 0;
    m->st.loss = m->st.loss_task + m->st.loss_budget + m->st.loss_entropy;
    return 0;
}

/* ---- backward ---- */

void model_backward(model *m) {
    const bk_backend *be = m->be;
    int B = m->batch, T = m->sh.seq_len, C = m->sh.d_model, NH = m->sh.heads, L = m->sh.layers;
    size_t BT = (size_t)B * T;
    int V = m->sh.n_classes ? m->sh.n_classes : m->sh.vocab;
    int rows = m->sh.n_classes ? B : (int)BT;
    be->zero(m->P.grad, m->P.numel * sizeof(float));

    /* d loss_task / d losses[r] = 1/counted for counted rows */
    float *hd = malloc((size_t)rows * sizeof(float));
    if (!hd) return;
    float inv = m->st.counted > 0 ? (float)(1.0 / m->st.counted) : 0.0f;
    for (int r = 0; r < rows; r++) hd[r] = m->h_targets[r] >= 0 ? inv : 0.0f;
    be->to_device(m->dlosses, hd, (size_t)rows * sizeof(float));
    free(hd);
    be->zero(m->dlogits, (size_t)rows * V * sizeof(float));
    be->crossentropy_backward(m->dlogits, m->probs, m->targets, m->dlosses, rows, V);
    be->zero(m->dlnf, BT * C * sizeof(float));
    if (m->sh.n_classes) {
        be->zero(m->dpooled, (size_t)B * C * sizeof(float));
        be->linear_backward(m->dpooled, G_(m, m->wc), G_(m, m->bc), m->dlogits, m->pooled,
                            P_(m, m->wc), B, C, V);
        be->meanpool_backward(m->dlnf, m->dpooled, m->mask, B, T, C);
    } else {
        be->linear_backward(m->dlnf, G_(m, m->wte), NULL, m->dlogits, m->lnf, P_(m, m->wte), rows,
                            C, V);
    }
    be->zero(m->dres, BT * C * sizeof(float));
    be->layernorm_backward(m->dres, G_(m, m->lnfw), G_(m, m->lnfb), m->dlnf, m->resid_out,
                           P_(m, m->lnfw), m->lnf_mean, m->lnf_rstd, (int)BT, C);

    for (int l = L - 1; l >= 0; l--) {
        layer_acts *x = &m->la[l];
        layer_ids *p = &m->lp[l];
        /* MLP branch: next = mid + W2 gelu(W1 ln2(mid)) */
        be->zero(m->dfchg, BT * 4 * C * sizeof(float));
        be->linear_backward(m->dfchg, G_(m, p->w2), G_(m, p->b2), m->dres, x->fchg, P_(m, p->w2),
                            (int)BT, 4 * C, C);
        be->zero(m->dfch, BT * 4 * C * sizeof(float));
        be->gelu_backward(m->dfch, x->fch, m->dfchg, BT * 4 * C);
        be->zero(m->dln, BT * C * sizeof(float));
        be->linear_backward(m->dln, G_(m, p->w1), G_(m, p->b1), m->dfch, x->ln2, P_(m, p->w1),
                            (int)BT, C, 4 * C);
        be->layernorm_backward(m->dres, G_(m, p->ln2w), G_(m, p->ln2b), m->dln, x->mid,
                               P_(m, p->ln2w), x->ln2_mean, x->ln2_rstd, (int)BT, C);
        /* attention branch: mid = resid + proj(attention(ln1(resid))) */
        be->zero(m->datty, BT * C * sizeof(float));
        if (m->sh.hadamard)
            be->fwht_backward(m->datty, G_(m, p->ha), G_(m, p->hb), m->fwht_scratch, m->dres,
                              x->atty, P_(m, p->ha), (int)BT, C);
        else
            be->linear_backward(m->datty, G_(m, p->wo), G_(m, p->bo), m->dres, x->atty,
                                P_(m, p->wo), (int)BT, C, C);
        be->zero(m->dqkv, BT * 3 * C * sizeof(float));
        bk_attn_args a;
        attn_args(m, &a, B, m->sh.budget ? x->gate : NULL);
        if (m->sh.budget) be->zero(m->dgate, (size_t)B * NH * sizeof(float));
        be->attention_backward(m->dqkv, m->sh.budget ? m->dgate : NULL, m->datt, m->datty, x->qkv,
                               x->att, &a);
        be->zero(m->dln, BT * C * sizeof(float));
        be->linear_backward(m->dln, G_(m, p->wqkv), G_(m, p->bqkv), m->dqkv, x->ln1, P_(m, p->wqkv),
                            (int)BT, C, 3 * C);
        if (m->sh.budget) {
            size_t o = (size_t)l * m->B;
            be->to_host(m->h_dgate + o * NH, m->dgate, (size_t)B * NH * sizeof(float));
            gate_backward(m, l, B);
            be->to_device(m->dz, m->h_dz + o * NH, (size_t)B * NH * sizeof(float));
            be->to_device(m->dbf, m->h_df + o, (size_t)B * sizeof(float));
            be->zero(m->dxbar, (size_t)B * C * sizeof(float));
            be->linear_backward(m->dxbar, G_(m, p->sw), G_(m, p->sb), m->dz, x->xbar, P_(m, p->sw),
                                B, C, NH);
            be->zero(m->dbg, (size_t)B * (C / 4) * sizeof(float));
            be->linear_backward(m->dbg, G_(m, p->bw2), G_(m, p->bb2), m->dbf, x->bg, P_(m, p->bw2),
                                B, C / 4, 1);
            be->zero(m->dbh, (size_t)B * (C / 4) * sizeof(float));
            be->gelu_backward(m->dbh, x->bh, m->dbg, (size_t)B * (C / 4));
            be->linear_backward(m->dxbar, G_(m, p->bw1), G_(m, p->bb1), m->dbh, x->xbar,
                                P_(m, p->bw1), B, C, C / 4);
            be->meanpool_backward(m->dln, m->dxbar, m->mask, B, T, C);
        }
        be->layernorm_backward(m->dres, G_(m, p->ln1w), G_(m, p->ln1b), m->dln, x->resid,
                               P_(m, p->ln1w), x->ln1_mean, x->ln1_rstd, (int)BT, C);
    }
    be->posadd_backward(NULL, G_(m, m->wpe), m->dres, B, T, C);
    be->embedding_backward(G_(m, m->wte), m->dres, m->ids, (int)BT, C);
}
