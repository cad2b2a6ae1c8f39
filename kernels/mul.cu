#include "kernels/common.cuh"
#include "kernels/mul.h"

template <typename T>
__global__ void mul_fwd_kernel(T *out, const T *a, const T *b, long long outer, long long inner, int accumulate) {
    long long n = outer * inner;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = to_f32(a[i]) * to_f32(b[i % inner]);
        out[i] = from_f32<T>(accumulate ? to_f32(out[i]) + v : v);
    }
}

/* As add's column reduction: 32 columns per block, 8 rows of threads split the outer loop, then a
 * fixed-order sum through shared memory (deterministic). */
template <typename T>
__global__ void mul_bwd_b_kernel(T *db, const T *dout, const T *a, long long outer, long long inner, int accumulate) {
    __shared__ float part[8][33];
    long long j = blockIdx.x * 32LL + threadIdx.x;
    float s = 0.f;
    if (j < inner)
        for (long long o = threadIdx.y; o < outer; o += blockDim.y) s += to_f32(dout[o * inner + j]) * to_f32(a[o * inner + j]);
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && j < inner) {
        float t = 0.f;
        for (int y = 0; y < (int)blockDim.y; y++) t += part[y][threadIdx.x];
        db[j] = from_f32<T>(accumulate ? to_f32(db[j]) + t : t);
    }
}

extern "C" void mul_forward_cuda(DType dt, void *out, const void *a, const void *b, int64_t outer, int64_t inner,
                                 int accumulate, void *stream) {
    long long n = outer * inner;
    if (n == 0) return;
    DISPATCH_F32_BF16(dt, "mul", mul_fwd_kernel<T><<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(
                                     (T *)out, (const T *)a, (const T *)b, outer, inner, accumulate));
    KERNEL_CHECK();
}

extern "C" void mul_backward_b_cuda(DType dt, void *db, const void *dout, const void *a, int64_t outer, int64_t inner,
                                    int accumulate, void *stream) {
    if (inner == 0) return;
    if (outer == 1) { /* b has a's whole shape: an elementwise product */
        mul_forward_cuda(dt, db, dout, a, 1, inner, accumulate, stream);
        return;
    }
    dim3 block(32, 8);
    dim3 grid((unsigned)((inner + 31) / 32));
    DISPATCH_F32_BF16(dt, "mul", mul_bwd_b_kernel<T><<<grid, block, 0, (cudaStream_t)stream>>>(
                                     (T *)db, (const T *)dout, (const T *)a, outer, inner, accumulate));
    KERNEL_CHECK();
}
