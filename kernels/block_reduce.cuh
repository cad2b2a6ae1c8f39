/* Deterministic warp and block reductions (butterfly shuffles, then one value per warp through
 * shared memory, reduced the same way by every warp): the result is the same bits on every run
 * for a given blockDim, and every thread of the block receives it. blockDim.x must be a multiple
 * of 32 and at most 1024; every thread of the block must call (it synchronises). */
#pragma once
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>

/* The two combining rules; max and min keep the argument order the shuffles give them. */
struct BrAdd {
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct BrMaxF {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct BrMinInt {
    __device__ __forceinline__ int operator()(int a, int b) const { return min(a, b); }
};

template <typename T, typename Op> __device__ __forceinline__ T br_warp_reduce(T v, Op op) {
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Each warp's result through `scratch` (__shared__ T[32]), reduced again by every warp; lanes past
 * the block's warps contribute `identity`. */
template <typename T, typename Op> __device__ __forceinline__ T br_block_reduce(T v, T *scratch, T identity, Op op) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = br_warp_reduce(v, op);
    __syncthreads(); /* an earlier call may still be reading scratch */
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return br_warp_reduce(lane < nw ? scratch[lane] : identity, op);
}

__device__ __forceinline__ float br_warp_sum(float v) { return br_warp_reduce(v, BrAdd()); }
__device__ __forceinline__ float br_warp_max(float v) { return br_warp_reduce(v, BrMaxF()); }
__device__ __forceinline__ int br_warp_sum_int(int v) { return br_warp_reduce(v, BrAdd()); }
__device__ __forceinline__ double br_warp_sum_double(double v) { return br_warp_reduce(v, BrAdd()); }
__device__ __forceinline__ int br_warp_min_int(int v) { return br_warp_reduce(v, BrMinInt()); }

/* `scratch` is __shared__ of the value's type, [32]. */
__device__ __forceinline__ float br_block_sum(float v, float *scratch) {
    return br_block_reduce(v, scratch, 0.f, BrAdd());
}
__device__ __forceinline__ float br_block_max(float v, float *scratch) {
    return br_block_reduce(v, scratch, -INFINITY, BrMaxF());
}
__device__ __forceinline__ int br_block_sum_int(int v, int *scratch) { return br_block_reduce(v, scratch, 0, BrAdd()); }
__device__ __forceinline__ double br_block_sum_double(double v, double *scratch) {
    return br_block_reduce(v, scratch, 0.0, BrAdd());
}
__device__ __forceinline__ int br_block_min_int(int v, int *scratch) {
    return br_block_reduce(v, scratch, INT_MAX, BrMinInt());
}
