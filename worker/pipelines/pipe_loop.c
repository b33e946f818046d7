/* pipe_loop — the generic training loop: a pipe_spec says what to train,
 * a pipe_host how to talk to the other ranks, the files and the daemon. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker/pipelines/pipe.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Learning rate: linear warmup, then cosine from lr down to lr/10. */
static float lr_at(const bf_config *c, long step) {
    float lr = c->train.lr;
    if (c->train.warmup > 0 && step < c->train.warmup)
        return lr * (float)(step + 1) / (float)c->train.warmup;
    long decay = c->train.steps - c->train.warmup;
    if (decay <= 0) return lr;
    float p = (float)(step - c->train.warmup) / (float)decay;
    if (p > 1) p = 1;
    return lr * (0.1f + 0.9f * 0.5f * (1.0f + cosf(3.14159265f * p)));
}

static void fmt_eta(double s, char *buf, size_t n) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else
        snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
}

/* What the host counts over one logging window (the rest is in the
 * model's device stats buffer, read once when the window is logged). */
typedef struct window {
    double steps, tokens;
    uint64_t d2h_calls; /* device-to-host copies at the window's start */
} window;

/* Everything one run of the loop holds. */
typedef struct loop {
    const pipe_spec *sp;
    const bf_config *c;
    const data_sets *d;
    const pipe_host *h;
    const bk_backend *be;
    int quiet, local_batch, reduce;
    model m;
    float *adam_m, *adam_v;
    bk_adamw hp;
    float *norm; /* device: the gradient norm of the current step */
    data_batcher_t *bt;
    data_batch_t b;
    window w;
    eval_result last_val; /* the last validation (the spec's check reads it) */
    long val_step;        /* the step validate_ctx's metrics are logged at */
    double t_start, t_log, t_comm;
    long start;
    /* the logging window a resumed checkpoint was in (restored after
     * window_begin): its steps and tokens, and its device stats summed
     * over ranks (rank 0 adds them back) */
    int resumed_window;
    double resumed_steps, resumed_tokens, resumed_stats[BK_STAT_SLOTS];
} loop;

static int host_sum(const loop *L, double *v, int n, char *err, size_t errlen) {
    return L->h->sum_f64 ? L->h->sum_f64(L->h->ctx, v, n, err, errlen) : 0;
}

static int host_any(const loop *L, int flag, int *any, char *err, size_t errlen) {
    if (!L->h->any) {
        *any = flag;
        return 0;
    }
    return L->h->any(L->h->ctx, flag, any, err, errlen);
}

static void metric(const loop *L, const char *name, double v) {
    if (L->h->metric) L->h->metric(L->h->ctx, name, v);
}

static void metric_begin(const loop *L, long step) {
    if (L->h->metric_begin) L->h->metric_begin(L->h->ctx, step);
}

/* Freezes the tensors named by train.freeze (comma-separated prefixes); a
 * prefix that names no tensor is an error listing a few valid names. */
static int freeze_config(model *m, const char *list, char *err, size_t errlen) {
    char buf[sizeof((bf_config *)0)->train.freeze];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *p = strtok_r(buf, ", ", &save); p; p = strtok_r(NULL, ", ", &save)) {
        if (nn_params_freeze(&m->np, p, 1) == 0) {
            const bk_params *P = &m->np.P;
            snprintf(err, errlen,
                     "train.freeze: '%s' names no tensor (names look like %s, %s, %s; "
                     "docs/checkpoints.md lists them)",
                     p, P->t[0].name, P->n > 2 ? P->t[2].name : "", P->t[P->n - 1].name);
            return -1;
        }
    }
    return 0;
}

/* Builds and initialises the model (weights from seed or init.from, frozen
 * groups) and the optimiser state. */
