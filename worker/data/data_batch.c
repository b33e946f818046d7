/* data_batch — deterministic, rank-sharded batches. Everything a batch holds
 * is a function of (data, opts, step): no hidden state but a cache of the
 * current epoch's permutation, so resuming at a step reproduces the run. */
#include "worker/data/data.h"
#include "worker/data/data_priv.h"

#include <stdlib.h>
#include <string.h>

struct data_batcher {
    const data_tok_t *d;
    data_batcher_opts o;
    int lm;
    uint64_t tok_begin, tok_end; /* LM: the split's token range */
    size_t n_items;
    uint64_t next_step;
    uint64_t perm_epoch; /* epoch perm holds, or UINT64_MAX */
    uint32_t *perm;      /* [n_items] when shuffle */
};

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t epoch_state(uint64_t seed, uint64_t epoch, uint64_t salt) {
    uint64_t s = seed ^ 0x6A09E667F3BCC908ull;
    (void)splitmix64(&s);
    s ^= epoch * 0xD1B54A32D192ED03ull + salt;
    (void)splitmix64(&s);
    return s;
}

void data_batcher_destroy(data_batcher_t **self_p) {
    if (!self_p || !*self_p) return;
    free((*self_p)->perm);
    free(*self_p);
    *self_p = NULL;
}

int data_batcher_new(const data_tok_t *d, const data_batcher_opts *o, data_batcher_t **out,
                     char *err, size_t errlen) {
    if (!d || !o || !out)
        return data_fail(err, errlen, DATA_EINVAL, "data_batcher_new: null argument");
    *out = NULL;
    if (o->global_batch < 1 || o->seq_len < 1)
        return data_fail(err, errlen, DATA_EINVAL, "batch %d and seq_len %d must be >= 1",
                         o->global_batch, o->seq_len);
    if (o->world < 1 || o->rank < 0 || o->rank >= o->world)
        return data_fail(err, errlen, DATA_EINVAL, "rank %d of world %d: need 0 <= rank < world",
                         o->rank, o->world);
    if (o->global_batch % o->world)
        return data_fail(err, errlen, DATA_EINVAL,
                         "global batch %d is not divisible by the %d ranks; use a multiple of %d",
                         o->global_batch, o->world, o->world);
    data_batcher_t *b = calloc(1, sizeof *b);
    if (!b) return data_fail(err, errlen, DATA_ENOMEM, "out of memory");
    b->d = d;
    b->o = *o;
    b->lm = d->kind == DATA_KIND_LM;
    b->perm_epoch = UINT64_MAX;
    if (b->lm) {
        uint64_t cut = d->offsets[d->val_start];
        b->tok_begin = o->split ? cut : 0;
        b->tok_end = o->split ? d->offsets[d->n_seq] : cut;
        uint64_t len = b->tok_end - b->tok_begin, T = (uint64_t)o->seq_len;
        /* Training windows need T+1 tokens from any per-epoch offset < T;
         * a one-pass batcher covers every target once, the last window short. */
        b->n_items =
            o->wrap ? (len >= 2 * T ? (len - T) / T : 0) : (len >= 2 ? (len - 1 + T - 1) / T : 0);
    } else {
        b->n_items = d->n_seq;
    }
    if (b->n_items == 0) {
        int rc =
            b->lm ? data_fail(
                        err, errlen, DATA_EINVAL,
                        "the %s split has %llu tokens: too few for seq_len %d (need at least %d)",
                        o->split ? "validation" : "training",
                        (unsigned long long)(b->tok_end - b->tok_begin), o->seq_len,
                        o->wrap ? 2 * o->seq_len : 2)
                  : data_fail(err, errlen, DATA_EINVAL, "the data set has no examples");
        free(b);
        return rc;
    }
    if (b->n_items > UINT32_MAX) {
        size_t n = b->n_items;
        free(b);
        return data_fail(err, errlen, DATA_ETOOBIG, "%zu items per epoch is over the limit of %u",
                         n, UINT32_MAX);
    }
    if (o->shuffle && !(b->perm = malloc(b->n_items * sizeof(uint32_t)))) {
        free(b);
        return data_fail(err, errlen, DATA_ENOMEM, "out of memory");
    }
    *out = b;
    return DATA_OK;
}

size_t data_batcher_steps_per_epoch(const data_batcher_t *b) {
    if (!b) return 0;
    size_t B = (size_t)b->o.global_batch;
    return (b->n_items + B - 1) / B;
}

void data_batcher_seek(data_batcher_t *b, uint64_t step) {
    if (b) b->next_step = step;
}

