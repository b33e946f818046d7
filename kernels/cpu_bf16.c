/* cpu_bf16 — the CPU backend's bf16 products (gemm_bf16, bf16_available;
 * contracts in kernels/bk_ops.def): oneDNN's matmul primitive where the
 * CPU computes bf16 (AVX512-BF16, AMX), created once per shape and kept,
 * as the arena keeps tensors; elsewhere the operands rounded to bf16 and
 * the fp32 product, the same values at more than fp32's cost (tests and
 * the bf16 export use it; training then runs fp32, bf16_available says
 * why). oneDNN is optional at build time (BK_HAVE_DNNL), as CUDA is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk_bf16.h"
#include "kernels/cpu_ops.h"

/* dst[i] = the bf16 nearest src[i] as an fp32 (for the rounding path) */
static void round_rows(float *dst, const float *src, int rows, int cols, long long ld) {
#pragma omp parallel for schedule(static) if ((long long)rows * cols >= (1 << 16))
    for (int r = 0; r < rows; r++) {
        const float *s = src + (long long)r * ld;
        float *d = dst + (size_t)r * cols;
#pragma omp simd
        for (int c = 0; c < cols; c++) d[c] = bk_bf16_round(s[c]);
    }
}

/* gemm_bf16 by rounding: A and B rounded into dense fp32 copies (A item i
 * [rows_a, cols_a] as stored, likewise B), then the fp32 gemm on them. A
 * bf16 times a bf16 is exact in fp32, so this is bf16 products with fp32
 * sums, the oneDNN and cuBLASLt contract. */
static void gemm_bf16_rounded(int transa, int transb, int M, int N, int K, float alpha,
                              const float *A, int lda, long long sA, const float *Bm, int ldb,
                              long long sB, float beta, float *C, int ldc, long long sC,
                              int batch) {
    const int ra = transa ? K : M, ca = transa ? M : K, rb = transb ? N : K, cb = transb ? K : N;
    const size_t na = (size_t)ra * ca, nb = (size_t)rb * cb;
    float *a = malloc(((size_t)batch * (na + nb) + 1) * sizeof(float));
    if (!a) {
        fprintf(stderr, "bk gemm_bf16: out of memory for the rounded operands (%zu floats)\n",
                (size_t)batch * (na + nb));
        abort(); /* ops return void: like a failed CUDA call, it cannot go on */
    }
    float *b = a + (size_t)batch * na;
    for (int i = 0; i < batch; i++) {
        round_rows(a + (size_t)i * na, A + (long long)i * sA, ra, ca, lda);
        round_rows(b + (size_t)i * nb, Bm + (long long)i * sB, rb, cb, ldb);
    }
    bk_cpu_gemm(transa, transb, M, N, K, alpha, a, ca, (long long)na, b, cb, (long long)nb, beta, C,
                ldc, sC, batch);
    free(a);
}

#ifdef BK_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdint.h>

/* One cached primitive: the shape, layout and scalars it was made for. */
typedef struct {
    int transa, transb, M, N, K, ldc, batch;
    long long sC;
    float alpha, beta;
    dnnl_memory_desc_t a_md, b_md, c_md;
    dnnl_primitive_t prim;
} mm_entry;

/* A step has a few dozen distinct products (each linear's forward and two
 * backward products, attention's batched ones); beyond this many, further
 * shapes take the rounding path rather than evict. */
#define MM_CACHE 128

static pthread_mutex_t mm_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t mm_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t mm_engine;
static dnnl_stream_t mm_stream;
static int mm_native;    /* 1: oneDNN computes bf16 on this CPU */
static char mm_why[256]; /* why not, when mm_native is 0 */
static mm_entry mm_cache[MM_CACHE];
static int mm_count;

/* oneDNN's name for an instruction set, for the message */
static const char *isa_name(dnnl_cpu_isa_t isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41:
        return "sse4.1";
    case dnnl_cpu_isa_avx:
        return "avx";
    case dnnl_cpu_isa_avx2:
        return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
        return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic:
        return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops:
        return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core:
        return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
        return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
        return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
        return "avx512_core_amx";
    default:
        return "unknown";
    }
}

/* The engine, the stream, and whether bf16 is native here: the effective
 * instruction set must include AVX512-BF16. oneDNN 2.6 emulates bf16
 * products on plain AVX-512 (avx512_core) and has none below it (on this
 * project's AVX2 Zen 3 creation fails, "unimplemented", docs/results.md);
 * the emulation is not used: it was not measured faster than fp32. */
