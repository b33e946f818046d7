/* generate.c — decoder inference with a KV cache (generate.h): prefill,
 * one-token decode, greedy or temperature/top-k sampling, and the uncached
 * reference the tests compare against. */

#include "worker/pipelines/generate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk_rng.h"

/* Same allocation sequence for planning and for real. */
static void plan(gen_state *g) {
    bk_arena *a = &g->A;
    size_t rows = (size_t)g->T * g->B, C = (size_t)g->C;
    size_t cache = (size_t)g->L * rows * C;
    g->kc = bk_arena_floats(a, cache);
    g->vc = bk_arena_floats(a, cache);
    g->x = bk_arena_floats(a, rows * C);
    g->ln = bk_arena_floats(a, rows * C);
    g->mean = bk_arena_floats(a, rows);
    g->rstd = bk_arena_floats(a, rows);
    g->q = bk_arena_floats(a, rows * C);
    g->y = bk_arena_floats(a, rows * C);
    g->proj = bk_arena_floats(a, rows * C);
    g->fch = bk_arena_floats(a, rows * 4 * C);
    g->fchg = bk_arena_floats(a, rows * 4 * C);
    g->scores = bk_arena_floats(a, (size_t)g->B * g->NH * g->T);
    g->logits = bk_arena_floats(a, (size_t)g->B * g->V);
    g->ids = bk_arena_ints(a, rows);
    g->posids = bk_arena_ints(a, rows);
}

int gen_create(gen_state *g, const model *m, int batch_capacity, char *err, size_t errlen) {
    memset(g, 0, sizeof *g);
    if (m->sh.n_classes != 0 || m->sh.budget) {
        snprintf(err, errlen,
                 "generate needs a causal language model without the head budget "
                 "(pipeline: lm)");
        return -1;
    }
    if (batch_capacity < 1) {
        snprintf(err, errlen, "generate: batch capacity must be >= 1, got %d", batch_capacity);
        return -1;
    }
    g->m = m;
    g->be = m->be;
    g->B = batch_capacity;
    g->T = m->sh.seq_len;
    g->L = m->sh.layers;
    g->C = m->sh.d_model;
    g->NH = m->sh.heads;
    g->V = m->sh.vocab;
    size_t rows = (size_t)g->T * g->B;
    g->h_ids = malloc(rows * sizeof(int));
    g->h_posids = malloc(rows * sizeof(int));
    if (!g->h_ids || !g->h_posids) {
        snprintf(err, errlen, "generate: out of memory");
        gen_destroy(g);
        return -1;
    }
    bk_arena_plan(&g->A);
    plan(g);
    g->cache_bytes = 2 * (size_t)g->L * rows * g->C * sizeof(float);
    if (bk_arena_reserve(&g->A, g->be, err, errlen)) {
        gen_destroy(g);
        return -1;
    }
    plan(g);
    g->scratch_bytes = g->A.size - g->cache_bytes;
    return 0;
}

void gen_destroy(gen_state *g) {
    bk_arena_free(&g->A);
    free(g->h_ids);
    free(g->h_posids);
    memset(g, 0, sizeof *g);
}

/* Runs n new tokens of each of g->batch sequences (device ids/posids already
 * set, rows position-major) from position g->pos, writing their K and V into
 * the cache, and leaves the logits after the last new token in g->logits
 * [batch, V]. */
static void forward_new(gen_state *g, int n) {
    const model *m = g->m;
    const bk_backend *be = g->be;
    int Bq = g->batch, C = g->C, L = g->L;
    int rows = n * Bq;
    size_t layer_cache = (size_t)g->T * g->B * C; /* per layer, at capacity */
    size_t pos_stride = (size_t)Bq * C;           /* one position of every sequence */
    nn_decode_ws w = {g->ln, g->mean, g->rstd, g->q, g->y, g->proj, g->fch, g->fchg, g->scores};

    nn_embed_rows(&m->emb, &m->env, g->x, g->ids, g->posids, rows, g->proj);
    for (int l = 0; l < L; l++)
        nn_block_decode(&m->blocks[l], &m->env, &w, g->x, g->kc + l * layer_cache,
                        g->vc + l * layer_cache, Bq, g->pos, n);
    /* only the last position's rows need logits */
    const float *last = g->x + (size_t)(n - 1) * pos_stride;
    nn_ln_acts ln = {g->ln, g->mean, g->rstd};
    nn_layernorm_forward(&m->lnf, &m->env, &ln, last, Bq);
    be->linear_forward(g->logits, g->ln, nn_w(&m->env, m->emb.tok), NULL, Bq, C, g->V);
}

