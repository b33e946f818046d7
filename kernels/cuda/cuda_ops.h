/* The CUDA backend's ops: same signatures and contracts as kernels/bk.h,
 * implemented in kernels/cuda/*.cu (cuBLAS for GEMMs, kernels for the rest). */
#ifndef BK_CUDA_OPS_H
#define BK_CUDA_OPS_H

#include "kernels/bk.h"
#ifdef __cplusplus
extern "C" {
#endif

void *bk_cuda_alloc(size_t bytes);
int bk_cuda_mem_available(size_t *bytes);
void bk_cuda_release(void *p);
void bk_cuda_to_device(void *dst, const void *src_host, size_t bytes);
void bk_cuda_to_host(void *dst_host, const void *src, size_t bytes);
void bk_cuda_copy(void *dst, const void *src, size_t bytes);
void bk_cuda_zero(void *p, size_t bytes);
void bk_cuda_sync(void);
void bk_cuda_add(float *out, const float *a, const float *b, size_t n);
void bk_cuda_axpy(float *y, const float *x, float alpha, size_t n);
void bk_cuda_scale(float *x, float alpha, size_t n);
void bk_cuda_gelu_forward(float *out, const float *inp, size_t n);
void bk_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void bk_cuda_silu_forward(float *out, const float *inp, size_t n);
void bk_cuda_silu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void bk_cuda_sigmoid_forward(float *out, const float *inp, size_t n);
void bk_cuda_sigmoid_backward(float *dinp, const float *out, const float *dout, size_t n);
void bk_cuda_softplus_forward(float *out, const float *inp, size_t n);
void bk_cuda_softplus_backward(float *dinp, const float *inp, const float *dout, size_t n);
void bk_cuda_embedding_forward(float *out, const int *idx, const float *table, int N, int C);
void bk_cuda_embedding_backward(float *dtable, const float *dout, const int *idx, int N, int C);
void bk_cuda_posadd_forward(float *out, const float *inp, const float *pos, int B, int T, int C);
void bk_cuda_posadd_backward(float *dinp, float *dpos, const float *dout, int B, int T, int C);
void bk_cuda_linear_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                            int IC, int OC);
void bk_cuda_linear_backward(float *dinp, float *dw, float *dbias, const float *dout,
                             const float *inp, const float *w, int N, int IC, int OC);
void bk_cuda_gemm(int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                  long long strideA, const float *Bm, int ldb, long long strideB, float beta,
                  float *Cm, int ldc, long long strideC, int batch);
void bk_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, int N, int C);
void bk_cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, const float *mean,
                                const float *rstd, int N, int C);
void bk_cuda_softmax_forward(float *out, const float *inp, int N, int C);
void bk_cuda_softmax_backward(float *dinp, const float *out, const float *dout, int N, int C);
void bk_cuda_attention_forward(float *out, float *att, const float *qkv, const bk_attn_args *a);
void bk_cuda_attention_backward(float *dqkv, float *dgate, float *scratch, const float *dout,
                                const float *qkv, const float *att, const bk_attn_args *a);
void bk_cuda_attention_selected_forward(float *out, float *scratch, const float *x,
                                        const float *wqkv, const float *bqkv, const int *heads,
                                        int K, const bk_attn_args *a);
void bk_cuda_linear_selected_forward(float *y, const float *c, const float *wo, const float *bo,
                                     const int *heads, int K, int B, int T, int C, int NH, int OC);
void bk_cuda_fwht_forward(float *out, float *pre, const float *inp, const float *alpha,
                          const float *beta, int N, int d);
void bk_cuda_fwht_backward(float *dinp, float *dalpha, float *dbeta, float *scratch,
                           const float *dout, const float *inp, const float *pre,
                           const float *alpha, int N, int d);
void bk_cuda_meanpool_forward(float *out, const float *inp, const float *mask, int B, int T, int C);
void bk_cuda_meanpool_backward(float *dinp, const float *dout, const float *mask, int B, int T,
                               int C);
void bk_cuda_crossentropy_forward(float *losses, float *probs, const float *logits,
                                  const int *targets, int N, int V);
void bk_cuda_crossentropy_backward(float *dlogits, const float *probs, const int *targets,
                                   const float *dlosses, int N, int V);