static int loop_model(loop *L, char *err, size_t errlen) {
    model_shape sh = pipe_model_shape(L->c, L->d);
    /* refused up front, with the sizes, rather than found buffer by buffer */
    if (model_fits(&sh, L->be, L->local_batch, 1, err, errlen) ||
        model_create(&L->m, &sh, L->be, L->local_batch, err, errlen))
        return -1;
    pipe_model_config(&L->m, L->c);
    L->m.label_smoothing = L->sp->label_smoothing;
    if (model_init_weights(&L->m, L->c->train.seed, err, errlen)) return -1;
    if (L->h->init_from && L->h->init_from(L->h->ctx, L->c, &L->m, err, errlen)) return -1;
    for (int i = 0; L->sp->frozen && L->sp->frozen[i]; i++)
        nn_params_freeze(&L->m.np, L->sp->frozen[i], 1);
    if (L->sp->trainable) {
        nn_params_freeze(&L->m.np, "", 1);
        for (int i = 0; L->sp->trainable[i]; i++)
            nn_params_freeze(&L->m.np, L->sp->trainable[i], 0);
    }
    if (freeze_config(&L->m, L->c->train.freeze, err, errlen)) return -1;
    size_t n = L->m.np.P.numel;
    L->adam_m = L->be->alloc(n * sizeof(float));
    L->adam_v = L->be->alloc(n * sizeof(float));
    if (!L->adam_m || !L->adam_v) {
        snprintf(err, errlen, "out of memory for the optimiser state (%zu parameters)", n);
        return -1;
    }
    L->norm = L->be->alloc(sizeof(float));
    if (!L->norm) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    L->be->zero(L->adam_m, n * sizeof(float));
    L->be->zero(L->adam_v, n * sizeof(float));
    L->m.stats_per_forward = 0; /* the loop reads the device stats once per window */
    model_stats_reset(&L->m);
    L->hp = (bk_adamw){.lr = L->c->train.lr,
                       .beta1 = 0.9f,
                       .beta2 = 0.95f,
                       .eps = 1e-8f,
                       .weight_decay = L->c->train.weight_decay};
    return 0;
}

static int loop_data(loop *L, char *err, size_t errlen) {
    const bf_config *c = L->c;
    data_batcher_opts bo = {.global_batch = c->train.batch,
                            .seq_len = pipe_input_len(c, L->d),
                            .rank = L->h->rank,
                            .world = L->h->world,
                            .seed = c->train.seed,
                            .shuffle = 1,
                            .wrap = 1,
                            .split = 0};
    if (data_batcher_new(L->d->train, &bo, &L->bt, err, errlen)) return -1;
    if (data_batch_alloc(&L->b, L->local_batch, pipe_input_len(c, L->d))) {
        snprintf(err, errlen, "out of memory for a batch");
        return -1;
    }
    return 0;
}

/* Averages the gradients over ranks. The loss is a mean over this rank's
 * counted rows (lm: target tokens): the global batch's mean gradient is
 * sum_r counted_r g_r / sum_r counted_r (counted is known on the host from
 * the targets). With the budget its losses are means over every row, so
 * ranks weigh equally (every training row is counted then: the batcher
 * wraps, no empty rows). */
static int reduce_step(loop *L, double counted, char *err, size_t errlen) {
    double t0 = now_s();
    size_t n = L->m.np.P.numel;
    float *g = L->m.np.P.grad;
    if (!L->m.sh.budget) {
        double total = counted;
        if (host_sum(L, &total, 1, err, errlen)) return -1;
        L->be->scale(g, (float)counted, n);
        if (L->h->allreduce(L->h->ctx, L->be, g, n, 0, err, errlen)) return -1;
        L->be->scale(g, total > 0 ? (float)(1.0 / total) : 0.0f, n);
    } else if (L->h->allreduce(L->h->ctx, L->be, g, n, 1, err, errlen)) {
        return -1;
    }
    L->t_comm += now_s() - t0;
    return 0;
}

typedef struct adamw_ctx {
    loop *L;
    int t;
} adamw_ctx;

/* One AdamW call over a run of trainable tensors, clipped by the device norm. */
static void adamw_run(void *ctx, size_t off, size_t n, int decay) {
    adamw_ctx *a = ctx;
    loop *L = a->L;
    L->hp.weight_decay = decay ? L->c->train.weight_decay : 0;
    L->be->adamw_clipped(L->m.np.P.data + off, L->m.np.P.grad + off, L->adam_m + off,
                         L->adam_v + off, n, &L->hp, a->t, L->norm, L->c->train.clip);
}

/* Clips by the global norm and updates every trainable tensor, on the
 * device: the norm never comes to the host; a step whose norm is not finite
 * is skipped by the op and counted in the stats (the window's log fails it). */
