/* s2s.c — the model side of the S2S stages (s2s.h): distillation's masked
 * MSE at the replaced mixers, and the speed measurements that pick which
 * layers to replace. */

#include "worker/pipelines/s2s.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/bk_rng.h"

static int distill_before(void *ctx, model *m, const int *in, const int *targets, int rows,
                          char *err, size_t errlen) {
    s2s_distill *d = ctx;
    d->teacher.drop = 0; /* masked: the full layout the student's rows line up with */
    /* the student's augmented images: its crop and flip, drawn from its knobs */
    d->teacher.aug_pad = m->aug_pad, d->teacher.aug_flip = m->aug_flip;
    d->teacher.kn.seed = m->kn.seed, d->teacher.kn.step = m->kn.step;
    d->teacher.kn.row_offset = m->kn.row_offset;
    d->teacher.aug_infer = 1;
    int rc = model_forward(&d->teacher, in, NULL, targets, rows, 0, err, errlen);
    d->teacher.aug_infer = 0; /* validation sees the images as they are */
    if (rc) return -1;
    if (d->teacher.sh.avit) { /* a dense teacher: no masks, the student runs every token */
        m->ext_mask = d->teacher.halt.mask;
        m->ext_ones = d->teacher.halt.ones;
    }
    d->steps += 1;
    return 0;
}

/* The teacher's mask of layer l: its halting's, or NULL (every token) for a
 * dense teacher. */
static const float *teacher_mask(const s2s_distill *d, int l) {
    return d->teacher.sh.avit ? d->teacher.halt.mask[l] : NULL;
}

/* The masked MSE of each replaced layer and its gradient at the mixer's
 * inner tap. */
static void distill_backward(void *ctx, model *m) {
    s2s_distill *d = ctx;
    const bk_backend *be = d->be;
    int N = m->batch * m->sh.seq_len, C = m->sh.d_model;
    for (int i = 0; i < d->n; i++) {
        int l = d->layers[i];
        nn_block *b = &m->blocks[l];
        const float *s = nn_block_tap(b, NN_TAP_MIXER_INNER);
        const float *t = model_attn(&d->teacher, l)->atty, *mask = teacher_mask(d, l);
        be->mse_forward(d->mse + i, s, t, mask, N, C);
        be->add(d->acc, d->acc, d->mse + i, 1);
        be->zero(d->grad[i], (size_t)N * C * sizeof(float));
        be->mse_backward(d->grad[i], NULL, s, t, mask, d->lambda_mse, N, C);
        nn_block_tap_grad(b, NN_TAP_MIXER_INNER, d->grad[i]);
    }
    if (d->lambda_halt > 0) be->zero(d->tcum, (size_t)N * sizeof(float));
    for (int l = 0; d->lambda_halt > 0 && l < m->sh.layers - 1; l++) {
        bk_halt_args a = {.B = m->batch,
                          .T = m->sh.seq_len,
                          .C = C,
                          .layer = l,
                          .layers = m->sh.layers,
                          .gamma = m->halt.cf.gamma,
                          .centre = nn_halt_gate_centre(&m->halt.cf),
                          .eps = m->halt.cf.eps,
                          .mean_h = d->mean_h};
        be->zero(d->hgrad[l], (size_t)N * C * sizeof(float));
        be->halt_align(d->hgrad[l], d->hlayer ? d->hlayer : d->hloss, d->hlayer ? l : 0,
                       m->x[l + 1], d->teacher.halt.h[l], d->tcum, d->teacher.halt.mask[l],
                       d->lambda_halt, &a);
        be->axpy(d->tcum, d->teacher.halt.h[l], 1.0f, (size_t)N); /* h = 0 where halted */
        nn_block_tap_grad(&m->blocks[l], NN_TAP_OUT, d->hgrad[l]);
    }
}

