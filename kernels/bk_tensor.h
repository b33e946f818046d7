/* Tensor descriptors, the parameter layout (all parameters in one buffer, all
 * gradients in another of the same layout) and the activation arena. */
#ifndef BK_TENSOR_H
#define BK_TENSOR_H

#include "kernels/bk.h"

#define BK_MAX_DIMS 4
#define BK_NAME_MAX 64

typedef struct bk_tensor {
    float *data; /* device pointer, set once the buffer exists */
    int ndim;
    int shape[BK_MAX_DIMS];
    size_t numel;
    size_t offset; /* in floats, within the parameter buffer or arena */
    bk_device device;
    char name[BK_NAME_MAX];
} bk_tensor;

size_t bk_numel(int ndim, const int *shape);

/* ---- parameters ---- */
/* A named list of parameter tensors laid out in one contiguous buffer. Tensors
 * with weight decay come first (one optimiser call over [0, n_decay) with decay,
 * one over the rest without), each group in insertion order. */
typedef struct bk_params {
    bk_tensor *t;
    int *decay; /* per tensor: 1 = weight decay applies */
    int n, cap;
    size_t numel, n_decay; /* totals, valid after bk_params_alloc */
    float *data, *grad;    /* one buffer each, on be->device */
    const bk_backend *be;
} bk_params;

void bk_params_init(bk_params *p);
/* Declares a tensor; returns its index, or -1 (out of memory, bad shape,
 * already allocated). Shape is copied. */
int bk_params_add(bk_params *p, const char *name, int ndim, const int *shape, int decay);
/* Allocates data and grad (zeroed) on the backend and sets every tensor's
 * data pointer. Returns 0, or -1 with a message. */
int bk_params_alloc(bk_params *p, const bk_backend *be, char *err, size_t errlen);
/* Gradient pointer of tensor i (same offset in the gradient buffer). */
float *bk_params_grad(const bk_params *p, int i);
int bk_params_find(const bk_params *p, const char *name);
void bk_params_free(bk_params *p);

/* ---- activations ---- */
/* A bump allocator sized once per (batch, sequence) shape: run the model's
 * allocation sequence once with bk_arena_plan (base NULL, only counts), then
 * bk_arena_reserve, then the same sequence again to hand out pointers. */
typedef struct bk_arena {
    char *base;
    size_t size, used, peak;
    const bk_backend *be;
} bk_arena;

void bk_arena_plan(bk_arena *a);
/* Returns NULL while planning (the pointer is not to be used), else n floats
 * aligned to 256 bytes; NULL too if the reservation is exceeded (a bug). */
float *bk_arena_floats(bk_arena *a, size_t n);
int *bk_arena_ints(bk_arena *a, size_t n);
/* Allocates the planned size on be. Returns 0 or -1 with a message. */
int bk_arena_reserve(bk_arena *a, const bk_backend *be, char *err, size_t errlen);
void bk_arena_reset(bk_arena *a);
void bk_arena_free(bk_arena *a);

#endif
