/* Deterministic warp and block reductions (butterfly shuffles, then one value per warp through
 * shared memory, reduced the same way by every warp): the result is the same bits on every run
 * for a given blockDim, and every thread of the block receives it. blockDim.x must be a multiple
 * of 32 and at most 1024; every thread of the block must call (it synchronises). */
#pragma once
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>

__device__ __forceinline__ float br_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float br_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ int br_warp_sum_int(int v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* `scratch` is __shared__ float[32]. */
__device__ __forceinline__ float br_block_sum(float v, float *scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = br_warp_sum(v);
    __syncthreads(); /* an earlier call may still be reading scratch */
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return br_warp_sum(lane < nw ? scratch[lane] : 0.f);
}

__device__ __forceinline__ float br_block_max(float v, float *scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = br_warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return br_warp_max(lane < nw ? scratch[lane] : -INFINITY);
}

/* `scratch` is __shared__ int[32]. */
__device__ __forceinline__ int br_block_sum_int(int v, int *scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = br_warp_sum_int(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return br_warp_sum_int(lane < nw ? scratch[lane] : 0);
}

__device__ __forceinline__ double br_warp_sum_double(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* `scratch` is __shared__ double[32]. */
__device__ __forceinline__ double br_block_sum_double(double v, double *scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = br_warp_sum_double(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return br_warp_sum_double(lane < nw ? scratch[lane] : 0.0);
}

__device__ __forceinline__ int br_warp_min_int(int v) {
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* `scratch` is __shared__ int[32]. */
__device__ __forceinline__ int br_block_min_int(int v, int *scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = br_warp_min_int(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return br_warp_min_int(lane < nw ? scratch[lane] : INT_MAX);
}
