/* TEMPORARY placeholders until CPU attention and FWHT lands; this file is deleted then. */
#include <stdio.h>
#include <stdlib.h>
#include "kernels/cpu_ops.h"

void bk_cpu_attention_forward(float *out, float *att, const float *qkv, const bk_attn_args *a) {
    (void)out;
    (void)att;
    (void)qkv;
    (void)a;
    fprintf(stderr, "bk_cpu_attention_forward: not implemented yet\n");
    abort();
}
void bk_cpu_attention_backward(float *dqkv, float *dgate, float *scratch, const float *dout, const float *qkv, const float *att, const bk_attn_args *a) {
    (void)dqkv;
    (void)dgate;
    (void)scratch;
    (void)dout;
    (void)qkv;
    (void)att;
    (void)a;
    fprintf(stderr, "bk_cpu_attention_backward: not implemented yet\n");
    abort();
}
void bk_cpu_attention_selected_forward(float *out, float *scratch, const float *x, const float *wqkv, const float *bqkv, const int *heads, int K, const bk_attn_args *a) {
    (void)out;
    (void)scratch;
    (void)x;
    (void)wqkv;
    (void)bqkv;
    (void)heads;
    (void)K;
    (void)a;
    fprintf(stderr, "bk_cpu_attention_selected_forward: not implemented yet\n");
    abort();
}
void bk_cpu_linear_selected_forward(float *y, const float *c, const float *wo, const float *bo, const int *heads, int K, int B, int T, int C, int NH, int OC) {
    (void)y;
    (void)c;
    (void)wo;
    (void)bo;
    (void)heads;
    (void)K;
    (void)B;
    (void)T;
    (void)C;
    (void)NH;
    (void)OC;
    fprintf(stderr, "bk_cpu_linear_selected_forward: not implemented yet\n");
    abort();
}
void bk_cpu_fwht_forward(float *out, const float *inp, const float *alpha, const float *beta, int N, int d) {
    (void)out;
    (void)inp;
    (void)alpha;
    (void)beta;
    (void)N;
    (void)d;
    fprintf(stderr, "bk_cpu_fwht_forward: not implemented yet\n");
    abort();
}
void bk_cpu_fwht_backward(float *dinp, float *dalpha, float *dbeta, float *scratch, const float *dout, const float *inp, const float *alpha, int N, int d) {
    (void)dinp;
    (void)dalpha;
    (void)dbeta;
    (void)scratch;
    (void)dout;
    (void)inp;
    (void)alpha;
    (void)N;
    (void)d;
    fprintf(stderr, "bk_cpu_fwht_backward: not implemented yet\n");
    abort();
}
