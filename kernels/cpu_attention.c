/* CPU multi-head attention: full (key mask, causal, per-head gates), its
 * backward, and the BudgetFormer inference path that computes only the
 * selected heads. One (batch, head) pair is one OpenMP task; a task owns the
 * head's columns of out/dqkv, so there are no write races and no reductions
 * across threads. Loops are written so the compiler vectorises them over the
 * head dimension. */
/* ISO C mode (-std=c11) turns off a*b+c -> fma contraction in GCC; the dot
 * products here want it (2x the arithmetic rate, and one rounding instead of two). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu_ops.h"

/* Short vectors through GCC's vector extension: the compiler keeps the
 * accumulators in registers and emits FMAs on any x86-64 level (SSE pairs
 * without -march=native). */
#ifdef __AVX__
#define VLEN 8
#else
#define VLEN 4 /* SSE: 32-byte vectors would change the ABI of these helpers */
#endif
typedef float vfloat __attribute__((vector_size(VLEN * sizeof(float))));

static inline vfloat vload(const float *p) {
    vfloat v;
    memcpy(&v, p, sizeof v);
    return v;
}

typedef int32_t vint __attribute__((vector_size(VLEN * sizeof(int32_t))));

static inline float vsum(vfloat v) { /* a tree, not a chain of dependent adds */
#if VLEN == 8
    float a0 = v[0] + v[4], a1 = v[1] + v[5], a2 = v[2] + v[6], a3 = v[3] + v[7];
#else
    float a0 = v[0], a1 = v[1], a2 = v[2], a3 = v[3];
#endif
    return (a0 + a2) + (a1 + a3);
}

static inline float fmax_fast(float a, float b) { return a > b ? a : b; }

/* e^x for x <= 0 (softmax after the row max is subtracted), vectorisable:
 * x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6 Taylor polynomial (relative
 * error ~1e-7), 2^n built in the exponent bits. Returns exactly 0 for
 * x < -87 (and -inf), so masked scores give probability exactly 0. */
static inline float softmax_exp(float x) {
    float xc = x < -87.0f ? -87.0f : x;
    float n = floorf(xc * 1.44269504f + 0.5f);
    float r = xc - n * 0.693145752f; /* ln2 split in two for accuracy */
    r = r - n * 1.42860677e-6f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union { int32_t i; float f; } scale = {.i = ((int32_t)n + 127) << 23};
    return x < -87.0f ? 0.0f : p * scale.f;
}

/* softmax_exp on VLEN lanes at once, x <= 0 (t - 0.5 truncated rounds t <= 0.5 to nearest). */
static inline vfloat softmax_vexp(vfloat x) {
    const vfloat lim = (vfloat){0} - 87.0f;
    vint low = x < lim; /* -1 in lanes that underflow to exactly 0 */
    vfloat xc = (vfloat)(((vint)x & ~low) | ((vint)lim & low));
    vint ni = __builtin_convertvector(xc * 1.44269504f - 0.5f, vint);
    vfloat n = __builtin_convertvector(ni, vfloat);
    vfloat r = xc - n * 0.693145752f;
    r = r - n * 1.42860677e-6f;
    vfloat p = r * (1.0f / 720.0f) + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    vfloat scale = (vfloat)((ni + 127) << 23);
    return (vfloat)((vint)(p * scale) & ~low);
}

/* acc[r] += <a, b + r*ldb> over n elements, for the 4 rows r of b. */
static inline void dot1x4(float acc[4], const float *a, const float *b, size_t ldb, int n) {
    const float *b0 = b, *b1 = b + ldb, *b2 = b + 2 * ldb, *b3 = b + 3 * ldb;
    vfloat c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
    int i = 0;
    for (; i + VLEN <= n; i += VLEN) {
        vfloat x = vload(a + i);
        c0 += x * vload(b0 + i);
        c1 += x * vload(b1 + i);
        c2 += x * vload(b2 + i);
        c3 += x * vload(b3 + i);
    }
    float s0 = vsum(c0), s1 = vsum(c1), s2 = vsum(c2), s3 = vsum(c3);
    for (; i < n; i++) {
        s0 += a[i] * b0[i];
        s1 += a[i] * b1[i];
        s2 += a[i] * b2[i];
        s3 += a[i] * b3[i];
    }
    acc[0] += s0;
    acc[1] += s1;
    acc[2] += s2;
    acc[3] += s3;
}

