/* CPU multi-head attention: full (key mask, causal, per-head gates), its
 * backward, and the BudgetFormer inference path that computes only the
 * selected heads. In the full path one (batch, head) pair is one OpenMP task;
 * a task owns the head's columns of out/dqkv, so there are no write races and
 * no reductions across threads. The selected path's tasks are runs of samples
 * (see the section below), with the projections through cblas_sgemm. Loops
 * are written so the compiler vectorises them over the head dimension. */
/* ISO C mode (-std=c11) turns off a*b+c -> fma contraction in GCC; the dot
 * products here want it (2x the arithmetic rate, and one rounding instead of two). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu_math.h"
#include "kernels/cpu_ops.h"

/* Short vectors (vfloat, vint, vload, VLEN) come from kernels/cpu_math.h:
 * GCC's vector extension keeps the accumulators in registers and emits FMAs
 * on any x86-64 level (SSE pairs without -march=native). */

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
    union {
        int32_t i;
        float f;
    } scale = {.i = ((int32_t)n + 127) << 23};
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

static inline float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
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

/* Softmax in place over one row of scores: row[0..nk) holds the scores of
 * the visible keys (mask: this sample's [T] key mask or NULL); on return
 * row[0..T) holds the probabilities, 0 past nk. Returns 0, with the row all
 * 0, when no key is visible (the row attends to nothing). */
static int softmax_row(float *row, int nk, int T, const float *mask) {
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
    if (mx == -INFINITY) {
        memset(row, 0, (size_t)T * sizeof(float));
        return 0;
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
    return 1;
}

/* One head, forward. q, k, v: [T, HS] with row stride ld; att: [T, T]
 * probabilities (overwritten); out: [T, HS] with row stride ldo, overwritten
 * with g * P v. mask: this sample's [T] key mask or NULL. The two products
 * are cblas_sgemm calls (inside the OpenMP task OpenBLAS runs on the calling
 * thread); causal rows ignore the scores past the diagonal, so computing the
 * whole square costs flops, not correctness. */
static void head_forward(float *out, size_t ldo, float *att, const float *q, const float *k,
                         const float *v, size_t ld, int T, int HS, int causal, const float *mask,
                         float g) {
    const float scale = 1.0f / sqrtf((float)HS);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HS, scale, q, (int)ld, k, (int)ld,
                0.0f, att, T);
    /* a row that sees no key is all 0 after softmax_row, so its output row is 0 */
    for (int t = 0; t < T; t++) softmax_row(att + (size_t)t * T, causal ? t + 1 : T, T, mask);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HS, T, g, att, T, v, (int)ld, 0.0f,
                out, (int)ldo);
}

void bk_cpu_attention_forward(float *out, float *att, const float *qkv, const bk_attn_args *a) {
    if (!att) {
        bk_cpu_attention_forward_tiled(out, a->lse, qkv, a);
        return;
    }
    const int B = a->B, T = a->T, C = a->C, NH = a->NH, HS = C / NH;
    const size_t ld = 3 * (size_t)C;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * ld + (size_t)h * HS;
        float g = a->gate ? a->gate[bh] : 1.0f;
        head_forward(out + (size_t)b * T * C + (size_t)h * HS, (size_t)C, att + (size_t)bh * T * T,
                     q, q + C, q + 2 * C, ld, T, HS, a->causal,
                     a->mask ? a->mask + (size_t)b * T : NULL, g);
    }
}

/* One head, backward, as four cblas_sgemm calls around a row pass. With
 * R = dOut V^T (R_tu = <dy_t, v_u>, ungated):
 *   dS = P ⊙ (g R - rowsum(P ⊙ g R)) / sqrt(HS)
 *   dq += dS k,  dk += dS^T q,  dv += g P^T dOut
 * and the gate gradient sum_tu P_tu R_tu = sum_t <dy_t, o_t> (o ungated).
 * tmp: T*T floats. Returns this head's dgate contribution. */
