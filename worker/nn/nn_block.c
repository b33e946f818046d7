/* nn_block.c — one pre-LN transformer block with a mixer slot (nn_block.h):
 * declare, plan, forward, backward, decode, and the taps distillation reads
 * and writes gradients at. */

#include "worker/nn/nn_block.h"

#include "worker/nn/nn_bilstm.h"
#include "worker/nn/nn_bilstm_wide.h"
#include "worker/nn/nn_bimamba.h"
#include "worker/nn/nn_bimamba2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- attention in the mixer slot ---- */

static int attn_plan(void *self, bk_arena *A, int B, int T) { return nn_attn_plan(self, A, B, T); }
static void attn_scratch(const void *self, nn_scratch *s) { nn_attn_scratch(self, s); }
static void attn_forward(void *self, const nn_env *e, nn_scratch *s, const nn_call *c, float *y,
                         const float *u) {
    nn_attn_forward(self, e, s, c, y, u);
}
static void attn_backward(void *self, const nn_env *e, nn_scratch *s, const nn_call *c, float *du,
                          const float *dy, const float *dinner, const float *u) {
    nn_attn_backward(self, e, s, c, du, dy, dinner, u);
}
static const float *attn_inner(const void *self) { return ((const nn_attn *)self)->atty; }
static void attn_destroy(void *self) {
    nn_attn_free(self);
    free(self);
}

static const nn_mixer_ops ATTENTION_OPS = {"attention",   attn_plan,  attn_scratch, attn_forward,
                                           attn_backward, attn_inner, attn_destroy};

/* ---- the sequential mixers of S2S in the mixer slot ---- */

static int mamba_plan(void *self, bk_arena *A, int B, int T) {
    return nn_bimamba_plan(self, A, B, T);
}
static void mamba_scratch(const void *self, nn_scratch *s) { nn_bimamba_scratch(self, s); }
static void mamba_forward(void *self, const nn_env *e, nn_scratch *s, const nn_call *c, float *y,
                          const float *u) {
    nn_bimamba_forward(self, e, s, c, y, u);
}
static void mamba_backward(void *self, const nn_env *e, nn_scratch *s, const nn_call *c, float *du,
                           const float *dy, const float *dinner, const float *u) {
    nn_bimamba_backward(self, e, s, c, du, dy, dinner, u);
}
static const float *mamba_inner(const void *self) { return ((const nn_bimamba *)self)->inner; }
static void plain_destroy(void *self) { free(self); }

static const nn_mixer_ops BIMAMBA_OPS = {"bimamba",      mamba_plan,  mamba_scratch, mamba_forward,
                                         mamba_backward, mamba_inner, plain_destroy};

static int lstm_plan(void *self, bk_arena *A, int B, int T) {
    return nn_bilstm_plan(self, A, B, T);
}
static void lstm_scratch(const void *self, nn_scratch *s) { nn_bilstm_scratch(self, s); }
static void lstm_forward(void *self, const nn_env *e, nn_scratch *s, const nn_call *c, float *y,
                         const float *u) {
    nn_bilstm_forward(self, e, s, c, y, u);
}
static void lstm_backward(void *self, const nn_env *e, nn_scratch *s, const nn_call *c, float *du,
                          const float *dy, const float *dinner, const float *u) {
    nn_bilstm_backward(self, e, s, c, du, dy, dinner, u);
}
static const float *lstm_inner(const void *self) { return ((const nn_bilstm *)self)->inner; }

static const nn_mixer_ops BILSTM_OPS = {"bilstm",      lstm_plan,  lstm_scratch, lstm_forward,
                                        lstm_backward, lstm_inner, plain_destroy};

static int wide_plan(void *self, bk_arena *A, int B, int T) {
    return nn_bilstm_wide_plan(self, A, B, T);
}
static void wide_scratch(const void *self, nn_scratch *s) { nn_bilstm_wide_scratch(self, s); }
static void wide_forward(void *self, const nn_env *e, nn_scratch *s, const nn_call *c, float *y,
                         const float *u) {
    nn_bilstm_wide_forward(self, e, s, c, y, u);
}
static void wide_backward(void *self, const nn_env *e, nn_scratch *s, const nn_call *c, float *du,
                          const float *dy, const float *dinner, const float *u) {
    nn_bilstm_wide_backward(self, e, s, c, du, dy, dinner, u);
}
static const float *wide_inner(const void *self) { return ((const nn_bilstm_wide *)self)->inner; }

static const nn_mixer_ops BILSTM_WIDE_OPS = {"bilstm_wide", wide_plan,  wide_scratch, wide_forward,
                                             wide_backward, wide_inner, plain_destroy};

