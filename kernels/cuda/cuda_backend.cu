/* The CUDA backend table and its one-time initialisation: device check,
 * then the cuBLAS handle (cuda_blas.cu). It runs no op itself. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_check.h"

/* Filled by name (C++17 has no designated initialisers), once, in bk_cuda(). */
static bk_backend cuda_backend;

static void fill_table(bk_backend *t) {
    t->name = "cuda";
    t->device = BK_CUDA;
#define BK_OP(ret, name, params) t->name = bk_cuda_##name;
#include "kernels/bk_ops.def"
#undef BK_OP
}

/* Returns the table, or NULL with a static reason. The first successful call
 * creates the cuBLAS handle on the current device (cudaSetDevice before it to
 * pick another one); later calls return the same table. */
extern "C" const bk_backend *bk_cuda(const char **why) {
    static char reason[256];
    static int state; /* 0 unknown, 1 usable, -1 not usable */
    if (state == 1) return &cuda_backend;
    if (state == -1) {
        if (why) *why = reason;
        return NULL;
    }
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(reason, sizeof reason, "cudaGetDeviceCount failed: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        (void)cudaGetLastError();
        state = -1;
    } else if (count == 0) {
        snprintf(reason, sizeof reason, "cudaGetDeviceCount reports no CUDA device");
        state = -1;
    } else {
        if (bk_cuda_blas_init(reason, sizeof reason)) {
            (void)cudaGetLastError();
            state = -1;
        } else {
            fill_table(&cuda_backend);
            state = 1;
        }
    }
    if (state == 1) return &cuda_backend;
    if (why) *why = reason;
    return NULL;
}