static void distill_log(void *ctx, void (*metric)(void *mctx, const char *name, double value),
                        void *mctx) {
    s2s_distill *d = ctx;
    double both[2] = {0, 0}; /* hloss, then acc's float: one copy for the window */
    d->be->to_host(both, d->hloss, sizeof both);
    d->be->zero(d->hloss, sizeof both);
    double hl = both[0];
    float acc;
    memcpy(&acc, &both[1], sizeof acc);
    metric(mctx, "train/loss_mse", d->steps > 0 ? acc / d->steps : NAN);
    if (d->teacher.sh.avit) /* a dense teacher has no halting to align */
        metric(mctx, "train/loss_halt", d->steps > 0 ? hl / d->steps : NAN);
    d->steps = 0;
}

/* The replaced layers' MSE on the validation split (the held-out version
 * of train/loss_mse): the teacher runs each batch, the student runs it
 * under the teacher's masks, and each layer's masked MSE at the mixer's
 * inner tap is averaged over samples (per batch, weighted by its samples),
 * then summed over the replaced layers. */
static int distill_validate(void *ctx, model *m, const bf_config *c, const data_sets *ds,
                            const pipe_host *h,
                            void (*metric)(void *mctx, const char *name, double value), void *mctx,
                            char *err, size_t errlen) {
    s2s_distill *d = ctx;
    if (!ds->val) return 0;
    const bk_backend *be = d->be;
    data_batcher_t *bt;
    data_batch_t b;
    float h_mse[MODEL_MAX_LAYERS];
    if (pipe_eval_batcher(m, c, ds, ds->val, h, &bt, &b, err, errlen)) return -1;
    int drop = m->drop, tdrop = d->teacher.drop, rc = 0;
    float *const *ext = m->ext_mask;
    const int *ext_ones = m->ext_ones;
    m->drop = d->teacher.drop = 0;
    m->ext_infer = 1;
    double sum[2] = {0, 0}; /* sum over samples of the layers' MSE, samples */
    for (;;) {
        int r = data_batch_next(bt, &b, err, errlen);
        if (r == DATA_END) break;
        if (r || (b.valid_rows > 0 && model_forward(&d->teacher, b.ids, b.mask, b.labels,
                                                    b.valid_rows, 0, err, errlen))) {
            rc = -1;
            break;
        }
        if (b.valid_rows == 0) continue;
        if (d->teacher.sh.avit) {
            m->ext_mask = d->teacher.halt.mask;
            m->ext_ones = d->teacher.halt.ones;
        }
        if (model_forward(m, b.ids, b.mask, b.labels, b.valid_rows, 0, err, errlen)) {
            rc = -1;
            break;
        }
        int N = b.valid_rows * m->sh.seq_len, C = m->sh.d_model;
        for (int i = 0; i < d->n; i++) {
            int l = d->layers[i];
            be->mse_forward(d->mse + i, nn_block_tap(&m->blocks[l], NN_TAP_MIXER_INNER),
                            model_attn(&d->teacher, l)->atty, teacher_mask(d, l), N, C);
        }
        be->to_host(h_mse, d->mse, (size_t)d->n * sizeof(float));
        for (int i = 0; i < d->n; i++) sum[0] += (double)h_mse[i] * b.valid_rows;
        sum[1] += b.valid_rows;
    }
    m->drop = drop, d->teacher.drop = tdrop, m->ext_infer = 0, m->ext_mask = ext;
    m->ext_ones = ext_ones;
    data_batch_free(&b);
    data_batcher_destroy(&bt);
    if (rc) return rc;
    if (h && h->sum_f64 && h->sum_f64(h->ctx, sum, 2, err, errlen)) return -1;
    metric(mctx, "val/loss_mse", sum[1] > 0 ? sum[0] / sum[1] : NAN);
    return 0;
}