/* Stages ids[batch, n] (batch-major) as position-major device ids and
 * positions pos..pos+n-1, checking the vocabulary. */
static int stage_ids(gen_state *g, const int *ids, int n, char *err, size_t errlen) {
    int Bq = g->batch;
    for (int b = 0; b < Bq; b++)
        for (int i = 0; i < n; i++) {
            int id = ids[(size_t)b * n + i];
            if (id < 0 || id >= g->V) {
                snprintf(err, errlen,
                         "generate: token id %d (sequence %d, position %d) outside the "
                         "vocabulary 0..%d",
                         id, b, g->pos + i, g->V - 1);
                return -1;
            }
            g->h_ids[(size_t)i * Bq + b] = id;
            g->h_posids[(size_t)i * Bq + b] = g->pos + i;
        }
    size_t bytes = (size_t)n * Bq * sizeof(int);
    g->be->to_device(g->ids, g->h_ids, bytes);
    g->be->to_device(g->posids, g->h_posids, bytes);
    return 0;
}

static int run_new(gen_state *g, const int *ids, int n, float *logits, char *err, size_t errlen) {
    if (stage_ids(g, ids, n, err, errlen)) return -1;
    forward_new(g, n);
    g->pos += n;
    if (logits) g->be->to_host(logits, g->logits, (size_t)g->batch * g->V * sizeof(float));
    return 0;
}

int gen_prefill(gen_state *g, const int *ids, int batch, int n, float *logits, char *err,
                size_t errlen) {
    if (batch < 1 || batch > g->B) {
        snprintf(err, errlen, "generate: batch %d outside 1..%d", batch, g->B);
        return -1;
    }
    if (n < 1 || n > g->T) {
        snprintf(err, errlen, "generate: prompt of %d tokens; the model holds 1..%d", n, g->T);
        return -1;
    }
    g->batch = batch;
    g->pos = 0;
    if (run_new(g, ids, n, logits, err, errlen)) {
        g->batch = 0;
        return -1;
    }
    return 0;
}

int gen_decode(gen_state *g, const int *ids, float *logits, char *err, size_t errlen) {
    if (g->batch < 1) {
        snprintf(err, errlen, "generate: decode before any prefill");
        return -1;
    }
    if (g->pos >= g->T) {
        snprintf(err, errlen, "generate: the context is full (%d positions)", g->T);
        return -1;
    }
    return run_new(g, ids, 1, logits, err, errlen);
}

/* ---- sampling ---- */

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

int gen_sample(const float *logits, int V, const gen_sampler *s, uint64_t stream, uint64_t step,
               float *work) {
    int best = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    if (s->temperature <= 0) return best;
    /* keep logits >= the k-th largest (ties at the threshold are all kept) */
    float thr = -INFINITY;
    if (s->top_k > 0 && s->top_k < V) {
        memcpy(work, logits, (size_t)V * sizeof(float));
        qsort(work, (size_t)V, sizeof(float), cmp_desc);
        thr = work[s->top_k - 1];
    }
    double sum = 0, inv_t = 1.0 / s->temperature, mx = logits[best];
    for (int v = 0; v < V; v++) {
        double p = logits[v] >= thr ? exp((logits[v] - mx) * inv_t) : 0.0;
        work[v] = (float)p;
        sum += p;
    }
    double u = bk_rng_uniform_at(s->seed, stream, step) * sum, acc = 0;
    int last = best;
    for (int v = 0; v < V; v++) {
        if (work[v] <= 0) continue;
        acc += work[v];
        last = v;
        if (u < acc) return v;
    }
    return last; /* rounding left u at the very top */
}