static float head_backward(float *dq, float *dk, float *dv, const float *dout, size_t ldo,
                           const float *att, const float *q, const float *k, const float *v,
                           size_t ld, int T, int HS, int causal, float g, float *tmp) {
    const float scale = 1.0f / sqrtf((float)HS);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HS, 1.0f, dout, (int)ldo, v, (int)ld,
                0.0f, tmp, T);
    float dgate = 0.0f;
    for (int t = 0; t < T; t++) {
        const float *p = att + (size_t)t * T;
        float *r = tmp + (size_t)t * T;
        int nk = causal ? t + 1 : T;
        float pd = 0.0f;
#pragma omp simd reduction(+ : pd)
        for (int u = 0; u < nk; u++) pd += p[u] * r[u];
        dgate += pd;
        float c = g * pd;
#pragma omp simd
        for (int u = 0; u < nk; u++) r[u] = p[u] * (g * r[u] - c) * scale;
        if (nk < T) memset(r + nk, 0, (size_t)(T - nk) * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HS, T, 1.0f, tmp, T, k, (int)ld, 1.0f,
                dq, (int)ld);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HS, T, 1.0f, tmp, T, q, (int)ld, 1.0f,
                dk, (int)ld);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HS, T, g, att, T, dout, (int)ldo, 1.0f,
                dv, (int)ld);
    return dgate;
}

void bk_cpu_attention_backward(float *dqkv, float *dgate, float *scratch, const float *dout,
                               const float *qkv, const float *att, const bk_attn_args *a) {
    if (!att) {
        bk_cpu_attention_backward_tiled(dqkv, dgate, dout, qkv, a->lse, a);
        return;
    }
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

/* ---- tiled attention (no T x T map) ----
 * For long sequences the [T, T] map of a head no longer fits in cache, and
 * writing it, reading it back for the softmax and again for P V costs more
 * than the products. The tiled path keeps one BQ x BK tile of scores at a
 * time: the forward an online softmax (running max m and sum l per row,
 * FlashAttention's recurrence), saving only lse = m + ln l per row; the
 * backward recomputes each tile's P = exp(S - lse). One (batch, head) pair is
 * still one task that owns the head's columns, and a task's sums run in a
 * fixed order, so the bits do not depend on the number of threads. */
#define TILE_Q 64
#define TILE_K 128

/* Floats of one task's work area: scores, R, O tiles, m, l, and pd[T]. */
static size_t tile_work_floats(int T, int HS) {
    return 2 * (size_t)TILE_Q * TILE_K + (size_t)TILE_Q * HS + 2 * TILE_Q + (size_t)T + 16;
}

/* Probabilities of one tile in place: s[nq, nk] (row stride TILE_K) holds
 * scale * q k^T for queries t0.. and keys u0..; keys hidden by the mask or by
 * causality become exactly 0. With lse (the backward), p = exp(s - lse_t);
 * without (the forward), the online softmax: m, l and the rows of o (stride
 * HS) are rescaled to the new row max and p = exp(s - m). */
static void tile_probs(float *s, int nq, int nk, int t0, int u0, int causal, const float *mask,
                       const float *lse, float *m, float *l, float *o, int HS) {
    for (int i = 0; i < nq; i++) {
        float *row = s + (size_t)i * TILE_K;
        int nv = causal ? t0 + i + 1 - u0 : nk; /* keys this row may see in the tile */
        if (nv > nk) nv = nk;
        if (nv < 0) nv = 0;
        if (mask)
            for (int u = 0; u < nv; u++)
                if (mask[u0 + u] == 0.0f) row[u] = -INFINITY;
        float mx;
        if (lse) {
            mx = lse[i];
        } else {
            float rm = -INFINITY;
#pragma omp simd reduction(max : rm)
            for (int u = 0; u < nv; u++) rm = fmax_fast(rm, row[u]);
            mx = fmax_fast(m[i], rm);
        }
        if (mx == -INFINITY) { /* no key seen yet (or at all): p = 0 */
            memset(row, 0, (size_t)nk * sizeof(float));
            continue;
        }
        vfloat vs = {0};
        int u = 0;
        for (; u + VLEN <= nv; u += VLEN) {
            vfloat e = softmax_vexp(vload(row + u) - mx);
            vstore(row + u, e);
            vs += e;
        }
        float sum = vsum(vs);
        for (; u < nv; u++) {
            float e = softmax_exp(row[u] - mx);
            row[u] = e;
            sum += e;
        }
        if (nv < nk) memset(row + nv, 0, (size_t)(nk - nv) * sizeof(float));
        if (lse) continue;
        if (mx != m[i]) {
            float corr = softmax_exp(m[i] - mx); /* 0 when m was -inf */
            l[i] *= corr;
            float *oi = o + (size_t)i * HS;
#pragma omp simd
            for (int j = 0; j < HS; j++) oi[j] *= corr;
            m[i] = mx;
        }
        l[i] += sum;
    }
}

/* The ungated, unnormalised outputs o[nq, HS] (stride HS) of queries
 * t0..t0+nq with their row max m and sum l: o_t / l_t = (P v)_t. */
static void tile_query_rows(float *o, float *m, float *l, float *s, const float *q, const float *k,
                            const float *v, size_t ld, int T, int HS, int t0, int nq, int causal,
                            const float *mask) {
    const float scale = 1.0f / sqrtf((float)HS);
    memset(o, 0, (size_t)nq * HS * sizeof(float));
    for (int i = 0; i < nq; i++) m[i] = -INFINITY, l[i] = 0.0f;
    int kend = causal ? t0 + nq : T;
    for (int u0 = 0; u0 < kend; u0 += TILE_K) {
        int nk = kend - u0 < TILE_K ? kend - u0 : TILE_K;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, HS, scale, q + (size_t)t0 * ld,
                    (int)ld, k + (size_t)u0 * ld, (int)ld, 0.0f, s, TILE_K);
        tile_probs(s, nq, nk, t0, u0, causal, mask, NULL, m, l, o, HS);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, HS, nk, 1.0f, s, TILE_K,
                    v + (size_t)u0 * ld, (int)ld, 1.0f, o, HS);
    }
}