static void optimise(loop *L, long step) {
    L->be->grad_norm(L->norm, L->m.dstats, L->m.np.P.grad, L->m.np.P.numel);
    L->hp.lr = lr_at(L->c, step);
    adamw_ctx a = {L, (int)(step + 1)};
    nn_params_runs(&L->m.np, adamw_run, &a);
}

/* One training step: knobs, batch, forward, backward, all-reduce, update. */
static int train_step(loop *L, long step, char *err, size_t errlen) {
    const bf_config *c = L->c;
    L->sp->knobs(&L->m, c, step);
    L->m.kn.row_offset = (uint64_t)L->h->rank * (uint64_t)L->local_batch;
    if (data_batch_at(L->bt, (uint64_t)step, &L->b, err, errlen)) return -1;
    const int *targets = L->sp->classify ? L->b.labels : L->b.targets;
    if (L->sp->before_forward &&
        L->sp->before_forward(L->sp->ctx, &L->m, L->b.ids, targets, L->b.rows, err, errlen))
        return -1;
    if (model_forward(&L->m, L->b.ids, L->b.mask, targets, L->b.rows, 1, err, errlen)) return -1;
    if (L->sp->extra_backward) L->sp->extra_backward(L->sp->ctx, &L->m);
    model_backward(&L->m);
    if (L->reduce && reduce_step(L, L->m.st.counted, err, errlen)) return -1;
    optimise(L, step);
    L->w.steps += 1;
    L->w.tokens += (double)c->train.batch * L->m.sh.seq_len;
    return 0;
}

static void metric_cb(void *ctx, const char *name, double v) { metric((const loop *)ctx, name, v); }

static uint64_t d2h_calls(const loop *L) {
    uint64_t n = 0;
    L->be->d2h_count(&n, NULL);
    return n;
}

/* Reads the window's device stats (the one host copy of the window), sums
 * them over ranks and turns them into means over its steps. */
static int window_stats(loop *L, model_stats *st, double *norm, double *nonfinite, char *err,
                        size_t errlen) {
    double raw[BK_STAT_SLOTS];
    model_stats_fetch(&L->m, raw);
    model_stats_reset(&L->m);
    if (host_sum(L, raw, BK_STAT_SLOTS, err, errlen)) return -1;
    int world = L->h->world;
    /* budget terms are per-rank means: average them; gate rows add up */
    raw[BK_STAT_BUDGET_LOSS] /= world;
    raw[BK_STAT_ENTROPY_LOSS] /= world;
    model_stats_means(&L->m, raw, L->w.steps, st);
    /* every rank computed the same norms (the gradients are all-reduced) */
    double finite = raw[BK_STAT_NORM_COUNT] - raw[BK_STAT_NONFINITE_STEPS];
    *norm = finite > 0 ? raw[BK_STAT_GRAD_NORM_SUM] / finite : NAN;
    *nonfinite = raw[BK_STAT_NONFINITE_STEPS];
    if (raw[BK_STAT_BAD_TARGETS] > 0) {
        snprintf(err, errlen, "%.0f training targets outside the model's classes (a bug)",
                 raw[BK_STAT_BAD_TARGETS]);
        return -1;
    }
    return 0;
}