static int m2_plan(void *self, bk_arena *A, int B, int T) {
    return nn_bimamba2_plan(self, A, B, T);
}
static void m2_scratch(const void *self, nn_scratch *s) { nn_bimamba2_scratch(self, s); }
static void m2_forward(void *self, const nn_env *e, nn_scratch *s, const nn_call *c, float *y,
                       const float *u) {
    nn_bimamba2_forward(self, e, s, c, y, u);
}
static void m2_backward(void *self, const nn_env *e, nn_scratch *s, const nn_call *c, float *du,
                        const float *dy, const float *dinner, const float *u) {
    nn_bimamba2_backward(self, e, s, c, du, dy, dinner, u);
}
static const float *m2_inner(const void *self) { return ((const nn_bimamba2 *)self)->inner; }

static const nn_mixer_ops BIMAMBA2_OPS = {"bimamba2",  m2_plan,  m2_scratch,   m2_forward,
                                          m2_backward, m2_inner, plain_destroy};

/* A sequential mixer under P.mamba, P.mamba2, P.lstm or P.lstm_wide, with attention's output
 * projection names (P.attn.out.*), so the teacher's W_O loads by name. */
static int declare_sequential(nn_block *b, nn_params *np, const char *prefix,
                              const nn_block_cfg *cf, char *err, size_t errlen) {
    char p[BK_NAME_MAX], o[BK_NAME_MAX];
    snprintf(o, sizeof o, "%s.attn.out", prefix);
    if (cf->attn.causal) {
        snprintf(err, errlen, "%s: mixer '%s' is bidirectional and cannot run a causal model",
                 prefix, cf->mixer);
        return -1;
    }
    nn_outproj *out; /* the mixer's output projection */
    if (strcmp(cf->mixer, "bimamba") == 0) {
        nn_bimamba *m = calloc(1, sizeof *m);
        if (!m) goto oom;
        b->mix = (nn_mixer){&BIMAMBA_OPS, m};
        snprintf(p, sizeof p, "%s.mamba", prefix);
        if (nn_bimamba_declare(m, np, p, o, cf->C, cf->attn.NH, cf->attn.hadamard, cf->std,
                               cf->resid_std, err, errlen))
            return -1;
        out = &m->out;
    } else if (strcmp(cf->mixer, "bimamba2") == 0) {
        nn_bimamba2 *m = calloc(1, sizeof *m);
        if (!m) goto oom;
        b->mix = (nn_mixer){&BIMAMBA2_OPS, m};
        snprintf(p, sizeof p, "%s.mamba2", prefix);
        if (nn_bimamba2_declare(m, np, p, o, cf->C, cf->attn.NH, cf->d_state, cf->attn.hadamard,
                                cf->resid_std, err, errlen))
            return -1;
        out = &m->out;
    } else if (strcmp(cf->mixer, "bilstm_wide") == 0) {
        nn_bilstm_wide *l = calloc(1, sizeof *l);
        if (!l) goto oom;
        b->mix = (nn_mixer){&BILSTM_WIDE_OPS, l};
        snprintf(p, sizeof p, "%s.lstm_wide", prefix);
        if (nn_bilstm_wide_declare(l, np, p, o, cf->C, cf->attn.NH, cf->attn.hadamard,
                                   cf->resid_std, err, errlen))
            return -1;
        out = &l->out;
    } else {
        nn_bilstm *l = calloc(1, sizeof *l);
        if (!l) goto oom;
        b->mix = (nn_mixer){&BILSTM_OPS, l};
        snprintf(p, sizeof p, "%s.lstm", prefix);
        if (nn_bilstm_declare(l, np, p, o, cf->C, cf->attn.NH, cf->attn.hadamard, cf->resid_std,
                              err, errlen))
            return -1;
        out = &l->out;
    }
    /* an inference-only model (attention's scratch_maps) keeps nothing for a
     * backward, as attention itself (nn_attn_declare) */
    out->infer_only = cf->attn.scratch_maps;
    return 0;
oom:
    snprintf(err, errlen, "out of memory declaring %s", prefix);
    return -1;
}

/* ---- the block ---- */