/* acc[m][r] += <a + m*lda, b + r*ldb> for 2 rows of a and 4 rows of b. */
static inline void dot2x4(float acc[2][4], const float *a, size_t lda, const float *b, size_t ldb,
                          int n) {
    const float *a0 = a, *a1 = a + lda;
    const float *b0 = b, *b1 = b + ldb, *b2 = b + 2 * ldb, *b3 = b + 3 * ldb;
    vfloat c00 = {0}, c01 = {0}, c02 = {0}, c03 = {0}, c10 = {0}, c11 = {0}, c12 = {0}, c13 = {0};
    int i = 0;
    for (; i + VLEN <= n; i += VLEN) {
        vfloat x0 = vload(a0 + i), x1 = vload(a1 + i), y;
        y = vload(b0 + i);
        c00 += x0 * y;
        c10 += x1 * y;
        y = vload(b1 + i);
        c01 += x0 * y;
        c11 += x1 * y;
        y = vload(b2 + i);
        c02 += x0 * y;
        c12 += x1 * y;
        y = vload(b3 + i);
        c03 += x0 * y;
        c13 += x1 * y;
    }
    float s[2][4] = {{vsum(c00), vsum(c01), vsum(c02), vsum(c03)},
                     {vsum(c10), vsum(c11), vsum(c12), vsum(c13)}};
    for (; i < n; i++) {
        s[0][0] += a0[i] * b0[i];
        s[0][1] += a0[i] * b1[i];
        s[0][2] += a0[i] * b2[i];
        s[0][3] += a0[i] * b3[i];
        s[1][0] += a1[i] * b0[i];
        s[1][1] += a1[i] * b1[i];
        s[1][2] += a1[i] * b2[i];
        s[1][3] += a1[i] * b3[i];
    }
    for (int m = 0; m < 2; m++)
        for (int r = 0; r < 4; r++) acc[m][r] += s[m][r];
}

static inline float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* s[u] = scale * <a, b_u> for u < nb, b_u = b + u*ldb. */
static void dots(float *s, const float *a, const float *b, size_t ldb, int nb, int n, float scale) {
    int u = 0;
    for (; u + 4 <= nb; u += 4) {
        float acc[4] = {0};
        dot1x4(acc, a, b + (size_t)u * ldb, ldb, n);
        for (int r = 0; r < 4; r++) s[u + r] = scale * acc[r];
    }
    for (; u < nb; u++) s[u] = scale * dot(a, b + (size_t)u * ldb, n);
}

/* o[j] (+)= sum_{u < nb} p[u] * v[u*ldv + j], j < n; overwrites when !accumulate. */
static void weighted_rows(float *o, const float *p, const float *v, size_t ldv, int nb, int n,
                          int accumulate) {
    if (!accumulate)
        for (int j = 0; j < n; j++) o[j] = 0.0f;
    int u = 0;
    for (; u + 4 <= nb; u += 4) {
        const float *v0 = v + (size_t)u * ldv, *v1 = v0 + ldv, *v2 = v1 + ldv, *v3 = v2 + ldv;
        float p0 = p[u], p1 = p[u + 1], p2 = p[u + 2], p3 = p[u + 3];
#pragma omp simd
        for (int j = 0; j < n; j++) o[j] += p0 * v0[j] + p1 * v1[j] + p2 * v2[j] + p3 * v3[j];
    }
    for (; u < nb; u++) {
        const float *vu = v + (size_t)u * ldv;
        float pu = p[u];
#pragma omp simd
        for (int j = 0; j < n; j++) o[j] += pu * vu[j];
    }
}

/* One head, forward. q, k, v: [T, HS] with row stride ld; att: [T, T]
 * probabilities (overwritten); out: [T, HS] with row stride ldo, overwritten
 * with g * P v. mask: this sample's [T] key mask or NULL. */
