/* Device memory for the CUDA backend, the backend's shared workspace, the
 * host<->device copy counters and the pinned staging ring of to_device. */
#include <atomic>
#include <mutex>
#include <string.h>

#include "kernels/cuda/cuda_check.h"

static std::atomic<uint64_t> d2h_calls, d2h_bytes, h2d_calls, h2d_bytes;

void bk_cuda_h2d_count(uint64_t *calls, uint64_t *bytes) {
    if (calls) *calls = h2d_calls.load(std::memory_order_relaxed);
    if (bytes) *bytes = h2d_bytes.load(std::memory_order_relaxed);
}

void bk_cuda_h2d_reset(void) {
    h2d_calls.store(0, std::memory_order_relaxed);
    h2d_bytes.store(0, std::memory_order_relaxed);
}

void bk_cuda_count_d2h(size_t bytes) {
    d2h_calls.fetch_add(1, std::memory_order_relaxed);
    d2h_bytes.fetch_add((uint64_t)bytes, std::memory_order_relaxed);
}

void bk_cuda_d2h_count(uint64_t *calls, uint64_t *bytes) {
    if (calls) *calls = d2h_calls.load(std::memory_order_relaxed);
    if (bytes) *bytes = d2h_bytes.load(std::memory_order_relaxed);
}

void bk_cuda_d2h_reset(void) {
    d2h_calls.store(0, std::memory_order_relaxed);
    d2h_bytes.store(0, std::memory_order_relaxed);
}

/* Zeroed device memory, or NULL (the CUDA error is cleared so the next
 * checked call does not see it). bytes == 0 still returns a valid pointer. */
int bk_cuda_mem_available(size_t *bytes) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    *bytes = free_b;
    return 0;
}

void *bk_cuda_alloc(size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    if (cudaMemset(p, 0, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        cudaFree(p);
        return NULL;
    }
    return p;
}

void bk_cuda_release(void *p) {
    if (p) CUDA_CHECK(cudaFree(p));
}

/* to_device through pinned staging. A plain cudaMemcpy from pageable memory
 * blocks the host until every queued op has run and the copy is done (and
 * the driver stages it through its own small pinned buffer). Instead the
 * host copies src into one of STAGE_N pinned slots and queues an async copy
 * from it on the legacy stream, so it stays ordered with the ops before and
 * after it, and to_device returns while the device still works: the host
 * prepares the next batch meanwhile. A slot is reused only after the event
 * recorded behind its last copy has fired. Larger copies go through the
 * slots in STAGE_BYTES pieces. If pinned memory cannot be had, the plain
 * synchronous copy is used (same result, slower). One stream is enough: a
 * separate copy stream would have to wait for the ops that read dst anyway. */
#define STAGE_N 4
#define STAGE_BYTES ((size_t)8 << 20)

static struct {
    std::mutex lock;
    int ready; /* 1: slots and events exist; -1: pinned memory refused */
    int next;  /* slot the next piece goes through */
    void *slot[STAGE_N];
    cudaEvent_t done[STAGE_N];
    int pending[STAGE_N]; /* an event was recorded behind the slot's last copy */
} stage;

static int stage_init(void) {
    for (int i = 0; i < STAGE_N; i++) {
        if (cudaHostAlloc(&stage.slot[i], STAGE_BYTES, cudaHostAllocDefault) != cudaSuccess) {
            (void)cudaGetLastError();
            for (int j = 0; j < i; j++)
                cudaFreeHost(stage.slot[j]), cudaEventDestroy(stage.done[j]);
            return -1;
        }
        CUDA_CHECK(cudaEventCreateWithFlags(&stage.done[i], cudaEventDisableTiming));
        stage.pending[i] = 0;
    }
    return 1;
}

void bk_cuda_to_device(void *dst, const void *src_host, size_t bytes) {
    h2d_calls.fetch_add(1, std::memory_order_relaxed);
    h2d_bytes.fetch_add((uint64_t)bytes, std::memory_order_relaxed);
    if (!bytes) return;
    std::lock_guard<std::mutex> g(stage.lock);
    if (!stage.ready) stage.ready = stage_init();
    if (stage.ready < 0) {
        CUDA_CHECK(cudaMemcpy(dst, src_host, bytes, cudaMemcpyHostToDevice));
        return;
    }
    for (size_t off = 0; off < bytes; off += STAGE_BYTES) {
        size_t n = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
        int i = stage.next;
        stage.next = (i + 1) % STAGE_N;
        if (stage.pending[i]) CUDA_CHECK(cudaEventSynchronize(stage.done[i]));
        memcpy(stage.slot[i], (const char *)src_host + off, n);
        CUDA_CHECK(cudaMemcpyAsync((char *)dst + off, stage.slot[i], n, cudaMemcpyHostToDevice, 0));
        CUDA_CHECK(cudaEventRecord(stage.done[i], 0));
        stage.pending[i] = 1;
    }
}

/* to_host is synchronous (the caller reads dst_host at once); cudaMemcpy on
 * the legacy stream waits for queued work, so it sees every op issued
 * before it. */

void bk_cuda_to_host(void *dst_host, const void *src, size_t bytes) {
    bk_cuda_count_d2h(bytes);
    if (bytes) CUDA_CHECK(cudaMemcpy(dst_host, src, bytes, cudaMemcpyDeviceToHost));
}

void bk_cuda_copy(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src)
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
}

__global__ static void fill32_kernel(uint32_t *p, uint32_t word, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = word;
}

void bk_cuda_fill32(void *p, uint32_t word, size_t n) {
    if (!n) return;
    fill32_kernel<<<bk_blocks(n, BK_THREADS), BK_THREADS>>>((uint32_t *)p, word, n);
    CUDA_CHECK_LAUNCH();
}

void bk_cuda_zero(void *p, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, 0));
}

void bk_cuda_sync(void) { CUDA_CHECK(cudaDeviceSynchronize()); }

static void *workspace;
static size_t workspace_bytes;

void *bk_cuda_workspace(size_t bytes) {
    if (bytes <= workspace_bytes) return workspace;
    size_t want = workspace_bytes ? workspace_bytes : (size_t)1 << 20;
    while (want < bytes) want *= 2;
    if (workspace) CUDA_CHECK(cudaFree(workspace)); /* synchronises: no op still reads it */
    workspace = NULL;
    workspace_bytes = 0;
    CUDA_CHECK(cudaMalloc(&workspace, want));
    workspace_bytes = want;
    return workspace;
}
