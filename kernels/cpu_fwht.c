/* CPU Walsh–Hadamard transform: the parameter-free output projection
 * y = alpha ⊙ (H_d x)/sqrt(d) + beta. d = 2^n uses Sylvester's H in natural
 * order (n butterfly stages, additions only); d = 12*2^n uses H_12 ⊗ H_{2^n}:
 * each of the 12 contiguous blocks of 2^n gets the fast transform, then the
 * 12x12 Paley matrix mixes the blocks. Rows are independent: OpenMP over rows. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kernels/bk_hadamard.h"
#include "kernels/cpu_ops.h"

/* Columns mixed per step of the portable 12x12 stage; 12 * 64 floats stay on the stack. */
#define FWHT_MIX_CHUNK 64

#if defined(__AVX512F__)
/* Stage h (< 16) inside each 16-float vector: lane l pairs with l ^ h; the
 * lower lane of a pair gets a + b, the upper a - b, i.e. y = p + s x with p
 * the partner's value and s = -1 in upper lanes. */
static inline __m512 fwht16_stage(__m512 x, int h) {
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __m512i partner = _mm512_xor_si512(lane, _mm512_set1_epi32(h));
    __m512 p = _mm512_permutexvar_ps(partner, x);
    __mmask16 upper = _mm512_test_epi32_mask(lane, _mm512_set1_epi32(h));
    return _mm512_mask_sub_ps(_mm512_add_ps(x, p), upper, p, x);
}
#endif

/* Stages h and 2h of the Sylvester transform in one pass over x[m] (a
 * radix-4 butterfly: stage h pairs p0 with p1 and p2 with p3, stage 2h then
 * p0 with p2 and p1 with p3), so a row is read and written half as often. */
static void fwht_radix4(float *x, int m, int h) {
    for (int i = 0; i < m; i += 4 * h) {
        float *p0 = x + i, *p1 = p0 + h, *p2 = p1 + h, *p3 = p2 + h;
#pragma omp simd
        for (int j = 0; j < h; j++) {
            float a = p0[j], b = p1[j], c = p2[j], d = p3[j];
            float s0 = a + b, d0 = a - b, s1 = c + d, d1 = c - d;
            p0[j] = s0 + s1;
            p1[j] = d0 + d1;
            p2[j] = s0 - s1;
            p3[j] = d0 - d1;
        }
    }
}

/* Unnormalised Sylvester transform of src[m] (times scale[m] first, when
 * given) into dst[m], m a power of two; dst may be src. The first pass
 * reads src, so no copy is made. */
static void fwht_pow2(float *dst, const float *src, const float *scale, int m) {
    int h = 1;
#if defined(__AVX512F__)
    if (m >= 16 && !bk_cpu_portable()) { /* the first four stages in registers */
        for (int i = 0; i < m; i += 16) {
            __m512 v = _mm512_loadu_ps(src + i);
            if (scale) v = _mm512_mul_ps(v, _mm512_loadu_ps(scale + i));
            v = fwht16_stage(v, 1);
            v = fwht16_stage(v, 2);
            v = fwht16_stage(v, 4);
            v = fwht16_stage(v, 8);
            _mm512_storeu_ps(dst + i, v);
        }
        h = 16;
    }
#endif
    /* First two stages fused: radix-4 butterflies touch 4 neighbours. */
    if (h == 1 && m >= 4) {
        for (int i = 0; i < m; i += 4) {
            float a = src[i], b = src[i + 1], c = src[i + 2], d = src[i + 3];
            if (scale) a *= scale[i], b *= scale[i + 1], c *= scale[i + 2], d *= scale[i + 3];
            float s0 = a + b, d0 = a - b, s1 = c + d, d1 = c - d;
            dst[i] = s0 + s1;
            dst[i + 1] = d0 + d1;
            dst[i + 2] = s0 - s1;
            dst[i + 3] = d0 - d1;
        }
        h = 4;
    } else if (h == 1) { /* m 1 or 2 */
        for (int i = 0; i < m; i++) dst[i] = scale ? src[i] * scale[i] : src[i];
    }
    for (; 4 * h <= m; h *= 4) fwht_radix4(dst, m, h);
    if (h < m) { /* one stage left */
        float *lo = dst, *hi = dst + h;
#pragma omp simd
        for (int j = 0; j < h; j++) {
            float a = lo[j], b = hi[j];
            lo[j] = a + b;
            hi[j] = a - b;
        }
    }
}

/* Unnormalised H_d (src ⊙ scale) (transpose = 0) or H_d^T (src ⊙ scale)
 * (transpose = 1) into dst (may be src); scale may be NULL. */