/* Logs the window that ends after `done` steps and starts a new one. */
static int log_window(loop *L, long done, train_result *r, char *err, size_t errlen) {
    const bf_config *c = L->c;
    const pipe_spec *sp = L->sp;
    model_stats st;
    double norm, nonfinite;
    if (window_stats(L, &st, &norm, &nonfinite, err, errlen)) return -1;
    if (nonfinite > 0) {
        snprintf(err, errlen,
                 "%.0f step(s) up to step %ld had a gradient norm that is not finite (loss "
                 "%.4g; those updates were skipped): lower train.lr or raise train.warmup",
                 nonfinite, done, st.loss);
        return -1;
    }
    double n = L->w.steps;
    double t = now_s(), tps = L->w.tokens / (t - L->t_log);
    double acc = st.counted > 0 ? st.correct / st.counted : NAN;
    metric_begin(L, done);
    metric(L, "train/loss", st.loss);
    for (int i = 0; i < sp->n_terms; i++)
        if (!sp->terms[i].budget_only || L->m.sh.budget)
            metric(L, sp->terms[i].metric, sp->terms[i].value(&st));
    if (sp->window) sp->window(&L->m, c, &st, n);
    if (sp->log_extra) sp->log_extra(&L->m, &st, metric_cb, L);
    if (sp->log_ctx) sp->log_ctx(sp->ctx, metric_cb, L);
    /* copies of the window's steps: the read above and a pipeline's own
     * (counted here, in its window, not the next one's) */
    uint64_t copies = d2h_calls(L) - L->w.d2h_calls;
    metric(L, "train/heads_used", st.heads_used);
    if (sp->classify) metric(L, "train/acc", acc);
    metric(L, "train/lr", L->hp.lr);
    metric(L, "train/grad_norm", norm);
    metric(L, "train/tokens_per_s", tps);
    metric(L, "train/host_copies", (double)copies);
    if (L->reduce) metric(L, "train/allreduce_s", L->t_comm / n);
    if (r) {
        r->train_loss = st.loss;
        r->tokens_per_s = tps;
        r->final_s = st.mean_s;
    }
    if (!L->quiet) {
        char eta[32];
        double per = (t - L->t_start) / (double)(done - L->start);
        fmt_eta(per * (double)(c->train.steps - done), eta, sizeof eta);
        fprintf(stderr, "step %6ld/%d | loss %.4f", done, c->train.steps, st.loss);
        if (L->m.sh.budget)
            fprintf(stderr, " (task %.4f budget %.4f ent %+.4f) | s %.3f", st.loss_task,
                    st.loss_budget, st.loss_entropy, st.mean_s);
        if (sp->classify) fprintf(stderr, " | acc %.3f", st.counted > 0 ? acc : 0.0);
        if (L->m.sh.patch > 0) { /* a ViT: images, and how many tokens A-ViT keeps */
            if (L->m.sh.avit && !L->m.ext_used) fprintf(stderr, " | retention %.3f", st.retention);
            fprintf(stderr, " | %.0f images/s", L->w.steps * c->train.batch / (t - L->t_log));
        } else {
            fprintf(stderr, " | heads %.3f | %.0f tok/s", st.heads_used, tps);
        }
        if (L->reduce) fprintf(stderr, " | allreduce %.2f ms", 1e3 * L->t_comm / n);
        fprintf(stderr, " | ETA %s\n", eta);
    }
    return 0;
}

/* Starts a logging window: nothing counted yet. */
static void window_begin(loop *L) {
    L->w = (window){0, 0, d2h_calls(L)};
    L->t_comm = 0;
    L->t_log = now_s();
}

static void eval_metrics(const loop *L, const char *split, const eval_result *e) {
    /* metric names outlive the flush: one static table per split */
    static const char *vnames[] = {"val/loss",       "val/acc",        "val/ppl",
                                   "val/heads_used", "val/attn_flops", "val/seconds",
                                   "val/corr_s_len", "val/corr_s_loss"};
    static const char *tnames[] = {"test/loss",       "test/acc",        "test/ppl",
                                   "test/heads_used", "test/attn_flops", "test/seconds",
                                   "test/corr_s_len", "test/corr_s_loss"};
    const char **nm = strcmp(split, "val") == 0 ? vnames : tnames;
    metric(L, nm[0], e->loss);
    metric(L, nm[L->sp->classify ? 1 : 2], L->sp->classify ? e->acc : e->ppl);
    metric(L, nm[3], e->heads_used);
    metric(L, nm[4], e->attn_flops);
    metric(L, nm[5], e->seconds);
    if (L->m.sh.budget && L->sp->classify) {
        metric(L, nm[6], e->corr_s_len);
        metric(L, nm[7], e->corr_s_loss);
    }
    if (L->m.sh.avit)
        metric(L, strcmp(split, "val") == 0 ? "val/retention" : "test/retention", e->retention);
    if (L->m.sh.patch > 0 && strcmp(split, "test") == 0 && e->seconds > 0)
        metric(L, "test/images_per_s", e->samples / e->seconds);
}

