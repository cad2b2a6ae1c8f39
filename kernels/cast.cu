#include "kernels/cast.h"
#include "kernels/common.cuh"

template <typename D, typename S>
__global__ void cast_kernel(D *dst, const S *src, long long n, int accumulate) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = to_f32(src[i]);
        dst[i] = from_f32<D>(accumulate ? to_f32(dst[i]) + v : v);
    }
}

/* The same 8 elements at a time when n is a multiple of 8 and both ends are 16-byte aligned. */
template <typename D, typename S>
__global__ void cast_by8_kernel(D *dst, const S *src, long long n, int accumulate) {
    for (long long i = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * 8; i < n;
         i += (long long)gridDim.x * blockDim.x * 8) {
        float v[8], d[8];
        load8(src + i, v);
        if (accumulate) {
            load8(dst + i, d);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] += d[k];
        }
        store8(dst + i, v);
    }
}

template <typename D>
static void cast_from(DType src_dt, D *dst, const void *src, long long n, int accumulate, cudaStream_t s) {
    DISPATCH_F32_BF16(src_dt, "cast", {
        if (rows_by8(n, dst, src))
            cast_by8_kernel<D, T><<<grid_for(n / 8, 256), 256, 0, s>>>(dst, (const T *)src, n, accumulate);
        else
            cast_kernel<D, T><<<grid_for(n, 256), 256, 0, s>>>(dst, (const T *)src, n, accumulate);
    });
}

extern "C" void cast_cuda(DType dst_dt, void *dst, DType src_dt, const void *src, int64_t n, int accumulate,
                          void *stream) {
    if (n == 0) return;
    cudaStream_t s = (cudaStream_t)stream;
    if (dst_dt == GDP_F32)
        cast_from<float>(src_dt, (float *)dst, src, n, accumulate, s);
    else if (dst_dt == GDP_BF16)
        cast_from<__nv_bfloat16>(src_dt, (__nv_bfloat16 *)dst, src, n, accumulate, s);
    else
        gdp_fatal("kernel 'cast' on cuda converts between f32 and bf16, not %s to %s", dtype_name(src_dt),
                  dtype_name(dst_dt));
    KERNEL_CHECK();
}
