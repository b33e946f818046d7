/* TEMPORARY placeholders until the basic CPU ops lands; this file is deleted then. */
#include <stdio.h>
#include <stdlib.h>
#include "kernels/cpu_ops.h"

void bk_cpu_add(float *out, const float *a, const float *b, size_t n) {
    (void)out;
    (void)a;
    (void)b;
    (void)n;
    fprintf(stderr, "bk_cpu_add: not implemented yet\n");
    abort();
}
void bk_cpu_axpy(float *y, const float *x, float alpha, size_t n) {
    (void)y;
    (void)x;
    (void)alpha;
    (void)n;
    fprintf(stderr, "bk_cpu_axpy: not implemented yet\n");
    abort();
}
void bk_cpu_scale(float *x, float alpha, size_t n) {
    (void)x;
    (void)alpha;
    (void)n;
    fprintf(stderr, "bk_cpu_scale: not implemented yet\n");
    abort();
}
void bk_cpu_gelu_forward(float *out, const float *inp, size_t n) {
    (void)out;
    (void)inp;
    (void)n;
    fprintf(stderr, "bk_cpu_gelu_forward: not implemented yet\n");
    abort();
}
void bk_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    (void)dinp;
    (void)inp;
    (void)dout;
    (void)n;
    fprintf(stderr, "bk_cpu_gelu_backward: not implemented yet\n");
    abort();
}
void bk_cpu_silu_forward(float *out, const float *inp, size_t n) {
    (void)out;
    (void)inp;
    (void)n;
    fprintf(stderr, "bk_cpu_silu_forward: not implemented yet\n");
    abort();
}
void bk_cpu_silu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    (void)dinp;
    (void)inp;
    (void)dout;
    (void)n;
    fprintf(stderr, "bk_cpu_silu_backward: not implemented yet\n");
    abort();
}
void bk_cpu_sigmoid_forward(float *out, const float *inp, size_t n) {
    (void)out;
    (void)inp;
    (void)n;
    fprintf(stderr, "bk_cpu_sigmoid_forward: not implemented yet\n");
    abort();
}
void bk_cpu_sigmoid_backward(float *dinp, const float *out, const float *dout, size_t n) {
    (void)dinp;
    (void)out;
    (void)dout;
    (void)n;
    fprintf(stderr, "bk_cpu_sigmoid_backward: not implemented yet\n");
    abort();
}
void bk_cpu_softplus_forward(float *out, const float *inp, size_t n) {
    (void)out;
    (void)inp;
    (void)n;
    fprintf(stderr, "bk_cpu_softplus_forward: not implemented yet\n");
    abort();
}
void bk_cpu_softplus_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    (void)dinp;
    (void)inp;
    (void)dout;
    (void)n;
    fprintf(stderr, "bk_cpu_softplus_backward: not implemented yet\n");
    abort();
}
void bk_cpu_embedding_forward(float *out, const int *idx, const float *table, int N, int C) {
    (void)out;
    (void)idx;
    (void)table;
    (void)N;
    (void)C;
    fprintf(stderr, "bk_cpu_embedding_forward: not implemented yet\n");
    abort();
}
void bk_cpu_embedding_backward(float *dtable, const float *dout, const int *idx, int N, int C) {
    (void)dtable;
    (void)dout;
    (void)idx;
    (void)N;
    (void)C;
    fprintf(stderr, "bk_cpu_embedding_backward: not implemented yet\n");
    abort();
}
void bk_cpu_posadd_forward(float *out, const float *inp, const float *pos, int B, int T, int C) {
    (void)out;
    (void)inp;
    (void)pos;
    (void)B;
    (void)T;
    (void)C;
    fprintf(stderr, "bk_cpu_posadd_forward: not implemented yet\n");
    abort();
}
void bk_cpu_posadd_backward(float *dinp, float *dpos, const float *dout, int B, int T, int C) {
    (void)dinp;
    (void)dpos;
    (void)dout;
    (void)B;
    (void)T;
    (void)C;
    fprintf(stderr, "bk_cpu_posadd_backward: not implemented yet\n");
    abort();
}
void bk_cpu_linear_forward(float *out, const float *inp, const float *w, const float *bias, int N, int IC, int OC) {
    (void)out;
    (void)inp;
    (void)w;
    (void)bias;
    (void)N;
    (void)IC;
    (void)OC;
    fprintf(stderr, "bk_cpu_linear_forward: not implemented yet\n");
    abort();
}
void bk_cpu_linear_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w, int N, int IC, int OC) {
    (void)dinp;
    (void)dw;
    (void)dbias;
    (void)dout;
    (void)inp;
    (void)w;
    (void)N;
    (void)IC;
    (void)OC;
    fprintf(stderr, "bk_cpu_linear_backward: not implemented yet\n");
    abort();
}
void bk_cpu_gemm(int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda, long long strideA, const float *Bm, int ldb, long long strideB, float beta, float *Cm, int ldc, long long strideC, int batch) {
    (void)transa;
    (void)transb;
    (void)M;
    (void)N;
    (void)K;
    (void)alpha;
    (void)A;
    (void)lda;
    (void)strideA;
    (void)Bm;
    (void)ldb;
    (void)strideB;
    (void)beta;
    (void)Cm;
    (void)ldc;
    (void)strideC;
    (void)batch;
    fprintf(stderr, "bk_cpu_gemm: not implemented yet\n");
    abort();
}
void bk_cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N, int C) {
    (void)out;
    (void)mean;
    (void)rstd;
    (void)inp;
    (void)w;
    (void)b;
    (void)N;
    (void)C;
    fprintf(stderr, "bk_cpu_layernorm_forward: not implemented yet\n");
    abort();
}
void bk_cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w, const float *mean, const float *rstd, int N, int C) {
    (void)dinp;
    (void)dw;
    (void)db;
    (void)dout;
    (void)inp;
    (void)w;
    (void)mean;
    (void)rstd;
    (void)N;
    (void)C;
    fprintf(stderr, "bk_cpu_layernorm_backward: not implemented yet\n");
    abort();
}
void bk_cpu_softmax_forward(float *out, const float *inp, int N, int C) {
    (void)out;
    (void)inp;
    (void)N;
    (void)C;
    fprintf(stderr, "bk_cpu_softmax_forward: not implemented yet\n");
    abort();
}
void bk_cpu_softmax_backward(float *dinp, const float *out, const float *dout, int N, int C) {
    (void)dinp;
    (void)out;
    (void)dout;
    (void)N;
    (void)C;
    fprintf(stderr, "bk_cpu_softmax_backward: not implemented yet\n");
    abort();
}
void bk_cpu_meanpool_forward(float *out, const float *inp, const float *mask, int B, int T, int C) {
    (void)out;
    (void)inp;
    (void)mask;
    (void)B;
    (void)T;
    (void)C;
    fprintf(stderr, "bk_cpu_meanpool_forward: not implemented yet\n");
    abort();
}
void bk_cpu_meanpool_backward(float *dinp, const float *dout, const float *mask, int B, int T, int C) {
    (void)dinp;
    (void)dout;
    (void)mask;
    (void)B;
    (void)T;
    (void)C;
    fprintf(stderr, "bk_cpu_meanpool_backward: not implemented yet\n");
    abort();
}
void bk_cpu_crossentropy_forward(float *losses, float *probs, const float *logits, const int *targets, int N, int V) {
    (void)losses;
    (void)probs;
    (void)logits;
    (void)targets;
    (void)N;
    (void)V;
    fprintf(stderr, "bk_cpu_crossentropy_forward: not implemented yet\n");
    abort();
}
void bk_cpu_crossentropy_backward(float *dlogits, const float *probs, const int *targets, const float *dlosses, int N, int V) {
    (void)dlogits;
    (void)probs;
    (void)targets;
    (void)dlosses;
    (void)N;
    (void)V;
    fprintf(stderr, "bk_cpu_crossentropy_backward: not implemented yet\n");
    abort();
}
void bk_cpu_mse_forward(float *loss, const float *a, const float *b, const float *mask, int N, int C) {
    (void)loss;
    (void)a;
    (void)b;
    (void)mask;
    (void)N;
    (void)C;
    fprintf(stderr, "bk_cpu_mse_forward: not implemented yet\n");
    abort();
}
void bk_cpu_mse_backward(float *da, float *db, const float *a, const float *b, const float *mask, float dloss, int N, int C) {
    (void)da;
    (void)db;
    (void)a;
    (void)b;
    (void)mask;
    (void)dloss;
    (void)N;
    (void)C;
    fprintf(stderr, "bk_cpu_mse_backward: not implemented yet\n");
    abort();
}
float bk_cpu_global_norm(const float *g, size_t n) {
    (void)g;
    (void)n;
    fprintf(stderr, "bk_cpu_global_norm: not implemented yet\n");
    abort();
}
void bk_cpu_adamw_update(float *p, const float *g, float *m, float *v, size_t n, const bk_adamw *h, int t, float grad_scale) {
    (void)p;
    (void)g;
    (void)m;
    (void)v;
    (void)n;
    (void)h;
    (void)t;
    (void)grad_scale;
    fprintf(stderr, "bk_cpu_adamw_update: not implemented yet\n");
    abort();
}
void bk_cpu_rng_uniform(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t offset) {
    (void)out;
    (void)n;
    (void)seed;
    (void)stream;
    (void)offset;
    fprintf(stderr, "bk_cpu_rng_uniform: not implemented yet\n");
    abort();
}
void bk_cpu_rng_normal(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t offset) {
    (void)out;
    (void)n;
    (void)seed;
    (void)stream;
    (void)offset;
    fprintf(stderr, "bk_cpu_rng_normal: not implemented yet\n");
    abort();
}