/* A pipeline's own validation metrics: logged, and printed when not quiet. */
static void val_metric_cb(void *ctx, const char *name, double v) {
    const loop *L = ctx;
    metric(L, name, v);
    if (!L->quiet) fprintf(stderr, "eval  %6ld | %s %.6g\n", L->val_step, name, v);
}

static int validate_ctx(loop *L, long done, char *err, size_t errlen) {
    if (!L->sp->validate_ctx) return 0;
    L->val_step = done;
    return L->sp->validate_ctx(L->sp->ctx, &L->m, L->c, L->d, L->h, val_metric_cb, L, err, errlen);
}

/* Validation on every rank's shard, logged with the step. */
static int validate(loop *L, long done, int logged, train_result *r, char *err, size_t errlen) {
    eval_result e;
    if (pipe_evaluate(&L->m, L->c, L->d, 0, L->h, &e, NULL, err, errlen)) return -1;
    if (!logged) metric_begin(L, done);
    eval_metrics(L, "val", &e);
    L->last_val = e;
    if (r) r->val = e;
    if (!L->quiet) {
        if (!L->sp->classify)
            fprintf(stderr, "eval  %6ld | val/loss %.4f | val/ppl %.2f\n", done, e.loss, e.ppl);
        else
            fprintf(stderr,
                    "eval  %6ld | val/loss %.4f | val/acc %.4f | val/heads_used %.3f | "
                    "val/attn_flops %.3g%s",
                    done, e.loss, e.acc, e.heads_used, e.attn_flops, L->m.sh.avit ? "" : "\n");
        if (L->m.sh.avit) fprintf(stderr, " | val/retention %.3f\n", e.retention);
    }
    return validate_ctx(L, done, err, errlen);
}

/* Under --quiet, a run without a test pass still says its result: the
 * last validation, on rank 0 (without --quiet its eval line was the last). */
static void quiet_result(const loop *L, long step) {
    if (!L->quiet || L->h->rank != 0 || (L->sp->classify && L->d->test) || L->last_val.samples == 0)
        return;
    const eval_result *e = &L->last_val;
    if (!L->sp->classify)
        fprintf(stderr, "result %6ld | val/loss %.4f | val/ppl %.2f\n", step, e->loss, e->ppl);
    else
        fprintf(stderr, "result %6ld | val/loss %.4f | val/acc %.4f\n", step, e->loss, e->acc);
}

/* The test pass at the end, on rank 0 alone (it writes the per-sample
 * file); the other ranks are done. */
static int final_test(loop *L, long step, train_result *r, char *err, size_t errlen) {
    if (!L->sp->classify || !L->d->test || L->h->rank != 0) return 0;
    eval_result e;
    FILE *ps = L->h->open_file ? L->h->open_file(L->h->ctx, "test_samples.tsv") : NULL;
    if (ps) fputs("s_mean\ttokens\tloss\tcorrect\n", ps);
    int erc = pipe_evaluate(&L->m, L->c, L->d, 1, NULL, &e, ps, err, errlen);
    if (ps && fclose(ps) && !erc) {
        snprintf(err, errlen, "cannot write test_samples.tsv (disk full?)");
        return -1;
    }
    if (erc) return -1;
    metric_begin(L, step);
    eval_metrics(L, "test", &e);
    if (L->h->metric_flush && L->h->metric_flush(L->h->ctx, err, errlen)) return -1;
    if (r) r->test = e;
    { /* the run's result: said even under --quiet, which silences progress only */
        fprintf(stderr,
                "test  | acc %.4f | heads_used %.3f | attn_flops %.4g | %.0f samples in %.2f s",
                e.acc, e.heads_used, e.attn_flops, e.samples, e.seconds);
        if (L->m.sh.budget)
            fprintf(stderr, " | corr(s, length) %.3f | corr(s, loss) %.3f", e.corr_s_len,
                    e.corr_s_loss);
        if (L->m.sh.avit) fprintf(stderr, " | retention %.3f", e.retention);
        if (L->m.sh.patch > 0 && e.seconds > 0)
            fprintf(stderr, " | %.0f images/s", e.samples / e.seconds);
        fputc('\n', stderr);
    }
    return 0;
}

/* ---- the state besides tensors and step, as counters (pipe_state) ---- */