/* One head, tiled forward: out = g P v (row stride ldo), lse[T] = the rows'
 * log-sum-exp of the scaled scores (-inf for a row that sees no key, whose
 * output is 0). */
static void head_forward_tiled(float *out, size_t ldo, float *lse, const float *q, const float *k,
                               const float *v, size_t ld, int T, int HS, int causal,
                               const float *mask, float g, float *work) {
    float *s = work, *o = s + 2 * (size_t)TILE_Q * TILE_K, *m = o + (size_t)TILE_Q * HS;
    float *l = m + TILE_Q;
    for (int t0 = 0; t0 < T; t0 += TILE_Q) {
        int nq = T - t0 < TILE_Q ? T - t0 : TILE_Q;
        tile_query_rows(o, m, l, s, q, k, v, ld, T, HS, t0, nq, causal, mask);
        for (int i = 0; i < nq; i++) {
            float *oi = out + (size_t)(t0 + i) * ldo;
            float f = l[i] > 0.0f ? g / l[i] : 0.0f;
#pragma omp simd
            for (int j = 0; j < HS; j++) oi[j] = f * o[(size_t)i * HS + j];
            lse[t0 + i] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
        }
    }
}

void bk_cpu_attention_forward_tiled(float *out, float *lse, const float *qkv,
                                    const bk_attn_args *a) {
    const int B = a->B, T = a->T, C = a->C, NH = a->NH, HS = C / NH;
    const size_t ld = 3 * (size_t)C, per = tile_work_floats(T, HS);
    float *ws = bk_cpu_workspace_take((size_t)omp_get_max_threads() * per * sizeof(float));
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * ld + (size_t)h * HS;
        float g = a->gate ? a->gate[bh] : 1.0f;
        head_forward_tiled(out + (size_t)b * T * C + (size_t)h * HS, (size_t)C,
                           lse + (size_t)bh * T, q, q + C, q + 2 * C, ld, T, HS, a->causal,
                           a->mask ? a->mask + (size_t)b * T : NULL, g,
                           ws + (size_t)omp_get_thread_num() * per);
    }
    bk_cpu_workspace_give(ws);
}

/* One head, tiled backward (the same equations as head_backward). pd_t =
 * sum_u P_tu R_tu = <dy_t, (P v)_t> comes first, one forward pass over the
 * query tiles; then for each key tile (outer, so dk and dv rows stay in
 * cache) and query tile, P from the saved lse, and
 *   dv_u += g P^T dy,  R = dy v^T,  dS = P (g R - g pd) / sqrt(HS),
 *   dq_t += dS k,  dk_u += dS^T q.
 * Returns this head's dgate contribution, sum_t pd_t. */
