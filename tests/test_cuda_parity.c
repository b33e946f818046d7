/* CPU-vs-CUDA parity: every op of the bk_backend table runs on the CPU
 * reference and on the CUDA backend with the same random inputs, and every
 * output and gradient is compared element by element:
 *     |cuda - cpu| <= atol + rtol * |cpu|
 * with TOL_EW (1e-4, 1e-4) for elementwise ops and TOL_MM (1e-3, 1e-3) for
 * GEMM-based ops and reductions (different summation orders, and libm vs
 * CUDA expf/tanhf differ by a few ulp). Backward outputs start from random
 * values, so the accumulate (+=) contract is checked too.
 *
 * Without a usable GPU (bk_cuda returns NULL) the program runs no test and
 * exits with status 77, which ctest reports as "Skipped" (SKIP_RETURN_CODE
 * in tests/CMakeLists.txt): a green run never hides that CUDA was not
 * tested. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk.h"
#include "kernels/bk_hadamard.h"
#include "kernels/bk_rng.h"

#define TOL_EW 1e-4, 1e-4
#define TOL_MM 1e-3, 1e-3

static const bk_backend *cpu, *gpu;

/* Elements past which a 256-thread launch hits bk_blocks' cap of 2^20 blocks
 * (kernels then loop grid-stride): parity cases past it test that loop. */
#define BK_TEST_CAP_ELEMS ((size_t)1048576 * 256)

/* Sets cpu/gpu, or skips the test when no GPU is usable. */
#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        const char *why_ = NULL;                                                                   \
        gpu = bk_cuda(&why_);                                                                      \
        if (!gpu) cr_skip_test("no GPU: %s", why_ ? why_ : "unknown reason");                      \
        cpu = bk_cpu();                                                                            \
    } while (0)

/* A float array twice over: h for the CPU backend (host memory), d a copy
 * on the GPU. */
typedef struct {
    float *h, *d;
    size_t n;
} pair;

static uint64_t seed_counter = 1000;

static pair pair_new(size_t n, float lo, float hi) {
    pair p = {malloc((n ? n : 1) * sizeof(float)), gpu->alloc(n * sizeof(float)), n};
    cr_assert(p.h && p.d, "allocation of %zu floats failed", n);
    uint64_t s = seed_counter++;
    for (size_t i = 0; i < n; i++) p.h[i] = lo + (hi - lo) * bk_rng_uniform_at(s, 11, i);
    gpu->to_device(p.d, p.h, n * sizeof(float));
    return p;
}

static pair pair_const(size_t n, float v) {
    pair p = pair_new(n, v, v);
    for (size_t i = 0; i < n; i++) p.h[i] = v;
    gpu->to_device(p.d, p.h, n * sizeof(float));
    return p;
}

static void pair_upload(pair *p) { gpu->to_device(p->d, p->h, p->n * sizeof(float)); }

static void pair_free(pair *p) {
    free(p->h);
    gpu->release(p->d);
    p->h = p->d = NULL;
}

static int *ints_to_gpu(const int *h, size_t n) {
    int *d = gpu->alloc(n * sizeof(int));
    cr_assert(d, "allocation failed");
    gpu->to_device(d, h, n * sizeof(int));
    return d;
}

/* Compares the GPU copy with the CPU one; reports the worst element. */
static void expect_close(const char *what, const pair *p, double atol, double rtol) {
    float *g = malloc((p->n ? p->n : 1) * sizeof(float));
    cr_assert(g);
    gpu->to_host(g, p->d, p->n * sizeof(float));
    double worst = 0;
    size_t wi = 0;
    int nan_mismatch = 0;
    for (size_t i = 0; i < p->n; i++) {
        double c = p->h[i], x = g[i];
        if (isnan(c) || isnan(x)) {
            if (isnan(c) != isnan(x) && !nan_mismatch) {
                nan_mismatch = 1;
                wi = i;
            }
            continue;
        }
        double r = fabs(x - c) / (atol + rtol * fabs(c));
        if (r > worst) {
            worst = r;
            wi = i;
        }
    }
    cr_expect(
        !nan_mismatch && worst <= 1.0,
        "%s: element %zu of %zu: cpu %.8g cuda %.8g (violation %.3g of atol %.1g rtol %.1g)%s",
        what, wi, p->n, (double)p->h[wi], (double)g[wi], worst, atol, rtol,
        nan_mismatch ? " NaN mismatch" : "");
    free(g);
}

Test(cuda_parity, memory) {
    NEED_GPU();
    size_t n = 1000;
    float *z = gpu->alloc(n * sizeof(float));
    float *back = malloc(n * sizeof(float));
    gpu->to_host(back, z, n * sizeof(float));
    for (size_t i = 0; i < n; i++) cr_expect_eq(back[i], 0.0f, "alloc not zeroed at %zu", i);
    pair a = pair_new(n, -1, 1);
    gpu->copy(z, a.d, n * sizeof(float));
    gpu->to_host(back, z, n * sizeof(float));
    cr_expect(memcmp(back, a.h, n * sizeof(float)) == 0, "round trip / copy changed data");
    gpu->zero(z, 10 * sizeof(float));
    gpu->sync();
    gpu->to_host(back, z, n * sizeof(float));
    cr_expect(back[9] == 0.0f && back[10] == a.h[10], "zero wrote the wrong range");
    cr_expect(strcmp(gpu->name, "cuda") == 0 && gpu->device == BK_CUDA);
    free(back);
    gpu->release(z);
    pair_free(&a);
}

Test(cuda_parity, add_axpy_scale) {
    NEED_GPU();
    size_t n = 10007;
    pair a = pair_new(n, -3, 3), b = pair_new(n, -3, 3), out = pair_new(n, 0, 1);
    cpu->add(out.h, a.h, b.h, n);
    gpu->add(out.d, a.d, b.d, n);
    expect_close("add", &out, TOL_EW);
    cpu->add(a.h, a.h, b.h, n); /* aliased */
    gpu->add(a.d, a.d, b.d, n);
    expect_close("add aliased", &a, TOL_EW);
    cpu->axpy(out.h, b.h, -0.37f, n);
    gpu->axpy(out.d, b.d, -0.37f, n);
    expect_close("axpy", &out, TOL_EW);
    cpu->scale(out.h, 1.7f, n);
    gpu->scale(out.d, 1.7f, n);
    expect_close("scale", &out, TOL_EW);
    pair_free(&a);
    pair_free(&b);
    pair_free(&out);
}

typedef void (*unary_fwd)(float *, const float *, size_t);
typedef void (*unary_bwd)(float *, const float *, const float *, size_t);

/* Forward and backward of one activation. The backward of sigmoid reads the
 * forward output, the others the input. */
static void check_activation(const char *name, unary_fwd cf, unary_fwd gf, unary_bwd cb,
                             unary_bwd gb, int backward_reads_output) {
    size_t n = 4099;
    pair x = pair_new(n, -8, 8);
    float extremes[] = {-100.0f, 100.0f, -30.0f, 30.0f, 0.0f, -1e-6f, 1e-6f, -17.5f};
    memcpy(x.h, extremes, sizeof extremes);
    pair_upload(&x);
    pair y = pair_new(n, 0, 1), dy = pair_new(n, -1, 1), dx = pair_new(n, -1, 1);
    cf(y.h, x.h, n);
    gf(y.d, x.d, n);
    char what[64];
    snprintf(what, sizeof what, "%s forward", name);
    expect_close(what, &y, TOL_EW);
    const float *src_h = backward_reads_output ? y.h : x.h,
                *src_d = backward_reads_output ? y.d : x.d;
    cb(dx.h, src_h, dy.h, n);
    gb(dx.d, src_d, dy.d, n);
    snprintf(what, sizeof what, "%s backward", name);
    expect_close(what, &dx, TOL_EW);
    pair_free(&x);
    pair_free(&y);
    pair_free(&dy);
    pair_free(&dx);
}

Test(cuda_parity, activations) {
    NEED_GPU();
    check_activation("gelu", cpu->gelu_forward, gpu->gelu_forward, cpu->gelu_backward,
                     gpu->gelu_backward, 0);
    check_activation("silu", cpu->silu_forward, gpu->silu_forward, cpu->silu_backward,
                     gpu->silu_backward, 0);
    check_activation("sigmoid", cpu->sigmoid_forward, gpu->sigmoid_forward, cpu->sigmoid_backward,
                     gpu->sigmoid_backward, 1);
    check_activation("softplus", cpu->softplus_forward, gpu->softplus_forward,
                     cpu->softplus_backward, gpu->softplus_backward, 0);
}

