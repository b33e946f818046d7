/* bk_select.c — picks the backend a run computes on ("auto", "cpu",
 * "cuda"), the stand-in bk_cuda of a build without CUDA, and re-executing
 * with OpenMP's passive wait policy (bk_openmp_passive). */

#include "kernels/bk.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <strings.h>

#ifndef BK_HAVE_CUDA
const bk_backend *bk_cuda(const char **why) {
    if (why) *why = "bf was built without CUDA (nvcc was not found at build time)";
    return NULL;
}
#endif

int bk_select(const char *device, const bk_backend **out, char *err, size_t errlen) {
    const char *why = NULL;
    if (!device || strcmp(device, "auto") == 0) {
        const bk_backend *cuda = bk_cuda(&why);
        *out = cuda ? cuda : bk_cpu();
        return 0;
    }
    if (strcmp(device, "cpu") == 0) {
        *out = bk_cpu();
        return 0;
    }
    if (strcmp(device, "cuda") == 0) {
        const bk_backend *cuda = bk_cuda(&why);
        if (!cuda) {
            snprintf(err, errlen, "device 'cuda' is not usable: %s", why ? why : "unknown reason");
            return -1;
        }
        *out = cuda;
        return 0;
    }
    snprintf(err, errlen, "unknown device '%s' (valid: auto, cpu, cuda)", device);
    return -1;
}

/* The OpenBLAS kernels to ask for, or NULL to leave its choice. OpenBLAS
 * picks its kernels from the CPU's family and model, and on a model it does
 * not know (a virtual machine that reports a generic "Intel Xeon Processor")
 * falls back to its SSE3 kernels, "Prescott": there an AVX-512 machine ran
 * the mixer sublayer's sgemm 3x slower than with "SkylakeX". Only that
 * fallback (a pre-AVX core on a CPU with AVX2 or AVX-512) is overridden, and
 * never a user's OPENBLAS_CORETYPE. */
static const char *blas_coretype(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (getenv("OPENBLAS_CORETYPE")) return NULL;
    static const char *const old[] = {"prescott", "core2", "penryn", "dunnington", "nehalem"};
    const char *name = openblas_get_corename();
    int fallback = 0;
    for (size_t i = 0; name && i < sizeof old / sizeof old[0]; i++)
        fallback |= strcasecmp(name, old[i]) == 0;
    if (!fallback) return NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512cd"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
    return NULL;
}

void bk_openmp_passive(char **argv) {
    int omp = getenv("OMP_WAIT_POLICY") == NULL;
    const char *core = blas_coretype();
    if (!omp && !core) return;
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return;
    self[n] = 0; /* exec the real path, so the process keeps its name (ps, pgrep) */
    if (omp) {
        if (setenv("OMP_WAIT_POLICY", "passive", 1)) return;
        setenv("BK_OMP_PASSIVE_SET", "1", 1); /* children (benchmark peers) can tell */
    }
    if (core && setenv("OPENBLAS_CORETYPE", core, 1)) return;
    execv(self, argv);
    /* exec failed: carry on with the default policy and kernels */
}
