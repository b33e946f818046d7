#include "worker/pipelines/train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "worker/ckpt.h"
#include "worker/comm.h"
#include "worker/metrics.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* mkdir -p */
static int make_dirs(const char *path, char *err, size_t errlen) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST) goto fail;
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST) goto fail;
    return 0;
fail:
    snprintf(err, errlen, "cannot create folder %s: %s", buf, strerror(errno));
    return -1;
}

/* ---- data ---- */

/* 1 when prefix.model exists and is at least as new as the source it was
 * trained from (a changed source retrains it). */
static int tok_current(const char *prefix, const char *src) {
    char model_path[4096];
    snprintf(model_path, sizeof model_path, "%s.model", prefix);
    struct stat ms, ss;
    if (stat(model_path, &ms) || !S_ISREG(ms.st_mode)) return 0;
    if (stat(src, &ss)) return 1;
    return ms.st_mtime >= ss.st_mtime;
}

/* Trains a sentencepiece model of `vocab` pieces at prefix.model from n
 * sentences (what/src only name them in the progress line). */
static int train_tok(const char **s, size_t n, const char *prefix, int vocab, int quiet,
                     const char *what, const char *src, char *err, size_t errlen) {
    tok_train_opts o;
    tok_train_opts_init(&o);
    o.vocab = vocab;
    o.prefix = prefix;
    o.hard_vocab_limit = 0;
    if (!quiet)
        fprintf(stderr, "tokenizer: training a %d-piece sentencepiece model on %zu %s of %s\n",
                vocab, n, what, src);
    return tok_train_sentences(s, n, &o, err, errlen) ? -1 : 0;
}

/* Trains the tokenizer at prefix.model from the texts of a TSV training split,
 * unless a current one exists. */
static int ensure_tok_tsv(const char *train_path, const char *prefix, int vocab, int quiet,
                          char *err, size_t errlen) {
    if (tok_current(prefix, train_path)) return 0;
    data_tsv_t *tsv = NULL;
    if (data_tsv_load(train_path, NULL, &tsv, err, errlen)) return -1;
    size_t n = tsv->n * (tsv->is_pair ? 2 : 1), k = 0;
    const char **s = malloc(n * sizeof *s);
    int rc = -1;
    if (!s) {
        snprintf(err, errlen, "out of memory");
    } else {
        for (size_t i = 0; i < tsv->n; i++) {
            s[k++] = tsv->text_a[i];
            if (tsv->is_pair) s[k++] = tsv->text_b[i];
        }
        rc = train_tok(s, k, prefix, vocab, quiet, "texts", train_path, err, errlen);
    }
    free(s);
    data_tsv_destroy(&tsv);
    return rc;
}

/* The same for a corpus: trained on its training lines only. */
static int ensure_tok_text(const char *path, double val_fraction, const char *prefix, int vocab,
                           int quiet, char *err, size_t errlen) {
    if (tok_current(prefix, path)) return 0;
    data_text_t *t = NULL;
    if (data_text_load(path, val_fraction, &t, err, errlen)) return -1;
    size_t n = t->val_start, k = 0;
    const char **s = malloc((n ? n : 1) * sizeof *s);
    int rc = -1;
    if (!s) {
        snprintf(err, errlen, "out of memory");
    } else {
        for (size_t i = 0; i < n; i++)
            if (t->line_bytes[i]) s[k++] = t->lines[i];
        rc = train_tok(s, k, prefix, vocab, quiet, "lines", path, err, errlen);
    }
    free(s);
    data_text_destroy(&t);
    return rc;
}

