#include "kernels/block_reduce.cuh"
#include "kernels/common.cuh"
#include "kernels/cross_entropy.h"

static int row_threads(long long v) { return v >= 16384 ? 1024 : (v >= 2048 ? 256 : 64); }

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* One block per row, one pass: each thread keeps a running max and its sum of exponentials
 * (rescaled when the max grows), then deterministic block reductions combine them. by8: the row
 * length is a multiple of 8 and rows are 16-byte aligned, so a thread reads 8 logits at a time. */
template <typename T>
__global__ void ce_rows_kernel(float *lse, float *row_loss, const T *logits, const int32_t *targets, long long v,
                               unsigned long long *flag, int by8) {
    __shared__ float red[32];
    long long r = blockIdx.x;
    const T *row = logits + r * v;
    float m = -INFINITY, s = 0.f;
    if (by8) {
        for (long long j = threadIdx.x * 8LL; j < v; j += blockDim.x * 8LL) {
            float x[8];
            load8(row + j, x);
            float mx = x[0];
#pragma unroll
            for (int k = 1; k < 8; k++) mx = fmaxf(mx, x[k]);
            if (mx > m) s *= expf(m - mx), m = mx;
#pragma unroll
            for (int k = 0; k < 8; k++) s += expf(x[k] - m);
        }
    } else {
        for (long long j = threadIdx.x; j < v; j += blockDim.x) {
            const float x = to_f32(row[j]);
            if (x > m) s *= expf(m - x), m = x;
            s += expf(x - m);
        }
    }
    const float mx = br_block_max(m, red);
    s = br_block_sum(m == -INFINITY ? 0.f : s * expf(m - mx), red);
    if (threadIdx.x == 0) {
        float l = mx + logf(s);
        int t = targets[r];
        lse[r] = l;
        row_loss[r] = (t >= 0 && t < v) ? l - to_f32(row[t]) : 0.f;
        if (t >= v) atomicMin(flag, (unsigned long long)r); /* integer atomic: the first bad row */
    }
}

/* One block: the row losses and the count in a fixed order. */
__global__ void ce_final_kernel(float *loss, int32_t *count, const float *row_loss, const int32_t *targets, long long n,
                                long long v) {
    __shared__ float red[32];
    __shared__ int redi[32];
    float s = 0.f;
    int c = 0;
    for (long long r = threadIdx.x; r < n; r += blockDim.x) {
        s += row_loss[r];
        c += targets[r] >= 0 && targets[r] < v;
    }
    s = br_block_sum(s, red);
    c = br_block_sum_int(c, redi);
    if (threadIdx.x == 0) {
        *loss = c > 0 ? s / (float)c : 0.f;
        *count = c;
    }
}

template <typename T>
__global__ void ce_bwd_kernel(T *dlogits, const float *dloss, const float *lse, const int32_t *count, const T *logits,
                              const int32_t *targets, long long v, int accumulate, int by8) {
    long long r = blockIdx.x;
    int c = *count, t = targets[r];
    float scale = c > 0 ? *dloss / (float)c : 0.f, l = lse[r];
    const T *row = logits + r * v;
    T *drow = dlogits + r * v;
    if (by8) { /* dlogits may be the logits themselves: each thread reads its 8 before writing them */
        for (long long j = threadIdx.x * 8LL; j < v; j += blockDim.x * 8LL) {
            float x[8], d[8];
            load8(row + j, x);
            if (accumulate) load8(drow + j, d);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float g = t >= 0 ? (expf(x[k] - l) - (j + k == t ? 1.f : 0.f)) * scale : 0.f;
                d[k] = accumulate ? d[k] + g : g;
            }
            store8(drow + j, d);
        }
        return;
    }
    for (long long j = threadIdx.x; j < v; j += blockDim.x) {
        float d = t >= 0 ? (expf(to_f32(row[j]) - l) - (j == t ? 1.f : 0.f)) * scale : 0.f;
        drow[j] = from_f32<T>(accumulate ? to_f32(drow[j]) + d : d);
    }
}

extern "C" size_t cross_entropy_cuda_scratch_bytes(int64_t n) {
    return align256((size_t)(n > 0 ? n : 1) * sizeof(float)) + 256;
}

extern "C" int64_t cross_entropy_forward_cuda(DType dt, float *loss, float *lse, int32_t *count, const void *logits,
                                              const int32_t *targets, int64_t n, int64_t v, void *scratch,
                                              int32_t *bad_target, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (n > 2147483647LL) gdp_fatal("kernel 'cross_entropy': %lld rows exceed the grid", (long long)n);
    float *row_loss = (float *)scratch;
    unsigned long long *flag = (unsigned long long *)((char *)scratch + align256((size_t)(n > 0 ? n : 1) * sizeof(float)));
    unsigned long long host_flag = 0;
    CUDA_CHECK(cudaMemsetAsync(flag, 0xff, sizeof *flag, s));
    if (n > 0) {
        DISPATCH_F32_BF16(dt, "cross_entropy", ce_rows_kernel<T><<<(unsigned)n, row_threads(v), 0, s>>>(
                                                   lse, row_loss, (const T *)logits, targets, v, flag,
                                                   rows_by8(v, logits)));
        KERNEL_CHECK();
    }
    ce_final_kernel<<<1, 1024, 0, s>>>(loss, count, row_loss, targets, n, v);
    KERNEL_CHECK();
    CUDA_CHECK(cudaMemcpyAsync(&host_flag, flag, sizeof host_flag, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    if (host_flag == ~0ULL) return -1;
    CUDA_CHECK(cudaMemcpyAsync(bad_target, targets + host_flag, sizeof *bad_target, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return (int64_t)host_flag;
}

extern "C" void cross_entropy_backward_cuda(DType dt, void *dlogits, const float *dloss, const float *lse,
                                            const int32_t *count, const void *logits, const int32_t *targets,
                                            int64_t n, int64_t v, int accumulate, void *stream) {
    if (n == 0 || v == 0) return;
    DISPATCH_F32_BF16(dt, "cross_entropy", ce_bwd_kernel<T><<<(unsigned)n, row_threads(v), 0, (cudaStream_t)stream>>>(
                                               (T *)dlogits, dloss, lse, count, (const T *)logits, targets, v,
                                               accumulate, rows_by8(v, dlogits, logits)));
    KERNEL_CHECK();
}