#define COUNTER_SHIFT "halt.shift"
#define COUNTER_INTEGRAL "halt.integral"
#define COUNTER_ERROR "halt.error"
#define COUNTER_STREAK "halt.streak"
#define COUNTER_WSTEPS "window.steps"
#define COUNTER_WTOKENS "window.tokens"
#define COUNTER_WSTAT "window.stat." /* + the slot */

static void put_counter(pipe_state *s, const char *name, uint64_t v) {
    pipe_counter *c = &s->counters[s->n_counters++];
    snprintf(c->name, sizeof c->name, "%s", name);
    c->value = v;
}

static uint64_t f64_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static uint64_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint64_t u) {
    uint32_t v = (uint32_t)u;
    float f;
    memcpy(&f, &v, sizeof f);
    return f;
}

static double bits_f64(uint64_t u) {
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* What a resume needs to go on as if never stopped, besides the tensors:
 * the A-ViT controller's shift, and the window in progress (open: steps
 * were trained since the last log) with its device stats, which the
 * controller and the window's metrics read at its end. Every rank calls
 * this (the stats are summed over ranks). */
static int state_counters(loop *L, int window_open, pipe_state *s, char *err, size_t errlen) {
    s->n_counters = 0;
    if (L->m.sh.avit) {
        put_counter(s, COUNTER_SHIFT, f32_bits(L->m.halt.cf.shift));
        put_counter(s, COUNTER_INTEGRAL, f32_bits(L->m.halt.cf.integral));
        put_counter(s, COUNTER_ERROR, f32_bits(L->m.halt.cf.error));
        put_counter(s, COUNTER_STREAK, f32_bits(L->m.halt.cf.streak));
        put_counter(s, MODEL_COUNTER_GATE, f32_bits(L->m.halt.cf.gate));
    }
    if (!window_open || L->w.steps == 0) return 0;
    double raw[BK_STAT_SLOTS];
    uint64_t before = d2h_calls(L);
    model_stats_fetch(&L->m, raw);
    L->w.d2h_calls += d2h_calls(L) - before; /* the save's copy is not one of training's */
    if (host_sum(L, raw, BK_STAT_SLOTS, err, errlen)) return -1;
    put_counter(s, COUNTER_WSTEPS, f64_bits(L->w.steps));
    put_counter(s, COUNTER_WTOKENS, f64_bits(L->w.tokens));
    for (int i = 0; i < BK_STAT_SLOTS && s->n_counters < PIPE_MAX_COUNTERS; i++)
        if (raw[i] != 0) {
            char name[PIPE_COUNTER_NAME];
            snprintf(name, sizeof name, COUNTER_WSTAT "%d", i);
            put_counter(s, name, f64_bits(raw[i]));
        }
    return 0;
}

/* Takes back what state_counters saved; a counter it does not know is an
 * error (a checkpoint of another bf: resuming would not be the same run). */
static int restore_counters(loop *L, const pipe_state *s, char *err, size_t errlen) {
    for (int i = 0; i < s->n_counters; i++) {
        const pipe_counter *c = &s->counters[i];
        const size_t nw = strlen(COUNTER_WSTAT);
        char *end = NULL;
        long slot = strncmp(c->name, COUNTER_WSTAT, nw) == 0 ? strtol(c->name + nw, &end, 10) : -1;
        if (strcmp(c->name, COUNTER_SHIFT) == 0 && L->m.sh.avit) {
            L->m.halt.cf.shift = bits_f32(c->value);
        } else if (strcmp(c->name, COUNTER_INTEGRAL) == 0 && L->m.sh.avit) {
            L->m.halt.cf.integral = bits_f32(c->value);
        } else if (strcmp(c->name, COUNTER_ERROR) == 0 && L->m.sh.avit) {
            L->m.halt.cf.error = bits_f32(c->value);
        } else if (strcmp(c->name, COUNTER_STREAK) == 0 && L->m.sh.avit) {
            L->m.halt.cf.streak = bits_f32(c->value);
        } else if (strcmp(c->name, MODEL_COUNTER_GATE) == 0 && L->m.sh.avit) {
            L->m.halt.cf.gate = bits_f32(c->value);
        } else if (strcmp(c->name, COUNTER_WSTEPS) == 0) {
            L->resumed_steps = bits_f64(c->value);
            L->resumed_window = 1;
        } else if (strcmp(c->name, COUNTER_WTOKENS) == 0) {
            L->resumed_tokens = bits_f64(c->value);
        } else if (slot >= 0 && slot < BK_STAT_SLOTS && end && !*end && end != c->name + nw) {
            L->resumed_stats[slot] = bits_f64(c->value);
        } else {
            snprintf(err, errlen,
                     "the checkpoint holds the state \"%s\", which this run does not have (valid: "
                     "%s, " COUNTER_WSTEPS ", " COUNTER_WTOKENS ", " COUNTER_WSTAT
                     "0.." COUNTER_WSTAT "%d): it was written by another bf or another model",
                     c->name,
                     L->m.sh.avit ? COUNTER_SHIFT ", " COUNTER_INTEGRAL ", " COUNTER_ERROR
                                                  ", " COUNTER_STREAK ", " MODEL_COUNTER_GATE
                                  : "(none)",
                     BK_STAT_SLOTS - 1);
            return -1;
        }
    }
    return 0;
}

