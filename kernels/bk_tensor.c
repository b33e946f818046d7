/* bk_tensor.c — the parameter layout (every tensor in one buffer, gradients
 * in another of the same layout) and the activation arena: plan, reserve,
 * take, reset (bk_tensor.h). */

#include "kernels/bk_tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t bk_numel(int ndim, const int *shape) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    return n;
}

void bk_params_init(bk_params *p) { memset(p, 0, sizeof *p); }

int bk_params_add(bk_params *p, const char *name, int ndim, const int *shape, int decay) {
    if (p->data || ndim < 1 || ndim > BK_MAX_DIMS) return -1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0) return -1;
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 32;
        bk_tensor *t = realloc(p->t, (size_t)cap * sizeof *t);
        if (!t) return -1;
        p->t = t;
        int *d = realloc(p->decay, (size_t)cap * sizeof *d);
        if (!d) return -1;
        p->decay = d;
        p->cap = cap;
    }
    bk_tensor *t = &p->t[p->n];
    memset(t, 0, sizeof *t);
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->numel = bk_numel(ndim, shape);
    snprintf(t->name, sizeof t->name, "%s", name);
    p->decay[p->n] = decay ? 1 : 0;
    return p->n++;
}

int bk_params_alloc(bk_params *p, const bk_backend *be, char *err, size_t errlen) {
    size_t off = 0;
    for (int pass = 1; pass >= 0; pass--) /* decayed tensors first */
        for (int i = 0; i < p->n; i++)
            if (p->decay[i] == pass) {
                p->t[i].offset = off;
                off += p->t[i].numel;
                if (pass == 1) p->n_decay = off;
            }
    p->numel = off;
    p->be = be;
    p->data = be->alloc(off * sizeof(float));
    p->grad = be->alloc(off * sizeof(float));
    if (!p->data || !p->grad) {
        snprintf(err, errlen, "cannot allocate %zu parameters on %s", off, be->name);
        return -1;
    }
    for (int i = 0; i < p->n; i++) {
        p->t[i].data = p->data + p->t[i].offset;
        p->t[i].device = be->device;
    }
    return 0;
}

float *bk_params_grad(const bk_params *p, int i) { return p->grad + p->t[i].offset; }

int bk_params_find(const bk_params *p, const char *name) {
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->t[i].name, name) == 0) return i;
    return -1;
}

void bk_params_free(bk_params *p) {
    if (p->be) {
        p->be->release(p->data);
        p->be->release(p->grad);
    }
    free(p->t);
    free(p->decay);
    memset(p, 0, sizeof *p);
}

void bk_arena_plan(bk_arena *a) { memset(a, 0, sizeof *a); }

static void *arena_take(bk_arena *a, size_t bytes) {
    size_t start = (a->used + 255) & ~(size_t)255;
    a->used = start + bytes;
    if (a->used > a->peak) a->peak = a->used;
    if (!a->base) return NULL;
    if (a->used > a->size) return NULL;
    return a->base + start;
}

float *bk_arena_floats(bk_arena *a, size_t n) { return arena_take(a, n * sizeof(float)); }
int *bk_arena_ints(bk_arena *a, size_t n) { return arena_take(a, n * sizeof(int)); }

int bk_arena_reserve(bk_arena *a, const bk_backend *be, char *err, size_t errlen) {
    size_t size = a->peak ? a->peak : 256;
    a->base = be->alloc(size);
    if (!a->base) {
        snprintf(err, errlen, "cannot allocate %zu bytes of activations on %s", size, be->name);
        return -1;
    }
    a->size = size;
    a->used = 0;
    a->be = be;
    return 0;
}

void bk_arena_reset(bk_arena *a) { a->used = 0; }

void bk_arena_free(bk_arena *a) {
    if (a->be && a->base) a->be->release(a->base);
    memset(a, 0, sizeof *a);
}