int pipe_data_open(const bf_config *c, pipe_data *d, int quiet, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    char train[1024], val[1024], test[1024], prefix[1100], model_path[1200];
    char e2[1024];
    int lm = strcmp(c->pipeline, "lm") == 0;
    if (lm) {
        if (c->data.path[0])
            snprintf(train, sizeof train, "%s", c->data.path);
        else if (strcmp(c->data.set, "kjv") == 0 || !c->data.set[0])
            snprintf(train, sizeof train, "%s/kjv/kjv.txt", c->data.dir);
        else {
            snprintf(err, errlen,
                     "data.set '%s' is not a text corpus (valid for lm: kjv, or data.path=FILE)",
                     c->data.set);
            return -1;
        }
        if (!file_exists(train)) {
            snprintf(err, errlen,
                     "corpus %s not found (run scripts/prepare_data.sh, or set data.path=FILE)",
                     train);
            return -1;
        }
        snprintf(prefix, sizeof prefix, "%s.tok%d", train, c->model.vocab);
        if (ensure_tok_text(train, c->data.val_fraction, prefix, c->model.vocab, quiet, err,
                            errlen))
            return -1;
    } else {
        if (c->data.train[0]) {
            snprintf(train, sizeof train, "%s", c->data.train);
            snprintf(val, sizeof val, "%s", c->data.val);
            snprintf(test, sizeof test, "%s", c->data.test);
            if (!c->data.val[0]) {
                snprintf(err, errlen,
                         "data.train is set but data.val is not: give both (data.test too, for "
                         "test metrics)");
                return -1;
            }
        } else if (strcmp(c->data.set, "wordnet") == 0 || !c->data.set[0]) {
            snprintf(train, sizeof train, "%s/wordnet/train.tsv", c->data.dir);
            snprintf(val, sizeof val, "%s/wordnet/val.tsv", c->data.dir);
            snprintf(test, sizeof test, "%s/wordnet/test.tsv", c->data.dir);
        } else {
            snprintf(err, errlen,
                     "data.set '%s' is not a text classification set (valid for budgetformer: "
                     "wordnet, or data.train/data.val/data.test TSV files)",
                     c->data.set);
            return -1;
        }
        if (!file_exists(train)) {
            snprintf(
                err, errlen,
                "training split %s not found (run scripts/prepare_data.sh, or set data.train=FILE)",
                train);
            return -1;
        }
        snprintf(prefix, sizeof prefix, "%s.tok%d", train, c->model.vocab);
        if (ensure_tok_tsv(train, prefix, c->model.vocab, quiet, err, errlen)) return -1;
    }
    snprintf(model_path, sizeof model_path, "%s.model", prefix);
    if (tok_load(&d->tok, model_path, err, errlen)) return -1;
    int rebuilt = 0;
    if (lm) {
        if (data_open_text(train, c->data.val_fraction, d->tok, NULL, &d->train, &rebuilt, e2,
                           sizeof e2)) {
            snprintf(err, errlen, "%s", e2);
            goto fail;
        }
        d->n_classes = 0;
    } else {
        if (data_open_tsv(train, d->tok, NULL, NULL, &d->train, &rebuilt, e2, sizeof e2) ||
            data_open_tsv(val, d->tok, d->train, NULL, &d->val, &rebuilt, e2, sizeof e2) ||
            (test[0] &&
             data_open_tsv(test, d->tok, d->train, NULL, &d->test, &rebuilt, e2, sizeof e2))) {
            snprintf(err, errlen, "%s", e2);
            goto fail;
        }
        d->n_classes = (int)d->train->n_classes;
        if (d->n_classes < 2) {
            snprintf(err, errlen, "%s has %d class(es); classification needs at least 2", train,
                     d->n_classes);
            goto fail;
        }
    }
    if (!quiet)
        fprintf(stderr, "data: %s: %zu sequences%s, vocab %d%s\n", train, d->train->n_seq,
                lm ? "" : " (train)", tok_vocab_size(d->tok), rebuilt ? " (cache rebuilt)" : "");
    return 0;
fail:
    pipe_data_close(d);
    return -1;
}

void pipe_data_close(pipe_data *d) {
    data_tok_destroy(&d->train);
    data_tok_destroy(&d->val);
    data_tok_destroy(&d->test);
    tok_destroy(&d->tok);
}

model_shape train_model_shape(const bf_config *c, const pipe_data *d) {
    model_shape sh = {.layers = c->model.layers,
                      .d_model = c->model.d_model,
                      .heads = c->model.heads,
                      .seq_len = c->model.seq_len,
                      .vocab = tok_vocab_size(d->tok),
                      .n_classes = d->n_classes,
                      .hadamard = strcmp(c->attn.out_proj, "hadamard") == 0,
                      .budget = c->budget.enabled && d->n_classes > 0};
    return sh;
}

/* ---- evaluation ---- */

/* Pearson r from the sums n, Σx, Σy, Σxx, Σyy, Σxy (so shards can be added). */
static double pearson_sums(double n, double sx, double sy, double sxx, double syy, double sxy) {
    if (n < 3) return NAN;
    double mx = sx / n, my = sy / n;
    double cxy = sxy / n - mx * my, vx = sxx / n - mx * mx, vy = syy / n - my * my;
    return vx > 0 && vy > 0 ? cxy / sqrt(vx * vy) : NAN;
}

/* Sums one evaluation pass collects; added over ranks in one all-reduce. */
enum {
    EV_LOSS,
    EV_COUNTED,
    EV_CORRECT,
    EV_HEADS,
    EV_FLOPS,
    EV_ROWS,
    EV_TOKENS,
    EV_SECONDS,
    EV_N,
    EV_S,
    EV_LEN,
    EV_L,
    EV_SS,
    EV_LENLEN,
    EV_LL,
    EV_SLEN,
    EV_SL,
    EV_COUNT
};

/* One pass over a split, this rank's rows of every batch (comm NULL: all of
 * them); the sums are added over ranks, so every rank gets the same result. */
