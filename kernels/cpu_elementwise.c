/* Optimised CPU backend: elementwise ops, activations, embeddings and
 * positional add. Contracts in kernels/bk.h; plain references of the
 * activations in tests/ref/ref_ops.h. All are memory bound: one pass, OpenMP
 * over elements once there is enough work to pay for waking the threads.
 * Backward functions accumulate (+=). */
#include <math.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kernels/cpu_math.h"
#include "kernels/cpu_ops.h"

/* Below this many elements the OpenMP fork/join costs more than the loop. */
#define EW_PAR_MIN ((size_t)1 << 15)

void bk_cpu_add(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= EW_PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void bk_cpu_axpy(float *y, const float *x, float alpha, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= EW_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

void bk_cpu_scale(float *x, float alpha, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= EW_PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= alpha;
}

/* GELU, tanh form: 0.5 x (1 + tanh(s (x + 0.044715 x^3))), s = sqrt(2/pi). */
#define GELU_S 0.7978845608028654f
#define GELU_C 0.044715f

/* tanh through bk_tanh_fast (kernels/cpu_math.h): vectorised, ~2e-7 absolute
 * error, which GELU multiplies by x/2. */
#define tanh_fast bk_tanh_fast

#if defined(__AVX512F__)
/* GELU on 16 lanes: the same formula as bk_vtanh (u clamped to [-10, 10],
 * tanh = 1 - 2/(e^{2u} + 1), e^r by the degree-6 polynomial), with 2^n by
 * vscalefps and the division by rcp14 and one Newton step (relative error
 * ~1e-7, as the division's rounding): the division was most of GELU's time. */
static inline __m512 gelu16_tanh(__m512 x) {
    __m512 u = _mm512_mul_ps(
        _mm512_set1_ps(GELU_S),
        _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(GELU_C), x), _mm512_mul_ps(x, x), x));
    u = _mm512_min_ps(_mm512_max_ps(u, _mm512_set1_ps(-10.0f)), _mm512_set1_ps(10.0f));
    __m512 y = _mm512_add_ps(u, u);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(y, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), y);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_fmadd_ps(r, _mm512_set1_ps(1.0f / 720.0f), _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512 d = _mm512_add_ps(_mm512_scalef_ps(p, n), _mm512_set1_ps(1.0f));
    __m512 q = _mm512_rcp14_ps(d);
    q = _mm512_mul_ps(q, _mm512_fnmadd_ps(d, q, _mm512_set1_ps(2.0f)));
    return _mm512_fnmadd_ps(_mm512_set1_ps(2.0f), q, _mm512_set1_ps(1.0f));
}

static void gelu16_forward(float *out, const float *inp, size_t nv) {
#pragma omp parallel for schedule(static) if (nv * 16 >= EW_PAR_MIN / 8)
    for (size_t j = 0; j < nv; j++) {
        __m512 x = _mm512_loadu_ps(inp + j * 16);
        __m512 hx = _mm512_mul_ps(_mm512_set1_ps(0.5f), x);
        _mm512_storeu_ps(out + j * 16, _mm512_fmadd_ps(hx, gelu16_tanh(x), hx));
    }
}

