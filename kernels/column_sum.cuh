/* Deterministic column sums of an [outer, inner] matrix (the broadcast backward of add and mul, and the
 * partials of the conv and norm dw sums):
 * db[j] (+)= sum over o of value(o * inner + j). A block of 1024 threads owns `cols` columns (a
 * power of two up to 32, so that narrow matrices such as [B*T, heads] still get 1024/cols rows of
 * threads), each thread sums a strided set of rows, and the rows are folded by a fixed tree in
 * shared memory: the same bits on every run. */
#pragma once
#include "kernels/common.cuh"

template <typename T, typename Value>
__global__ void __launch_bounds__(1024) column_sum_kernel(T *db, Value value, long long outer, long long inner,
                                                          int cols, int accumulate) {
    __shared__ float part[1024];
    const int tid = threadIdx.x, c = tid % cols, r = tid / cols, rows = blockDim.x / cols;
    const long long j = blockIdx.x * (long long)cols + c;
    float s = 0.f;
    if (j < inner)
        for (long long o = r; o < outer; o += rows) s += value(o * inner + j);
    part[tid] = s;
    __syncthreads();
    for (int stride = rows / 2; stride > 0; stride >>= 1) {
        if (r < stride) part[tid] += part[tid + stride * cols];
        __syncthreads();
    }
    if (r == 0 && j < inner) db[j] = from_f32<T>(accumulate ? to_f32(db[j]) + part[tid] : part[tid]);
}

template <typename T, typename Value>
static void column_sum(T *db, Value value, long long outer, long long inner, int accumulate, cudaStream_t stream) {
    int cols = 1;
    while (cols < 32 && cols < inner) cols <<= 1;
    unsigned blocks = (unsigned)((inner + cols - 1) / cols);
    column_sum_kernel<T, Value><<<blocks, 1024, 0, stream>>>(db, value, outer, inner, cols, accumulate);
}

/* Float partials [outer][inner] (one row per chunk of a deterministic reduction) folded into db in
 * row order: the second stage of the conv and norm kernels' dw sums. */
struct ColumnSumPartials {
    const float *partial;
    __device__ float operator()(long long i) const { return partial[i]; }
};
template <typename T>
static void column_sum_partials(T *db, const float *partial, long long outer, long long inner, int accumulate,
                                cudaStream_t stream) {
    column_sum(db, ColumnSumPartials{partial}, outer, inner, accumulate, stream);
}