static int evaluate_shard(model *m, const bf_config *c, const pipe_data *d, int split, comm_t *comm,
                          eval_result *out, FILE *per_sample, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    const data_tok_t *set = d->n_classes ? (split ? d->test : d->val) : d->train;
    if (!set) {
        snprintf(err, errlen, "no %s split", split ? "test" : "validation");
        return -1;
    }
    int world = comm_world(comm);
    data_batcher_opts bo = {.global_batch = m->B * world,
                            .seq_len = c->model.seq_len,
                            .rank = comm_rank(comm),
                            .world = world,
                            .seed = c->train.seed,
                            .shuffle = 0,
                            .wrap = 0,
                            .split = d->n_classes ? 0 : 1};
    data_batcher_t *bt = NULL;
    if (data_batcher_new(set, &bo, &bt, err, errlen)) return -1;
    data_batch_t b;
    if (data_batch_alloc(&b, m->B, c->model.seq_len)) {
        data_batcher_destroy(&bt);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    double sum[EV_COUNT] = {0};
    int rc = 0;
    for (;;) {
        int r = data_batch_next(bt, &b, err, errlen);
        if (r == DATA_END) break;
        if (r) {
            rc = -1;
            break;
        }
        if (b.valid_rows == 0) continue;
        double t0 = now_s();
        const int *targets = d->n_classes ? b.labels : b.targets;
        if (model_forward(m, b.ids, b.mask, targets, b.valid_rows, 0, err, errlen)) {
            rc = -1;
            break;
        }
        sum[EV_SECONDS] += now_s() - t0;
        sum[EV_LOSS] += m->st.loss_task * m->st.counted;
        sum[EV_COUNTED] += m->st.counted;
        sum[EV_CORRECT] += m->st.correct;
        sum[EV_HEADS] += m->st.heads_used * b.valid_rows;
        sum[EV_FLOPS] += m->st.attn_flops * b.valid_rows;
        sum[EV_ROWS] += b.valid_rows;
        for (int i = 0; i < b.valid_rows * c->model.seq_len; i++) sum[EV_TOKENS] += b.mask[i] > 0;
        if (d->n_classes && (m->sh.budget || per_sample)) {
            for (int i = 0; i < b.valid_rows; i++) {
                double s = m->sh.budget ? 0 : NAN;
                for (int l = 0; m->sh.budget && l < m->sh.layers; l++) s += model_budget_s(m, l, i);
                if (m->sh.budget) s /= m->sh.layers;
                int len = 0;
                for (int t = 0; t < c->model.seq_len; t++)
                    len += b.mask[i * c->model.seq_len + t] > 0;
                const float *lg = m->h_logits + (size_t)i * d->n_classes;
                int best = 0;
                for (int v = 1; v < d->n_classes; v++)
                    if (lg[v] > lg[best]) best = v;
                double loss = m->h_losses[i];
                if (per_sample)
                    fprintf(per_sample, "%.6f\t%d\t%.6f\t%d\n", s, len, loss, best == b.labels[i]);
                if (!m->sh.budget) continue;
                sum[EV_N] += 1;
                sum[EV_S] += s;
                sum[EV_LEN] += len;
                sum[EV_L] += loss;
                sum[EV_SS] += s * s;
                sum[EV_LENLEN] += (double)len * len;
                sum[EV_LL] += loss * loss;
                sum[EV_SLEN] += s * len;
                sum[EV_SL] += s * loss;
            }
        }
    }
    data_batch_free(&b);
    data_batcher_destroy(&bt);
    /* a rank that failed returns without the collective; main aborts the job */
    if (rc) return rc;
    if (comm_sum_f64(comm, sum, EV_COUNT, err, errlen)) return -1;
    double counted = sum[EV_COUNTED], rows = sum[EV_ROWS];
    out->seconds = sum[EV_SECONDS] / world; /* mean over ranks ~ wall time */
    out->samples = rows;
    out->tokens = sum[EV_TOKENS];
    out->loss = counted > 0 ? sum[EV_LOSS] / counted : NAN;
    out->acc = d->n_classes && counted > 0 ? sum[EV_CORRECT] / counted : NAN;
    out->ppl = d->n_classes ? NAN : exp(out->loss);
    out->heads_used = rows > 0 ? sum[EV_HEADS] / rows : NAN;
    out->attn_flops = rows > 0 ? sum[EV_FLOPS] / rows : NAN;
    out->corr_s_len =
        pearson_sums(sum[EV_N], sum[EV_S], sum[EV_LEN], sum[EV_SS], sum[EV_LENLEN], sum[EV_SLEN]);
    out->corr_s_loss =
        pearson_sums(sum[EV_N], sum[EV_S], sum[EV_L], sum[EV_SS], sum[EV_LL], sum[EV_SL]);
    return 0;
}

int train_evaluate(model *m, const bf_config *c, const pipe_data *d, int split, eval_result *out,
                   FILE *per_sample, char *err, size_t errlen) {
    return evaluate_shard(m, c, d, split, NULL, out, per_sample, err, errlen);
}

/* ---- training ---- */

static float lr_at(const bf_config *c, long step) {
    float lr = c->train.lr;
    if (c->train.warmup > 0 && step < c->train.warmup)
        return lr * (float)(step + 1) / (float)c->train.warmup;
    long decay = c->train.steps - c->train.warmup;
    if (decay <= 0) return lr;
    float p = (float)(step - c->train.warmup) / (float)decay;
    if (p > 1) p = 1;
    /* cosine from lr down to lr/10 */
    return lr * (0.1f + 0.9f * 0.5f * (1.0f + cosf(3.14159265f * p)));
}

static void set_knobs(model *m, const bf_config *c, long step) {
    float p = c->train.steps > 1 ? (float)step / (float)(c->train.steps - 1) : 1.0f;
    if (p > 1) p = 1;
    cfg_schedule tr = {c->budget.temperature.kind, 0.5f, 0.05f};
    m->kn.tau = cfg_schedule_at(&c->budget.temperature, p);
    m->kn.sigma = cfg_schedule_at(&c->budget.noise, p);
    m->kn.tau_r = cfg_schedule_at(&tr, p);
    m->kn.s_min = c->budget.range[0];
    m->kn.s_max = c->budget.range[1];
    m->kn.lambda_budget = c->budget.lambda_budget;
    m->kn.lambda_entropy = c->budget.lambda_entropy;
    m->kn.progress = p;
    m->kn.seed = c->train.seed;
    m->kn.step = (uint64_t)step;
}

static void add_eval_metrics(metrics *mt, const char *split, const eval_result *e, int budget,
                             int lm) {
    /* metric names must outlive the flush: one static table per split */
    static const char *vnames[] = {"val/loss",       "val/acc",        "val/ppl",
                                   "val/heads_used", "val/attn_flops", "val/seconds",
                                   "val/corr_s_len", "val/corr_s_loss"};
    static const char *tnames[] = {"test/loss",       "test/acc",        "test/ppl",
                                   "test/heads_used", "test/attn_flops", "test/seconds",
                                   "test/corr_s_len", "test/corr_s_loss"};
    const char **nm = strcmp(split, "val") == 0 ? vnames : tnames;
    metrics_add(mt, nm[0], e->loss);
    if (lm)
        metrics_add(mt, nm[2], e->ppl);
    else
        metrics_add(mt, nm[1], e->acc);
    metrics_add(mt, nm[3], e->heads_used);
    metrics_add(mt, nm[4], e->attn_flops);
    metrics_add(mt, nm[5], e->seconds);
    if (budget && !lm) {
        metrics_add(mt, nm[6], e->corr_s_len);
        metrics_add(mt, nm[7], e->corr_s_loss);
    }
}

static void fmt_eta(double s, char *buf, size_t n) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else
        snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
}