static float head_backward_tiled(float *dq, float *dk, float *dv, const float *dout, size_t ldo,
                                 const float *lse, const float *q, const float *k, const float *v,
                                 size_t ld, int T, int HS, int causal, const float *mask, float g,
                                 float *work) {
    const float scale = 1.0f / sqrtf((float)HS);
    float *s = work, *r = s + (size_t)TILE_Q * TILE_K, *o = r + (size_t)TILE_Q * TILE_K;
    float *m = o + (size_t)TILE_Q * HS, *l = m + TILE_Q, *pd = l + TILE_Q;
    float dgate = 0.0f;
    for (int t0 = 0; t0 < T; t0 += TILE_Q) {
        int nq = T - t0 < TILE_Q ? T - t0 : TILE_Q;
        tile_query_rows(o, m, l, s, q, k, v, ld, T, HS, t0, nq, causal, mask);
        for (int i = 0; i < nq; i++) {
            float d = l[i] > 0.0f
                          ? dot(dout + (size_t)(t0 + i) * ldo, o + (size_t)i * HS, HS) / l[i]
                          : 0.0f;
            pd[t0 + i] = d;
            dgate += d;
        }
    }
    if (g == 0.0f) return dgate; /* dq, dk, dv get g times something: nothing */
    for (int u0 = 0; u0 < T; u0 += TILE_K) {
        int nk = T - u0 < TILE_K ? T - u0 : TILE_K;
        for (int t0 = causal ? (u0 / TILE_Q) * TILE_Q : 0; t0 < T; t0 += TILE_Q) {
            int nq = T - t0 < TILE_Q ? T - t0 : TILE_Q;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, HS, scale,
                        q + (size_t)t0 * ld, (int)ld, k + (size_t)u0 * ld, (int)ld, 0.0f, s,
                        TILE_K);
            tile_probs(s, nq, nk, t0, u0, causal, mask, lse + t0, NULL, NULL, NULL, HS);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, HS, nq, g, s, TILE_K,
                        dout + (size_t)t0 * ldo, (int)ldo, 1.0f, dv + (size_t)u0 * ld, (int)ld);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, HS, 1.0f,
                        dout + (size_t)t0 * ldo, (int)ldo, v + (size_t)u0 * ld, (int)ld, 0.0f, r,
                        TILE_K);
            for (int i = 0; i < nq; i++) {
                const float *p = s + (size_t)i * TILE_K;
                float *ri = r + (size_t)i * TILE_K, c = g * pd[t0 + i];
#pragma omp simd
                for (int u = 0; u < nk; u++) ri[u] = p[u] * (g * ri[u] - c) * scale;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, HS, nk, 1.0f, r, TILE_K,
                        k + (size_t)u0 * ld, (int)ld, 1.0f, dq + (size_t)t0 * ld, (int)ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, HS, nq, 1.0f, r, TILE_K,
                        q + (size_t)t0 * ld, (int)ld, 1.0f, dk + (size_t)u0 * ld, (int)ld);
        }
    }
    return dgate;
}

void bk_cpu_attention_backward_tiled(float *dqkv, float *dgate, const float *dout, const float *qkv,
                                     const float *lse, const bk_attn_args *a) {
    const int B = a->B, T = a->T, C = a->C, NH = a->NH, HS = C / NH;
    const size_t ld = 3 * (size_t)C, per = tile_work_floats(T, HS);
    float *ws = bk_cpu_workspace_take((size_t)omp_get_max_threads() * per * sizeof(float));
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        size_t off = (size_t)b * T * ld + (size_t)h * HS;
        const float *q = qkv + off;
        float *dq = dqkv + off;
        float g = a->gate ? a->gate[bh] : 1.0f;
        float dg = head_backward_tiled(
            dq, dq + C, dq + 2 * C, dout + (size_t)b * T * C + (size_t)h * HS, (size_t)C,
            lse + (size_t)bh * T, q, q + C, q + 2 * C, ld, T, HS, a->causal,
            a->mask ? a->mask + (size_t)b * T : NULL, g, ws + (size_t)omp_get_thread_num() * per);
        if (a->gate && dgate) dgate[bh] += dg;
    }
    bk_cpu_workspace_give(ws);
}