static void gelu16_backward(float *dinp, const float *inp, const float *dout, size_t nv) {
#pragma omp parallel for schedule(static) if (nv * 16 >= EW_PAR_MIN / 8)
    for (size_t j = 0; j < nv; j++) {
        const size_t i = j * 16;
        __m512 x = _mm512_loadu_ps(inp + i), th = gelu16_tanh(x);
        __m512 x2 = _mm512_mul_ps(x, x);
        __m512 dth =
            _mm512_mul_ps(_mm512_set1_ps(GELU_S),
                          _mm512_fmadd_ps(_mm512_set1_ps(3.0f * GELU_C), x2, _mm512_set1_ps(1.0f)));
        __m512 half = _mm512_set1_ps(0.5f);
        __m512 a = _mm512_fmadd_ps(half, th, half);                    /* 0.5 (1 + th) */
        __m512 sech2 = _mm512_fnmadd_ps(th, th, _mm512_set1_ps(1.0f)); /* 1 - th^2 */
        __m512 local = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(half, x), sech2), dth, a);
        /* |x| > 10: exactly 1 or 0 (and no 0 * inf from x^2) */
        __mmask16 big = _mm512_cmp_ps_mask(x, _mm512_set1_ps(10.0f), _CMP_GT_OQ);
        __mmask16 small = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-10.0f), _CMP_LT_OQ);
        local = _mm512_mask_mov_ps(local, big, _mm512_set1_ps(1.0f));
        local = _mm512_mask_mov_ps(local, small, _mm512_setzero_ps());
        _mm512_storeu_ps(
            dinp + i, _mm512_fmadd_ps(local, _mm512_loadu_ps(dout + i), _mm512_loadu_ps(dinp + i)));
    }
}
#endif

void bk_cpu_gelu_forward(float *out, const float *inp, size_t n) {
    size_t done = 0;
#if defined(__AVX512F__)
    if (!bk_cpu_portable()) {
        gelu16_forward(out, inp, n / 16);
        done = n / 16 * 16;
    }
#endif
    size_t nv = (n - done) / VLEN;
    const float *in0 = inp + done;
    float *out0 = out + done;
#pragma omp parallel for schedule(static) if (n - done >= EW_PAR_MIN / 8)
    for (size_t j = 0; j < nv; j++) {
        vfloat x = vload(in0 + j * VLEN);
        vstore(out0 + j * VLEN, 0.5f * x * (1.0f + bk_vtanh(GELU_S * (x + GELU_C * x * x * x))));
    }
    for (size_t i = done + nv * VLEN; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanh_fast(GELU_S * (x + GELU_C * x * x * x)));
    }
}

/* d/dx of the tanh-form GELU; |x| > 10 is saturated (derivative exactly 1 or
 * 0), which also keeps x^2 from overflowing into 0 * inf. */
static inline vfloat gelu_vgrad(vfloat x) {
    vfloat th = bk_vtanh(GELU_S * (x + GELU_C * x * x * x));
    vfloat dth = GELU_S * (1.0f + 3.0f * GELU_C * x * x);
    vfloat local = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * dth;
    vfloat sat = vselect(x > 0.0f, vsplat(1.0f), vsplat(0.0f));
    return vselect(x > 10.0f, sat, vselect(x < -10.0f, sat, local));
}

void bk_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    size_t done = 0;
#if defined(__AVX512F__)
    if (!bk_cpu_portable()) {
        gelu16_backward(dinp, inp, dout, n / 16);
        done = n / 16 * 16;
    }
#endif
    size_t nv = (n - done) / VLEN;
#pragma omp parallel for schedule(static) if (n - done >= EW_PAR_MIN / 8)
    for (size_t j = 0; j < nv; j++) {
        size_t i = done + j * VLEN;
        vstore(dinp + i, vload(dinp + i) + gelu_vgrad(vload(inp + i)) * vload(dout + i));
    }
    for (size_t i = done + nv * VLEN; i < n; i++)
        dinp[i] += gelu_vgrad(vsplat(inp[i]))[0] * dout[i];
}

/* 1/(1+e^-x) never produces NaN: e^-x overflows to inf for very negative x
 * and the quotient is then 0. */
static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

void bk_cpu_silu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for schedule(static) if (n >= EW_PAR_MIN / 8)
    for (size_t i = 0; i < n; i++) out[i] = inp[i] * sigmoidf(inp[i]);
}

void bk_cpu_silu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp parallel for schedule(static) if (n >= EW_PAR_MIN / 8)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], s = sigmoidf(x);
        dinp[i] += s * (1.0f + x * (1.0f - s)) * dout[i];
    }
}