/* Rank 0 writes the checkpoint of `step` steps done into dir; then every rank
 * learns whether that worked (an untimed agreement: the others wait while
 * rank 0 writes). Returns 0 or -1 with a message on every rank. */
static int save_checkpoint(comm_t *comm, const char *dir, model *m, const bf_config *c, float *hm,
                           float *hv, const float *dm, const float *dv, long step, char *err,
                           size_t errlen) {
    int failed = 0;
    if (comm_rank(comm) == 0) {
        size_t n = m->np.P.numel;
        char *cfg_text = malloc(CKPT_MAX_CFG);
        float *hp = malloc(n * sizeof(float));
        if (!cfg_text || !hp) {
            snprintf(err, errlen, "out of memory writing a checkpoint");
            failed = 1;
        } else {
            cfg_dump(c, cfg_text, CKPT_MAX_CFG);
            m->be->to_host(hp, m->np.P.data, n * sizeof(float));
            m->be->to_host(hm, dm, n * sizeof(float));
            m->be->to_host(hv, dv, n * sizeof(float));
            ckpt_state s = {.step = (uint64_t)step,
                            .seed = c->train.seed,
                            .data_step = (uint64_t)step,
                            .n_params = n,
                            .params = hp,
                            .m = hm,
                            .v = hv,
                            .cfg_text = cfg_text};
            failed = ckpt_write(dir, &s, err, errlen) != 0;
        }
        free(cfg_text);
        free(hp);
    }
    if (comm_world(comm) == 1) return failed ? -1 : 0;
    char e2[256];
    int any = 0;
    comm_watch(comm, 0);
    int rc = comm_any(comm, failed, &any, e2, sizeof e2);
    comm_watch(comm, 1);
    if (rc) {
        if (!failed) snprintf(err, errlen, "%s", e2);
        return -1;
    }
    if (any && !failed)
        snprintf(err, errlen, "rank 0 could not write the checkpoint of step %ld (see its message)",
                 step);
    return any ? -1 : 0;
}