int data_batch_alloc(data_batch_t *bt, int rows, int seq_len) {
    memset(bt, 0, sizeof *bt);
    if (rows < 1 || seq_len < 1) return DATA_EINVAL;
    size_t n = (size_t)rows * (size_t)seq_len;
    bt->rows = rows;
    bt->seq_len = seq_len;
    bt->ids = malloc(n * sizeof(int32_t));
    bt->mask = malloc(n * sizeof(float));
    bt->labels = malloc((size_t)rows * sizeof(int32_t));
    bt->targets = malloc(n * sizeof(int32_t));
    if (!bt->ids || !bt->mask || !bt->labels || !bt->targets) {
        data_batch_free(bt);
        return DATA_ENOMEM;
    }
    return DATA_OK;
}

void data_batch_free(data_batch_t *bt) {
    if (!bt) return;
    free(bt->ids);
    free(bt->mask);
    free(bt->labels);
    free(bt->targets);
    memset(bt, 0, sizeof *bt);
}

/* The item at position pos of epoch's order. */
static size_t item_at(data_batcher_t *b, uint64_t epoch, size_t pos) {
    if (!b->o.shuffle) return pos;
    if (b->perm_epoch != epoch) {
        uint64_t s = epoch_state(b->o.seed, epoch, 1);
        for (size_t i = 0; i < b->n_items; i++) b->perm[i] = (uint32_t)i;
        for (size_t i = b->n_items - 1; i > 0; i--) {
            size_t j = (size_t)(((unsigned __int128)splitmix64(&s) * (i + 1)) >> 64);
            uint32_t t = b->perm[i];
            b->perm[i] = b->perm[j];
            b->perm[j] = t;
        }
        b->perm_epoch = epoch;
    }
    return b->perm[pos];
}

int data_batch_at(data_batcher_t *b, uint64_t step, data_batch_t *bt, char *err, size_t errlen) {
    if (!b || !bt) return data_fail(err, errlen, DATA_EINVAL, "data_batch_at: null argument");
    const int B = b->o.global_batch, W = b->o.world, T = b->o.seq_len;
    const int rows = B / W;
    if (bt->rows != rows || bt->seq_len != T)
        return data_fail(err, errlen, DATA_EINVAL,
                         "batch buffers are [%d, %d]; this batcher needs [%d, %d]", bt->rows,
                         bt->seq_len, rows, T);
    const uint64_t N = b->n_items;
    if (!b->o.wrap && step * (uint64_t)B >= N) return DATA_END;
    bt->step = step;
    bt->epoch = step * (uint64_t)B / N;
    bt->valid_rows = 0;
    const int32_t *tok = b->d->tokens;
    for (int i = 0; i < rows; i++) {
        uint64_t k = step * (uint64_t)B + (uint64_t)b->o.rank * (uint64_t)rows + (uint64_t)i;
        int32_t *ids = bt->ids + (size_t)i * T, *tg = bt->targets + (size_t)i * T;
        float *m = bt->mask + (size_t)i * T;
        for (int t = 0; t < T; t++) ids[t] = TOK_PAD, tg[t] = -1, m[t] = 0.0f;
        bt->labels[i] = -1;
        if (!b->o.wrap && k >= N) continue;
        uint64_t epoch = k / N;
        size_t item = item_at(b, epoch, (size_t)(k % N));
        bt->valid_rows++;
        if (!b->lm) {
            uint64_t s = b->d->offsets[item], e = b->d->offsets[item + 1];
            uint64_t n = e - s < (uint64_t)T ? e - s : (uint64_t)T;
            for (uint64_t t = 0; t < n; t++) ids[t] = tok[s + t], m[t] = 1.0f;
            bt->labels[i] = b->d->labels[item];
        } else {
            uint64_t off = 0;
            if (b->o.wrap && b->o.shuffle) off = epoch_state(b->o.seed, epoch, 2) % (uint64_t)T;
            uint64_t s = b->tok_begin + off + (uint64_t)item * (uint64_t)T;
            for (int t = 0; t < T; t++) {
                if (s + (uint64_t)t + 1 >= b->tok_end) break;
                ids[t] = tok[s + t];
                tg[t] = tok[s + t + 1];
                m[t] = 1.0f;
            }
        }
    }
    return DATA_OK;
}

int data_batch_next(data_batcher_t *b, data_batch_t *bt, char *err, size_t errlen) {
    if (!b) return data_fail(err, errlen, DATA_EINVAL, "data_batch_next: null argument");
    int rc = data_batch_at(b, b->next_step, bt, err, errlen);
    if (rc == DATA_OK) b->next_step++;
    return rc;
}