/* ---- selected heads (BudgetFormer inference) ----
 * Samples go in runs: consecutive samples that selected the same set of heads
 * (in any order) share their projection weights, so a run's Q/K/V and output
 * projections are cblas_sgemm calls over all its rows, one per block of
 * adjacent selected heads (their rows of wqkv and columns of wo are
 * contiguous). At k = NH all samples share one set and every block is all of
 * C: the all-heads path's GEMMs, cut into runs of rows only to feed every
 * thread. One run is one OpenMP task; OpenBLAS
 * called inside a parallel region runs on the calling thread, so the tasks'
 * GEMMs and attention run side by side, one per thread. */

/* Whether head h is among the K ids in hs. */
static int head_selected(const int *hs, int K, int h) {
    for (int k = 0; k < K; k++)
        if (hs[k] == h) return 1;
    return 0;
}

/* Whether a and b hold the same K distinct heads, in any order. */
static int same_head_set(const int *a, const int *b, int K) {
    for (int k = 0; k < K; k++)
        if (!head_selected(b, K, a[k])) return 0;
    return 1;
}

/* End of the run that starts at sample b0: the samples after it with the same
 * head set, at most cap samples in all (so that one set still makes tasks
 * for every thread). */
static int run_end(const int *heads, int K, int B, int b0, int cap) {
    int b1 = b0 + 1;
    while (b1 < B && b1 - b0 < cap &&
           same_head_set(heads + (size_t)b0 * K, heads + (size_t)b1 * K, K))
        b1++;
    return b1;
}

/* Samples per run at most: about four tasks per thread when all samples
 * share one head set. */
static int run_cap(int B) {
    int tasks = 4 * omp_get_max_threads();
    return (B + tasks - 1) / tasks;
}

/* The next block of adjacent selected heads [*h0, *h1) at or after head h:
 * returns 0 when there is none. */
static int next_head_block(const int *hs, int K, int NH, int h, int *h0, int *h1) {
    while (h < NH && !head_selected(hs, K, h)) h++;
    if (h == NH) return 0;
    *h0 = h;
    while (h < NH && head_selected(hs, K, h)) h++;
    *h1 = h;
    return 1;
}

/* s[u] = scale * <q, k_u> for u < nk, the keys stored transposed: k_u[j] =
 * kt[j*ldk + u]. Vectorised over keys: no horizontal sums, which dominate
 * dots() when HS is only a few vectors long. */
static void dots_transposed(float *s, const float *q, const float *kt, size_t ldk, int nk, int HS,
                            float scale) {
    int u = 0;
    for (; u + 4 * VLEN <= nk; u += 4 * VLEN) {
        vfloat c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
        for (int j = 0; j < HS; j++) {
            const float *kj = kt + (size_t)j * ldk + u;
            vfloat qj = (vfloat){0} + q[j];
            c0 += qj * vload(kj);
            c1 += qj * vload(kj + VLEN);
            c2 += qj * vload(kj + 2 * VLEN);
            c3 += qj * vload(kj + 3 * VLEN);
        }
        c0 *= scale, c1 *= scale, c2 *= scale, c3 *= scale;
        memcpy(s + u, &c0, sizeof c0);
        memcpy(s + u + VLEN, &c1, sizeof c1);
        memcpy(s + u + 2 * VLEN, &c2, sizeof c2);
        memcpy(s + u + 3 * VLEN, &c3, sizeof c3);
    }
    for (; u + VLEN <= nk; u += VLEN) {
        vfloat c0 = {0};
        for (int j = 0; j < HS; j++) c0 += ((vfloat){0} + q[j]) * vload(kt + (size_t)j * ldk + u);
        c0 *= scale;
        memcpy(s + u, &c0, sizeof c0);
    }
    for (; u < nk; u++) {
        float acc = 0.0f;
        for (int j = 0; j < HS; j++) acc += q[j] * kt[(size_t)j * ldk + u];
        s[u] = scale * acc;
    }
}

/* o_t[j] = sum_{u < nk} p[t*ldp + u] * v[u*ldv + j] for the 4 rows t of p
 * and o (row stride ldo), j < HS: four rows share each load of v, and the
 * sums stay in registers across all keys. */