static void mm_init(void) {
    if (dnnl_engine_create(&mm_engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&mm_stream, mm_engine, dnnl_stream_default_flags) != dnnl_success) {
        snprintf(mm_why, sizeof mm_why, "oneDNN could not create its CPU engine or stream");
        return;
    }
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if (((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) !=
        (unsigned)dnnl_cpu_isa_avx512_core_bf16) {
        snprintf(mm_why, sizeof mm_why,
                 "this CPU has no AVX512-BF16 (oneDNN %d.%d's best instruction set here: %s; "
                 "below AVX-512 it has no bf16 products at all, and its AVX-512 emulation is "
                 "not used)",
                 dnnl_version()->major, dnnl_version()->minor, isa_name(isa));
        return;
    }
    mm_native = 1;
}

/* A dense bf16 operand [batch, rows, cols] as the logical [batch, R, C]
 * a matmul reads (trans: stored transposed). */
static dnnl_status_t operand_md(dnnl_memory_desc_t *md, int batch, int R, int Cc, int trans) {
    dnnl_dims_t dims = {batch, R, Cc};
    dnnl_dims_t str = {(dnnl_dim_t)R * Cc, trans ? 1 : Cc, trans ? R : 1};
    if (batch == 1) {
        dnnl_dims_t d2 = {R, Cc}, s2 = {str[1], str[2]};
        return dnnl_memory_desc_init_by_strides(md, 2, d2, dnnl_bf16, s2);
    }
    return dnnl_memory_desc_init_by_strides(md, 3, dims, dnnl_bf16, str);
}

/* The cached primitive for this call, made on first use; NULL when oneDNN
 * will not make one (the caller rounds instead). mm_lock held. */
static mm_entry *mm_get(int transa, int transb, int M, int N, int K, float alpha, float beta,
                        int ldc, long long sC, int batch) {
    for (int i = 0; i < mm_count; i++) {
        mm_entry *e = &mm_cache[i];
        if (e->transa == transa && e->transb == transb && e->M == M && e->N == N && e->K == K &&
            e->ldc == ldc && e->batch == batch && (batch == 1 || e->sC == sC) &&
            e->alpha == alpha && e->beta == beta)
            return e->prim ? e : NULL;
    }
    if (mm_count == MM_CACHE) return NULL;
    mm_entry *e = &mm_cache[mm_count++];
    *e = (mm_entry){transa, transb, M, N, K, ldc, batch, sC, alpha, beta, {0}, {0}, {0}, NULL};
    dnnl_dims_t cd = {batch, M, N}, cs = {sC, ldc, 1};
    dnnl_status_t st = operand_md(&e->a_md, batch, M, K, transa);
    if (st == dnnl_success) st = operand_md(&e->b_md, batch, K, N, transb);
    if (st == dnnl_success) {
        if (batch == 1) {
            dnnl_dims_t d2 = {M, N}, s2 = {ldc, 1};
            st = dnnl_memory_desc_init_by_strides(&e->c_md, 2, d2, dnnl_f32, s2);
        } else {
            st = dnnl_memory_desc_init_by_strides(&e->c_md, 3, cd, dnnl_f32, cs);
        }
    }
    dnnl_matmul_desc_t desc;
    if (st == dnnl_success) st = dnnl_matmul_desc_init(&desc, &e->a_md, &e->b_md, NULL, &e->c_md);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (st == dnnl_success) st = dnnl_primitive_attr_create(&attr);
    if (st == dnnl_success && alpha != 1.0f)
        st = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha);
    if (st == dnnl_success && beta != 0.0f) {
        st = dnnl_post_ops_create(&po);
        if (st == dnnl_success) st = dnnl_post_ops_append_sum(po, beta);
        if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, po);
    }
    dnnl_primitive_desc_t pd = NULL;
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &desc, attr, mm_engine, NULL);
    if (st == dnnl_success) st = dnnl_primitive_create(&e->prim, pd);
    if (st != dnnl_success) e->prim = NULL; /* remembered: this shape rounds */
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return e->prim ? e : NULL;
}