int s2s_distill_spec(s2s_distill *d, pipe_spec *sp, const int *layers, int n, float lambda_mse,
                     float lambda_halt, float label_smoothing, int unfreeze, int mixer_kind,
                     char *err, size_t errlen) {
    const bk_backend *be = d->teacher.be;
    d->be = be;
    d->teacher.trunk_only = 1; /* its masks, h and attention outputs only: no head, no copy */
    d->n = n;
    d->lambda_mse = lambda_mse;
    memcpy(d->layers, layers, (size_t)n * sizeof(int));
    size_t NC = (size_t)d->teacher.B * d->teacher.sh.seq_len * d->teacher.sh.d_model;
    d->mse = be->alloc((size_t)n * sizeof(float));
    d->grad = calloc((size_t)n, sizeof *d->grad);
    int L = d->teacher.sh.layers;
    d->lambda_halt = d->teacher.sh.avit ? lambda_halt : 0.0f; /* dense: nothing halts */
    d->hgrad = calloc((size_t)L, sizeof *d->hgrad);
    /* the window's two sums in one buffer, read by one copy: hloss (a double)
     * then acc (a float in the second double's bytes) */
    d->hloss = be->alloc(2 * sizeof(double));
    d->acc = d->hloss ? (float *)(d->hloss + 1) : NULL;
    d->tcum = be->alloc((size_t)d->teacher.B * d->teacher.sh.seq_len * sizeof(float));
    int ok = d->mse && d->grad && d->hgrad && d->hloss && d->tcum;
    for (int i = 0; ok && i < n; i++) ok = (d->grad[i] = be->alloc(NC * sizeof(float))) != NULL;
    for (int l = 0; ok && lambda_halt > 0 && l < L - 1; l++)
        ok = (d->hgrad[l] = be->alloc(NC * sizeof(float))) != NULL;
    if (!ok) {
        snprintf(err, errlen, "out of memory for the distillation buffers");
        return -1;
    }
    be->zero(d->hloss, 2 * sizeof(double));
    int k = 0;
    for (int i = 0; !unfreeze && i < n; i++) {
        char p[64];
        snprintf(p, sizeof p, "blocks.%d.%s.", layers[i], model_mixer_prefix(mixer_kind));
        if (!(d->trainable[k++] = strdup(p))) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    d->trainable[k] = NULL;
    *sp = pipe_vit;
    sp->name = "s2s distill";
    sp->model_kind = "vit student (stage 1: layer distillation)";
    sp->check = NULL; /* the student halts as the teacher says: no retention target here */
    sp->window = NULL;
    sp->trainable = unfreeze ? NULL : (const char *const *)d->trainable;
    sp->ctx = d;
    sp->before_forward = distill_before;
    sp->extra_backward = distill_backward;
    sp->log_ctx = distill_log;
    sp->validate_ctx = distill_validate;
    sp->label_smoothing = label_smoothing;
    return 0;
}

void s2s_distill_free(s2s_distill *d) {
    if (d->be) {
        for (int i = 0; d->grad && i < d->n; i++) d->be->release(d->grad[i]);
        for (int l = 0; d->hgrad && l < d->teacher.sh.layers; l++)
            if (d->hgrad[l]) d->be->release(d->hgrad[l]);
        d->be->release(d->hloss);
        if (d->hlayer) d->be->release(d->hlayer);
        if (d->tcum) d->be->release(d->tcum);
        d->be->release(d->mse);
    }
    free(d->grad);
    free(d->hgrad);
    for (int i = 0; d->trainable[i]; i++) free(d->trainable[i]);
    model_destroy(&d->teacher);
    memset(d, 0, sizeof *d);
}

/* ---- speed ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The shape at T tokens: square images of sqrt(T - 1) patches a side. */
static int shape_at(model_shape *sh, int T, char *err, size_t errlen) {
    int side = (int)lround(sqrt((double)(T - 1)));
    if (side * side != T - 1 || sh->patch < 1) {
        snprintf(err, errlen, "%d tokens is not a square of patches plus the class token", T);
        return -1;
    }
    sh->seq_len = T;
    sh->image_h = sh->image_w = side * sh->patch;
    return 0;
}

static int random_batch(model *m, int B, int **img, int **lab) {
    size_t px = (size_t)m->sh.image_h * m->sh.image_w;
    *img = malloc((size_t)B * px * sizeof(int));
    *lab = malloc((size_t)B * sizeof(int));
    if (!*img || !*lab) return -1;
    for (size_t i = 0; i < (size_t)B * px; i++)
        (*img)[i] = (int)(256 * bk_rng_uniform_at(7, 3, i)) & 255;
    for (int b = 0; b < B; b++) (*lab)[b] = b % m->sh.n_classes;
    return 0;
}

/* One model a speed measurement runs: shape at T tokens, fresh weights, a
 * random batch, halting tuned (avit) to keep `retention` of the tokens. */
typedef struct speed_probe {
    model m;
    int *img, *lab;
    int B, open, timed; /* timed: st.attn_seconds is the measure (a mixer alone) */
} speed_probe;

static void probe_close(speed_probe *p) {
    free(p->img), free(p->lab);
    if (p->open) model_destroy(&p->m);
    memset(p, 0, sizeof *p);
}

static int probe_open(speed_probe *p, const model_shape *shape, const bk_backend *be, int T,
                      double retention, int B, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    model_shape sh = *shape;
    sh.infer_only = 1;
    if (shape_at(&sh, T, err, errlen) || model_create(&p->m, &sh, be, B, err, errlen)) return -1;
    p->open = 1;
    p->B = B;
    if (model_init_weights(&p->m, 1, err, errlen)) return -1;
    if (random_batch(&p->m, B, &p->img, &p->lab)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (sh.avit) { /* the gate centre that keeps `retention` of the tokens, by bisection */
        double lo = -50, hi = 50;
        p->m.drop = 0;
        for (int i = 0; i < 40; i++) {
            p->m.halt.cf.centre = (float)(0.5 * (lo + hi));
            if (model_forward(&p->m, p->img, NULL, p->lab, B, 0, err, errlen)) return -1;
            if (fabs(p->m.st.retention - retention) < 0.01) break;
            *(p->m.st.retention > retention ? &hi : &lo) = p->m.halt.cf.centre;
        }
        p->m.drop = 1;
    }
    return 0;
}

/* Seconds of one inference forward (or of its mixer sublayer when timed). */
static double probe_once(speed_probe *p, char *err, size_t errlen) {
    const bk_backend *be = p->m.be;
    be->sync();
    double t0 = now_s();
    if (model_forward(&p->m, p->img, NULL, p->lab, p->B, 0, err, errlen)) return -1;
    be->sync();
    return p->timed ? p->m.st.attn_seconds : now_s() - t0;
}

/* Times n probes in turns: a warm-up round, then reps rounds of one forward
 * each; best[k] = the fastest of probe k. Taking turns lets a slow moment of
 * the machine hit every probe alike, so the ratios hold better than the
 * absolute times. */
static int probe_rounds(speed_probe *p, int n, int reps, double *best, char *err, size_t errlen) {
    for (int k = 0; k < n; k++) best[k] = INFINITY;
    for (int r = 0; r <= reps; r++)
        for (int k = 0; k < n; k++) {
            double s = probe_once(&p[k], err, errlen);
            if (s < 0) return -1;
            if (r > 0 && s < best[k]) best[k] = s; /* r = 0 warms up */
        }
    return 0;
}

int s2s_speeds(const model_shape *shapes, const double *retention, int n, const bk_backend *be,
               int T, int B, int reps, double *ips, double *ret, char *err, size_t errlen) {
    speed_probe p[S2S_SPEED_MAX];
    double best[S2S_SPEED_MAX];
    if (n < 1 || n > S2S_SPEED_MAX) {
        snprintf(err, errlen, "%d models to time (1..%d)", n, S2S_SPEED_MAX);
        return -1;
    }
    memset(p, 0, sizeof p);
    int rc = 0;
    for (int k = 0; !rc && k < n; k++)
        rc =
            probe_open(&p[k], &shapes[k], be, T, shapes[k].avit ? retention[k] : 1, B, err, errlen);
    if (!rc) rc = probe_rounds(p, n, reps, best, err, errlen);
    for (int k = 0; !rc && k < n; k++) {
        ips[k] = B / best[k];
        ret[k] = shapes[k].avit ? p[k].m.st.retention : 1;
    }
    for (int k = 0; k < n; k++) probe_close(&p[k]);
    return rc;
}

/* The images a timing reads, copied out of the batcher so that no data
 * work falls inside a timed forward. */
typedef struct split_batches {
    int n, rows, T;
    int32_t *ids, *labels;
    float *mask;
    int *valid;
} split_batches;

static void split_batches_free(split_batches *s) {
    free(s->ids), free(s->labels), free(s->mask), free(s->valid);
    memset(s, 0, sizeof *s);
}

static int split_batches_read(split_batches *s, const model *m, const bf_config *c,
                              const data_sets *d, int split, int max_images, char *err,
                              size_t errlen) {
    memset(s, 0, sizeof *s);
    const data_tok_t *set = split ? d->test : d->val;
    if (!set) {
        snprintf(err, errlen, "no %s split to time the trained models on",
                 split ? "test" : "validation");
        return -1;
    }
    data_batcher_t *bt;
    data_batch_t b;
    if (pipe_eval_batcher(m, c, d, set, NULL, &bt, &b, err, errlen)) return -1;
    s->rows = b.rows, s->T = b.seq_len;
    size_t RT = (size_t)s->rows * s->T;
    int cap = (max_images + s->rows - 1) / s->rows, images = 0, rc = 0;
    if (cap < 1) cap = 1;
    s->ids = malloc((size_t)cap * RT * sizeof *s->ids);
    s->mask = malloc((size_t)cap * RT * sizeof *s->mask);
    s->labels = malloc((size_t)cap * s->rows * sizeof *s->labels);
    s->valid = malloc((size_t)cap * sizeof *s->valid);
    if (!s->ids || !s->mask || !s->labels || !s->valid) {
        snprintf(err, errlen, "out of memory for %d batches of test images", cap);
        rc = -1;
    }
    while (!rc && s->n < cap && images < max_images) {
        int r = data_batch_next(bt, &b, err, errlen);
        if (r == DATA_END) break;
        if (r) {
            rc = -1;
            break;
        }
        if (b.valid_rows == 0) continue;
        memcpy(s->ids + s->n * RT, b.ids, RT * sizeof *s->ids);
        memcpy(s->mask + s->n * RT, b.mask, RT * sizeof *s->mask);
        memcpy(s->labels + (size_t)s->n * s->rows, b.labels, (size_t)s->rows * sizeof *s->labels);
        s->valid[s->n++] = b.valid_rows;
        images += b.valid_rows;
    }
    data_batch_free(&b);
    data_batcher_destroy(&bt);
    if (!rc && s->n == 0) {
        snprintf(err, errlen, "the %s split has no images to time", split ? "test" : "validation");
        rc = -1;
    }
    if (rc) split_batches_free(s);
    return rc;
}

int s2s_split_speeds(model *const *m, int n, const bf_config *c, const data_sets *d, int split,
                     int max_images, int reps, double *ips, double *ret, double *images, char *err,
                     size_t errlen) {
    if (n < 1 || n > S2S_SPEED_MAX || reps < 1) {
        snprintf(err, errlen, "%d models to time (1..%d), %d rounds (>= 1)", n, S2S_SPEED_MAX,
                 reps);
        return -1;
    }
    for (int k = 1; k < n; k++)
        if (m[k]->B != m[0]->B) {
            snprintf(err, errlen, "models of batch %d and %d: the timed batches need one", m[0]->B,
                     m[k]->B);
            return -1;
        }
    split_batches s;
    if (split_batches_read(&s, m[0], c, d, split, max_images, err, errlen)) return -1;
    double *best = malloc((size_t)s.n * n * sizeof *best), keep[S2S_SPEED_MAX] = {0}, seen = 0;
    if (!best) {
        split_batches_free(&s);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < s.n * n; i++) best[i] = INFINITY;
    size_t RT = (size_t)s.rows * s.T;
    int rc = 0;
    for (int r = 0; !rc && r <= reps; r++) /* r = 0 warms up and reads the retention */
        for (int j = 0; !rc && j < s.n; j++)
            for (int k = 0; !rc && k < n; k++) {
                const bk_backend *be = m[k]->be;
                be->sync();
                double t0 = now_s();
                rc = model_forward(m[k], s.ids + j * RT, s.mask + j * RT,
                                   s.labels + (size_t)j * s.rows, s.valid[j], 0, err, errlen);
                be->sync();
                double t = now_s() - t0;
                if (r > 0 && t < best[j * n + k]) best[j * n + k] = t;
                if (r == 0) keep[k] += (m[k]->sh.avit ? m[k]->st.retention : 1) * s.valid[j];
                if (r == 0 && k == 0) seen += s.valid[j];
            }
    for (int k = 0; !rc && k < n; k++) {
        double t = 0;
        for (int j = 0; j < s.n; j++) t += best[j * n + k];
        ips[k] = seen / t;
        ret[k] = keep[k] / seen;
    }
    if (!rc) *images = seen;
    free(best);
    split_batches_free(&s);
    return rc;
}

int s2s_mixer_ms(const model_shape *shape, const bk_backend *be, int mixer, int T, int B, int reps,
                 double *attention_ms, double *mixer_ms, char *err, size_t errlen) {
    speed_probe p[2];
    double best[2];
    memset(p, 0, sizeof p);
    int rc = 0;
    for (int k = 0; !rc && k < 2; k++) { /* one layer of attention, one of the mixer */
        model_shape sh = *shape;
        sh.layers = 1;
        sh.avit = 0;
        memset(sh.mixer, 0, sizeof sh.mixer);
        sh.mixer[0] = (unsigned char)(k ? mixer : MODEL_MIXER_ATTENTION);
        rc = probe_open(&p[k], &sh, be, T, 1, B, err, errlen);
        p[k].timed = 1;
        if (!rc) p[k].m.time_attention = 1; /* st.attn_seconds: LN1 to the residual add */
    }
    if (!rc) rc = probe_rounds(p, 2, reps, best, err, errlen);
    if (!rc) *attention_ms = 1e3 * best[0], *mixer_ms = 1e3 * best[1];
    for (int k = 0; k < 2; k++) probe_close(&p[k]);
    return rc;
}

int s2s_module_ms(const model_shape *shape, const bk_backend *be, int kind, int N, int C, int B,
                  int warmup, int reps, double *ms, char *err, size_t errlen) {
    if (N < 2 || reps < 1 || warmup < 0) {
        snprintf(err, errlen,
                 "module timing at %d tokens, %d timed, %d warm-up (need >= 2, >= 1, "
                 ">= 0)",
                 N, reps, warmup);
        return -1;
    }
    /* one layer over a row of N - 1 patches: the module sees [B, N, C] */
    model_shape sh = *shape;
    sh.layers = 1;
    sh.avit = 0;
    sh.infer_only = 1;
    sh.d_model = C;
    sh.heads = C / 64 > 0 ? C / 64 : 1;
    memset(sh.mixer, 0, sizeof sh.mixer);
    sh.mixer[0] = (unsigned char)kind;
    sh.seq_len = N;
    sh.image_h = sh.patch;
    sh.image_w = sh.patch * (N - 1);
    speed_probe p;
    memset(&p, 0, sizeof p);
    if (model_create(&p.m, &sh, be, B, err, errlen)) return -1;
    p.open = 1;
    p.B = B;
    p.timed = 1;
    p.m.time_attention = 1;
    int rc = model_init_weights(&p.m, 1, err, errlen);
    if (!rc && random_batch(&p.m, B, &p.img, &p.lab)) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    }
    double sum = 0;
    for (int r = 0; !rc && r < warmup + reps; r++) {
        rc = model_forward(&p.m, p.img, NULL, p.lab, B, 0, err, errlen);
        if (!rc && r >= warmup) sum += p.m.st.mixer_seconds;
    }
    if (!rc) *ms = 1e3 * sum / reps;
    probe_close(&p);
    return rc;
}