void bk_cpu_sigmoid_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for schedule(static) if (n >= EW_PAR_MIN / 8)
    for (size_t i = 0; i < n; i++) out[i] = sigmoidf(inp[i]);
}

void bk_cpu_sigmoid_backward(float *dinp, const float *out, const float *dout, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= EW_PAR_MIN)
    for (size_t i = 0; i < n; i++) dinp[i] += out[i] * (1.0f - out[i]) * dout[i];
}

/* softplus(x) = max(x, 0) + log1p(e^-|x|): no overflow for large x, no loss
 * of the tiny value for very negative x. */
void bk_cpu_softplus_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for schedule(static) if (n >= EW_PAR_MIN / 8)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
    }
}

void bk_cpu_softplus_backward(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp parallel for schedule(static) if (n >= EW_PAR_MIN / 8)
    for (size_t i = 0; i < n; i++) dinp[i] += sigmoidf(inp[i]) * dout[i];
}

/* ---- embeddings ---- */

/* Rows of fewer than this many floats are copied without threads. */
#define EMB_PAR_MIN (1 << 14)

/* out[N,C] = table[idx[n], :] */
void bk_cpu_embedding_forward(float *out, const int *idx, const float *table, int N, int C) {
#pragma omp parallel for schedule(static) if ((long long)N * C >= EMB_PAR_MIN)
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * C, table + (size_t)idx[n] * C, (size_t)C * sizeof(float));
}

/* Channels per task in the backward: 64 floats = 4 cache lines per row, so a
 * task streams over rows touching whole lines, and no two tasks share a line. */
#define EMB_CHUNK 64

/* dtable[idx[n], :] += dout[n, :]. Rows may repeat an index, so threads split
 * the channels, never the rows: each dtable element is owned by one thread
 * and summed in row order, hence no race and a result that does not depend on
 * the thread count. */
void bk_cpu_embedding_backward(float *dtable, const float *dout, const int *idx, int N, int C) {
    int nchunks = (C + EMB_CHUNK - 1) / EMB_CHUNK;
#pragma omp parallel for schedule(static) if ((long long)N * C >= EMB_PAR_MIN && nchunks > 1)
    for (int k = 0; k < nchunks; k++) {
        int c0 = k * EMB_CHUNK, c1 = c0 + EMB_CHUNK < C ? c0 + EMB_CHUNK : C;
        for (int n = 0; n < N; n++) {
            float *dst = dtable + (size_t)idx[n] * C;
            const float *src = dout + (size_t)n * C;
#pragma omp simd
            for (int c = c0; c < c1; c++) dst[c] += src[c];
        }
    }
}

/* out[B,T,C] = inp[B,T,C] + pos[T,C] */
void bk_cpu_posadd_forward(float *out, const float *inp, const float *pos, int B, int T, int C) {
    long long rows = (long long)B * T;
#pragma omp parallel for schedule(static) if (rows * C >= (long long)EW_PAR_MIN)
    for (long long r = 0; r < rows; r++) {
        const float *x = inp + r * C, *p = pos + (r % T) * C;
        float *o = out + r * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = x[c] + p[c];
    }
}

/* dinp += dout (nullable); dpos[t,c] += sum_b dout[b,t,c], summed in b order
 * per element so it is deterministic. */
void bk_cpu_posadd_backward(float *dinp, float *dpos, const float *dout, int B, int T, int C) {
    size_t total = (size_t)B * T * C, tc = (size_t)T * C;
    if (dinp) bk_cpu_axpy(dinp, dout, 1.0f, total);
    if (!dpos) return;
#pragma omp parallel for schedule(static) if (total >= EW_PAR_MIN)
    for (int t = 0; t < T; t++) {
        float *dp = dpos + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            const float *d = dout + b * tc + (size_t)t * C;
#pragma omp simd
            for (int c = 0; c < C; c++) dp[c] += d[c];
        }
    }
}