/* dst = src rounded to bf16, rows of cols values ld apart, written dense */
static void cast_rows(uint16_t *dst, const float *src, int rows, int cols, long long ld) {
#pragma omp parallel for schedule(static) if ((long long)rows * cols >= (1 << 16))
    for (int r = 0; r < rows; r++) {
        const float *s = src + (long long)r * ld;
        uint16_t *d = dst + (size_t)r * cols;
#pragma omp simd
        for (int c = 0; c < cols; c++) d[c] = bk_bf16_from_f32(s[c]);
    }
}

/* Runs the product through the cached primitive: both operands cast into
 * the workspace (dense, in their stored layout), then one execute. Returns
 * 0, or -1 when it did not run (no primitive, no memory, a oneDNN error
 * before anything was written). */
static int gemm_dnnl(int transa, int transb, int M, int N, int K, float alpha, const float *A,
                     int lda, long long sA, const float *Bm, int ldb, long long sB, float beta,
                     float *C, int ldc, long long sC, int batch) {
    pthread_mutex_lock(&mm_lock);
    mm_entry *e = mm_get(transa, transb, M, N, K, alpha, beta, ldc, sC, batch);
    pthread_mutex_unlock(&mm_lock);
    if (!e) return -1;
    const int ra = transa ? K : M, ca = transa ? M : K, rb = transb ? N : K, cb = transb ? K : N;
    const size_t na = (size_t)ra * ca, nb = (size_t)rb * cb;
    uint16_t *a = bk_cpu_workspace_take((size_t)batch * (na + nb) * sizeof(uint16_t));
    if (!a) return -1;
    uint16_t *b = a + (size_t)batch * na;
    for (int i = 0; i < batch; i++) {
        cast_rows(a + (size_t)i * na, A + (long long)i * sA, ra, ca, lda);
        cast_rows(b + (size_t)i * nb, Bm + (long long)i * sB, rb, cb, ldb);
    }
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL;
    dnnl_status_t st = dnnl_memory_create(&ma, &e->a_md, mm_engine, a);
    if (st == dnnl_success) st = dnnl_memory_create(&mb, &e->b_md, mm_engine, b);
    if (st == dnnl_success) st = dnnl_memory_create(&mc, &e->c_md, mm_engine, C);
    if (st == dnnl_success) {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
        st = dnnl_primitive_execute(e->prim, mm_stream, 3, args);
        if (st == dnnl_success) st = dnnl_stream_wait(mm_stream);
        if (st != dnnl_success) { /* C may be half written: nothing sound is left */
            fprintf(stderr, "bk gemm_bf16: dnnl_primitive_execute failed (status %d)\n", (int)st);
            abort();
        }
    }
    if (ma) dnnl_memory_destroy(ma);
    if (mb) dnnl_memory_destroy(mb);
    if (mc) dnnl_memory_destroy(mc);
    bk_cpu_workspace_give(a);
    return st == dnnl_success ? 0 : -1;
}
#endif

int bk_cpu_bf16_available(char *why, size_t whylen) {
#ifdef BK_HAVE_DNNL
    pthread_once(&mm_once, mm_init);
    if (mm_native) return 1;
    if (why && whylen) snprintf(why, whylen, "%s", mm_why);
#else
    if (why && whylen)
        snprintf(why, whylen,
                 "bf was built without oneDNN (libdnnl-dev was not found at build time), the "
                 "library of the CPU's bf16 products");
#endif
    return 0;
}

void bk_cpu_gemm_bf16(int transa, int transb, int M, int N, int K, float alpha, const float *A,
                      int lda, long long strideA, const float *Bm, int ldb, long long strideB,
                      float beta, float *Cm, int ldc, long long strideC, int batch) {
    if (M <= 0 || N <= 0 || batch <= 0) return;
    if (K <= 0) { /* no products: C = beta C, as gemm */
        bk_cpu_gemm(transa, transb, M, N, K, alpha, A, lda, strideA, Bm, ldb, strideB, beta, Cm,
                    ldc, strideC, batch);
        return;
    }
#ifdef BK_HAVE_DNNL
    if (bk_cpu_bf16_available(NULL, 0) &&
        gemm_dnnl(transa, transb, M, N, K, alpha, A, lda, strideA, Bm, ldb, strideB, beta, Cm, ldc,
                  strideC, batch) == 0)
        return;
#endif
    gemm_bf16_rounded(transa, transb, M, N, K, alpha, A, lda, strideA, Bm, ldb, strideB, beta, Cm,
                      ldc, strideC, batch);
}
