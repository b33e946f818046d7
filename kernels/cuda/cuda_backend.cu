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
    t->alloc = bk_cuda_alloc;
    t->mem_available = bk_cuda_mem_available;
    t->release = bk_cuda_release;
    t->to_device = bk_cuda_to_device;
    t->to_host = bk_cuda_to_host;
    t->copy = bk_cuda_copy;
    t->zero = bk_cuda_zero;
    t->sync = bk_cuda_sync;
    t->add = bk_cuda_add;
    t->axpy = bk_cuda_axpy;
    t->scale = bk_cuda_scale;
    t->gelu_forward = bk_cuda_gelu_forward;
    t->gelu_backward = bk_cuda_gelu_backward;
    t->silu_forward = bk_cuda_silu_forward;
    t->silu_backward = bk_cuda_silu_backward;
    t->sigmoid_forward = bk_cuda_sigmoid_forward;
    t->sigmoid_backward = bk_cuda_sigmoid_backward;
    t->softplus_forward = bk_cuda_softplus_forward;
    t->softplus_backward = bk_cuda_softplus_backward;
    t->embedding_forward = bk_cuda_embedding_forward;
    t->embedding_backward = bk_cuda_embedding_backward;
    t->posadd_forward = bk_cuda_posadd_forward;
    t->posadd_backward = bk_cuda_posadd_backward;
    t->linear_forward = bk_cuda_linear_forward;
    t->linear_backward = bk_cuda_linear_backward;
    t->gemm = bk_cuda_gemm;
    t->layernorm_forward = bk_cuda_layernorm_forward;
    t->layernorm_backward = bk_cuda_layernorm_backward;
    t->softmax_forward = bk_cuda_softmax_forward;
    t->softmax_backward = bk_cuda_softmax_backward;
    t->attention_forward = bk_cuda_attention_forward;
    t->attention_backward = bk_cuda_attention_backward;
    t->attention_selected_forward = bk_cuda_attention_selected_forward;
    t->linear_selected_forward = bk_cuda_linear_selected_forward;
    t->fwht_forward = bk_cuda_fwht_forward;
    t->fwht_backward = bk_cuda_fwht_backward;
    t->meanpool_forward = bk_cuda_meanpool_forward;
    t->meanpool_backward = bk_cuda_meanpool_backward;
    t->crossentropy_forward = bk_cuda_crossentropy_forward;
    t->crossentropy_backward = bk_cuda_crossentropy_backward;
    t->mse_forward = bk_cuda_mse_forward;
    t->mse_backward = bk_cuda_mse_backward;
    t->global_norm = bk_cuda_global_norm;
    t->adamw_update = bk_cuda_adamw_update;
    t->rng_uniform = bk_cuda_rng_uniform;
    t->rng_normal = bk_cuda_rng_normal;
    /* sequence mixers */
    t->conv1d_forward = bk_cuda_conv1d_forward;
    t->conv1d_backward = bk_cuda_conv1d_backward;
    t->scan_forward = bk_cuda_scan_forward;
    t->scan_backward = bk_cuda_scan_backward;
    t->lstm_forward = bk_cuda_lstm_forward;
    t->lstm_backward = bk_cuda_lstm_backward;
    t->rowscale = bk_cuda_rowscale;
    t->halt_forward = bk_cuda_halt_forward;
    t->halt_loss = bk_cuda_halt_loss;
    t->halt_backward = bk_cuda_halt_backward;
    t->halt_act_forward = bk_cuda_halt_act_forward;
    t->halt_act_backward = bk_cuda_halt_act_backward;
    t->halt_align = bk_cuda_halt_align;
    t->label_smooth_forward = bk_cuda_label_smooth_forward;
    t->label_smooth_backward = bk_cuda_label_smooth_backward;

    /* the step on the device */
    t->d2h_count = bk_cuda_d2h_count;
    t->d2h_reset = bk_cuda_d2h_reset;
    t->h2d_count = bk_cuda_h2d_count;
    t->h2d_reset = bk_cuda_h2d_reset;
    t->fill32 = bk_cuda_fill32;
    t->rng_gumbel = bk_cuda_rng_gumbel;
    t->grad_norm = bk_cuda_grad_norm;
    t->adamw_clipped = bk_cuda_adamw_clipped;
    t->crossentropy_stats = bk_cuda_crossentropy_stats;
    t->crossentropy_dlosses = bk_cuda_crossentropy_dlosses;
    t->gate_forward = bk_cuda_gate_forward;
    t->gate_backward = bk_cuda_gate_backward;
    t->gate_infer = bk_cuda_gate_infer;
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
