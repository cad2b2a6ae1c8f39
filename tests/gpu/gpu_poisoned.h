/* Device tensors inside poisoned allocations, for kernel tests that check writes stay in bounds:
 * every byte of the allocation starts as 0xFF, the tensor sits at a chosen byte offset (to move its
 * alignment), and dev_take reports whether any byte around the tensor changed. */
#pragma once
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "base/common.h"
#include "base/cuda_check.h"

#define GPU_POISON_SLACK 64 /* poisoned bytes after each device tensor (and before it when moved) */

typedef struct DevBuf {
    unsigned char *base;
    void *p; /* base + off, or NULL for a tensor not asked for */
    size_t off, bytes;
} DevBuf;

/* A device tensor of `bytes` at byte offset `off` of a poisoned allocation, holding init if given;
 * want 0 gives p = NULL (the kernels' "not needed"). */
static inline DevBuf dev_buf(int want, size_t bytes, size_t off, const void *init) {
    DevBuf d = {NULL, NULL, off, bytes};
    if (!want) return d;
    CUDA_CHECK(cudaMalloc((void **)&d.base, bytes + off + GPU_POISON_SLACK));
    CUDA_CHECK(cudaMemset(d.base, 0xFF, bytes + off + GPU_POISON_SLACK));
    d.p = d.base + off;
    if (init && bytes) CUDA_CHECK(cudaMemcpy(d.p, init, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* Copies the tensor into out (if both exist) and frees it; false if a byte around it changed. */
static inline bool dev_take(DevBuf *d, void *out) {
    if (!d->base) return true;
    size_t total = d->bytes + d->off + GPU_POISON_SLACK;
    unsigned char *all = (unsigned char *)xmalloc(total);
    CUDA_CHECK(cudaMemcpy(all, d->base, total, cudaMemcpyDeviceToHost));
    if (out) memcpy(out, all + d->off, d->bytes);
    bool ok = true;
    for (size_t i = 0; i < total; i++)
        if ((i < d->off || i >= d->off + d->bytes) && all[i] != 0xFF) ok = false;
    free(all);
    CUDA_CHECK(cudaFree(d->base));
    d->base = NULL;
    return ok;
}