static void head_forward(float *out, size_t ldo, float *att, const float *q, const float *k,
                         const float *v, size_t ld, int T, int HS, int causal, const float *mask,
                         float g) {
    const float scale = 1.0f / sqrtf((float)HS);
    for (int t = 0; t < T; t++) {
        float *row = att + (size_t)t * T;
        float *o = out + (size_t)t * ldo;
        int nk = causal ? t + 1 : T;
        dots(row, q + (size_t)t * ld, k, ld, nk, HS, scale);
        float mx = -INFINITY;
        if (mask) {
#pragma omp simd reduction(max : mx)
            for (int u = 0; u < nk; u++) {
                float s = mask[u] != 0.0f ? row[u] : -INFINITY;
                row[u] = s;
                mx = fmax_fast(mx, s);
            }
        } else {
#pragma omp simd reduction(max : mx)
            for (int u = 0; u < nk; u++) mx = fmax_fast(mx, row[u]);
        }
        if (mx == -INFINITY) { /* no visible key: the row attends to nothing */
            memset(row, 0, (size_t)T * sizeof(float));
            memset(o, 0, (size_t)HS * sizeof(float));
            continue;
        }
        vfloat vs = {0};
        int u = 0;
        for (; u + VLEN <= nk; u += VLEN) {
            vfloat e = softmax_vexp(vload(row + u) - mx);
            memcpy(row + u, &e, sizeof e);
            vs += e;
        }
        float sum = vsum(vs);
        for (; u < nk; u++) {
            float e = softmax_exp(row[u] - mx);
            row[u] = e;
            sum += e;
        }
        float inv = 1.0f / sum;
#pragma omp simd
        for (int u = 0; u < nk; u++) row[u] *= inv;
        if (nk < T) memset(row + nk, 0, (size_t)(T - nk) * sizeof(float));
        weighted_rows(o, row, v, ld, nk, HS, 0);
        if (g != 1.0f)
            for (int j = 0; j < HS; j++) o[j] *= g;
    }
}

void bk_cpu_attention_forward(float *out, float *att, const float *qkv, const bk_attn_args *a) {
    const int B = a->B, T = a->T, C = a->C, NH = a->NH, HS = C / NH;
    const size_t ld = 3 * (size_t)C;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * ld + (size_t)h * HS;
        float g = a->gate ? a->gate[bh] : 1.0f;
        head_forward(out + (size_t)b * T * C + (size_t)h * HS, (size_t)C,
                     att + (size_t)bh * T * T, q, q + C, q + 2 * C, ld, T, HS, a->causal,
                     a->mask ? a->mask + (size_t)b * T : NULL, g);
    }
}

/* One head, backward. Row t of P gives, with dy = dout_t and dP_u = g <dy, v_u>:
 *   dS_u = P_u (dP_u - sum_u' P_u' dP_u') / sqrt(HS)
 *   dq_t += sum_u dS_u k_u,  dk_u += dS_u q_t,  dv_u += g P_u dy
 * and the gate gradient sum_u P_u <dy, v_u> = <dy, o_t> (o ungated).
 * tmp: T floats. Returns this head's dgate contribution. */
static float head_backward(float *dq, float *dk, float *dv, const float *dout, size_t ldo,
                           const float *att, const float *q, const float *k, const float *v,
                           size_t ld, int T, int HS, int causal, float g, float *tmp) {
    const float scale = 1.0f / sqrtf((float)HS);
    float dgate = 0.0f;
    for (int t = 0; t < T; t++) {
        const float *p = att + (size_t)t * T;
        const float *dy = dout + (size_t)t * ldo;
        const float *qt = q + (size_t)t * ld;
        int nk = causal ? t + 1 : T;
        dots(tmp, dy, v, ld, nk, HS, 1.0f); /* <dy, v_u> */
        float pd = 0.0f;
#pragma omp simd reduction(+ : pd)
        for (int u = 0; u < nk; u++) pd += p[u] * tmp[u];
        dgate += pd;
        float r = g * pd;
#pragma omp simd
        for (int u = 0; u < nk; u++) tmp[u] = p[u] * (g * tmp[u] - r) * scale;
        weighted_rows(dq + (size_t)t * ld, tmp, k, ld, nk, HS, 1);
        for (int u = 0; u < nk; u++) {
            float ds = tmp[u], gp = g * p[u];
            if (ds == 0.0f && gp == 0.0f) continue; /* masked key */
            float *dku = dk + (size_t)u * ld, *dvu = dv + (size_t)u * ld;
#pragma omp simd
            for (int j = 0; j < HS; j++) {
                dku[j] += ds * qt[j];
                dvu[j] += gp * dy[j];
            }
        }
    }
    return dgate;
}

