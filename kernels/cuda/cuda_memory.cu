/* Device memory for the CUDA backend, the backend's shared workspace, and
 * the device-to-host copy counter. */
#include <atomic>

#include "kernels/cuda/cuda_check.h"

static std::atomic<uint64_t> d2h_calls, d2h_bytes;

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

/* cudaMemcpy on the legacy stream waits for queued work: to_host sees every
 * op issued before it. */
void bk_cuda_to_device(void *dst, const void *src_host, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpy(dst, src_host, bytes, cudaMemcpyHostToDevice));
}

void bk_cuda_to_host(void *dst_host, const void *src, size_t bytes) {
    bk_cuda_count_d2h(bytes);
    if (bytes) CUDA_CHECK(cudaMemcpy(dst_host, src, bytes, cudaMemcpyDeviceToHost));
}

void bk_cuda_copy(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src)
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
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