static void fwht_row(float *dst, const float *src, const float *scale, int d, int transpose) {
    if ((d & (d - 1)) == 0) {
        fwht_pow2(dst, src, scale, d);
        return;
    }
    int m = d / 12;
    for (int a = 0; a < 12; a++)
        fwht_pow2(dst + (size_t)a * m, src + (size_t)a * m, scale ? scale + (size_t)a * m : NULL,
                  m);
    float hs[12][12];
    for (int a = 0; a < 12; a++)
        for (int s = 0; s < 12; s++) hs[a][s] = transpose ? bk_h12[s][a] : bk_h12[a][s];
    int j0 = 0;
#if defined(__AVX512F__)
    /* 16 columns at a time in registers: each column's 12 values read once,
     * its 12 outputs written once */
    if (!bk_cpu_portable())
        for (; j0 + 16 <= m; j0 += 16) {
            __m512 v[12];
            for (int s = 0; s < 12; s++) v[s] = _mm512_loadu_ps(dst + (size_t)s * m + j0);
            for (int a = 0; a < 12; a++) {
                __m512 acc = _mm512_setzero_ps();
                for (int s = 0; s < 12; s++)
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(hs[a][s]), v[s], acc);
                _mm512_storeu_ps(dst + (size_t)a * m + j0, acc);
            }
        }
#endif
    /* the rest in chunks of columns through a buffer on the stack (the
     * sums in the same order, s = 0..11 from 0; sign * x is exact, so an
     * FMA gives the same bits) */
    float tmp[12][FWHT_MIX_CHUNK];
    for (int b0 = j0; b0 < m; b0 += FWHT_MIX_CHUNK) {
        int nb = m - b0 < FWHT_MIX_CHUNK ? m - b0 : FWHT_MIX_CHUNK;
        for (int a = 0; a < 12; a++)
            memcpy(tmp[a], dst + (size_t)a * m + b0, (size_t)nb * sizeof(float));
        for (int a = 0; a < 12; a++) {
            float *out = dst + (size_t)a * m + b0;
            for (int j = 0; j < nb; j++) out[j] = 0.0f;
            for (int s = 0; s < 12; s++) {
                const float sign = hs[a][s], *in = tmp[s];
#pragma omp simd
                for (int j = 0; j < nb; j++) out[j] += sign * in[j];
            }
        }
    }
}

void bk_cpu_fwht_forward(float *out, float *pre, const float *inp, const float *alpha,
                         const float *beta, int N, int d) {
    const float norm = 1.0f / sqrtf((float)d);
    /* a few rows (one decode step) are cheaper than waking the thread team */
#pragma omp parallel if ((size_t)N * d >= 16384)
    {
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            float *y = out + (size_t)n * d;
            const float *x = inp + (size_t)n * d;
            fwht_row(y, x, NULL, d, 0);
            if (pre) { /* kept for the backward: the same products, so the same bits */
                float *p = pre + (size_t)n * d;
                const float *a = alpha, *b = beta;
                int i0 = 0;
#if defined(__AVX512F__)
                /* pre is read back only by the backward, long after: streaming
                 * stores skip reading its lines into the cache first */
                if (!bk_cpu_portable() && ((uintptr_t)p & 63) == 0) {
                    const __m512 vn = _mm512_set1_ps(norm);
                    for (; i0 + 16 <= d; i0 += 16) {
                        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(y + i0), vn);
                        _mm512_stream_ps(p + i0, v);
                        __m512 o = a ? _mm512_mul_ps(_mm512_loadu_ps(a + i0), v) : v;
                        o = _mm512_add_ps(o, b ? _mm512_loadu_ps(b + i0) : _mm512_setzero_ps());
                        _mm512_storeu_ps(y + i0, o);
                    }
                }
#endif
#pragma omp simd
                for (int i = i0; i < d; i++) {
                    float v = y[i] * norm;
                    p[i] = v;
                    y[i] = (a ? a[i] * v : v) + (b ? b[i] : 0.0f);
                }
            } else if (alpha && beta) {
#pragma omp simd
                for (int i = 0; i < d; i++) y[i] = alpha[i] * (y[i] * norm) + beta[i];
            } else if (alpha) {
#pragma omp simd
                for (int i = 0; i < d; i++) y[i] = alpha[i] * (y[i] * norm);
            } else if (beta) {
#pragma omp simd
                for (int i = 0; i < d; i++) y[i] = y[i] * norm + beta[i];
            } else {
#pragma omp simd
                for (int i = 0; i < d; i++) y[i] *= norm;
            }
        }
#if defined(__AVX512F__)
        if (pre) _mm_sfence(); /* this thread's streamed rows visible before the region ends */
#endif
    }
}

/* Rows per block of the backward: each block's column sums go to a partial
 * of its own, added in block order afterwards, so dalpha and dbeta do not
 * depend on the thread count. */
#define FWHT_BWD_ROWS 32
/* From this width on the backward streams dx out (below). */
#define FWHT_STREAM_MIN_D 2048

/* One pass over the rows: for each, dbeta's and dalpha's terms (H x/sqrt(d):
 * the forward's kept pre, or transformed again in a block's own row of the
 * workspace, which stays in cache) and dx = H^T(alpha dy)/sqrt(d), the
 * transform written straight into dx's row and scaled there while the row is
 * in cache; with pre kept, one transform per row as in the forward, which
 * reads x and writes y and pre, where this reads dy and pre and writes dx.
 * The workspace holds the partials and the rows; scratch (N*d floats) only
 * serves a row when it cannot be had. */