void bk_cuda_mse_forward(float *loss, const float *a, const float *b, const float *mask, int N,
                         int C);
void bk_cuda_mse_backward(float *da, float *db, const float *a, const float *b, const float *mask,
                          float dloss, int N, int C);
float bk_cuda_global_norm(const float *g, size_t n);
void bk_cuda_adamw_update(float *p, const float *g, float *m, float *v, size_t n, const bk_adamw *h,
                          int t, float grad_scale);
void bk_cuda_rng_uniform(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t offset);
void bk_cuda_rng_normal(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t offset);

/* sequence mixers (cuda_mixer.cu) */
void bk_cuda_conv1d_forward(float *out, const float *x, const float *w, const float *bias,
                            const bk_conv_args *a);
void bk_cuda_conv1d_backward(float *dx, float *dw, float *dbias, float *scratch, const float *dout,
                             const float *x, const float *w, const float *bias,
                             const bk_conv_args *a);
void bk_cuda_scan_forward(float *out, float *states, const bk_scan_args *a);
void bk_cuda_scan_backward(const bk_scan_grads *g, float *scratch, const float *dout,
                           const float *states, const bk_scan_args *a);
void bk_cuda_lstm_forward(float *out, float *saved, const float *gx, const float *whh,
                          const bk_lstm_args *a);
void bk_cuda_lstm_backward(float *dgx, float *dwhh, float *scratch, const float *dout,
                           const float *saved, const float *whh, const bk_lstm_args *a);

/* ---- the step on the device (kernels/cuda/cuda_devstep.cu, counters in cuda_memory.cu) ---- */
void bk_cuda_d2h_count(uint64_t *calls, uint64_t *bytes);
void bk_cuda_d2h_reset(void);
void bk_cuda_h2d_count(uint64_t *calls, uint64_t *bytes);
void bk_cuda_h2d_reset(void);
void bk_cuda_fill32(void *p, uint32_t word, size_t n);
void bk_cuda_rng_gumbel(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t offset);
void bk_cuda_grad_norm(float *norm, double *stats, const float *g, size_t n);
void bk_cuda_adamw_clipped(float *p, const float *g, float *m, float *v, size_t n,
                           const bk_adamw *h, int t, const float *norm, float clip);
void bk_cuda_crossentropy_stats(double *stats, const float *logits, const float *losses,
                                const int *targets, int N, int V);
void bk_cuda_crossentropy_dlosses(float *dlosses, const int *targets, float value, int N, int V);
void bk_cuda_gate_forward(float *gate, int *k, float *save, double *stats, const float *f,
                          const float *z, const bk_gate_args *a);
void bk_cuda_gate_backward(float *df, float *dz, const float *dgate, const float *save,
                           const bk_gate_args *a);
void bk_cuda_gate_infer(float *s, int *k, int *heads, double *stats, const float *f, const float *z,
                        const double *head_cost, int B, int H, int force_k);

/* ---- A-ViT token halting (kernels/cuda/cuda_halt.cu) ---- */
void bk_cuda_rowscale(float *out, const float *inp, const float *s, int N, int C);
void bk_cuda_halt_forward(float *h, float *next, float *cum, float *rem, int *at, double *hstats,
                          const float *t, const float *mask, const bk_halt_args *a);
void bk_cuda_halt_loss(double *stats, float *dldp, const double *hstats,
                       const bk_halt_loss_args *a);
void bk_cuda_halt_backward(float *dt, const float *h, const int *at, const float *dldp, float pgrad,
                           const bk_halt_args *a);
void bk_cuda_halt_act_forward(float *out, const float *x, const float *h, const int *at,
                              const float *rem, const bk_halt_args *a);
void bk_cuda_halt_act_backward(float *dx, const float *dout, const float *x, const float *xlast,
                               const float *h, const int *at, const float *rem,
                               const bk_halt_args *a);
void bk_cuda_halt_align(float *dt, double *stats, int slot, const float *t, const float *ht,
                        const float *tcum, const float *mask, float weight, const bk_halt_args *a);
void bk_cuda_label_smooth_forward(float *losses, const float *logits, const int *targets, int N,
                                  int V, float eps);
void bk_cuda_label_smooth_backward(float *dlogits, const int *targets, const float *dlosses, int N,
                                   int V, float eps);

#ifdef __cplusplus
}
#endif
#endif
