#include "kernels/bk.h"

#include <stdio.h>
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