void bk_cpu_fwht_backward(float *dinp, float *dalpha, float *dbeta, float *scratch,
                          const float *dout, const float *inp, const float *pre, const float *alpha,
                          int N, int d) {
    if (N <= 0 || (!dinp && !dalpha && !dbeta)) return;
    const float norm = 1.0f / sqrtf((float)d);
    const int nb = (N + FWHT_BWD_ROWS - 1) / FWHT_BWD_ROWS;
    const int npart = (dalpha != NULL) + (dbeta != NULL);
    /* per block: [npart][d] partials, then one row */
    const size_t per = (size_t)(npart + 1) * d;
    float *ws = bk_cpu_workspace_take((size_t)nb * per * sizeof(float));
    if (!ws) { /* out of memory: the same sums in one thread */
        float *row = scratch;
        for (int n = 0; n < N; n++) {
            const float *dy = dout + (size_t)n * d;
            if (dbeta)
                for (int i = 0; i < d; i++) dbeta[i] += dy[i];
            if (dalpha && pre) {
                for (int i = 0; i < d; i++) dalpha[i] += dy[i] * pre[(size_t)n * d + i];
            } else if (dalpha) {
                fwht_row(row, inp + (size_t)n * d, NULL, d, 0);
                for (int i = 0; i < d; i++) dalpha[i] += dy[i] * (row[i] * norm);
            }
            if (dinp) {
                float *dx = dinp + (size_t)n * d;
                fwht_row(dx, dy, alpha, d, 1);
                for (int i = 0; i < d; i++) dx[i] *= norm;
            }
        }
        return;
    }
#if defined(__AVX512F__)
    /* wide rows (8 KB and more, with the partials and the dy and pre rows
     * past L1): transformed in the workspace row and streamed out, rather
     * than transformed in place in dx, whose lines would be read first
     * (measured: 11.3 -> 8.9 ms at d 2048, 4096 rows; slower below) */
    const int stream = d >= FWHT_STREAM_MIN_D && dinp && !bk_cpu_portable() &&
                       ((uintptr_t)dinp & 63) == 0 && d % 16 == 0;
#endif
#pragma omp parallel for schedule(static) if ((size_t)N * d >= 16384)
    for (int blk = 0; blk < nb; blk++) {
        float *pa = ws + (size_t)blk * per, *pb = pa + (dalpha ? d : 0);
        float *row = ws + (size_t)blk * per + (size_t)npart * d;
        if (npart) memset(pa, 0, (size_t)npart * d * sizeof(float));
        const int n1 = (blk + 1) * FWHT_BWD_ROWS < N ? (blk + 1) * FWHT_BWD_ROWS : N;
        for (int n = blk * FWHT_BWD_ROWS; n < n1; n++) {
            const float *dy = dout + (size_t)n * d;
            if (dalpha && pre) { /* the forward's kept H x / sqrt(d) */
                const float *pr = pre + (size_t)n * d;
                if (dbeta) {
#pragma omp simd
                    for (int i = 0; i < d; i++) {
                        pa[i] += dy[i] * pr[i];
                        pb[i] += dy[i];
                    }
                } else {
#pragma omp simd
                    for (int i = 0; i < d; i++) pa[i] += dy[i] * pr[i];
                }
            } else if (dalpha) { /* H x / sqrt(d), the forward's pre-affine output */
                fwht_row(row, inp + (size_t)n * d, NULL, d, 0);
                if (dbeta) {
#pragma omp simd
                    for (int i = 0; i < d; i++) {
                        pa[i] += dy[i] * (row[i] * norm);
                        pb[i] += dy[i];
                    }
                } else {
#pragma omp simd
                    for (int i = 0; i < d; i++) pa[i] += dy[i] * (row[i] * norm);
                }
            } else if (dbeta) {
#pragma omp simd
                for (int i = 0; i < d; i++) pb[i] += dy[i];
            }
            if (!dinp) continue;
            float *dx = dinp + (size_t)n * d;
#if defined(__AVX512F__)
            if (stream) { /* transformed in the cache, dx written without reading its lines */
                fwht_row(row, dy, alpha, d, 1);
                const __m512 vn = _mm512_set1_ps(norm);
                for (int i = 0; i < d; i += 16)
                    _mm512_stream_ps(dx + i, _mm512_mul_ps(_mm512_loadu_ps(row + i), vn));
                continue;
            }
#endif
            fwht_row(dx, dy, alpha, d, 1); /* H^T (alpha dy), alpha read on the first pass */
#pragma omp simd
            for (int i = 0; i < d; i++) dx[i] *= norm;
        }
#if defined(__AVX512F__)
        if (stream) _mm_sfence();
#endif
    }
    /* the partials in block order, columns split among threads */
    for (int p = 0; p < npart; p++) {
        float *acc = p == 0 && dalpha ? dalpha : dbeta;
#pragma omp parallel for schedule(static) if ((size_t)nb * d >= 65536)
        for (int i = 0; i < d; i++) {
            float s = 0.0f;
            for (int blk = 0; blk < nb; blk++) s += ws[(size_t)blk * per + (size_t)p * d + i];
            acc[i] += s;
        }
    }
    bk_cpu_workspace_give(ws);
}