static void weighted_rows4(float *o, size_t ldo, const float *p, size_t ldp, const float *v,
                           size_t ldv, int nk, int HS) {
    const float *p0 = p, *p1 = p + ldp, *p2 = p1 + ldp, *p3 = p2 + ldp;
    float *o0 = o, *o1 = o + ldo, *o2 = o1 + ldo, *o3 = o2 + ldo;
    int j = 0;
    for (; j + 2 * VLEN <= HS; j += 2 * VLEN) {
        vfloat a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
        for (int u = 0; u < nk; u++) {
            const float *vu = v + (size_t)u * ldv + j;
            vfloat x = vload(vu), y = vload(vu + VLEN);
            vfloat w0 = (vfloat){0} + p0[u], w1 = (vfloat){0} + p1[u];
            vfloat w2 = (vfloat){0} + p2[u], w3 = (vfloat){0} + p3[u];
            a0 += w0 * x, b0 += w0 * y;
            a1 += w1 * x, b1 += w1 * y;
            a2 += w2 * x, b2 += w2 * y;
            a3 += w3 * x, b3 += w3 * y;
        }
        memcpy(o0 + j, &a0, sizeof a0), memcpy(o0 + j + VLEN, &b0, sizeof b0);
        memcpy(o1 + j, &a1, sizeof a1), memcpy(o1 + j + VLEN, &b1, sizeof b1);
        memcpy(o2 + j, &a2, sizeof a2), memcpy(o2 + j + VLEN, &b2, sizeof b2);
        memcpy(o3 + j, &a3, sizeof a3), memcpy(o3 + j + VLEN, &b3, sizeof b3);
    }
    for (; j < HS; j++) {
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
        for (int u = 0; u < nk; u++) {
            float vj = v[(size_t)u * ldv + j];
            s0 += p0[u] * vj, s1 += p1[u] * vj, s2 += p2[u] * vj, s3 += p3[u] * vj;
        }
        o0[j] = s0, o1[j] = s1, o2[j] = s2, o3[j] = s3;
    }
}

/* Samples [b0, b1), which all selected the K heads hs (KH = K*HS columns).
 * The run's block of scratch, M = (b1-b0)*T rows from row b0*T on:
 *   qv[M, 2*KH]: q | v, each the selected heads in ascending order;
 *   kt[KH, M]:   the keys transposed, as dots_transposed wants them;
 * so that one GEMM per block of adjacent heads fills each for the whole run.
 * The blocks of all runs take the first B*T*3*KH floats, att[B, K, T, T]
 * the rest. Unselected heads' columns of out are set to 0. */
static void selected_run_forward(float *out, float *scratch, const float *x, const float *wqkv,
                                 const float *bqkv, const int *hs, int K, int b0, int b1,
                                 const bk_attn_args *a) {
    const int T = a->T, C = a->C, NH = a->NH, HS = C / NH, KH = K * HS;
    const size_t ld = 2 * (size_t)KH, M = (size_t)(b1 - b0) * T;
    const float scale = 1.0f / sqrtf((float)HS);
    float *qv = scratch + (size_t)b0 * T * 3 * KH, *kt = qv + M * ld;
    float *att = scratch + (size_t)a->B * T * 3 * KH;
    const float *xr = x + (size_t)b0 * T * C;
    if (bqkv) { /* the bias first, the products added to it */
        int i = 0;
        for (int h = 0; h < NH; h++) {
            if (!head_selected(hs, K, h)) continue;
            const float *bq = bqkv + (size_t)h * HS;
            memcpy(qv + (size_t)i * HS, bq, (size_t)HS * sizeof(float));
            memcpy(qv + KH + (size_t)i * HS, bq + 2 * (size_t)C, (size_t)HS * sizeof(float));
            for (int j = 0; j < HS; j++) {
                float *kr = kt + ((size_t)i * HS + j) * M, bk = bq[C + j];
                for (size_t r = 0; r < M; r++) kr[r] = bk;
            }
            i++;
        }
        for (size_t r = 1; r < M; r++) memcpy(qv + r * ld, qv, ld * sizeof(float));
    }
    const float beta = bqkv ? 1.0f : 0.0f;
    int h0, h1;
    for (int h = 0, i0 = 0; next_head_block(hs, K, NH, h, &h0, &h1); h = h1, i0 += h1 - h0) {
        const int n = (h1 - h0) * HS;
        const float *wq = wqkv + (size_t)h0 * HS * C, *wk = wq + (size_t)C * C,
                    *wv = wk + (size_t)C * C;
        float *q0 = qv + (size_t)i0 * HS;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, n, C, 1.0f, xr, C, wq, C, beta,
                    q0, (int)ld);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, n, C, 1.0f, xr, C, wv, C, beta,
                    q0 + KH, (int)ld);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, (int)M, C, 1.0f, wk, C, xr, C, beta,
                    kt + (size_t)i0 * HS * M, (int)M);
    }
    for (int b = b0; b < b1; b++) {
        float *ob = out + (size_t)b * T * C;
        const size_t r0 = (size_t)(b - b0) * T; /* this sample's first row in the run */
        const float *mask = a->mask ? a->mask + (size_t)b * T : NULL;
        int i = 0;
        for (int h = 0; h < NH; h++) {
            if (!head_selected(hs, K, h)) {
                for (int t = 0; t < T; t++)
                    memset(ob + (size_t)t * C + (size_t)h * HS, 0, (size_t)HS * sizeof(float));
                continue;
            }
            const float *q = qv + r0 * ld + (size_t)i * HS, *v = q + KH;
            const float *k = kt + (size_t)i * HS * M + r0;
            float *ah = att + ((size_t)b * K + i) * T * T;
            for (int t = 0; t < T; t++) { /* probabilities; a row with no key is all 0 */
                float *row = ah + (size_t)t * T;
                int nk = a->causal ? t + 1 : T;
                dots_transposed(row, q + (size_t)t * ld, k, M, nk, HS, scale);
                softmax_row(row, nk, T, mask);
            }
            float *oh = ob + (size_t)h * HS;
            int t = 0;
            for (; t + 4 <= T; t += 4) /* rows past a row's last key hold 0 */
                weighted_rows4(oh + (size_t)t * C, (size_t)C, ah + (size_t)t * T, (size_t)T, v, ld,
                               a->causal ? t + 4 : T, HS);
            for (; t < T; t++)
                weighted_rows(oh + (size_t)t * C, ah + (size_t)t * T, v, ld, a->causal ? t + 1 : T,
                              HS, 0);
            i++;
        }
    }
}