/* Rank 0 reads out_dir's checkpoint (when there is one), checks it against
 * c and n, and every rank gets params and moments into the device buffers.
 * *start = steps already done (0 without a checkpoint). Returns 0 or -1 with
 * a message on every rank. */
static int resume_from(comm_t *comm, const char *out_dir, model *m, const bf_config *c, float *dm,
                       float *dv, float *hm, float *hv, long *start, int quiet, char *err,
                       size_t errlen) {
    const bk_backend *be = m->be;
    size_t n = m->np.P.numel;
    int rank = comm_rank(comm), failed = 0;
    uint64_t hdr[2] = {0, 0}; /* have, step */
    ckpt_state s;
    memset(&s, 0, sizeof s);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out_dir, CKPT_NAME);
    if (rank == 0 && file_exists(path)) {
        char *cur = malloc(CKPT_MAX_CFG);
        if (!cur) {
            snprintf(err, errlen, "out of memory");
            failed = 1;
        } else if (ckpt_read(path, &s, err, errlen)) {
            failed = 1;
        } else if (s.n_params != n) {
            snprintf(err, errlen, "checkpoint %s has %zu parameters, this config builds %zu", path,
                     s.n_params, n);
            failed = 1;
        } else {
            cfg_dump(c, cur, CKPT_MAX_CFG);
            char e2[1536];
            if (ckpt_config_check(s.cfg_text, cur, e2, sizeof e2)) {
                snprintf(err, errlen, "checkpoint %s: %s", path, e2);
                failed = 1;
            }
        }
        free(cur);
        hdr[0] = !failed;
        hdr[1] = s.step;
    }
    int any = failed;
    char e2[256];
    comm_watch(comm, 0);
    int rc = comm_any(comm, failed, &any, e2, sizeof e2);
    comm_watch(comm, 1);
    if (rc || any) {
        if (rc && !failed)
            snprintf(err, errlen, "%s", e2);
        else if (!failed)
            snprintf(err, errlen, "rank 0 could not resume from %s (see its message)", path);
        ckpt_free(&s);
        return -1;
    }
    if (comm_bcast(comm, hdr, sizeof hdr, 0, err, errlen)) {
        ckpt_free(&s);
        return -1;
    }
    if (!hdr[0]) return 0; /* no checkpoint yet: a fresh start */
    float *hp = rank == 0 ? s.params : malloc(n * sizeof(float));
    if (!hp) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (rank == 0) {
        memcpy(hm, s.m, n * sizeof(float));
        memcpy(hv, s.v, n * sizeof(float));
    }
    rc = comm_bcast(comm, hp, n * sizeof(float), 0, err, errlen) ||
         comm_bcast(comm, hm, n * sizeof(float), 0, err, errlen) ||
         comm_bcast(comm, hv, n * sizeof(float), 0, err, errlen);
    if (!rc) {
        be->to_device(m->np.P.data, hp, n * sizeof(float));
        be->to_device(dm, hm, n * sizeof(float));
        be->to_device(dv, hv, n * sizeof(float));
        *start = (long)hdr[1];
        if (!quiet) fprintf(stderr, "resume: continuing from step %ld of %s\n", *start, path);
    }
    if (rank != 0) free(hp);
    ckpt_free(&s);
    return rc ? -1 : 0;
}

/* What one training step measured, added over ranks. */
enum { ST_COUNTED, ST_TASK, ST_BUDGET, ST_ENTROPY, ST_S, ST_HEADS, ST_CORRECT, ST_COUNT };

