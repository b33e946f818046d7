/* pipe_eval — one inference pass over a split, through the same model code
 * as training (model_forward in inference mode). */
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
    EV_RET,
    EV_COUNT
};

int pipe_eval_batcher(const model *m, const bf_config *c, const data_sets *d, const data_tok_t *set,
                      const pipe_host *h, data_batcher_t **bt, data_batch_t *b, char *err,
                      size_t errlen) {
    int world = h ? h->world : 1, T_in = pipe_input_len(c, d);
    data_batcher_opts bo = {.global_batch = m->B * world,
                            .seq_len = T_in,
                            .rank = h ? h->rank : 0,
                            .world = world,
                            .seed = c->train.seed,
                            .shuffle = 0,
                            .wrap = 0,
                            .split = d->n_classes ? 0 : 1};
    *bt = NULL;
    if (data_batcher_new(set, &bo, bt, err, errlen)) return -1;
    if (data_batch_alloc(b, m->B, T_in)) {
        data_batcher_destroy(bt);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

int pipe_evaluate(model *m, const bf_config *c, const data_sets *d, int split, const pipe_host *h,
                  eval_result *out, FILE *per_sample, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    const data_tok_t *set = d->n_classes ? (split ? d->test : d->val) : d->train;
    if (!set) {
        snprintf(err, errlen, "no %s split", split ? "test" : "validation");
        return -1;
    }
    int world = h ? h->world : 1, T_in = pipe_input_len(c, d);
    data_batcher_t *bt;
    data_batch_t b;
    if (pipe_eval_batcher(m, c, d, set, h, &bt, &b, err, errlen)) return -1;
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
        sum[EV_RET] += m->st.retention * b.valid_rows;
        for (int i = 0; i < b.valid_rows * T_in; i++) sum[EV_TOKENS] += b.mask[i] > 0;
        if (d->n_classes && (m->sh.budget || per_sample)) {
            for (int i = 0; i < b.valid_rows; i++) {
                double s = m->sh.budget ? 0 : NAN;
                for (int l = 0; m->sh.budget && l < m->sh.layers; l++) s += model_budget_s(m, l, i);
                if (m->sh.budget) s /= m->sh.layers;
                int len = 0;
                for (int t = 0; t < T_in; t++) len += b.mask[i * T_in + t] > 0;
                int best = model_prediction(m, i);
                double loss = model_row_loss(m, i);
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
    if (h && h->sum_f64 && h->sum_f64(h->ctx, sum, EV_COUNT, err, errlen)) return -1;
    double counted = sum[EV_COUNTED], rows = sum[EV_ROWS];
    out->seconds = sum[EV_SECONDS] / world; /* mean over ranks ~ wall time */
    out->samples = rows;
    out->tokens = sum[EV_TOKENS];
    out->loss = counted > 0 ? sum[EV_LOSS] / counted : NAN;
    out->acc = d->n_classes && counted > 0 ? sum[EV_CORRECT] / counted : NAN;
    out->ppl = d->n_classes ? NAN : exp(out->loss);
    out->heads_used = rows > 0 ? sum[EV_HEADS] / rows : NAN;
    out->attn_flops = rows > 0 ? sum[EV_FLOPS] / rows : NAN;
    out->retention = m->sh.avit && rows > 0 ? sum[EV_RET] / rows : NAN;
    out->corr_s_len =
        pearson_sums(sum[EV_N], sum[EV_S], sum[EV_LEN], sum[EV_SS], sum[EV_LENLEN], sum[EV_SLEN]);
    out->corr_s_loss =
        pearson_sums(sum[EV_N], sum[EV_S], sum[EV_L], sum[EV_SS], sum[EV_LL], sum[EV_SL]);
    return 0;
}