Test(cuda_parity, embedding_posadd) {
    NEED_GPU();
    int V = 50, C = 33, N = 97, B = 3, T = 17;
    int idx[97];
    for (int i = 0; i < N; i++) idx[i] = (int)(bk_rng_uniform_at(5, 1, (uint64_t)i) * V) % V;
    idx[1] = idx[0]; /* a repeated token */
    int *idx_d = ints_to_gpu(idx, (size_t)N);
    pair table = pair_new((size_t)V * C, -1, 1), out = pair_new((size_t)N * C, 0, 1);
    pair dout = pair_new((size_t)N * C, -1, 1), dtable = pair_new((size_t)V * C, -1, 1);
    cpu->embedding_forward(out.h, idx, table.h, N, C);
    gpu->embedding_forward(out.d, idx_d, table.d, N, C);
    expect_close("embedding forward", &out, TOL_EW);
    cpu->embedding_backward(dtable.h, dout.h, idx, N, C);
    gpu->embedding_backward(dtable.d, dout.d, idx_d, N, C);
    expect_close("embedding backward", &dtable, TOL_EW);

    size_t n = (size_t)B * T * C;
    pair inp = pair_new(n, -1, 1), pos = pair_new((size_t)T * C, -1, 1), o2 = pair_new(n, 0, 1);
    pair d2 = pair_new(n, -1, 1), dinp = pair_new(n, -1, 1), dpos = pair_new((size_t)T * C, -1, 1);
    cpu->posadd_forward(o2.h, inp.h, pos.h, B, T, C);
    gpu->posadd_forward(o2.d, inp.d, pos.d, B, T, C);
    expect_close("posadd forward", &o2, TOL_EW);
    cpu->posadd_backward(dinp.h, dpos.h, d2.h, B, T, C);
    gpu->posadd_backward(dinp.d, dpos.d, d2.d, B, T, C);
    expect_close("posadd backward dinp", &dinp, TOL_EW);
    expect_close("posadd backward dpos", &dpos, TOL_EW);
    cpu->posadd_backward(NULL, dpos.h, d2.h, B, T, C);
    gpu->posadd_backward(NULL, dpos.d, d2.d, B, T, C);
    expect_close("posadd backward dpos only", &dpos, TOL_EW);
    gpu->release(idx_d);
    pair *all[] = {&table, &out, &dout, &dtable, &inp, &pos, &o2, &d2, &dinp, &dpos};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

Test(cuda_parity, linear) {
    NEED_GPU();
    int N = 37, IC = 70, OC = 45;
    pair inp = pair_new((size_t)N * IC, -1, 1), w = pair_new((size_t)OC * IC, -0.5f, 0.5f);
    pair bias = pair_new((size_t)OC, -1, 1), out = pair_new((size_t)N * OC, 0, 1);
    pair dout = pair_new((size_t)N * OC, -1, 1), dinp = pair_new((size_t)N * IC, -1, 1);
    pair dw = pair_new((size_t)OC * IC, -1, 1), db = pair_new((size_t)OC, -1, 1);
    cpu->linear_forward(out.h, inp.h, w.h, bias.h, N, IC, OC);
    gpu->linear_forward(out.d, inp.d, w.d, bias.d, N, IC, OC);
    expect_close("linear forward", &out, TOL_MM);
    cpu->linear_forward(out.h, inp.h, w.h, NULL, N, IC, OC);
    gpu->linear_forward(out.d, inp.d, w.d, NULL, N, IC, OC);
    expect_close("linear forward, no bias", &out, TOL_MM);
    cpu->linear_backward(dinp.h, dw.h, db.h, dout.h, inp.h, w.h, N, IC, OC);
    gpu->linear_backward(dinp.d, dw.d, db.d, dout.d, inp.d, w.d, N, IC, OC);
    expect_close("linear backward dinp", &dinp, TOL_MM);
    expect_close("linear backward dw", &dw, TOL_MM);
    expect_close("linear backward dbias", &db, TOL_MM);
    cpu->linear_backward(dinp.h, NULL, NULL, dout.h, inp.h, w.h, N, IC, OC);
    gpu->linear_backward(dinp.d, NULL, NULL, dout.d, inp.d, w.d, N, IC, OC);
    expect_close("linear backward dinp only", &dinp, TOL_MM);
    pair *all[] = {&inp, &w, &bias, &out, &dout, &dinp, &dw, &db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

/* The CPU's and the GPU's gemm (bf16: gemm_bf16), alpha 0.7 and beta 0.3,
 * at M 13, N 17, K and a batch of 3, in all four transposes, with padded
 * leading dimensions and batch strides: the same C within TOL_MM. */
static void gemm_all_transposes(int bf16, int K) {
    int M = 13, N = 17, batch = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int arows = ta ? K : M, acols = ta ? M : K, brows = tb ? N : K, bcols = tb ? K : N;
            int lda = acols + 3, ldb = bcols + 2, ldc = N + 5;
            long long sA = (long long)arows * lda + 7, sB = (long long)brows * ldb + 1,
                      sC = (long long)M * ldc + 3;
            pair A = pair_new((size_t)(sA * batch), -1, 1),
                 Bm = pair_new((size_t)(sB * batch), -1, 1);
            pair Cm = pair_new((size_t)(sC * batch), -1, 1);
            (bf16 ? cpu->gemm_bf16 : cpu->gemm)(ta, tb, M, N, K, 0.7f, A.h, lda, sA, Bm.h, ldb, sB,
                                                0.3f, Cm.h, ldc, sC, batch);
            (bf16 ? gpu->gemm_bf16 : gpu->gemm)(ta, tb, M, N, K, 0.7f, A.d, lda, sA, Bm.d, ldb, sB,
                                                0.3f, Cm.d, ldc, sC, batch);
            char what[64];
            snprintf(what, sizeof what, "%s transa=%d transb=%d", bf16 ? "gemm_bf16" : "gemm", ta,
                     tb);
            expect_close(what, &Cm, TOL_MM);
            pair_free(&A);
            pair_free(&Bm);
            pair_free(&Cm);
        }
}

Test(cuda_parity, gemm_all_transposes_padded_batched) {
    NEED_GPU();
    gemm_all_transposes(0, 19);
}

/* gemm_bf16: cuBLASLt's bf16 products (fp32 sums) against the CPU's bf16
 * path (oneDNN, or the operands rounded and the fp32 product): the same
 * rounded products, summed in other orders, so within TOL_MM (the sums'
 * fp32 error, gamma_K sum |a'b'|, is ~1e-5 of it at K <= 300 over [-1, 1]).
 * The exact case pins cuBLASLt's rounding to nearest even: 64 (1 + 2^-7)
 * = 64.5 exactly (tests/test_bf16.c's derivation). */
Test(cuda_parity, gemm_bf16_cublaslt) {
    NEED_GPU();
    char why[384] = "";
    cr_expect(gpu->bf16_available(why, sizeof why), "no bf16 on this GPU: %s", why);
    gemm_all_transposes(1, 300);
    /* a linear layer's forward at DeiT-Tiny's QKV shape */
    pair A = pair_new((size_t)6304 * 192, -1, 1), W = pair_new((size_t)576 * 192, -1, 1);
    pair Y = pair_const((size_t)6304 * 576, 0.0f);
    cpu->gemm_bf16(0, 1, 6304, 576, 192, 1.0f, A.h, 192, 0, W.h, 192, 0, 0.0f, Y.h, 576, 0, 1);
    gpu->gemm_bf16(0, 1, 6304, 576, 192, 1.0f, A.d, 192, 0, W.d, 192, 0, 0.0f, Y.d, 576, 0, 1);
    expect_close("gemm_bf16 6304x576x192", &Y, TOL_MM);
    pair_free(&A);
    pair_free(&W);
    pair_free(&Y);
    /* rounding to nearest even: A rounds up, B (a tie) to the even 1 */
    pair a = pair_const(8 * 64, 1.0f + 0x1p-8f + 0x1p-10f), b = pair_const(5 * 64, 1.0f + 0x1p-8f);
    pair c = pair_const(8 * 5, 0.0f);
    gpu->gemm_bf16(0, 1, 8, 5, 64, 1.0f, a.d, 64, 0, b.d, 64, 0, 0.0f, c.d, 5, 0, 1);
    gpu->to_host(c.h, c.d, 40 * sizeof(float));
    for (int i = 0; i < 40; i++)
        cr_expect_eq(c.h[i], 64.5f, "gemm_bf16 C[%d] = %.9g, want 64.5", i, (double)c.h[i]);
    pair_free(&a);
    pair_free(&b);
    pair_free(&c);
}

/* One gemm on both backends over buffers of the given sizes; compares C. */
static void check_gemm(const char *what, int ta, int tb, int M, int N, int K, size_t na, int lda,
                       long long sA, size_t nb, int ldb, long long sB, float beta, size_t nc,
                       int ldc, long long sC, int batch) {
    pair A = pair_new(na, -1, 1), Bm = pair_new(nb, -1, 1), Cm = pair_new(nc, -1, 1);
    cpu->gemm(ta, tb, M, N, K, 1.0f, A.h, lda, sA, Bm.h, ldb, sB, beta, Cm.h, ldc, sC, batch);
    gpu->gemm(ta, tb, M, N, K, 1.0f, A.d, lda, sA, Bm.d, ldb, sB, beta, Cm.d, ldc, sC, batch);
    expect_close(what, &Cm, TOL_MM);
    pair_free(&A);
    pair_free(&Bm);
    pair_free(&Cm);
}

/* The products of the wide BiLSTM mixer (worker/nn/nn_bilstm_wide.c) at
 * DeiT-Tiny's width (C 192, 3 heads of d_h 64, 2 x 50 tokens): the biases
 * as a rank-1 product with a ones column and their gradients as its
 * transpose (K or M of 1, leading dimension 1), and the per-head products
 * whose batch items sit side by side in one row (stride d_h within a row of
 * C), forward and both backward forms. Its LSTM is check_lstm's H = 64. */
Test(cuda_parity, bilstm_wide_gemms) {
    NEED_GPU();
    enum { BT = 100, C = 192, H = 3, dh = 64 };
    check_gemm("bias rows", 0, 0, BT, 8 * C, 1, BT, 1, 0, 8 * C, 8 * C, 0, 0.0f, (size_t)BT * 8 * C,
               8 * C, 0, 1);
    check_gemm("bias grad", 1, 0, 1, 8 * C, BT, BT, 1, 0, (size_t)BT * 8 * C, 8 * C, 0, 1.0f, 8 * C,
               8 * C, 0, 1);
    check_gemm("ih forward", 0, 1, BT, 8 * dh, dh, (size_t)BT * C, C, dh, (size_t)H * 8 * dh * dh,
               dh, 8LL * dh * dh, 1.0f, (size_t)BT * 8 * C, 8 * C, 8 * dh, H);
    check_gemm("ih dinput", 0, 0, BT, dh, 8 * dh, (size_t)BT * 8 * C, 8 * C, 8 * dh,
               (size_t)H * 8 * dh * dh, dh, 8LL * dh * dh, 0.0f, (size_t)BT * C, C, dh, H);
    check_gemm("ih dweight", 1, 0, 8 * dh, dh, BT, (size_t)BT * 8 * C, 8 * C, 8 * dh,
               (size_t)BT * C, C, dh, 1.0f, (size_t)H * 8 * dh * dh, dh, 8LL * dh * dh, H);
    check_gemm("head forward", 0, 1, BT, dh, 2 * dh, (size_t)BT * 2 * C, 2 * C, 2 * dh,
               (size_t)C * 2 * dh, 2 * dh, 2LL * dh * dh, 1.0f, (size_t)BT * C, C, dh, H);
}

Test(cuda_parity, layernorm_softmax) {
    NEED_GPU();
    int N = 29, C = 300;
    size_t n = (size_t)N * C;
    pair inp = pair_new(n, -2, 3), w = pair_new((size_t)C, 0.5f, 1.5f),
         b = pair_new((size_t)C, -1, 1);
    pair out = pair_new(n, 0, 1), mean = pair_new((size_t)N, 0, 1),
         rstd = pair_new((size_t)N, 0, 1);
    pair dout = pair_new(n, -1, 1), dinp = pair_new(n, -1, 1), dw = pair_new((size_t)C, -1, 1),
         db = pair_new((size_t)C, -1, 1);
    cpu->layernorm_forward(out.h, mean.h, rstd.h, inp.h, w.h, b.h, N, C);
    gpu->layernorm_forward(out.d, mean.d, rstd.d, inp.d, w.d, b.d, N, C);
    expect_close("layernorm out", &out, TOL_MM);
    expect_close("layernorm mean", &mean, TOL_MM);
    expect_close("layernorm rstd", &rstd, TOL_MM);
    cpu->layernorm_backward(dinp.h, dw.h, db.h, dout.h, inp.h, w.h, mean.h, rstd.h, N, C);
    gpu->layernorm_backward(dinp.d, dw.d, db.d, dout.d, inp.d, w.d, mean.d, rstd.d, N, C);
    expect_close("layernorm dinp", &dinp, TOL_MM);
    expect_close("layernorm dw", &dw, TOL_MM);
    expect_close("layernorm db", &db, TOL_MM);

    int SN = 31, SC = 1000;
    pair x = pair_new((size_t)SN * SC, -10, 10), y = pair_new((size_t)SN * SC, 0, 1);
    pair dy = pair_new((size_t)SN * SC, -1, 1), dx = pair_new((size_t)SN * SC, -1, 1);
    cpu->softmax_forward(y.h, x.h, SN, SC);
    gpu->softmax_forward(y.d, x.d, SN, SC);
    expect_close("softmax forward", &y, TOL_MM);
    cpu->softmax_backward(dx.h, y.h, dy.h, SN, SC);
    gpu->softmax_backward(dx.d, y.d, dy.d, SN, SC);
    expect_close("softmax backward", &dx, TOL_MM);
    pair *all[] = {&inp, &w, &b, &out, &mean, &rstd, &dout, &dinp, &dw, &db, &x, &y, &dy, &dx};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

/* Full attention forward and backward for one configuration. */
static void check_attention(int B, int T, int C, int NH, int causal, int with_mask, int with_gate) {
    char tag[96];
    snprintf(tag, sizeof tag, "attention B=%d T=%d C=%d NH=%d causal=%d mask=%d gate=%d", B, T, C,
             NH, causal, with_mask, with_gate);
    pair qkv = pair_new((size_t)B * T * 3 * C, -1.5f, 1.5f);
    pair mask = pair_const((size_t)B * T, 1.0f), gate = pair_new((size_t)B * NH, 0.2f, 1.5f);
    /* sample 0: two keys removed; sample 1: its first key removed, so with
     * the causal mask query 0 sees nothing; last sample: every key removed */
    mask.h[2] = 0.0f;
    mask.h[T - 1] = 0.0f;
    if (B > 1) mask.h[T] = 0.0f;
    if (B > 2)
        for (int t = 0; t < T; t++) mask.h[(size_t)(B - 1) * T + t] = 0.0f;
    pair_upload(&mask);
    size_t natt = (size_t)B * NH * T * T;
    pair out = pair_new((size_t)B * T * C, 0, 1), att = pair_new(natt, 0, 1);
    bk_attn_args ah = {B, T, C, NH, causal, with_mask ? mask.h : NULL, with_gate ? gate.h : NULL};
    bk_attn_args ad = {B, T, C, NH, causal, with_mask ? mask.d : NULL, with_gate ? gate.d : NULL};
    cpu->attention_forward(out.h, att.h, qkv.h, &ah);
    gpu->attention_forward(out.d, att.d, qkv.d, &ad);
    char what[160];
    snprintf(what, sizeof what, "%s: out", tag);
    expect_close(what, &out, TOL_MM);
    snprintf(what, sizeof what, "%s: att", tag);
    expect_close(what, &att, TOL_MM);

    pair dout = pair_new((size_t)B * T * C, -1, 1), dqkv = pair_new((size_t)B * T * 3 * C, -1, 1);
    pair dgate = pair_new((size_t)B * NH, -1, 1), scratch = pair_new(natt, 0, 1);
    cpu->attention_backward(dqkv.h, dgate.h, scratch.h, dout.h, qkv.h, att.h, &ah);
    gpu->attention_backward(dqkv.d, dgate.d, scratch.d, dout.d, qkv.d, att.d, &ad);
    snprintf(what, sizeof what, "%s: dqkv", tag);
    expect_close(what, &dqkv, TOL_MM);
    snprintf(what, sizeof what, "%s: dgate", tag);
    expect_close(what, &dgate, TOL_MM);
    pair *all[] = {&qkv, &mask, &gate, &out, &att, &dout, &dqkv, &dgate, &scratch};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

Test(cuda_parity, attention_mask_causal_gate) {
    NEED_GPU();
    check_attention(3, 13, 24, 4, 1, 1, 1);
    check_attention(3, 13, 24, 4, 0, 1, 1);
}

Test(cuda_parity, attention_plain) {
    NEED_GPU();
    check_attention(2, 64, 64, 2, 0, 0, 0);
    check_attention(5, 33, 48, 8, 1, 0, 0); /* more heads than samples: the other GEMM loop order */
}

Test(cuda_parity, attention_selected_heads) {
    NEED_GPU();
    int B = 3, T = 11, C = 32, NH = 4, K = 2, HS = C / NH, OC = 20;
    int heads[] = {2, 0, 1, 3, 3, 2};
    int *heads_d = ints_to_gpu(heads, (size_t)B * K);
    pair x = pair_new((size_t)B * T * C, -1, 1), wqkv = pair_new((size_t)3 * C * C, -0.3f, 0.3f);
    pair bqkv = pair_new((size_t)3 * C, -0.5f, 0.5f), mask = pair_const((size_t)B * T, 1.0f);
    mask.h[3] = 0.0f;
    mask.h[T] = 0.0f; /* sample 1, first key: causal query 0 sees nothing */
    pair_upload(&mask);
    size_t nscratch = (size_t)B * K * T * (3 * HS + T);
    pair scratch = pair_new(nscratch, 0, 1), out = pair_new((size_t)B * T * C, 0, 1);
    bk_attn_args ah = {B, T, C, NH, 1, mask.h, NULL}, ad = {B, T, C, NH, 1, mask.d, NULL};
    cpu->attention_selected_forward(out.h, scratch.h, x.h, wqkv.h, bqkv.h, heads, K, &ah);
    gpu->attention_selected_forward(out.d, scratch.d, x.d, wqkv.d, bqkv.d, heads_d, K, &ad);
    expect_close("selected attention, bias", &out, TOL_MM);
    cpu->attention_selected_forward(out.h, scratch.h, x.h, wqkv.h, NULL, heads, K, &ah);
    gpu->attention_selected_forward(out.d, scratch.d, x.d, wqkv.d, NULL, heads_d, K, &ad);
    expect_close("selected attention, no bias", &out, TOL_MM);

    /* the output projection over the selected heads, from the CPU's c on both */
    pair c = pair_new((size_t)B * T * C, 0, 1);
    memcpy(c.h, out.h, c.n * sizeof(float));
    pair_upload(&c);
    pair wo = pair_new((size_t)OC * C, -0.5f, 0.5f), bo = pair_new((size_t)OC, -1, 1);
    pair y = pair_new((size_t)B * T * OC, 0, 1);
    cpu->linear_selected_forward(y.h, c.h, wo.h, bo.h, heads, K, B, T, C, NH, OC);
    gpu->linear_selected_forward(y.d, c.d, wo.d, bo.d, heads_d, K, B, T, C, NH, OC);
    expect_close("linear_selected, bias", &y, TOL_MM);
    cpu->linear_selected_forward(y.h, c.h, wo.h, NULL, heads, K, B, T, C, NH, OC);
    gpu->linear_selected_forward(y.d, c.d, wo.d, NULL, heads_d, K, B, T, C, NH, OC);
    expect_close("linear_selected, no bias", &y, TOL_MM);
    gpu->release(heads_d);
    pair *all[] = {&x, &wqkv, &bqkv, &mask, &scratch, &out, &c, &wo, &bo, &y};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

/* Entry (i, j) of the unnormalised H_d, built here from bk_h12 and the
 * Sylvester sign (-1)^popcount(i & j), independently of either backend. */
static int hadamard_sign(int d, int i, int j) {
    int P = d % 3 == 0 ? d / 12 : d, s = 1;
    if (d % 3 == 0) s = bk_h12[i / P][j / P];
    return (__builtin_popcount((unsigned)((i % P) & (j % P))) & 1) ? -s : s;
}

static void check_fwht(int N, int d) {
    char what[96];
    size_t n = (size_t)N * d;
    pair inp = pair_new(n, -1, 1), alpha = pair_new((size_t)d, 0.5f, 1.5f),
         beta = pair_new((size_t)d, -1, 1);
    pair out = pair_new(n, 0, 1);
    cpu->fwht_forward(out.h, NULL, inp.h, alpha.h, beta.h, N, d);
    gpu->fwht_forward(out.d, NULL, inp.d, alpha.d, beta.d, N, d);
    snprintf(what, sizeof what, "fwht forward d=%d affine", d);
    expect_close(what, &out, TOL_MM);
    cpu->fwht_forward(out.h, NULL, inp.h, NULL, NULL, N, d);
    gpu->fwht_forward(out.d, NULL, inp.d, NULL, NULL, N, d);
    snprintf(what, sizeof what, "fwht forward d=%d plain", d);
    expect_close(what, &out, TOL_MM);

    /* known values: row 0 against a dense product in double */
    if (d <= 1024) {
        float *g = malloc((size_t)d * sizeof(float));
        gpu->to_host(g, out.d, (size_t)d * sizeof(float));
        double worst = 0;
        for (int i = 0; i < d; i++) {
            double s = 0;
            for (int j = 0; j < d; j++) s += hadamard_sign(d, i, j) * (double)inp.h[j];
            worst = fmax(worst, fabs(s / sqrt((double)d) - g[i]));
        }
        cr_expect(worst < 1e-4, "fwht d=%d: cuda differs from the dense H_d product by %.3g", d,
                  worst);
        free(g);
    }

    /* in place on the GPU */
    pair inplace = pair_new(n, 0, 1);
    memcpy(inplace.h, inp.h, n * sizeof(float));
    pair_upload(&inplace);
    cpu->fwht_forward(inplace.h, NULL, inplace.h, alpha.h, beta.h, N, d);
    gpu->fwht_forward(inplace.d, NULL, inplace.d, alpha.d, beta.d, N, d);
    snprintf(what, sizeof what, "fwht forward d=%d in place", d);
    expect_close(what, &inplace, TOL_MM);

    pair dout = pair_new(n, -1, 1), dinp = pair_new(n, -1, 1), dalpha = pair_new((size_t)d, -1, 1);
    pair dbeta = pair_new((size_t)d, -1, 1), scratch = pair_new(n, 0, 1);
    cpu->fwht_backward(dinp.h, dalpha.h, dbeta.h, scratch.h, dout.h, inp.h, NULL, alpha.h, N, d);
    gpu->fwht_backward(dinp.d, dalpha.d, dbeta.d, scratch.d, dout.d, inp.d, NULL, alpha.d, N, d);
    snprintf(what, sizeof what, "fwht backward d=%d dinp", d);
    expect_close(what, &dinp, TOL_MM);
    snprintf(what, sizeof what, "fwht backward d=%d dalpha", d);
    expect_close(what, &dalpha, TOL_MM);
    snprintf(what, sizeof what, "fwht backward d=%d dbeta", d);
    expect_close(what, &dbeta, TOL_MM);
    cpu->fwht_backward(dinp.h, NULL, NULL, scratch.h, dout.h, inp.h, NULL, NULL, N, d);
    gpu->fwht_backward(dinp.d, NULL, NULL, scratch.d, dout.d, inp.d, NULL, NULL, N, d);
    snprintf(what, sizeof what, "fwht backward d=%d dinp, no alpha", d);
    expect_close(what, &dinp, TOL_MM);

    /* the training path: the forward keeps pre = H inp / sqrt(d), the backward reads it */
    pair pre = pair_new(n, 0, 1);
    cpu->fwht_forward(out.h, pre.h, inp.h, alpha.h, beta.h, N, d);
    gpu->fwht_forward(out.d, pre.d, inp.d, alpha.d, beta.d, N, d);
    snprintf(what, sizeof what, "fwht forward d=%d kept pre", d);
    expect_close(what, &pre, TOL_MM);
    snprintf(what, sizeof what, "fwht forward d=%d output with pre", d);
    expect_close(what, &out, TOL_MM);
    cpu->fwht_backward(dinp.h, dalpha.h, dbeta.h, scratch.h, dout.h, NULL, pre.h, alpha.h, N, d);
    gpu->fwht_backward(dinp.d, dalpha.d, dbeta.d, scratch.d, dout.d, NULL, pre.d, alpha.d, N, d);
    snprintf(what, sizeof what, "fwht backward d=%d dalpha from pre", d);
    expect_close(what, &dalpha, TOL_MM);
    snprintf(what, sizeof what, "fwht backward d=%d dinp from pre", d);
    expect_close(what, &dinp, TOL_MM);
    pair *all[] = {&inp,  &alpha,  &beta,  &out,     &inplace, &dout,
                   &dinp, &dalpha, &dbeta, &scratch, &pre};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

Test(cuda_parity, fwht) {
    NEED_GPU();
    check_fwht(5, 64);
    check_fwht(7, 768);
    check_fwht(3, 1024);
    check_fwht(4, 12);
    check_fwht(2, 24576); /* wider than shared memory: the global-memory path */
}

Test(cuda_parity, meanpool) {
    NEED_GPU();
    int B = 3, T = 9, C = 20;
    pair inp = pair_new((size_t)B * T * C, -1, 1), mask = pair_const((size_t)B * T, 1.0f);
    mask.h[1] = mask.h[4] = 0.0f;
    for (int t = 0; t < T; t++) mask.h[2 * T + t] = 0.0f; /* sample 2 pools to 0 */
    pair_upload(&mask);
    pair out = pair_new((size_t)B * C, 0, 1), dout = pair_new((size_t)B * C, -1, 1);
    pair dinp = pair_new((size_t)B * T * C, -1, 1);
    for (int with_mask = 1; with_mask >= 0; with_mask--) {
        cpu->meanpool_forward(out.h, inp.h, with_mask ? mask.h : NULL, B, T, C);
        gpu->meanpool_forward(out.d, inp.d, with_mask ? mask.d : NULL, B, T, C);
        expect_close(with_mask ? "meanpool forward, mask" : "meanpool forward", &out, TOL_MM);
        cpu->meanpool_backward(dinp.h, dout.h, with_mask ? mask.h : NULL, B, T, C);
        gpu->meanpool_backward(dinp.d, dout.d, with_mask ? mask.d : NULL, B, T, C);
        expect_close(with_mask ? "meanpool backward, mask" : "meanpool backward", &dinp, TOL_MM);
    }
    pair *all[] = {&inp, &mask, &out, &dout, &dinp};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

Test(cuda_parity, crossentropy) {
    NEED_GPU();
    int N = 7, V = 1001;
    int targets[7] = {0, 1000, 17, -1, 500, 3, -5};
    int *targets_d = ints_to_gpu(targets, (size_t)N);
    pair logits = pair_new((size_t)N * V, -8, 8), probs = pair_new((size_t)N * V, 0, 1);
    pair losses = pair_new((size_t)N, 0, 1), dlosses = pair_new((size_t)N, 0.1f, 1);
    pair dlogits = pair_new((size_t)N * V, -1, 1);
    cpu->crossentropy_forward(losses.h, probs.h, logits.h, targets, N, V);
    gpu->crossentropy_forward(losses.d, probs.d, logits.d, targets_d, N, V);
    expect_close("crossentropy losses", &losses, TOL_MM);
    expect_close("crossentropy probs", &probs, TOL_MM);
    cpu->crossentropy_backward(dlogits.h, probs.h, targets, dlosses.h, N, V);
    gpu->crossentropy_backward(dlogits.d, probs.d, targets_d, dlosses.d, N, V);
    expect_close("crossentropy dlogits", &dlogits, TOL_MM);
    gpu->release(targets_d);
    pair *all[] = {&logits, &probs, &losses, &dlosses, &dlogits};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

Test(cuda_parity, label_smoothing) {
    NEED_GPU();
    int N = 37, V = 19;
    pair x = pair_new((size_t)N * V, -3, 3), p = pair_const((size_t)N * V, 0);
    pair l = pair_const((size_t)N, 0), d = pair_const((size_t)N * V, 0);
    pair dl = pair_new((size_t)N, 0.1f, 1);
    int *t = malloc((size_t)N * sizeof(int));
    for (int n = 0; n < N; n++) t[n] = n % 7 == 3 ? -1 : (n * 5) % V;
    int *t_d = ints_to_gpu(t, (size_t)N);
    cpu->crossentropy_forward(l.h, p.h, x.h, t, N, V);
    gpu->crossentropy_forward(l.d, p.d, x.d, t_d, N, V);
    cpu->label_smooth_forward(l.h, x.h, t, N, V, 0.1f);
    gpu->label_smooth_forward(l.d, x.d, t_d, N, V, 0.1f);
    expect_close("label smooth forward", &l, TOL_EW);
    cpu->label_smooth_backward(d.h, t, dl.h, N, V, 0.1f);
    gpu->label_smooth_backward(d.d, t_d, dl.d, N, V, 0.1f);
    expect_close("label smooth backward", &d, TOL_EW);
    pair_free(&x), pair_free(&p), pair_free(&l), pair_free(&d), pair_free(&dl);
    gpu->release(t_d);
    free(t);
}

Test(cuda_parity, mse) {
    NEED_GPU();
    int N = 13, C = 17;
    pair a = pair_new((size_t)N * C, -1, 1), b = pair_new((size_t)N * C, -1, 1);
    pair mask = pair_const((size_t)N, 1.0f), loss = pair_new(1, 0, 1);
    mask.h[0] = mask.h[5] = mask.h[12] = 0.0f;
    pair_upload(&mask);
    pair da = pair_new((size_t)N * C, -1, 1), db = pair_new((size_t)N * C, -1, 1);
    for (int with_mask = 1; with_mask >= 0; with_mask--) {
        const float *mh = with_mask ? mask.h : NULL, *md = with_mask ? mask.d : NULL;
        cpu->mse_forward(loss.h, a.h, b.h, mh, N, C);
        gpu->mse_forward(loss.d, a.d, b.d, md, N, C);
        expect_close(with_mask ? "mse forward, mask" : "mse forward", &loss, TOL_MM);
        cpu->mse_backward(da.h, db.h, a.h, b.h, mh, 0.7f, N, C);
        gpu->mse_backward(da.d, db.d, a.d, b.d, md, 0.7f, N, C);
        expect_close(with_mask ? "mse backward da, mask" : "mse backward da", &da, TOL_MM);
        expect_close(with_mask ? "mse backward db, mask" : "mse backward db", &db, TOL_MM);
    }
    cpu->mse_backward(NULL, db.h, a.h, b.h, mask.h, 1.3f, N, C);
    gpu->mse_backward(NULL, db.d, a.d, b.d, mask.d, 1.3f, N, C);
    expect_close("mse backward db only", &db, TOL_MM);
    pair *all[] = {&a, &b, &mask, &loss, &da, &db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

Test(cuda_parity, global_norm_adamw) {
    NEED_GPU();
    size_t n = 100003;
    pair g = pair_new(n, -1, 1);
    float nc = cpu->global_norm(g.h, n), ng = gpu->global_norm(g.d, n);
    cr_expect(fabsf(nc - ng) <= 1e-5f * nc, "global_norm: cpu %.8g cuda %.8g", (double)nc,
              (double)ng);

    size_t m = 1003;
    pair p = pair_new(m, -1, 1), gr = pair_new(m, -2, 2), mo = pair_new(m, -0.1f, 0.1f),
         v = pair_new(m, 0, 0.01f);
    bk_adamw h = {1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f};
    for (int t = 1; t <= 3; t++) {
        cpu->adamw_update(p.h, gr.h, mo.h, v.h, m, &h, t, 0.5f);
        gpu->adamw_update(p.d, gr.d, mo.d, v.d, m, &h, t, 0.5f);
    }
    expect_close("adamw p", &p, TOL_MM);
    expect_close("adamw m", &mo, TOL_MM);
    expect_close("adamw v", &v, TOL_MM);
    pair *all[] = {&g, &p, &gr, &mo, &v};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

Test(cuda_parity, rng_streams) {
    NEED_GPU();
    size_t n = 1001;
    pair u = pair_new(n, 0, 1), z = pair_new(n, 0, 1);
    cpu->rng_uniform(u.h, n, 42, 3, 5);
    gpu->rng_uniform(u.d, n, 42, 3, 5);
    expect_close("rng_uniform (bit-exact)", &u, 1e-30, 0.0);
    cpu->rng_normal(z.h, n, 42, 3, (uint64_t)1 << 40);
    gpu->rng_normal(z.d, n, 42, 3, (uint64_t)1 << 40);
    expect_close("rng_normal", &z, 1e-5, 1e-5);
    pair_free(&u);
    pair_free(&z);
}

/* ---- sequence mixers (conv1d, selective scan, LSTM) ---- */

/* A [B,T] mask with holes (runs, first and last tokens of sample 1). */
static pair mixer_mask(int B, int T) {
    pair m = pair_const((size_t)B * T, 1.0f);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            if ((b * 7 + t * 3) % 5 == 0 || (t >= T / 3 && t < T / 3 + 3) ||
                (b == 1 && (t == 0 || t == T - 1)))
                m.h[(size_t)b * T + t] = 0.0f;
    pair_upload(&m);
    return m;
}

static void check_conv(int B, int T, int C, int K, int reverse, int silu, int masked) {
    char what[128];
    size_t n = (size_t)B * T * C;
    pair x = pair_new(n, -1, 1), w = pair_new((size_t)C * K, -1, 1), bias = pair_new(C, -1, 1);
    pair mask = mixer_mask(B, T), out = pair_new(n, 0, 1), dout = pair_new(n, -1, 1);
    pair dx = pair_new(n, -1, 1), dw = pair_new((size_t)C * K, -1, 1), db = pair_new(C, -1, 1);
    pair scratch = pair_new((size_t)B * C * (K + 1), 0, 1);
    bk_conv_args ah = {B, T, C, K, reverse, silu, masked ? mask.h : NULL}, ad = ah;
    ad.mask = masked ? mask.d : NULL;
    cpu->conv1d_forward(out.h, x.h, w.h, bias.h, &ah);
    gpu->conv1d_forward(out.d, x.d, w.d, bias.d, &ad);
    snprintf(what, sizeof what, "conv1d forward K=%d rev=%d silu=%d mask=%d", K, reverse, silu,
             masked);
    expect_close(what, &out, TOL_MM);
    cpu->conv1d_backward(dx.h, dw.h, db.h, scratch.h, dout.h, x.h, w.h, bias.h, &ah);
    gpu->conv1d_backward(dx.d, dw.d, db.d, scratch.d, dout.d, x.d, w.d, bias.d, &ad);
    snprintf(what, sizeof what, "conv1d backward dx K=%d rev=%d", K, reverse);
    expect_close(what, &dx, TOL_MM);
    snprintf(what, sizeof what, "conv1d backward dw K=%d rev=%d", K, reverse);
    expect_close(what, &dw, TOL_MM);
    snprintf(what, sizeof what, "conv1d backward dbias K=%d rev=%d", K, reverse);
    expect_close(what, &db, TOL_MM);
    pair *all[] = {&x, &w, &bias, &mask, &out, &dout, &dx, &dw, &db, &scratch};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

Test(cuda_parity, conv1d) {
    NEED_GPU();
    for (int reverse = 0; reverse < 2; reverse++) {
        check_conv(4, 131, 40, 4, reverse, 1, 1);
        check_conv(2, 33, 7, 3, reverse, 0, 0);
    }
    check_conv(2, 20, 5, 1, 0, 1, 1);
    check_conv(3, 40, 9, BK_CONV_MAX_K, 1, 1, 1); /* the widest window, through the holes */
}

/* B*T*C past the 2^28 elements one capped grid covers: the conv kernels'
 * grid-stride loops must reach the last elements (1 GiB a tensor). */
Test(cuda_parity, conv1d_past_the_grid_cap) {
    NEED_GPU();
    cr_assert_gt((size_t)2 * 2049 * 65537, BK_TEST_CAP_ELEMS);
    check_conv(2, 2049, 65537, 4, 1, 1, 1);
}

static void check_scan(int B, int T, int D, int G, int N, int reverse, int masked, int gated) {
    char what[160];
    const int R = 3, S = R + 2 * N, nch = (T + BK_SCAN_CHUNK - 1) / BK_SCAN_CHUNK;
    size_t nx = (size_t)B * T * D, nbc = (size_t)B * T * G * S;
    pair x = pair_new(nx, -1, 1), delta = pair_new(nx, -2.5f, 0.5f), bias = pair_new(D, -1, 0.5f);
    pair Alog = pair_new((size_t)D * N, 0, 2.5f), xdbl = pair_new(nbc, -1, 1);
    pair Dp = pair_new(D, 0.5f, 1.5f), z = pair_new(nx, -2, 2), mask = mixer_mask(B, T);
    pair out = pair_new(nx, 0, 1), states = pair_new((size_t)B * D * nch * N, 0, 1);
    pair dout = pair_new(nx, -1, 1);
    pair dx = pair_new(nx, -1, 1), dd = pair_new(nx, -1, 1), dbias = pair_new(D, -1, 1);
    pair dA = pair_new((size_t)D * N, -1, 1), dxdbl = pair_new(nbc, -1, 1), dD = pair_new(D, -1, 1),
         dz = pair_new(nx, -1, 1);
    pair scratch = pair_new((size_t)B * D * (2 * N + 2), 0, 1);
    bk_scan_args ah = {.B = B, .T = T, .D = D, .G = G, .N = N, .reverse = reverse, .bc_stride = S};
    bk_scan_args ad = ah;
    ah.x = x.h, ah.delta = delta.h, ah.delta_bias = bias.h, ah.A_log = Alog.h;
    ah.Bm = xdbl.h + R, ah.Cm = xdbl.h + R + N, ah.Dskip = Dp.h, ah.z = gated ? z.h : NULL;
    ah.mask = masked ? mask.h : NULL;
    ad.x = x.d, ad.delta = delta.d, ad.delta_bias = bias.d, ad.A_log = Alog.d;
    ad.Bm = xdbl.d + R, ad.Cm = xdbl.d + R + N, ad.Dskip = Dp.d, ad.z = gated ? z.d : NULL;
    ad.mask = masked ? mask.d : NULL;
    cpu->scan_forward(out.h, states.h, &ah);
    gpu->scan_forward(out.d, states.d, &ad);
    snprintf(what, sizeof what, "scan forward T=%d D=%d G=%d N=%d rev=%d mask=%d z=%d", T, D, G, N,
             reverse, masked, gated);
    expect_close(what, &out, TOL_MM);
    snprintf(what, sizeof what, "scan chunk states T=%d rev=%d", T, reverse);
    expect_close(what, &states, TOL_MM);
    bk_scan_grads gh = {
        dx.h, dd.h, dbias.h, dA.h, dxdbl.h + R, dxdbl.h + R + N, dD.h, gated ? dz.h : NULL};
    bk_scan_grads gd = {
        dx.d, dd.d, dbias.d, dA.d, dxdbl.d + R, dxdbl.d + R + N, dD.d, gated ? dz.d : NULL};
    cpu->scan_backward(&gh, scratch.h, dout.h, states.h, &ah);
    gpu->scan_backward(&gd, scratch.d, dout.d, states.d, &ad);
    const struct {
        const char *name;
        pair *p;
    } grads[] = {{"dx", &dx},     {"ddelta", &dd},   {"ddelta_bias", &dbias},
                 {"dA_log", &dA}, {"dB dC", &dxdbl}, {"dD", &dD},
                 {"dz", &dz}};
    for (size_t i = 0; i < sizeof grads / sizeof *grads; i++) {
        snprintf(what, sizeof what, "scan backward %s T=%d D=%d G=%d N=%d rev=%d mask=%d",
                 grads[i].name, T, D, G, N, reverse, masked);
        expect_close(what, grads[i].p, TOL_MM);
    }
    /* the forward-only options: delta_w inside, accumulate onto out */
    pair dw = pair_new((size_t)D * R, -1, 1), acc = pair_new(nx, -1, 1);
    ah.delta = NULL, ah.delta_w = dw.h, ah.dlow = xdbl.h, ah.R = R, ah.accumulate = 1;
    ad.delta = NULL, ad.delta_w = dw.d, ad.dlow = xdbl.d, ad.R = R, ad.accumulate = 1;
    cpu->scan_forward(acc.h, NULL, &ah);
    gpu->scan_forward(acc.d, NULL, &ad);
    snprintf(what, sizeof what, "scan delta_w + accumulate T=%d D=%d G=%d rev=%d mask=%d", T, D, G,
             reverse, masked);
    expect_close(what, &acc, TOL_MM);
    pair *all[] = {&x,  &delta, &bias,  &Alog, &xdbl,  &Dp, &z,       &mask, &out, &states, &dout,
                   &dx, &dd,    &dbias, &dA,   &dxdbl, &dD, &scratch, &dw,   &acc, &dz};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

Test(cuda_parity, selective_scan) {
    NEED_GPU();
    for (int reverse = 0; reverse < 2; reverse++) {
        check_scan(3, 200, 96, 3, 16, reverse, 1, 1); /* 32 channels per group, 4 chunks */
        check_scan(2, 70, 10, 2, 5, reverse, 0, 0);   /* 5 channels per group, N = 5 */
    }
    check_scan(2, 129, 256, 1, 16, 0, 1, 1); /* one group of 256 channels */
    check_scan(2, 1100, 80, 2, 16, 1, 1, 1); /* 40 channels per group: a full and a partial
                                                tile of 32; 18 chunks, the last partial */
    check_scan(1, 7, 33, 1, 3, 0, 1, 0);     /* shorter than one chunk's first segment */
}

static void check_lstm(int B, int T, int S, int H, int bidir, int masked) {
    char what[128];
    size_t ng = (size_t)B * T * S * 4 * H, no = (size_t)B * T * S * H, nw = (size_t)S * 4 * H * H;
    pair gx = pair_new(ng, -1.5f, 1.5f), whh = pair_new(nw, -0.5f, 0.5f), mask = mixer_mask(B, T);
    pair out = pair_new(no, 0, 1), saved = pair_new(no * 6, 0, 1), dout = pair_new(no, -1, 1);
    pair dgx = pair_new(ng, -1, 1), dw = pair_new(nw, -1, 1), scratch = pair_new(B * nw, 0, 1);
    bk_lstm_args ah = {B, T, S, H, bidir, masked ? mask.h : NULL}, ad = ah;
    ad.mask = masked ? mask.d : NULL;
    cpu->lstm_forward(out.h, saved.h, gx.h, whh.h, &ah);
    gpu->lstm_forward(out.d, saved.d, gx.d, whh.d, &ad);
    snprintf(what, sizeof what, "lstm forward T=%d S=%d H=%d bidir=%d mask=%d", T, S, H, bidir,
             masked);
    expect_close(what, &out, TOL_MM);
    snprintf(what, sizeof what, "lstm saved T=%d H=%d", T, H);
    expect_close(what, &saved, TOL_MM);
    cpu->lstm_backward(dgx.h, dw.h, scratch.h, dout.h, saved.h, whh.h, &ah);
    gpu->lstm_backward(dgx.d, dw.d, scratch.d, dout.d, saved.d, whh.d, &ad);
    snprintf(what, sizeof what, "lstm backward dgx T=%d H=%d", T, H);
    expect_close(what, &dgx, TOL_MM);
    snprintf(what, sizeof what, "lstm backward dwhh T=%d H=%d", T, H);
    expect_close(what, &dw, TOL_MM);
    pair *all[] = {&gx, &whh, &mask, &out, &saved, &dout, &dgx, &dw, &scratch};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

Test(cuda_parity, lstm) {
    NEED_GPU();
    check_lstm(4, 97, 6, 32, 1, 1); /* 3 heads of d_h = 64, both directions */
    check_lstm(2, 17, 3, 5, 0, 0);
    check_lstm(2, 50, 6, 64, 1, 1); /* bilstm_wide at d 192, 3 heads: hidden d_h = 64 */
}

/* ---- Mamba-2's SSD scan and gated RMSNorm (bimamba2) ---- */

/* x, B, C in rows of ld = H*P + 2N + 3 (three columns neither backend may
 * write); every gradient buffer starts random (the per-token ones are
 * overwritten, the parameter ones accumulated). */
static void check_ssd(int B, int T, int H, int P, int N, int Q, int reverse, int masked) {
    char what[160];
    const int ld = H * P + 2 * N + 3, q = Q > 0 ? Q : BK_SSD_CHUNK, nch = (T + q - 1) / q;
    size_t nrow = (size_t)B * T * ld, nout = (size_t)B * T * H * P, ndt = (size_t)B * T * H;
    pair xbc = pair_new(nrow, -1, 1), dt = pair_new(ndt, -2.5f, 0.5f);
    pair bias = pair_new(H, -1, 0.5f), Alog = pair_new(H, 0, 2.5f), Dp = pair_new(H, 0.5f, 1.5f);
    pair mask = mixer_mask(B, T), out = pair_new(nout, 0, 1), dout = pair_new(nout, -1, 1);
    pair states = pair_new((size_t)B * H * nch * P * N, 0, 1);
    pair scratch = pair_new(BK_SSD_SCRATCH(B, T, H, P, N, q), 0, 1);
    pair dxbc = pair_new(nrow, -1, 1), ddt = pair_new(ndt, -1, 1), dpar = pair_new(3 * H, -1, 1);
    bk_ssd_args ah = {
        .B = B, .T = T, .H = H, .P = P, .N = N, .chunk = Q, .reverse = reverse, .ld = ld};
    bk_ssd_args ad = ah;
    ah.x = xbc.h, ah.Bm = xbc.h + H * P, ah.Cm = xbc.h + H * P + N, ah.dt = dt.h;
    ah.dt_bias = bias.h, ah.A_log = Alog.h, ah.Dskip = Dp.h, ah.mask = masked ? mask.h : NULL;
    ad.x = xbc.d, ad.Bm = xbc.d + H * P, ad.Cm = xbc.d + H * P + N, ad.dt = dt.d;
    ad.dt_bias = bias.d, ad.A_log = Alog.d, ad.Dskip = Dp.d, ad.mask = masked ? mask.d : NULL;
    cpu->ssd_forward(out.h, states.h, scratch.h, &ah);
    gpu->ssd_forward(out.d, states.d, scratch.d, &ad);
    snprintf(what, sizeof what, "ssd forward T=%d H=%d P=%d N=%d chunk=%d rev=%d mask=%d", T, H, P,
             N, q, reverse, masked);
    expect_close(what, &out, TOL_MM);
    snprintf(what, sizeof what, "ssd chunk states T=%d chunk=%d rev=%d", T, q, reverse);
    expect_close(what, &states, TOL_MM);
    bk_ssd_grads gh = {dxbc.h, dxbc.h + H * P, dxbc.h + H * P + N, ddt.h,
                       dpar.h, dpar.h + H,     dpar.h + 2 * H};
    bk_ssd_grads gd = {dxbc.d, dxbc.d + H * P, dxbc.d + H * P + N, ddt.d,
                       dpar.d, dpar.d + H,     dpar.d + 2 * H};
    cpu->ssd_backward(&gh, scratch.h, dout.h, states.h, &ah);
    gpu->ssd_backward(&gd, scratch.d, dout.d, states.d, &ad);
    snprintf(what, sizeof what, "ssd backward dx dB dC T=%d H=%d P=%d N=%d rev=%d mask=%d", T, H, P,
             N, reverse, masked);
    expect_close(what, &dxbc, TOL_MM);
    snprintf(what, sizeof what, "ssd backward ddt T=%d rev=%d mask=%d", T, reverse, masked);
    expect_close(what, &ddt, TOL_MM);
    snprintf(what, sizeof what, "ssd backward d(dt_bias, A_log, D) T=%d rev=%d", T, reverse);
    expect_close(what, &dpar, TOL_MM);
    pair *all[] = {&xbc,  &dt,     &bias,    &Alog, &Dp,  &mask, &out,
                   &dout, &states, &scratch, &dxbc, &ddt, &dpar};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

Test(cuda_parity, ssd_scan) {
    NEED_GPU();
    for (int reverse = 0; reverse < 2; reverse++) {
        check_ssd(3, 150, 3, 64, 128, 0, reverse, 1); /* DeiT-Tiny's head and state, 3 chunks */
        check_ssd(2, 23, 2, 4, 5, 4, reverse, 0);     /* chunks of 4 */
    }
    check_ssd(2, 40, 1, 40, 7, 3, 0, 1); /* more heads' columns than state columns */
}

static void check_rmsnorm_gated(int N, int C) {
    size_t n = (size_t)N * C;
    pair y = pair_new(n, -1, 1), z = pair_new(n, -3, 3), w = pair_new(C, 0.5f, 1.5f);
    pair out = pair_new(n, 0, 1), rstd = pair_new(N, 0, 1), dout = pair_new(n, -1, 1);
    pair dy = pair_new(n, -1, 1), dz = pair_new(n, -1, 1), dw = pair_new(C, -1, 1);
    cpu->rmsnorm_gated_forward(out.h, rstd.h, y.h, z.h, w.h, N, C);
    gpu->rmsnorm_gated_forward(out.d, rstd.d, y.d, z.d, w.d, N, C);
    expect_close("rmsnorm_gated forward", &out, TOL_MM);
    expect_close("rmsnorm_gated rstd", &rstd, TOL_MM);
    cpu->rmsnorm_gated_backward(dy.h, dz.h, dw.h, dout.h, y.h, z.h, w.h, rstd.h, N, C);
    gpu->rmsnorm_gated_backward(dy.d, dz.d, dw.d, dout.d, y.d, z.d, w.d, rstd.d, N, C);
    expect_close("rmsnorm_gated dy", &dy, TOL_MM);
    expect_close("rmsnorm_gated dz", &dz, TOL_MM);
    expect_close("rmsnorm_gated dw", &dw, TOL_MM);
    pair *all[] = {&y, &z, &w, &out, &rstd, &dout, &dy, &dz, &dw};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

Test(cuda_parity, rmsnorm_gated) {
    NEED_GPU();
    check_rmsnorm_gated(300, 192); /* bimamba2 at d 192 */
    check_rmsnorm_gated(7, 300);   /* a row wider than the block */
}

/* ---- the step on the device (kernels/cuda/cuda_devstep.cu) ----
 * Noise, ranks, k and counts must agree exactly; float math within 1e-6
 * (CUDA's expf/log against libm's); sums in another order within 1e-12. */

static double *doubles_to_gpu(const double *h, size_t n) {
    double *d = gpu->alloc(n * sizeof(double));
    cr_assert(d, "allocation failed");
    gpu->to_device(d, h, n * sizeof(double));
    return d;
}

static void expect_stats_close(const char *what, const double *want, const double *dev,
                               double rtol) {
    double got[BK_STAT_SLOTS];
    gpu->to_host(got, dev, sizeof got);
    for (int s = 0; s < BK_STAT_SLOTS; s++)
        cr_expect(fabs(got[s] - want[s]) <= rtol * fmax(1.0, fabs(want[s])),
                  "%s: stats slot %d cpu %.17g cuda %.17g", what, s, want[s], got[s]);
}

static void expect_ints_equal(const char *what, const int *want, const int *dev, size_t n) {
    int *got = malloc((n ? n : 1) * sizeof(int));
    cr_assert(got);
    gpu->to_host(got, dev, n * sizeof(int));
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            cr_expect(0, "%s: element %zu of %zu: cpu %d cuda %d", what, i, n, want[i], got[i]);
            break;
        }
    free(got);
}

static void expect_bits_equal(const char *what, const pair *p, size_t from, size_t n) {
    float *got = malloc((n ? n : 1) * sizeof(float));
    cr_assert(got);
    gpu->to_host(got, p->d + from, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &p->h[from + i], sizeof(float)) != 0) {
            cr_expect(0, "%s: element %zu of %zu: cpu %.9g cuda %.9g (not the same bits)", what, i,
                      n, (double)p->h[from + i], (double)got[i]);
            break;
        }
    free(got);
}

Test(cuda_parity, devstep_d2h_counter) {
    NEED_GPU();
    pair a = pair_new(1000, -1, 1), n1 = pair_new(1, 0, 0);
    float host[4];
    uint64_t calls, bytes;
    gpu->d2h_reset();
    gpu->to_host(host, a.d, sizeof host);
    (void)gpu->global_norm(a.d, 1000);
    gpu->d2h_count(&calls, &bytes);
    cr_expect(calls == 2 && bytes == sizeof host + sizeof(float), "%llu calls %llu bytes",
              (unsigned long long)calls, (unsigned long long)bytes);
    gpu->grad_norm(n1.d, NULL, a.d, 1000);
    gpu->rng_gumbel(a.d, 1000, 1, 2, 3);
    gpu->sync();
    gpu->d2h_count(&calls, NULL);
    cr_expect(calls == 2, "device-side ops copied to the host: %llu calls",
              (unsigned long long)calls);
    gpu->d2h_reset();
    pair_free(&a);
    pair_free(&n1);
}

/* to_device goes through a ring of pinned slots and returns before the copy
 * is done: the caller may overwrite its buffer at once, a copy larger than
 * the ring (4 x 8 MiB) goes through in pieces, ops after it see the data,
 * and the counter counts calls and bytes. fill32 makes 1.0f and -1. */
Test(cuda_parity, devstep_pinned_upload_and_fill32) {
    NEED_GPU();
    size_t n = ((size_t)40 << 20) / sizeof(float) + 123; /* 40 MiB: more than the ring */
    float *h = malloc(n * sizeof(float)), *back = malloc(n * sizeof(float));
    float *d = gpu->alloc(n * sizeof(float)), *d2 = gpu->alloc(n * sizeof(float));
    cr_assert(h && back && d && d2);
    for (size_t i = 0; i < n; i++) h[i] = (float)(i % 1000003);
    uint64_t calls, bytes;
    gpu->h2d_reset();
    gpu->to_device(d, h, n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = -1.0f; /* at once: the device keeps the first values */
    gpu->to_device(d2, h, 3 * sizeof(float));
    gpu->h2d_count(&calls, &bytes);
    cr_expect(calls == 2 && bytes == (n + 3) * sizeof(float), "%llu calls %llu bytes",
              (unsigned long long)calls, (unsigned long long)bytes);
    gpu->scale(d, 2.0f, n);
    gpu->to_host(back, d, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        if (back[i] != 2.0f * (float)(i % 1000003)) {
            cr_expect(0, "element %zu of %zu: %g, want %g", i, n, (double)back[i],
                      2.0 * (double)(i % 1000003));
            break;
        }
    gpu->to_host(back, d2, 3 * sizeof(float));
    cr_expect(back[0] == -1.0f && back[2] == -1.0f, "the second upload: %g %g", (double)back[0],
              (double)back[2]);
    /* past bk_blocks' 2^20-block cap: the grid-stride loop covers the rest */
    size_t big = (size_t)BK_TEST_CAP_ELEMS + 77;
    float *f = gpu->alloc(big * sizeof(float));
    float *hf = malloc(big * sizeof(float));
    cr_assert(f && hf);
    gpu->fill32(f, 0x3f800000u, big - 1);
    gpu->to_host(hf, f, big * sizeof(float));
    size_t ones = 0;
    for (size_t i = 0; i < big; i++) ones += hf[i] == 1.0f;
    cr_expect(ones == big - 1 && hf[big - 1] == 0.0f, "fill32: %zu ones of %zu", ones, big - 1);
    gpu->fill32(f, 0xffffffffu, 5);
    int k[6];
    gpu->to_host(k, f, sizeof k);
    cr_expect(k[0] == -1 && k[4] == -1 && k[5] != -1, "fill32 of -1: %d %d %d", k[0], k[4], k[5]);
    gpu->release(f);
    gpu->release(d);
    gpu->release(d2);
    free(hf);
    free(h);
    free(back);
}

Test(cuda_parity, devstep_gumbel_bit_exact) {
    NEED_GPU();
    size_t n = (size_t)1 << 20;
    pair g = pair_new(n, 0, 0);
    cpu->rng_gumbel(g.h, n, 42, (7ull << 8) | 3, 12345);
    gpu->rng_gumbel(g.d, n, 42, (7ull << 8) | 3, 12345);
    expect_bits_equal("rng_gumbel", &g, 0, n);
    pair_free(&g);
}

Test(cuda_parity, devstep_grad_norm_adamw_clipped) {
    NEED_GPU();
    size_t n = 100003;
    pair g = pair_new(n, -1, 1), norm = pair_new(1, 0, 0), p = pair_new(n, -1, 1),
         mo = pair_new(n, 0, 0), v = pair_new(n, 0, 0);
    double st[BK_STAT_SLOTS] = {0};
    double *dst = doubles_to_gpu(st, BK_STAT_SLOTS);
    bk_adamw h = {1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f};
    for (int t = 1; t <= 3; t++) {
        cpu->grad_norm(norm.h, st, g.h, n);
        gpu->grad_norm(norm.d, dst, g.d, n);
        expect_close("grad_norm", &norm, 0, 1e-6);
        /* the same norm on both, so the updates can be compared tightly */
        pair_upload(&norm);
        cpu->adamw_clipped(p.h, g.h, mo.h, v.h, n, &h, t, norm.h, 100.0f);
        gpu->adamw_clipped(p.d, g.d, mo.d, v.d, n, &h, t, norm.d, 100.0f);
    }
    expect_stats_close("grad_norm stats", st, dst, 1e-6);
    expect_close("adamw_clipped p", &p, 1e-6, 1e-6);
    expect_close("adamw_clipped m", &mo, 1e-6, 1e-6);
    expect_close("adamw_clipped v", &v, 1e-6, 1e-6);
    /* a non-finite norm skips the update */
    norm.h[0] = NAN;
    pair_upload(&norm);
    gpu->adamw_clipped(p.d, g.d, mo.d, v.d, n, &h, 4, norm.d, 1.0f);
    expect_close("adamw_clipped skipped p", &p, 1e-6, 1e-6);
    gpu->release(dst);
    pair *all[] = {&g, &norm, &p, &mo, &v};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

Test(cuda_parity, devstep_crossentropy_stats) {
    NEED_GPU();
    int shapes[2][2] = {{517, 1003}, {16, 50257}};
    for (int c = 0; c < 2; c++) {
        int N = shapes[c][0], V = shapes[c][1];
        pair lg = pair_new((size_t)N * V, -3, 3), probs = pair_new((size_t)N * V, 0, 0),
             losses = pair_new((size_t)N, 0, 0);
        for (size_t i = 0; i < lg.n; i++) lg.h[i] = roundf(lg.h[i] * 2); /* ties */
        int *tg = malloc(N * sizeof(int));
        for (int r = 0; r < N; r++) {
            tg[r] = r % 13 == 0             ? -1
                    : r % 17 == 0 || r == 5 ? V + r
                    : r % 19 == 0           ? -7
                                            : (r * 31) % V;
            if (r % 3 == 0 && tg[r] >= 0 && tg[r] < V) lg.h[(size_t)r * V + tg[r]] = 9;
        }
        pair_upload(&lg);
        int *dtg = ints_to_gpu(tg, (size_t)N);
        cpu->crossentropy_forward(losses.h, probs.h, lg.h, tg, N, V);
        gpu->crossentropy_forward(losses.d, probs.d, lg.d, dtg, N, V);
        expect_close("crossentropy_forward, bad targets", &losses, TOL_MM);
        pair_upload(&losses); /* the same losses: only the summation order differs */
        double st[BK_STAT_SLOTS] = {0};
        double *dst = doubles_to_gpu(st, BK_STAT_SLOTS);
        cpu->crossentropy_stats(st, lg.h, losses.h, tg, N, V);
        gpu->crossentropy_stats(dst, lg.d, losses.d, dtg, N, V);
        expect_stats_close("crossentropy_stats", st, dst, 1e-12);
        pair seed = pair_new((size_t)N, -1, 1);
        cpu->crossentropy_dlosses(seed.h, tg, 0.125f, N, V);
        gpu->crossentropy_dlosses(seed.d, dtg, 0.125f, N, V);
        expect_bits_equal("crossentropy_dlosses", &seed, 0, (size_t)N);
        pair_free(&seed);
        cr_expect(st[BK_STAT_BAD_TARGETS] > 0 && st[BK_STAT_CORRECT] > 0, "test data");
        gpu->release(dst);
        gpu->release(dtg);
        free(tg);
        pair_free(&lg), pair_free(&probs), pair_free(&losses);
    }
}

Test(cuda_parity, devstep_gate) {
    NEED_GPU();
    struct {
        int B, H;
        float sigma;
        int coarse;
    } cases[] = {{64, 12, 0.5f, 0}, {5, 256, 1.0f, 0}, {3, 1, 1.0f, 0}, {17, 16, 0.0f, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int B = cases[c].B, H = cases[c].H;
        size_t BH = (size_t)B * H, SV = BK_GATE_SAVE_FLOATS(B, H);
        pair f = pair_new((size_t)B, -4, 4), z = pair_new(BH, -2, 2), dg = pair_new(BH, -1, 1);
        if (cases[c].coarse) {
            for (size_t i = 0; i < BH; i++) z.h[i] = roundf(z.h[i] * 2);
            pair_upload(&z);
        }
        pair gate = pair_new(BH, 0, 0), save = pair_new(SV, 0, 0), df = pair_new((size_t)B, -1, 1),
             dz = pair_new(BH, -1, 1), s = pair_new((size_t)B, 0, 0);
        double cost[64], st[BK_STAT_SLOTS] = {0};
        for (int b = 0; b < B; b++) cost[b] = 100.0 + b;
        double *dcost = doubles_to_gpu(cost, (size_t)B), *dst = doubles_to_gpu(st, BK_STAT_SLOTS);
        int *k = calloc((size_t)B, sizeof(int)), *heads = calloc(BH, sizeof(int));
        int *dk = ints_to_gpu(k, (size_t)B), *dheads = ints_to_gpu(heads, BH);
        bk_gate_args a = {.B = B,
                          .H = H,
                          .tau = 0.9f,
                          .sigma = cases[c].sigma,
                          .tau_r = 0.5f,
                          .s_min = 0.2f,
                          .s_max = 0.7f,
                          .lambda_budget = 1.0f,
                          .lambda_entropy = 0.05f,
                          .progress = 0.8f,
                          .norm = 1.0 / (B * 4.0),
                          .seed = 77,
                          .step = 1234,
                          .row_offset = 64,
                          .layer = 2,
                          .exact_gradient = (int)(c & 1)};
        for (int exact = 0; exact < 2; exact++) {
            a.exact_gradient = exact;
            a.head_cost = cost;
            cpu->gate_forward(gate.h, k, save.h, st, f.h, z.h, &a);
            a.head_cost = dcost;
            gpu->gate_forward(gate.d, dk, save.d, dst, f.d, z.d, &a);
            cpu->gate_backward(df.h, dz.h, dg.h, save.h, &a);
            gpu->gate_backward(df.d, dz.d, dg.d, save.d, &a);
        }
        expect_close("gate", &gate, 1e-6, 1e-6);
        expect_ints_equal("gate k", k, dk, (size_t)B);
        expect_bits_equal("gate zn (noise)", &save, 4 * (size_t)B, BH);
        expect_bits_equal("gate ranks", &save, 4 * (size_t)B + 3 * BH, BH);
        expect_close("gate saved state", &save, 1e-6, 1e-6);
        expect_stats_close("gate stats", st, dst, 1e-6);
        expect_close("gate df", &df, 1e-5, 1e-5);
        expect_close("gate dz", &dz, 1e-5, 1e-5);
        for (int force = 0; force <= 3; force += 3) {
            cpu->gate_infer(s.h, k, heads, st, f.h, z.h, cost, B, H, force);
            gpu->gate_infer(s.d, dk, dheads, dst, f.d, z.d, dcost, B, H, force);
            expect_close("gate_infer s", &s, 1e-6, 1e-6);
            expect_ints_equal("gate_infer k", k, dk, (size_t)B);
            expect_ints_equal("gate_infer heads", heads, dheads, BH);
        }
        expect_stats_close("gate_infer stats", st, dst, 1e-6);
        gpu->release(dcost), gpu->release(dst), gpu->release(dk), gpu->release(dheads);
        free(k), free(heads);
        pair *all[] = {&f, &z, &dg, &gate, &save, &df, &dz, &s};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
    }
}

/* A-ViT: three layers of halting with the loss and its backward, the ACT
 * output and its backward, and the distillation alignment (both forms);
 * thresholds are tested away from ties by the score spread. B x T from one
 * block's worth of tokens to many (the grid's partials). */
static void halting_case(int B, int T, int prior, int mean_h) {
    int C = 8, L = 3;
    size_t BT = (size_t)B * T;
    pair t[3], h[3], mask[4];
    pair cum = pair_const(BT, 0), rem = pair_const(BT, 1), dt = pair_const(BT * C, 0);
    mask[0] = pair_const(BT, 1);
    int *at = malloc(BT * sizeof(int)), *at_d;
    for (size_t i = 0; i < BT; i++) at[i] = -1;
    at_d = ints_to_gpu(at, BT);
    double hs[BK_HALT_STATS(3)] = {0}, *hs_d = doubles_to_gpu(hs, BK_HALT_STATS(3));
    for (int l = 0; l < L; l++) {
        t[l] = pair_new(BT * C, -0.6f, 0.6f);
        h[l] = pair_const(BT, 0);
        mask[l + 1] = pair_const(BT, 0);
        bk_halt_args a = {B, T, C, l, L, 10, 0.5f, 0.01f, prior, mean_h};
        cpu->halt_forward(h[l].h, mask[l + 1].h, cum.h, rem.h, at, hs, t[l].h, mask[l].h, &a);
        gpu->halt_forward(h[l].d, mask[l + 1].d, cum.d, rem.d, at_d, hs_d, t[l].d, mask[l].d, &a);
        expect_close("halt h", &h[l], TOL_EW);
        expect_close("halt mask", &mask[l + 1], 0, 0);
    }
    expect_ints_equal("halt at", at, at_d, BT);
    expect_close("halt rem", &rem, TOL_EW);
    double st[BK_STAT_SLOTS] = {0}, *st_d = doubles_to_gpu(st, BK_STAT_SLOTS);
    pair dldp = pair_const((size_t)L, 0);
    bk_halt_loss_args la = {L, (double)B * (T - 1), 1.2f, 1, 0.01f, 0.3f, 20, 21, 22, prior};
    cpu->halt_loss(st, dldp.h, hs, &la);
    gpu->halt_loss(st_d, dldp.d, hs_d, &la);
    expect_stats_close("halt loss", st, st_d, 1e-9);
    expect_close("halt dldp", &dldp, TOL_EW);
    /* the ACT output of the three layers' outputs t[l], and its backward */
    pair out = pair_const(BT * C, 0), dout = pair_new(BT * C, -1, 1);
    for (int l = 0; l < L; l++) {
        bk_halt_args a = {B, T, C, l, L, 10, 0.5f, 0.01f, prior, mean_h};
        cpu->halt_act_forward(out.h, t[l].h, h[l].h, at, rem.h, &a);
        gpu->halt_act_forward(out.d, t[l].d, h[l].d, at_d, rem.d, &a);
    }
    expect_close("halt act output", &out, TOL_EW);
    for (int l = L - 1; l >= 0; l--) {
        bk_halt_args a = {B, T, C, l, L, 10, 0.5f, 0.01f, prior, mean_h};
        cpu->halt_act_backward(dt.h, dout.h, t[l].h, t[L - 1].h, h[l].h, at, rem.h, &a);
        gpu->halt_act_backward(dt.d, dout.d, t[l].d, t[L - 1].d, h[l].d, at_d, rem.d, &a);
        cpu->halt_backward(dt.h, h[l].h, at, dldp.h, -1e-4f, &a);
        gpu->halt_backward(dt.d, h[l].d, at_d, dldp.d, -1e-4f, &a);
    }
    expect_close("halt backward", &dt, TOL_EW);
    double ha = 0, *ha_d = doubles_to_gpu(&ha, 1);
    bk_halt_args a1 = {B, T, C, 1, L, 10, 0.5f, 0.01f, prior, mean_h};
    cpu->halt_align(dt.h, &ha, 0, t[1].h, h[1].h, cum.h, mask[1].h, 0.3f, &a1);
    gpu->halt_align(dt.d, ha_d, 0, t[1].d, h[1].d, cum.d, mask[1].d, 0.3f, &a1);
    expect_close("halt align", &dt, TOL_EW);
    double ha_got = 0;
    gpu->to_host(&ha_got, ha_d, sizeof ha_got);
    cr_expect(fabs(ha_got - ha) <= 1e-6 * fmax(1, fabs(ha)), "halt align loss %g vs %g", ha,
              ha_got);
    gpu->release(ha_d);
    for (int l = 0; l < L; l++) pair_free(&h[l]), pair_free(&t[l]);
    for (int l = 0; l <= L; l++) pair_free(&mask[l]);
    pair_free(&cum), pair_free(&rem), pair_free(&dt), pair_free(&dldp);
    pair_free(&out), pair_free(&dout);
    gpu->release(at_d), gpu->release(hs_d), gpu->release(st_d);
    free(at);
}

Test(cuda_parity, avit_halting) {
    NEED_GPU();
    int B = 3, T = 33, C = 8;
    size_t BT = (size_t)B * T;
    pair x = pair_new(BT * C, -1, 1), s = pair_new(BT, 0, 1), y = pair_const(BT * C, 0);
    cpu->rowscale(y.h, x.h, s.h, (int)BT, C);
    gpu->rowscale(y.d, x.d, s.d, (int)BT, C);
    expect_close("rowscale", &y, TOL_EW);
    pair_free(&x), pair_free(&s), pair_free(&y);
    halting_case(3, 33, BK_PRIOR_PAPER, 0);   /* the defaults: paper prior, keep alignment */
    halting_case(3, 33, BK_PRIOR_SPEND, 1);   /* the former forms */
    halting_case(3, 33, BK_PRIOR_NVLABS, 0);  /* halted tokens scoring a zeroed row */
    halting_case(64, 197, BK_PRIOR_PAPER, 0); /* 12608 tokens: 50 blocks' partials */
}

/* Criterion's main, after the GPU probe: 77 (skipped) without a GPU. */
int main(int argc, char *argv[]) {
    const char *why = NULL;
    if (!bk_cuda(&why)) {
        printf("test_cuda_parity: SKIPPED, no GPU: %s\n", why ? why : "unknown reason");
        return 77;
    }
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true)) result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return result;
}