int nn_block_declare(nn_block *b, nn_params *np, const char *prefix, const nn_block_cfg *cf,
                     char *err, size_t errlen) {
    memset(b, 0, sizeof *b);
    b->C = cf->C;
    char p[BK_NAME_MAX];
    snprintf(p, sizeof p, "%s.ln1", prefix);
    if (nn_layernorm_declare(&b->ln1, np, p, cf->C)) goto oom;
    const char *mixer = cf->mixer ? cf->mixer : "attention";
    if (strcmp(mixer, "bimamba") == 0 || strcmp(mixer, "bimamba2") == 0 ||
        strcmp(mixer, "bilstm") == 0 || strcmp(mixer, "bilstm_wide") == 0) {
        if (declare_sequential(b, np, prefix, cf, err, errlen)) return -1;
        snprintf(p, sizeof p, "%s.ln2", prefix);
        if (nn_layernorm_declare(&b->ln2, np, p, cf->C)) goto oom;
        snprintf(p, sizeof p, "%s.mlp", prefix);
        if (nn_mlp_declare(&b->mlp, np, p, cf->C, cf->hidden, cf->std, cf->resid_std)) goto oom;
        return 0;
    }
    if (strcmp(mixer, "attention") != 0) {
        snprintf(
            err, errlen,
            "%s: unknown mixer '%s' (valid: attention, bimamba, bimamba2, bilstm, bilstm_wide)",
            prefix, mixer);
        return -1;
    }
    nn_attn *a = calloc(1, sizeof *a);
    if (!a) goto oom;
    b->mix = (nn_mixer){&ATTENTION_OPS, a};
    snprintf(p, sizeof p, "%s.attn", prefix);
    if (nn_attn_declare(a, np, p, &cf->attn, cf->std, cf->resid_std, err, errlen)) return -1;
    snprintf(p, sizeof p, "%s.ln2", prefix);
    if (nn_layernorm_declare(&b->ln2, np, p, cf->C)) goto oom;
    snprintf(p, sizeof p, "%s.mlp", prefix);
    if (nn_mlp_declare(&b->mlp, np, p, cf->C, cf->hidden, cf->std, cf->resid_std)) goto oom;
    snprintf(p, sizeof p, "%s.attn", prefix);
    if (nn_attn_declare_budget(a, np, p, cf->std)) goto oom;
    return 0;
oom:
    snprintf(err, errlen, "out of memory declaring %s", prefix);
    return -1;
}

int nn_block_plan(nn_block *b, bk_arena *A, int B, int T) {
    size_t BT = (size_t)B * T;
    b->B = B;
    b->T = T;
    nn_ln_acts_plan(&b->a1, A, BT, b->C);
    nn_ln_acts_plan(&b->a2, A, BT, b->C);
    b->mid = bk_arena_floats(A, BT * b->C);
    b->mix_out = bk_arena_floats(A, BT * b->C);
    nn_mlp_plan(&b->mlp, A, BT);
    return b->mix.ops->plan(b->mix.self, A, B, T);
}

void nn_block_ws_plan(nn_block_ws *w, bk_arena *A, size_t rows, int C) {
    w->dln = bk_arena_floats(A, rows * C);
    w->dmix = bk_arena_floats(A, rows * C);
}

void nn_block_scratch(const nn_block *b, nn_scratch *s) {
    b->mix.ops->scratch(b->mix.self, s);
    /* the MLP output in forward; the MLP backward's own */
    size_t rows = (size_t)b->B * b->T;
    nn_scratch_need(s, rows * b->C);
    nn_scratch_need(s, nn_mlp_scratch(&b->mlp, rows));
}

void nn_block_destroy(nn_block *b) {
    if (b->mix.ops && b->mix.self) b->mix.ops->destroy(b->mix.self);
    b->mix.self = NULL;
}

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The call as this block sees it: its own mask when it has one. */
static nn_call block_call(const nn_block *b, const nn_call *c) {
    nn_call bc = *c;
    if (b->mask) {
        bc.mask = b->mask;
        bc.h_mask = b->h_mask;
    }
    return bc;
}

/* Whether the block's own mask may freeze rows: not when it is known to be
 * all ones (then every rowscale by it is the identity). */
static int freezes(const nn_block *b) { return b->mask && !b->mask_ones; }

/* Under the block's own mask (A-ViT halting) a masked row is frozen: its
 * LayerNorm outputs and both branch outputs are zeroed, so out = x there. */
static void freeze_rows(const nn_block *b, const nn_env *e, float *v, int N) {
    if (freezes(b)) e->be->rowscale(v, v, b->mask, N, b->C);
}