void bk_cpu_attention_backward(float *dqkv, float *dgate, float *scratch, const float *dout,
                               const float *qkv, const float *att, const bk_attn_args *a) {
    const int B = a->B, T = a->T, C = a->C, NH = a->NH, HS = C / NH;
    const size_t ld = 3 * (size_t)C;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        size_t off = (size_t)b * T * ld + (size_t)h * HS;
        const float *q = qkv + off;
        float *dq = dqkv + off;
        float g = a->gate ? a->gate[bh] : 1.0f;
        float dg = head_backward(dq, dq + C, dq + 2 * C, dout + (size_t)b * T * C + (size_t)h * HS,
                                 (size_t)C, att + (size_t)bh * T * T, q, q + C, q + 2 * C, ld, T,
                                 HS, a->causal, g, scratch + (size_t)bh * T * T);
        if (a->gate && dgate) dgate[bh] += dg;
    }
}

/* c[M,N] (row stride ldc) = a[M,K] @ b[N,K]^T + bias[N] (nullable); a and b
 * row strides lda, ldb. Dot-product form: both operands are read along K. */
static void matmul_nt(float *c, size_t ldc, const float *a, size_t lda, const float *b, size_t ldb,
                      const float *bias, int M, int N, int K) {
    int m = 0;
    for (; m + 2 <= M; m += 2) {
        const float *am = a + (size_t)m * lda;
        float *c0 = c + (size_t)m * ldc, *c1 = c0 + ldc;
        int n = 0;
        for (; n + 4 <= N; n += 4) {
            float acc[2][4] = {{0}};
            dot2x4(acc, am, lda, b + (size_t)n * ldb, ldb, K);
            for (int r = 0; r < 4; r++) {
                float bb = bias ? bias[n + r] : 0.0f;
                c0[n + r] = acc[0][r] + bb;
                c1[n + r] = acc[1][r] + bb;
            }
        }
        for (; n < N; n++) {
            float bb = bias ? bias[n] : 0.0f;
            c0[n] = dot(am, b + (size_t)n * ldb, K) + bb;
            c1[n] = dot(am + lda, b + (size_t)n * ldb, K) + bb;
        }
    }
    for (; m < M; m++) {
        const float *am = a + (size_t)m * lda;
        float *cm = c + (size_t)m * ldc;
        int n = 0;
        for (; n + 4 <= N; n += 4) {
            float acc[4] = {0};
            dot1x4(acc, am, b + (size_t)n * ldb, ldb, K);
            for (int r = 0; r < 4; r++) cm[n + r] = acc[r] + (bias ? bias[n + r] : 0.0f);
        }
        for (; n < N; n++) cm[n] = dot(am, b + (size_t)n * ldb, K) + (bias ? bias[n] : 0.0f);
    }
}

void bk_cpu_attention_selected_forward(float *out, float *scratch, const float *x, const float *wqkv,
                                       const float *bqkv, const int *heads, int K,
                                       const bk_attn_args *a) {
    const int B = a->B, T = a->T, C = a->C, NH = a->NH, HS = C / NH;
    const size_t slot = (size_t)T * (3 * (size_t)HS + T);
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int b = 0; b < B; b++) memset(out + (size_t)b * T * C, 0, (size_t)T * C * sizeof(float));
#pragma omp for schedule(static)
        for (int bk = 0; bk < B * K; bk++) {
            int b = bk / K, h = heads[bk];
            float *buf = scratch + (size_t)bk * slot;
            float *qkv[3] = {buf, buf + (size_t)T * HS, buf + 2 * (size_t)T * HS};
            const float *xb = x + (size_t)b * T * C;
            for (int part = 0; part < 3; part++) {
                size_t row0 = (size_t)part * C + (size_t)h * HS; /* first row of wqkv */
                matmul_nt(qkv[part], (size_t)HS, xb, (size_t)C, wqkv + row0 * C, (size_t)C,
                          bqkv ? bqkv + row0 : NULL, T, HS, C);
            }
            head_forward(out + (size_t)b * T * C + (size_t)h * HS, (size_t)C,
                         buf + 3 * (size_t)T * HS, qkv[0], qkv[1], qkv[2], (size_t)HS, T, HS,
                         a->causal, a->mask ? a->mask + (size_t)b * T : NULL, 1.0f);
        }
    }
}

