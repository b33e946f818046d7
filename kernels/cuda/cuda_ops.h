/* The CUDA backend's ops: same signatures and contracts as kernels/bk.h,
 * implemented in kernels/cuda/*.cu (cuBLAS for GEMMs, kernels for the rest). */
#ifndef BK_CUDA_OPS_H
#define BK_CUDA_OPS_H

#include "kernels/bk.h"
#ifdef __cplusplus
extern "C" {
#endif

/* One function per op of kernels/bk_ops.def, bk_cuda_NAME, with the op's
 * signature and contract. */
#define BK_OP(ret, name, params) ret bk_cuda_##name params;
#include "kernels/bk_ops.def"
#undef BK_OP

/* sequence mixers (cuda_mixer.cu) */

/* ---- the step on the device (kernels/cuda/cuda_devstep.cu, counters in cuda_memory.cu) ---- */

/* ---- A-ViT token halting (kernels/cuda/cuda_halt.cu) ---- */

#ifdef __cplusplus
}
#endif
#endif
