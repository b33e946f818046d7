#include "kernels/bk.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

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

void bk_openmp_passive(char **argv) {
    if (getenv("OMP_WAIT_POLICY")) return;
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return;
    self[n] = 0; /* exec the real path, so the process keeps its name (ps, pgrep) */
    if (setenv("OMP_WAIT_POLICY", "passive", 1)) return;
    setenv("BK_OMP_PASSIVE_SET", "1", 1); /* children (benchmark peers) can tell */
    execv(self, argv);
    /* exec failed: carry on with the default policy */
}