int gen_generate(gen_state *g, const int *prompt, int n_prompt, int n_new, const gen_sampler *s,
                 int *out, char *err, size_t errlen) {
    if (n_prompt < 1 || n_new < 0) {
        snprintf(err, errlen, "generate: needs a prompt of at least one token");
        return -1;
    }
    int T = g->T, keep = T / 2 > 0 ? T / 2 : 1;
    int total = n_prompt + n_new;
    int *seq = malloc((size_t)total * sizeof(int));
    float *logits = malloc((size_t)g->V * sizeof(float));
    float *work = malloc((size_t)g->V * sizeof(float));
    int rc = -1;
    if (!seq || !logits || !work) {
        snprintf(err, errlen, "generate: out of memory");
        goto done;
    }
    memcpy(seq, prompt, (size_t)n_prompt * sizeof(int));
    int len = n_prompt;
    int start = n_prompt > T ? n_prompt - keep : 0;
    if (gen_prefill(g, seq + start, 1, len - start, logits, err, errlen)) goto done;
    for (int i = 0; i < n_new; i++) {
        int tok = gen_sample(logits, g->V, s, 0, (uint64_t)i, work);
        seq[len++] = tok;
        out[i] = tok;
        if (i + 1 == n_new) break;
        if (g->pos >= T) {
            if (gen_prefill(g, seq + len - keep, 1, keep, logits, err, errlen)) goto done;
        } else if (gen_decode(g, &tok, logits, err, errlen)) {
            goto done;
        }
    }
    rc = 0;
done:
    free(seq);
    free(logits);
    free(work);
    return rc;
}

/* ---- reference: the whole sequence through model_forward ---- */

int gen_reference_logits(model *m, const int *ids, int n, float *logits, char *err, size_t errlen) {
    int T = m->sh.seq_len, V = m->sh.vocab;
    if (m->sh.n_classes != 0 || n < 1 || n > T) {
        snprintf(err, errlen, "reference: needs a causal LM and 1..%d tokens, got %d", T, n);
        return -1;
    }
    int *row = calloc((size_t)T, sizeof(int)), *targets = malloc((size_t)T * sizeof(int));
    float *mask = calloc((size_t)T, sizeof(float));
    int rc = -1;
    if (!row || !targets || !mask) {
        snprintf(err, errlen, "reference: out of memory");
        goto done;
    }
    memcpy(row, ids, (size_t)n * sizeof(int));
    for (int t = 0; t < T; t++) {
        targets[t] = -1;
        mask[t] = t < n ? 1.0f : 0.0f;
    }
    if (model_forward(m, row, mask, targets, 1, 0, err, errlen)) goto done;
    memcpy(logits, m->h_logits + (size_t)(n - 1) * V, (size_t)V * sizeof(float));
    rc = 0;
done:
    free(row);
    free(targets);
    free(mask);
    return rc;
}

int gen_reference_greedy(model *m, const int *prompt, int n_prompt, int n_new, int *out, char *err,
                         size_t errlen) {
    int T = m->sh.seq_len, V = m->sh.vocab;
    if (n_prompt < 1 || n_new < 0 || n_prompt + n_new > T) {
        snprintf(err, errlen, "reference: prompt %d + new %d tokens must fit in %d", n_prompt,
                 n_new, T);
        return -1;
    }
    int *seq = malloc((size_t)(n_prompt + n_new) * sizeof(int));
    float *logits = malloc((size_t)V * sizeof(float));
    int rc = -1;
    if (!seq || !logits) {
        snprintf(err, errlen, "reference: out of memory");
        goto done;
    }
    memcpy(seq, prompt, (size_t)n_prompt * sizeof(int));
    gen_sampler greedy = {0};
    for (int i = 0; i < n_new; i++) {
        if (gen_reference_logits(m, seq, n_prompt + i, logits, err, errlen)) goto done;
        out[i] = seq[n_prompt + i] = gen_sample(logits, V, &greedy, 0, 0, NULL);
    }
    rc = 0;
done:
    free(seq);
    free(logits);
    return rc;
}
