/* nn.c — what every nn/ module shares (nn.h): the named parameter list with
 * its init rules and frozen flags, and the transient scratch arena. */

#include "worker/nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk_rng.h"

void nn_params_init(nn_params *np) {
    memset(np, 0, sizeof *np);
    bk_params_init(&np->P);
}

void nn_params_free(nn_params *np) {
    bk_params_free(&np->P);
    free(np->init);
    free(np->frozen);
    memset(np, 0, sizeof *np);
}

int nn_param(nn_params *np, const char *prefix, const char *name, int d0, int d1, int decay,
             nn_init init) {
    char full[BK_NAME_MAX];
    int n = snprintf(full, sizeof full, "%s%s%s", prefix, prefix[0] ? "." : "", name);
    if (n < 0 || n >= (int)sizeof full) return -1;
    int shape[2] = {d0, d1};
    int id = bk_params_add(&np->P, full, d1 > 0 ? 2 : 1, shape, decay);
    if (id < 0) return -1;
    if (id >= np->cap) {
        int cap = np->cap ? 2 * np->cap : 64;
        while (cap <= id) cap *= 2;
        nn_init *in = realloc(np->init, (size_t)cap * sizeof *in);
        if (!in) return -1;
        np->init = in;
        unsigned char *fz = realloc(np->frozen, (size_t)cap);
        if (!fz) return -1;
        np->frozen = fz;
        np->cap = cap;
    }
    np->init[id] = init;
    np->frozen[id] = 0;
    return id;
}

int nn_params_init_weights(nn_params *np, uint64_t seed, char *err, size_t errlen) {
    bk_params *P = &np->P;
    float *host = malloc((P->numel ? P->numel : 1) * sizeof(float));
    if (!host) {
        snprintf(err, errlen, "out of memory initialising %zu parameters", P->numel);
        return -1;
    }
    for (int i = 0; i < P->n; i++) {
        const bk_tensor *t = &P->t[i];
        float *w = host + t->offset;
        nn_init in = np->init[i];
        switch (in.kind) {
        case NN_INIT_ZEROS:
            memset(w, 0, t->numel * sizeof(float));
            break;
        case NN_INIT_ONES:
            for (size_t j = 0; j < t->numel; j++) w[j] = 1.0f;
            break;
        case NN_INIT_CONST:
            for (size_t j = 0; j < t->numel; j++) w[j] = in.value;
            break;
        case NN_INIT_NORMAL:
            for (size_t j = 0; j < t->numel; j++)
                w[j] = in.value * bk_rng_normal_at(seed, (uint64_t)i, j);
            break;
        case NN_INIT_LOG_ARANGE: {
            size_t n = t->ndim > 1 ? (size_t)t->shape[t->ndim - 1] : t->numel;
            for (size_t j = 0; j < t->numel; j++) w[j] = logf((float)(1 + j % n));
            break;
        }
        case NN_INIT_DT_BIAS:
            for (size_t j = 0; j < t->numel; j++) {
                double u = bk_rng_uniform_at(seed, (uint64_t)i, j);
                double dt = exp(log(in.value) + u * (log(in.value2) - log(in.value)));
                if (dt < 1e-4) dt = 1e-4;
                w[j] = (float)(dt + log(-expm1(-dt))); /* softplus^-1(dt) */
            }
            break;
        }
    }
    P->be->to_device(P->data, host, P->numel * sizeof(float));
    free(host);
    return 0;
}

int nn_params_freeze(nn_params *np, const char *prefix, int frozen) {
    size_t len = strlen(prefix);
    int n = 0;
    for (int i = 0; i < np->P.n; i++)
        if (strncmp(np->P.t[i].name, prefix, len) == 0) {
            np->frozen[i] = frozen ? 1 : 0;
            n++;
        }
    return n;
}

size_t nn_params_trainable(const nn_params *np) {
    size_t n = 0;
    for (int i = 0; i < np->P.n; i++)
        if (!np->frozen[i]) n += np->P.t[i].numel;
    return n;
}

void nn_params_runs(const nn_params *np, void (*fn)(void *ctx, size_t off, size_t n, int decay),
                    void *ctx) {
    const bk_params *P = &np->P;
    /* tensors in buffer order: walk offsets, merging adjacent trainable
     * tensors of the same decay class */
    size_t off = 0;
    size_t run_off = 0, run_n = 0;
    int run_decay = -1;
    while (off < P->numel) {
        int i = 0;
        while (i < P->n && P->t[i].offset != off) i++;
        if (i == P->n) break; /* cannot happen: the layout tiles the buffer */
        int train = !np->frozen[i], decay = P->decay[i];
        if (train && run_n > 0 && decay == run_decay && run_off + run_n == off) {
            run_n += P->t[i].numel;
        } else {
            if (run_n > 0) fn(ctx, run_off, run_n, run_decay);
            run_n = 0;
            if (train) {
                run_off = off;
                run_n = P->t[i].numel;
                run_decay = decay;
            }
        }
        off += P->t[i].numel;
    }
    if (run_n > 0) fn(ctx, run_off, run_n, run_decay);
}

void nn_scratch_need(nn_scratch *s, size_t floats) {
    size_t bytes = floats * sizeof(float);
    if (bytes > s->need) s->need = bytes;
}

/* Every take rounds up to 256 bytes: room for 64 takes per call. */
#define NN_SCRATCH_SLACK (64 * 256)

int nn_scratch_reserve(nn_scratch *s, const bk_backend *be, char *err, size_t errlen) {
    bk_arena_plan(&s->a);
    s->a.peak = s->need + NN_SCRATCH_SLACK;
    return bk_arena_reserve(&s->a, be, err, errlen);
}

void nn_scratch_begin(nn_scratch *s) { bk_arena_reset(&s->a); }
float *nn_scratch_floats(nn_scratch *s, size_t n) { return bk_arena_floats(&s->a, n); }
int *nn_scratch_ints(nn_scratch *s, size_t n) { return bk_arena_ints(&s->a, n); }
void nn_scratch_free(nn_scratch *s) { bk_arena_free(&s->a); }

int nn_active_tokens(const nn_call *c, int b) {
    if (!c->h_mask) return c->T;
    int n = 0;
    for (int t = 0; t < c->T; t++) n += c->h_mask[(size_t)b * c->T + t] > 0;
    return n;
}