/* After window_begin: the window the checkpoint was in goes on. */
static void restore_window(loop *L) {
    if (!L->resumed_window) return;
    L->w.steps = L->resumed_steps;
    L->w.tokens = L->resumed_tokens;
    if (L->h->rank == 0)
        L->be->to_device(L->m.dstats, L->resumed_stats, BK_STAT_SLOTS * sizeof(double));
}

/* Writes the state after `step` steps; window_open: steps were trained
 * since the last logged window. */
static int save(loop *L, long step, int window_open, char *err, size_t errlen) {
    if (!L->h->has_files || !L->h->save) return 0;
    pipe_state s;
    memset(&s, 0, sizeof s);
    s.m = &L->m, s.adam_m = L->adam_m, s.adam_v = L->adam_v, s.step = step;
    if (state_counters(L, window_open, &s, err, errlen)) return -1;
    return L->h->save(L->h->ctx, L->c, &s, err, errlen);
}

static int resume(loop *L, char *err, size_t errlen) {
    L->start = 0;
    if (!L->h->resume) return 0;
    pipe_state s;
    memset(&s, 0, sizeof s);
    s.m = &L->m, s.adam_m = L->adam_m, s.adam_v = L->adam_v;
    int found = 0;
    if (L->h->resume(L->h->ctx, L->c, &s, &found, err, errlen)) return -1;
    if (!found) return 0;
    L->start = s.step;
    return restore_counters(L, &s, err, errlen);
}

/* train.precision bf16: the linear layers' products in bf16 where the
 * backend has bf16 products; elsewhere one line on rank 0 says what is
 * missing, and the run trains in fp32 (docs/sweeps.md#precision). */
static void loop_precision(loop *L) {
    if (strcmp(L->c->train.precision, "bf16") != 0) return;
    char why[384] = "";
    if (L->be->bf16_available(why, sizeof why)) {
        L->m.env.bf16 = 1;
        return;
    }
    if (L->h->rank == 0)
        fprintf(stderr, "train.precision bf16: %s; this run trains in fp32\n", why);
}

static void banner(const loop *L) {
    if (L->quiet) return;
    const model_shape *sh = &L->m.sh;
    if (sh->patch > 0) /* a ViT has no head budget: its patch size and A-ViT instead */
        fprintf(stderr,
                "model: %s, %d layers, d_model %d, %d heads, patch %d, A-ViT %s, %zu parameters "
                "(%zu trained), device %s\n",
                L->sp->model_kind, sh->layers, sh->d_model, sh->heads, sh->patch,
                sh->avit ? "on" : "off", L->m.np.P.numel, nn_params_trainable(&L->m.np),
                L->be->name);
    else
        fprintf(stderr,
                "model: %s, %d layers, d_model %d, %d heads, out_proj %s, budget %s, %zu "
                "parameters (%zu trained), device %s\n",
                L->sp->model_kind, sh->layers, sh->d_model, sh->heads,
                sh->hadamard ? "hadamard" : "dense", sh->budget ? "on" : "off", L->m.np.P.numel,
                nn_params_trainable(&L->m.np), L->be->name);
    if (L->h->world > 1)
        fprintf(stderr, "data parallel: %d ranks, %d rows each of a global batch of %d\n",
                L->h->world, L->local_batch, L->c->train.batch);
}

