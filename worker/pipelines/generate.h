/* generate — inference for the causal decoder (a model with n_classes = 0)
 * with a KV cache: prefill a prompt, then one token at a time, for B
 * sequences at once; greedy or temperature/top-k sampling.
 *
 * The layers are the model's own nn/ modules (nn_block_decode, which runs
 * nn_attn_decode against the cache): no second copy of any layer's forward.
 * Attention of new queries against the cache is composed of gemm + softmax +
 * gemm, one query position at a time, so that the softmax row is exactly the
 * visible keys (no mask op is needed).
 *
 * Layout. Inside one call the rows are position-major, [n][batch][C], so the
 * K and V of the new tokens are one contiguous block that the projection
 * writes straight into the cache, and head h of sequence b is item b*NH + h
 * of a batched gemm with a uniform stride HS:
 *   cache (K and V each) [L][T][batch][C]   — T = model seq_len positions.
 * The learned position table has T rows, so a sequence holds at most T tokens;
 * gen_generate slides the window by re-prefilling the most recent T/2 tokens.
 *
 * The reference path (gen_reference_*) recomputes the whole sequence with
 * model_forward at every token: slow, cache-free, and the oracle the tests
 * compare the cache against. */
#ifndef GENERATE_H
#define GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "worker/models/model.h"

/* How the next token is chosen from the logits of one sequence. */
typedef struct gen_sampler {
    float temperature; /* <= 0: greedy (argmax, lowest id on ties) */
    int top_k;         /* > 0: sample among the k largest logits only; 0: all */
    uint64_t seed;     /* Philox: the draw of sequence b at step s is uniform_at(seed, b, s) */
} gen_sampler;

typedef struct gen_state {
    const model *m;       /* borrowed; must outlive the state */
    const bk_backend *be; /* m->be */
    int B;                /* batch capacity */
    int T, L, C, NH, V;   /* positions (seq_len), layers, width, heads, vocabulary */
    int batch;            /* sequences in the cache (set by gen_prefill) */
    int pos;              /* tokens each sequence holds in the cache */
    size_t cache_bytes;   /* K and V caches, all layers, at capacity */
    size_t scratch_bytes; /* everything else in the arena */
    bk_arena A;
    float *kc, *vc; /* [L][T][batch][C] on the device */
    float *x, *ln, *mean, *rstd, *q, *y, *proj, *fch, *fchg, *scores, *logits;
    int *ids, *posids;     /* device, [T*B] */
    int *h_ids, *h_posids; /* host staging, [T*B] */
} gen_state;

/* Builds a generator for m (a causal LM without the head budget) holding up to
 * batch_capacity sequences of up to m->sh.seq_len tokens; allocates the cache
 * and scratch on m->be. Returns 0, or -1 with a message (wrong model kind,
 * out of memory). Free with gen_destroy. */
int gen_create(gen_state *g, const model *m, int batch_capacity, char *err, size_t errlen);
void gen_destroy(gen_state *g);

/* Starts `batch` new sequences from ids[batch, n] (host, batch-major; every
 * prompt has the same length n, 1 <= n <= T) and runs them through the model.
 * logits (host, nullable) receives [batch, V]: the next-token logits after
 * each prompt's last token. Returns 0 or -1 with a message. */
int gen_prefill(gen_state *g, const int *ids, int batch, int n, float *logits, char *err,
                size_t errlen);

/* Appends one token per sequence, ids[batch] (host), using the cache for all
 * earlier positions; logits as in gen_prefill. Fails when the context is full
 * (pos == T) or no prefill came first. */
int gen_decode(gen_state *g, const int *ids, float *logits, char *err, size_t errlen);

/* Picks a token from logits[V] (host; not modified). work: V floats of
 * scratch. Deterministic in (s->seed, stream, step). */
int gen_sample(const float *logits, int V, const gen_sampler *s, uint64_t stream, uint64_t step,
               float *work);

/* One sequence: feeds prompt[n_prompt] (n_prompt >= 1), then writes n_new
 * sampled tokens into out[n_new]. When the context fills, the most recent T/2
 * tokens are prefilled again and generation goes on (a prompt longer than T
 * keeps its last T/2 tokens). Needs a state of capacity >= 1. */
int gen_generate(gen_state *g, const int *prompt, int n_prompt, int n_new, const gen_sampler *s,
                 int *out, char *err, size_t errlen);

/* Oracle: the next-token logits[V] after ids[n] (1 <= n <= seq_len), from one
 * model_forward over the whole sequence (batch row 0; m needs capacity >= 1).
 * Returns 0 or -1 with a message. */
int gen_reference_logits(model *m, const int *ids, int n, float *logits, char *err, size_t errlen);

/* Oracle: greedy generation by recomputing the whole sequence for every new
 * token (n_prompt + n_new <= seq_len). out[n_new]. */
int gen_reference_greedy(model *m, const int *prompt, int n_prompt, int n_new, int *out, char *err,
                         size_t errlen);

#endif
