#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_ops.h"

/* 64-byte aligned so vector loads never split a cache line. */
void *bk_cpu_alloc(size_t bytes) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (p) memset(p, 0, rounded ? rounded : 64);
    return p;
}

void bk_cpu_release(void *p) { free(p); }
void bk_cpu_to_device(void *dst, const void *src_host, size_t bytes) {
    memcpy(dst, src_host, bytes);
}
void bk_cpu_to_host(void *dst_host, const void *src, size_t bytes) { memcpy(dst_host, src, bytes); }
void bk_cpu_copy(void *dst, const void *src, size_t bytes) { memmove(dst, src, bytes); }
void bk_cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
void bk_cpu_sync(void) {}