static void loop_free(loop *L) {
    data_batch_free(&L->b);
    data_batcher_destroy(&L->bt);
    if (L->be) {
        L->be->release(L->adam_m);
        L->be->release(L->adam_v);
        L->be->release(L->norm);
    }
    model_destroy(&L->m);
}

/* Steps from L->start to c->train.steps with logging, validation and
 * checkpoints; returns 0, 2 (preempted) or -1. */
static int run_steps(loop *L, volatile sig_atomic_t *stop, train_result *r, long *step_out,
                     char *err, size_t errlen) {
    const bf_config *c = L->c;
    const int log_every = c->train.log_every > 0 ? c->train.log_every : 50;
    long step = L->start;
    for (; step < c->train.steps; step++) {
        *step_out = step;
        /* every rank stops at the same step when any rank got SIGTERM */
        int any_stop = 0;
        if (host_any(L, stop && *stop, &any_stop, err, errlen)) return -1;
        if (any_stop) {
            if (save(L, step, 1, err, errlen)) return -1;
            if (!L->quiet) fprintf(stderr, "preempted: checkpoint written at step %ld\n", step);
            return 2;
        }
        if (train_step(L, step, err, errlen)) return -1;
        long done = step + 1;
        int last = done == c->train.steps, logged = 0;
        if (done % log_every == 0 || last) {
            if (log_window(L, done, r, err, errlen)) return -1;
            logged = 1;
        }
        if ((c->train.eval_every > 0 && done % c->train.eval_every == 0) || last)
            if (validate(L, done, logged, r, err, errlen)) return -1;
        if (L->h->metric_flush && L->h->metric_flush(L->h->ctx, err, errlen)) return -1;
        if ((c->train.checkpoint_every > 0 && done % c->train.checkpoint_every == 0) || last)
            if (save(L, done, !logged, err, errlen)) return -1;
        if (logged) window_begin(L);
    }
    *step_out = step;
    return 0;
}

int pipe_train(const pipe_spec *sp, const bf_config *c, const data_sets *d, const pipe_host *h,
               volatile sig_atomic_t *stop, int quiet, train_result *r, char *err, size_t errlen) {
    if (c->train.batch % h->world != 0) {
        snprintf(
            err, errlen,
            "train.batch %d is not divisible by the %d ranks (each rank takes batch/ranks rows)",
            c->train.batch, h->world);
        return -1;
    }
    loop L;
    memset(&L, 0, sizeof L);
    L.sp = sp;
    L.c = c;
    L.d = d;
    L.h = h;
    L.quiet = quiet || h->rank != 0;
    L.local_batch = c->train.batch / h->world;
    L.reduce = h->world > 1 || h->reduce_always;
    int rc = -1;
    long step = 0;
    if (h->device(h->ctx, c->device, &L.be, err, errlen)) return -1;
    if (loop_model(&L, err, errlen) || resume(&L, err, errlen) || loop_data(&L, err, errlen) ||
        (h->begin && h->begin(h->ctx, c, err, errlen)))
        goto out;
    loop_precision(&L);
    banner(&L);
    if (L.start == 0 && sp->validate_ctx) { /* the held-out measures before training */
        metric_begin(&L, 0);
        if (validate_ctx(&L, 0, err, errlen) ||
            (h->metric_flush && h->metric_flush(h->ctx, err, errlen)))
            goto out;
    }
    L.t_start = now_s();
    window_begin(&L);
    restore_window(&L);
    rc = run_steps(&L, stop, r, &step, err, errlen);
    if (rc == 0 && final_test(&L, step, r, err, errlen)) rc = -1;
    if (rc == 0) quiet_result(&L, step);
    /* a run resumed at its last step validated nothing in this process:
     * the check reads a validation of the weights it ends with */
    if (rc == 0 && sp->check && L.last_val.samples == 0 &&
        pipe_evaluate(&L.m, c, d, 0, h, &L.last_val, NULL, err, errlen))
        rc = -1;
    if (rc == 0 && sp->check && sp->check(&L.m, c, &L.last_val, err, errlen)) rc = -1;
    if (rc == 0 && r) r->steps = step;
out:
    loop_free(&L);
    return rc;
}
