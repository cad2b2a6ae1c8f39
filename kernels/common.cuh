/* Device-side helpers shared by the kernels: dtype conversion to and from float, and
 * launch error checks. Kernels accumulate in float whatever the storage type. */
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/cuda_check.h"

template <typename T> __device__ __forceinline__ float to_f32(T x);
template <> __device__ __forceinline__ float to_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

static inline unsigned int grid_for(long long n, int block) {
    long long g = (n + block - 1) / block;
    if (g > 65535LL * 32) g = 65535LL * 32; /* kernels use grid-stride loops past this */
    return (unsigned int)(g < 1 ? 1 : g);
}

/* Runs body(T) with T = float or __nv_bfloat16 according to a DType; anything else is fatal. */
#define DISPATCH_F32_BF16(dt, opname, ...)                                                     \
    do {                                                                                       \
        if ((dt) == GDP_F32) {                                                                 \
            typedef float T;                                                                   \
            __VA_ARGS__;                                                                       \
        } else if ((dt) == GDP_BF16) {                                                         \
            typedef __nv_bfloat16 T;                                                           \
            __VA_ARGS__;                                                                       \
        } else {                                                                               \
            gdp_fatal("kernel '%s' on cuda supports f32 and bf16, not %s", opname, dtype_name(dt)); \
        }                                                                                      \
    } while (0)