void bk_cpu_attention_selected_forward(float *out, float *scratch, const float *x,
                                       const float *wqkv, const float *bqkv, const int *heads,
                                       int K, const bk_attn_args *a) {
    const int B = a->B, cap = run_cap(B);
#pragma omp parallel
#pragma omp single
    for (int b0 = 0, b1; b0 < B; b0 = b1) {
        b1 = run_end(heads, K, B, b0, cap);
#pragma omp task firstprivate(b0, b1)
        selected_run_forward(out, scratch, x, wqkv, bqkv, heads + (size_t)b0 * K, K, b0, b1, a);
    }
}

/* Samples [b0, b1), which all selected the K heads hs: y rows = bias, plus
 * one GEMM per block of adjacent selected heads over those columns of c and wo. */
static void selected_run_project(float *y, const float *c, const float *wo, const float *bo,
                                 const int *hs, int K, int b0, int b1, int T, int C, int NH,
                                 int OC) {
    const int HS = C / NH;
    const size_t M = (size_t)(b1 - b0) * T;
    float *yr = y + (size_t)b0 * T * OC;
    const float *cr = c + (size_t)b0 * T * C;
    for (size_t r = 0; r < M; r++) {
        if (bo)
            memcpy(yr + r * OC, bo, (size_t)OC * sizeof(float));
        else
            memset(yr + r * OC, 0, (size_t)OC * sizeof(float));
    }
    int h0, h1;
    for (int h = 0; next_head_block(hs, K, NH, h, &h0, &h1); h = h1)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, OC, (h1 - h0) * HS, 1.0f,
                    cr + (size_t)h0 * HS, C, wo + (size_t)h0 * HS, C, 1.0f, yr, OC);
}

void bk_cpu_linear_selected_forward(float *y, const float *c, const float *wo, const float *bo,
                                    const int *heads, int K, int B, int T, int C, int NH, int OC) {
    const int cap = run_cap(B);
#pragma omp parallel
#pragma omp single
    for (int b0 = 0, b1; b0 < B; b0 = b1) {
        b1 = run_end(heads, K, B, b0, cap);
#pragma omp task firstprivate(b0, b1)
        selected_run_project(y, c, wo, bo, heads + (size_t)b0 * K, K, b0, b1, T, C, NH, OC);
    }
}
