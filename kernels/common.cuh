/* Device-side helpers shared by the kernels: dtype conversion to and from float, and
 * launch error checks. Kernels accumulate in float whatever the storage type. */
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "base/cuda_check.h"

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

/* The logistic function (op_sigmoid, SiLU, SwiGLU, gates, the conv's SiLU) from the hardware exp2 and
 * reciprocal: a few ulp from the correctly rounded value, far inside the f32 tests' 1e-4 and bf16's
 * 2^-8. The IEEE form (expf, a branch on the sign, a full-precision division) made the element-wise
 * kernels that call it compute-bound: on the H200 the conv + SiLU forward at B 8, T 2048, C 2304 took
 * 0.102 ms with it and 0.051 ms with this (copy bandwidth: 0.041 ms). No overflow: for x -> -inf,
 * __expf(-x) -> inf and the approximate division by inf gives 0; for x -> +inf it gives 1. */
__device__ __forceinline__ float sigmoid_f32(float x) { return __fdividef(1.f, 1.f + __expf(-x)); }

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

/* Runs body(TX, TY) for an op whose input TX and output TY may differ: both f32, both bf16, or
 * f32 in and bf16 out (the f32 residual stream feeding a bf16 branch). */
#define DISPATCH_IN_OUT(xdt, ydt, opname, ...)                                                          \
    do {                                                                                                \
        if ((xdt) == (ydt)) {                                                                           \
            DISPATCH_F32_BF16(xdt, opname, typedef T TX; typedef T TY; __VA_ARGS__);                    \
        } else if ((xdt) == GDP_F32 && (ydt) == GDP_BF16) {                                             \
            typedef float TX;                                                                           \
            typedef __nv_bfloat16 TY;                                                                   \
            __VA_ARGS__;                                                                                \
        } else {                                                                                        \
            gdp_fatal("kernel '%s' on cuda takes f32 or bf16 in and out, or f32 in and bf16 out, not %s to %s", \
                      opname, dtype_name(xdt), dtype_name(ydt));                                        \
        }                                                                                               \
    } while (0)

/* 16 bytes of T (8 bf16 or 4 floats): one vector load or store in the elementwise kernels. */
template <typename T> struct alignas(16) Pack16 {
    static constexpr int N = 16 / (int)sizeof(T);
    T v[N];
};
/* Whether n elements at every given pointer (NULL counts as aligned) can go as Pack16 of T. */
template <typename T> static inline bool packs_fit(long long n, const void *p0, const void *p1 = 0,
                                                   const void *p2 = 0, const void *p3 = 0, const void *p4 = 0) {
    const uintptr_t bits = (uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2 | (uintptr_t)p3 | (uintptr_t)p4;
    return n % Pack16<T>::N == 0 && (bits & 15) == 0;
}

/* 8 consecutive elements to or from floats (16-byte aligned: one load for bf16, two for f32): the
 * row kernels' lanes each take 8 columns at a time when a row's length is a multiple of 8. */
__device__ __forceinline__ void load8(const float *p, float (&f)[8]) {
    const float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
__device__ __forceinline__ void load8(const __nv_bfloat16 *p, float (&f)[8]) {
    const uint4 u = *reinterpret_cast<const uint4 *>(p);
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 v = __bfloat1622float2(h[i]);
        f[2 * i] = v.x, f[2 * i + 1] = v.y;
    }
}
__device__ __forceinline__ void store8(float *p, const float (&f)[8]) {
    reinterpret_cast<float4 *>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
    reinterpret_cast<float4 *>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}
__device__ __forceinline__ void store8(__nv_bfloat16 *p, const float (&f)[8]) {
    uint4 u;
    __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    *reinterpret_cast<uint4 *>(p) = u;
}
/* Rows of C elements at these pointers (NULL counts as aligned) can go 8 at a time. */
static inline bool rows_by8(long long C, const void *p0, const void *p1 = 0, const void *p2 = 0, const void *p3 = 0,
                            const void *p4 = 0, const void *p5 = 0) {
    const uintptr_t bits =
        (uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2 | (uintptr_t)p3 | (uintptr_t)p4 | (uintptr_t)p5;
    return C % 8 == 0 && (bits & 15) == 0;
}