/* acc[m][r] += sum over the K segments col[k] of <a + m*lda + col[k], b + r*ldb + col[k]>,
 * segment length HS, for 2 rows m of a and 4 rows r of b (each weight load
 * serves two rows); one horizontal sum per output. */
static inline void dot2x4_segments(float acc[2][4], const float *a, size_t lda, const float *b,
                                   size_t ldb, const size_t *col, int K, int HS) {
    vfloat c00 = {0}, c01 = {0}, c02 = {0}, c03 = {0}, c10 = {0}, c11 = {0}, c12 = {0}, c13 = {0};
    float s[2][4] = {{0}};
    for (int k = 0; k < K; k++) {
        const float *a0 = a + col[k], *a1 = a0 + lda;
        const float *b0 = b + col[k], *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
        int i = 0;
        for (; i + VLEN <= HS; i += VLEN) {
            vfloat x0 = vload(a0 + i), x1 = vload(a1 + i), w;
            w = vload(b0 + i);
            c00 += x0 * w;
            c10 += x1 * w;
            w = vload(b1 + i);
            c01 += x0 * w;
            c11 += x1 * w;
            w = vload(b2 + i);
            c02 += x0 * w;
            c12 += x1 * w;
            w = vload(b3 + i);
            c03 += x0 * w;
            c13 += x1 * w;
        }
        for (; i < HS; i++)
            for (int r = 0; r < 4; r++) {
                s[0][r] += a0[i] * b0[(size_t)r * ldb + i];
                s[1][r] += a1[i] * b0[(size_t)r * ldb + i];
            }
    }
    acc[0][0] += vsum(c00) + s[0][0];
    acc[0][1] += vsum(c01) + s[0][1];
    acc[0][2] += vsum(c02) + s[0][2];
    acc[0][3] += vsum(c03) + s[0][3];
    acc[1][0] += vsum(c10) + s[1][0];
    acc[1][1] += vsum(c11) + s[1][1];
    acc[1][2] += vsum(c12) + s[1][2];
    acc[1][3] += vsum(c13) + s[1][3];
}

/* Selected heads per sample are at most NH; their column offsets are built once per row. */
#define SELECTED_MAX_HEADS 256

void bk_cpu_linear_selected_forward(float *y, const float *c, const float *wo, const float *bo,
                                    const int *heads, int K, int B, int T, int C, int NH, int OC) {
    const int HS = C / NH;
    if (K > SELECTED_MAX_HEADS) K = SELECTED_MAX_HEADS; /* heads are distinct, so K <= NH */
    const int pairs = (T + 1) / 2; /* rows t, t+1 of one sample share heads and weight loads */
#pragma omp parallel for schedule(static)
    for (int bp = 0; bp < B * pairs; bp++) {
        int b = bp / pairs, t = 2 * (bp % pairs), rows = t + 1 < T ? 2 : 1;
        const int *hb = heads + (size_t)b * K;
        size_t col[SELECTED_MAX_HEADS];
        for (int k = 0; k < K; k++) col[k] = (size_t)hb[k] * HS;
        const float *ct = c + ((size_t)b * T + t) * C;
        float *yt = y + ((size_t)b * T + t) * OC;
        int o = 0;
        for (; rows == 2 && o + 4 <= OC; o += 4) {
            float acc[2][4] = {{0}};
            dot2x4_segments(acc, ct, (size_t)C, wo + (size_t)o * C, (size_t)C, col, K, HS);
            for (int r = 0; r < 4; r++) {
                float bb = bo ? bo[o + r] : 0.0f;
                yt[o + r] = acc[0][r] + bb;
                yt[OC + o + r] = acc[1][r] + bb;
            }
        }
        for (; o < OC; o++)
            for (int m = 0; m < rows; m++) {
                float s = 0.0f;
                for (int k = 0; k < K; k++)
                    s += dot(ct + (size_t)m * C + col[k], wo + (size_t)o * C + col[k], HS);
                yt[(size_t)m * OC + o] = s + (bo ? bo[o] : 0.0f);
            }
    }
}
