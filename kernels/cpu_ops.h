/* The optimised CPU backend's ops (the plain references they are tested
 * against are in tests/ref/): one function per bk_backend member, same
 * signature and contract as listed in kernels/bk_ops.def. Split by family:
 * cpu_memory.c, cpu_elementwise.c, cpu_matmul.c, cpu_norm.c, cpu_loss.c,
 * cpu_optim.c, cpu_rng.c, cpu_attention.c, cpu_fwht.c, cpu_halt.c,
 * cpu_mixer.c, cpu_ssd.c, cpu_devstep.c; the table is cpu_backend.c. */
#ifndef BK_CPU_OPS_H
#define BK_CPU_OPS_H

#include "kernels/bk.h"

/* One function per op of kernels/bk_ops.def, bk_cpu_NAME, with the op's
 * signature and contract. */
#define BK_OP(ret, name, params) ret bk_cpu_##name params;
#include "kernels/bk_ops.def"
#undef BK_OP

/* A workspace of at least bytes (64-byte aligned, contents undefined) for one
 * kernel call, or NULL when out of memory; hand it back with
 * bk_cpu_workspace_give. Reused across calls (no malloc, no page faults). */
void *bk_cpu_workspace_take(size_t bytes);
void bk_cpu_workspace_give(void *p);
/* Whether bk_cpu_set_portable turned the AVX-512 kernels off. */
int bk_cpu_portable(void);
/* bench_ops --attention-tiled: the tiled forward wins from ~1025 tokens (1.13x,
 * 1.17x at 2049) but its backward (two more tile products: pd, and P again)
 * loses at every length measured (0.58-0.66x), so training would be slower:
 * off (0) until the backward wins; the kernels are tested and callable. */
#define BK_CPU_ATTENTION_TILED_MIN_T 0
/* The tiled path (att == NULL above): no [T, T] map, lse[B, NH, T] saved. */
void bk_cpu_attention_forward_tiled(float *out, float *lse, const float *qkv,
                                    const bk_attn_args *a);
void bk_cpu_attention_backward_tiled(float *dqkv, float *dgate, const float *dout, const float *qkv,
                                     const float *lse, const bk_attn_args *a);

/* sequence mixers (cpu_mixer.c) */

/* ---- the step on the device (kernels/cpu_devstep.c, counters in cpu_memory.c) ---- */

/* Internal to the CPU backend: one device-to-host copy of `bytes` happened;
 * sqrt(sum g^2) without counting (global_norm counts, grad_norm does not). */
void bk_cpu_count_d2h(size_t bytes);
float bk_cpu_norm_value(const float *g, size_t n);

/* cpu_halt.c */

#endif