int train_run(const bf_config *c, const train_opts *o, train_result *r, char *err, size_t errlen) {
    comm_t *comm = o->comm;
    const int rank = comm_rank(comm), world = comm_world(comm);
    const int quiet = o->quiet || rank != 0;
    if (c->train.batch % world != 0) {
        snprintf(
            err, errlen,
            "train.batch %d is not divisible by the %d ranks (each rank takes batch/ranks rows)",
            c->train.batch, world);
        return TRAIN_ERROR;
    }
    const int local_batch = c->train.batch / world;
    /* BF_ALLREDUCE_ALWAYS=1: run the all-reduce even on one rank (the
     * scaling benchmark measures NCCL's cost on a single GPU this way) */
    const char *always = getenv("BF_ALLREDUCE_ALWAYS");
    const int reduce = world > 1 || (always && strcmp(always, "1") == 0);
    const bk_backend *be;
    if (comm_select_gpu(comm, err, errlen)) return TRAIN_ERROR;
    if (bk_select(c->device, &be, err, errlen)) return TRAIN_ERROR;
    if (comm_gpu_setup(comm, be, err, errlen)) return TRAIN_ERROR;
    const char *out_dir = rank == 0 ? o->out_dir : NULL; /* only rank 0 writes files */
    if (out_dir && make_dirs(out_dir, err, errlen)) return TRAIN_ERROR;
    int lm = strcmp(c->pipeline, "lm") == 0;
    /* Rank 0 opens the data first (it may train the tokenizer and write the
     * token cache), then the others read what it made. */
    pipe_data d;
    memset(&d, 0, sizeof d);
    {
        int failed = 0, any = 0;
        if (rank == 0) failed = pipe_data_open(c, &d, quiet, err, errlen) != 0;
        char e2[256];
        comm_watch(comm, 0);
        int rc = comm_any(comm, failed, &any, e2, sizeof e2);
        comm_watch(comm, 1);
        if (rc || any) {
            if (!failed)
                snprintf(err, errlen, "%s",
                         rc ? e2 : "rank 0 could not open the data (see its message)");
            if (!failed && rank == 0) pipe_data_close(&d);
            return TRAIN_ERROR;
        }
        if (rank != 0 && pipe_data_open(c, &d, 1, err, errlen)) return TRAIN_ERROR;
    }
    model_shape sh = train_model_shape(c, &d);
    model m;
    int rc = TRAIN_ERROR;
    metrics mt;
    memset(&mt, 0, sizeof mt);
    float *dm = NULL, *dv = NULL, *hm = NULL, *hv = NULL;
    data_batcher_t *bt = NULL;
    data_batch_t b;
    memset(&b, 0, sizeof b);
    if (model_create(&m, &sh, be, local_batch, err, errlen)) {
        pipe_data_close(&d);
        return TRAIN_ERROR;
    }
    m.kn.s_min = c->budget.range[0];
    m.kn.s_max = c->budget.range[1];
    if (model_init_weights(&m, c->train.seed, err, errlen)) {
        model_destroy(&m);
        pipe_data_close(&d);
        return TRAIN_ERROR;
    }
    size_t n = m.np.P.numel;
    dm = be->alloc(n * sizeof(float));
    dv = be->alloc(n * sizeof(float));
    hm = malloc(n * sizeof(float));
    hv = malloc(n * sizeof(float));
    if (!dm || !dv || !hm || !hv) {
        snprintf(err, errlen, "out of memory for the optimiser state");
        goto out;
    }
    long start = 0;
    if (o->resume && o->out_dir &&
        resume_from(comm, o->out_dir, &m, c, dm, dv, hm, hv, &start, quiet, err, errlen))
        goto out;
    if (out_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/config.yaml", out_dir);
        FILE *f = fopen(path, "w");
        if (f) {
            char *txt = malloc(CKPT_MAX_CFG);
            if (txt) {
                cfg_dump(c, txt, CKPT_MAX_CFG);
                fputs(txt, f);
                free(txt);
            }
            fclose(f);
        }
    }
    if (metrics_open(&mt, out_dir, err, errlen)) goto out;
    data_batcher_opts bo = {.global_batch = c->train.batch,
                            .seq_len = c->model.seq_len,
                            .rank = rank,
                            .world = world,
                            .seed = c->train.seed,
                            .shuffle = 1,
                            .wrap = 1,
                            .split = 0};
    if (data_batcher_new(d.train, &bo, &bt, err, errlen)) goto out;
    if (data_batch_alloc(&b, local_batch, c->model.seq_len)) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (!quiet) {
        fprintf(stderr,
                "model: %s, %d layers, d_model %d, %d heads, out_proj %s, budget %s, %zu "
                "parameters, device %s\n",
                lm ? "causal lm" : "encoder classifier", sh.layers, sh.d_model, sh.heads,
                sh.hadamard ? "hadamard" : "dense", sh.budget ? "on" : "off", n, be->name);
        if (world > 1)
            fprintf(stderr, "data parallel: %d ranks (%s), %d rows each of a global batch of %d\n",
                    world, comm_kind(comm), local_batch, c->train.batch);
    }
    bk_adamw hp = {.lr = c->train.lr,
                   .beta1 = 0.9f,
                   .beta2 = 0.95f,
                   .eps = 1e-8f,
                   .weight_decay = c->train.weight_decay};
    double t_start = now_s(), t_log = t_start, t_comm = 0;
    double acc_loss = 0, acc_task = 0, acc_budget = 0, acc_ent = 0, acc_s = 0, acc_heads = 0;
    double acc_correct = 0, acc_count = 0, acc_tokens = 0;
    int acc_n = 0;
    long step = start;
    const int log_every = c->train.log_every > 0 ? c->train.log_every : 50;
    for (; step < c->train.steps; step++) {
        /* every rank stops at the same step when any rank got SIGTERM */
        int stop = 0;
        if (comm_any(comm, o->stop && *o->stop, &stop, err, errlen)) goto out;
        if (stop) {
            if (o->out_dir &&
                save_checkpoint(comm, o->out_dir, &m, c, hm, hv, dm, dv, step, err, errlen))
                goto out;
            if (!quiet) fprintf(stderr, "preempted: checkpoint written at step %ld\n", step);
            rc = TRAIN_PREEMPTED;
            goto out;
        }
        set_knobs(&m, c, step);
        m.kn.row_offset = (uint64_t)rank * (uint64_t)local_batch;
        if (data_batch_at(bt, (uint64_t)step, &b, err, errlen)) goto out;
        const int *targets = lm ? b.targets : b.labels;
        if (model_forward(&m, b.ids, b.mask, targets, b.rows, 1, err, errlen)) goto out;
        model_backward(&m);
        model_stats st = m.st;
        if (reduce) {
            /* The loss is a mean over this rank's counted rows (lm: target
             * tokens). The global batch's mean gradient is
             * sum_r counted_r * g_r / sum_r counted_r; with the budget on, its
             * losses are means over every row, so ranks weigh equally (every
             * training row is counted then: the batcher wraps, no empty rows). */
            double t0 = now_s();
            double sv[ST_COUNT] = {st.counted,     st.loss_task * st.counted,
                                   st.loss_budget, st.loss_entropy,
                                   st.mean_s,      st.heads_used,
                                   st.correct};
            if (comm_sum_f64(comm, sv, ST_COUNT, err, errlen)) goto out;
            if (!sh.budget) {
                be->scale(m.np.P.grad, (float)st.counted, n);
                if (comm_allreduce_sum(comm, be, m.np.P.grad, n, 1, err, errlen)) goto out;
                be->scale(m.np.P.grad, sv[ST_COUNTED] > 0 ? (float)(1.0 / sv[ST_COUNTED]) : 0.0f,
                          n);
            } else if (comm_allreduce_mean(comm, be, m.np.P.grad, n, 1, err, errlen)) {
                goto out;
            }
            t_comm += now_s() - t0;
            st.counted = sv[ST_COUNTED];
            st.loss_task = st.counted > 0 ? sv[ST_TASK] / st.counted : 0;
            st.loss_budget = sv[ST_BUDGET] / world;
            st.loss_entropy = sv[ST_ENTROPY] / world;
            st.loss = st.loss_task + st.loss_budget + st.loss_entropy;
            st.mean_s = sv[ST_S] / world;
            st.heads_used = sv[ST_HEADS] / world;
            st.correct = sv[ST_CORRECT];
        }
        float norm = be->global_norm(m.np.P.grad, n);
        float scale = c->train.clip > 0 && norm > c->train.clip ? c->train.clip / norm : 1.0f;
        if (!isfinite(norm)) {
            snprintf(err, errlen,
                     "step %ld: gradient norm is not finite (loss %.4g): lower train.lr or raise "
                     "train.warmup",
                     step, st.loss);
            goto out;
        }
        hp.lr = lr_at(c, step);
        hp.weight_decay = c->train.weight_decay;
        be->adamw_update(m.np.P.data, m.np.P.grad, dm, dv, m.np.P.n_decay, &hp, (int)(step + 1),
                         scale);
        hp.weight_decay = 0;
        be->adamw_update(m.np.P.data + m.np.P.n_decay, m.np.P.grad + m.np.P.n_decay,
                         dm + m.np.P.n_decay, dv + m.np.P.n_decay, n - m.np.P.n_decay, &hp,
                         (int)(step + 1), scale);
        acc_loss += st.loss;
        acc_task += st.loss_task;
        acc_budget += st.loss_budget;
        acc_ent += st.loss_entropy;
        acc_s += st.mean_s;
        acc_heads += st.heads_used;
        acc_correct += st.correct;
        acc_count += st.counted;
        acc_tokens += (double)c->train.batch * c->model.seq_len;
        acc_n++;
        long done = step + 1;
        int last = done == c->train.steps;
        if (done % log_every == 0 || last) {
            double t = now_s(), tps = acc_tokens / (t - t_log);
            metrics_begin(&mt, done);
            metrics_add(&mt, "train/loss", acc_loss / acc_n);
            metrics_add(&mt, "train/loss_task", acc_task / acc_n);
            if (sh.budget) {
                metrics_add(&mt, "train/loss_budget", acc_budget / acc_n);
                metrics_add(&mt, "train/loss_entropy", acc_ent / acc_n);
                metrics_add(&mt, "train/temperature", m.kn.tau);
                metrics_add(&mt, "train/noise", m.kn.sigma);
                metrics_add(&mt, "train/gate_temperature", m.kn.tau_r);
                metrics_add(&mt, "train/budget_s", acc_s / acc_n);
            }
            metrics_add(&mt, "train/heads_used", acc_heads / acc_n);
            if (!lm) metrics_add(&mt, "train/acc", acc_count > 0 ? acc_correct / acc_count : NAN);
            metrics_add(&mt, "train/lr", hp.lr);
            metrics_add(&mt, "train/grad_norm", norm);
            metrics_add(&mt, "train/tokens_per_s", tps);
            if (reduce) metrics_add(&mt, "train/allreduce_s", t_comm / acc_n);
            if (r) {
                r->train_loss = acc_loss / acc_n;
                r->tokens_per_s = tps;
                r->final_s = acc_s / acc_n;
            }
            if (!quiet) {
                char eta[32];
                double per = (t - t_start) / (double)(done - start);
                fmt_eta(per * (double)(c->train.steps - done), eta, sizeof eta);
                fprintf(stderr, "step %6ld/%d | loss %.4f", done, c->train.steps, acc_loss / acc_n);
                if (sh.budget)
                    fprintf(stderr, " (task %.4f budget %.4f ent %+.4f) | s %.3f", acc_task / acc_n,
                            acc_budget / acc_n, acc_ent / acc_n, acc_s / acc_n);
                if (!lm)
                    fprintf(stderr, " | acc %.3f", acc_count > 0 ? acc_correct / acc_count : 0.0);
                fprintf(stderr, " | heads %.3f | %.0f tok/s", acc_heads / acc_n, tps);
                if (reduce) fprintf(stderr, " | allreduce %.2f ms", 1e3 * t_comm / acc_n);
                fprintf(stderr, " | ETA %s\n", eta);
            }
            acc_loss = acc_task = acc_budget = acc_ent = acc_s = acc_heads = 0;
            acc_correct = acc_count = acc_tokens = 0;
            acc_n = 0;
            t_comm = 0;
            t_log = now_s();
        }
        if ((c->train.eval_every > 0 && done % c->train.eval_every == 0) || last) {
            eval_result e;
            /* every rank evaluates its shard; the sums are all-reduced */
            if (evaluate_shard(&m, c, &d, 0, comm, &e, NULL, err, errlen)) goto out;
            if (mt.n == 0) metrics_begin(&mt, done);
            add_eval_metrics(&mt, "val", &e, sh.budget, lm);
            if (r) r->val = e;
            if (!quiet) {
                if (lm)
                    fprintf(stderr, "eval  %6ld | val/loss %.4f | val/ppl %.2f\n", done, e.loss,
                            e.ppl);
                else
                    fprintf(stderr,
                            "eval  %6ld | val/loss %.4f | val/acc %.4f | val/heads_used %.3f | "
                            "val/attn_flops %.3g\n",
                            done, e.loss, e.acc, e.heads_used, e.attn_flops);
            }
            t_log = now_s();
        }
        metrics_flush(&mt);
        if (o->out_dir &&
            ((c->train.checkpoint_every > 0 && done % c->train.checkpoint_every == 0) || last)) {
            if (save_checkpoint(comm, o->out_dir, &m, c, hm, hv, dm, dv, done, err, errlen))
                goto out;
        }
    }
    /* The test pass at the end runs on rank 0 alone (it writes the per-sample
     * file); the other ranks are done and only wait in MPI_Finalize. */
    if (!lm && d.test && rank == 0) {
        eval_result e;
        FILE *ps = NULL;
        if (out_dir) { /* per test sample: s (NaN without a budget), tokens, loss, correct */
            char path[4096];
            snprintf(path, sizeof path, "%s/test_samples.tsv", out_dir);
            ps = fopen(path, "w");
            if (ps) fputs("s_mean\ttokens\tloss\tcorrect\n", ps);
        }
        int erc = evaluate_shard(&m, c, &d, 1, NULL, &e, ps, err, errlen);
        if (ps) fclose(ps);
        if (erc) goto out;
        metrics_begin(&mt, step);
        add_eval_metrics(&mt, "test", &e, sh.budget, lm);
        metrics_flush(&mt);
        if (r) r->test = e;
        if (!quiet) {
            fprintf(stderr,
                    "test  | acc %.4f | heads_used %.3f | attn_flops %.4g | %.0f samples in %.2f s",
                    e.acc, e.heads_used, e.attn_flops, e.samples, e.seconds);
            if (sh.budget)
                fprintf(stderr, " | corr(s, length) %.3f | corr(s, loss) %.3f", e.corr_s_len,
                        e.corr_s_loss);
            fputc('\n', stderr);
        }
    }
    if (r) r->steps = step;
    rc = TRAIN_OK;
out:
    metrics_close(&mt);
    data_batch_free(&b);
    data_batcher_destroy(&bt);
    be->release(dm);
    be->release(dv);
    free(hm);
    free(hv);
    model_destroy(&m);
    pipe_data_close(&d);
    return rc;
}