void nn_block_forward(nn_block *b, const nn_env *e, nn_scratch *s, const nn_call *c, float *out,
                      const float *x) {
    const bk_backend *be = e->be;
    nn_call bc = block_call(b, c);
    int N = bc.B * bc.T;
    size_t NC = (size_t)N * b->C;
    b->x_in = x;
    b->x_out = out;
    double t0 = 0;
    if (bc.time_mixer) {
        be->sync();
        t0 = wall_s();
    }
    nn_layernorm_forward(&b->ln1, e, &b->a1, x, N);
    freeze_rows(b, e, b->a1.out, N);
    double t1 = 0;
    if (bc.time_mixer) {
        be->sync();
        t1 = wall_s();
    }
    b->mix.ops->forward(b->mix.self, e, s, &bc, b->mix_out, b->a1.out);
    if (bc.time_mixer) {
        be->sync();
        bc.st->mixer_seconds += wall_s() - t1;
    }
    freeze_rows(b, e, b->mix_out, N);
    be->add(b->mid, x, b->mix_out, NC);
    if (bc.time_mixer) {
        be->sync();
        bc.st->attn_seconds += wall_s() - t0;
    }
    nn_layernorm_forward(&b->ln2, e, &b->a2, b->mid, N);
    freeze_rows(b, e, b->a2.out, N);
    nn_scratch_begin(s);
    float *mlp_out = nn_scratch_floats(s, NC);
    nn_mlp_forward(&b->mlp, e, mlp_out, b->a2.out, N);
    freeze_rows(b, e, mlp_out, N);
    be->add(out, b->mid, mlp_out, NC);
}

void nn_block_backward(nn_block *b, const nn_env *e, nn_scratch *s, const nn_block_ws *w,
                       const nn_call *c, float *dx) {
    const bk_backend *be = e->be;
    nn_call bc = block_call(b, c);
    int N = bc.B * bc.T;
    size_t NC = (size_t)N * b->C;
    if (b->tap_grad[NN_TAP_OUT]) be->add(dx, dx, b->tap_grad[NN_TAP_OUT], NC);
    /* MLP branch: out = mid + MLP(LN2(mid)) */
    const float *dy = dx;
    if (freezes(b)) {
        be->rowscale(w->dmix, dx, b->mask, N, b->C);
        dy = w->dmix;
    }
    be->zero(w->dln, NC * sizeof(float));
    nn_mlp_backward(&b->mlp, e, s, w->dln, dy, b->a2.out, N);
    freeze_rows(b, e, w->dln, N);
    nn_layernorm_backward(&b->ln2, e, &b->a2, dx, w->dln, b->mid, N);
    /* mixer branch: mid = x + Mix(LN1(x)) */
    dy = dx;
    if (b->tap_grad[NN_TAP_MIXER]) {
        be->add(w->dmix, dx, b->tap_grad[NN_TAP_MIXER], NC);
        dy = w->dmix;
    }
    if (freezes(b)) {
        be->rowscale(w->dmix, dy, b->mask, N, b->C);
        dy = w->dmix;
    }
    be->zero(w->dln, NC * sizeof(float));
    b->mix.ops->backward(b->mix.self, e, s, &bc, w->dln, dy, b->tap_grad[NN_TAP_MIXER_INNER],
                         b->a1.out);
    freeze_rows(b, e, w->dln, N);
    nn_layernorm_backward(&b->ln1, e, &b->a1, dx, w->dln, b->x_in, N);
}

void nn_block_decode(nn_block *b, const nn_env *e, const nn_decode_ws *w, float *x, float *kc,
                     float *vc, int batch, int pos, int n) {
    const bk_backend *be = e->be;
    int rows = n * batch;
    size_t RC = (size_t)rows * b->C;
    nn_ln_acts ln = {w->ln, w->mean, w->rstd};
    nn_layernorm_forward(&b->ln1, e, &ln, x, rows);
    nn_attn_decode(nn_block_attn(b), e, w->proj, w->ln, kc, vc, batch, pos, n, w->q, w->y,
                   w->scores);
    be->add(x, x, w->proj, RC);
    nn_layernorm_forward(&b->ln2, e, &ln, x, rows);
    nn_mlp_forward_rows(&b->mlp, e, w->proj, w->ln, rows, w->fch, w->fchg);
    be->add(x, x, w->proj, RC);
}

nn_attn *nn_block_attn(const nn_block *b) {
    return b->mix.ops == &ATTENTION_OPS ? (nn_attn *)b->mix.self : NULL;
}

const float *nn_block_tap(const nn_block *b, nn_tap t) {
    switch (t) {
    case NN_TAP_MIXER_INNER:
        return b->mix.ops->inner(b->mix.self);
    case NN_TAP_MIXER:
        return b->mix_out;
    case NN_TAP_OUT:
        return b->x_out;
    default:
        return NULL;
    }
}

void nn_block_tap_grad(nn_block *b, nn_tap t, const float *dgrad) {
    if (t >= 0 && t < NN_TAP_COUNT) b->tap_grad[t] = dgrad;
}
