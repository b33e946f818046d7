/* cpu_memory.c — the CPU backend's memory ops: alloc/release, the shared
 * workspace, host<->"device" copies and fills, and the d2h/h2d counters the
 * no-copy tests read. */

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_ops.h"

/* Device-to-host traffic since the last reset (bk.h, d2h_count). On the CPU
 * "device" memory is host memory, so these count what the same calls would
 * copy over PCIe on a GPU: the tests of "no copy in a training step" run here. */
static _Atomic uint64_t d2h_calls, d2h_bytes;

void bk_cpu_count_d2h(size_t bytes) {
    atomic_fetch_add_explicit(&d2h_calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&d2h_bytes, (uint64_t)bytes, memory_order_relaxed);
}

void bk_cpu_d2h_count(uint64_t *calls, uint64_t *bytes) {
    if (calls) *calls = atomic_load_explicit(&d2h_calls, memory_order_relaxed);
    if (bytes) *bytes = atomic_load_explicit(&d2h_bytes, memory_order_relaxed);
}

void bk_cpu_d2h_reset(void) {
    atomic_store_explicit(&d2h_calls, 0, memory_order_relaxed);
    atomic_store_explicit(&d2h_bytes, 0, memory_order_relaxed);
}

/* Host-to-device traffic (bk.h, h2d_count), counted the same way. */
static _Atomic uint64_t h2d_calls, h2d_bytes;

void bk_cpu_h2d_count(uint64_t *calls, uint64_t *bytes) {
    if (calls) *calls = atomic_load_explicit(&h2d_calls, memory_order_relaxed);
    if (bytes) *bytes = atomic_load_explicit(&h2d_bytes, memory_order_relaxed);
}

void bk_cpu_h2d_reset(void) {
    atomic_store_explicit(&h2d_calls, 0, memory_order_relaxed);
    atomic_store_explicit(&h2d_bytes, 0, memory_order_relaxed);
}

void bk_cpu_fill32(void *p, uint32_t word, size_t n) {
    uint32_t *w = p;
    for (size_t i = 0; i < n; i++) w[i] = word;
}

/* 64-byte aligned so vector loads never split a cache line. */
void *bk_cpu_alloc(size_t bytes) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (p) memset(p, 0, rounded ? rounded : 64);
    return p;
}

void bk_cpu_release(void *p) { free(p); }

/* The kernels' reusable workspace: one 64-byte aligned buffer kept across
 * calls, so a kernel that needs partials or packed operands on every call
 * (tn_gemm, skinny_gemm, the FWHT and LayerNorm backward's column partials)
 * neither mallocs nor faults fresh pages each time. A second taker while it is
 * in use (another thread; kernels never nest) gets a buffer of its own. */
static pthread_mutex_t ws_lock = PTHREAD_MUTEX_INITIALIZER;
static void *ws_buf;
static size_t ws_cap;

void *bk_cpu_workspace_take(size_t bytes) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (!rounded) rounded = 64;
    if (pthread_mutex_trylock(&ws_lock) != 0) return aligned_alloc(64, rounded);
    if (ws_cap < rounded) {
        free(ws_buf);
        ws_buf = aligned_alloc(64, rounded);
        ws_cap = ws_buf ? rounded : 0;
    }
    if (!ws_buf) {
        pthread_mutex_unlock(&ws_lock);
        return NULL;
    }
    return ws_buf;
}

void bk_cpu_workspace_give(void *p) {
    if (!p) return;
    if (p == ws_buf)
        pthread_mutex_unlock(&ws_lock);
    else
        free(p);
}

/* A number from the first line of path (cgroup files: "max" is no limit). */
static int read_u64_file(const char *path, unsigned long long *v) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int ok = fscanf(f, "%llu", v) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

int bk_cpu_mem_available(size_t *bytes) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    unsigned long long kb = 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
    fclose(f);
    if (!found) return -1;
    unsigned long long avail = kb * 1024ull, max, cur;
    /* a container's limit (cgroup v2) can be tighter than the host's memory */
    if (read_u64_file("/sys/fs/cgroup/memory.max", &max) == 0 &&
        read_u64_file("/sys/fs/cgroup/memory.current", &cur) == 0 && max > cur && max - cur < avail)
        avail = max - cur;
    *bytes = (size_t)avail;
    return 0;
}
void bk_cpu_to_device(void *dst, const void *src_host, size_t bytes) {
    atomic_fetch_add_explicit(&h2d_calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h2d_bytes, (uint64_t)bytes, memory_order_relaxed);
    memcpy(dst, src_host, bytes);
}
void bk_cpu_to_host(void *dst_host, const void *src, size_t bytes) {
    bk_cpu_count_d2h(bytes);
    memcpy(dst_host, src, bytes);
}
void bk_cpu_copy(void *dst, const void *src, size_t bytes) { memmove(dst, src, bytes); }
void bk_cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
void bk_cpu_sync(void) {}
