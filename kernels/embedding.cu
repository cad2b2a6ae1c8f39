#include <cub/cub.cuh>

#include "kernels/common.cuh"
#include "kernels/embedding.h"

template <typename T>
__global__ void emb_fwd_kernel(T *out, const T *w, const int32_t *ids, long long n, long long v, long long c,
                               unsigned long long *flag) {
    long long total = n * c;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        long long p = i / c, j = i - p * c;
        int id = ids[p];
        if (id < 0 || id >= v) {
            out[i] = from_f32<T>(0.f);
            if (j == 0 && flag) atomicMin(flag, (unsigned long long)p); /* integer atomic: the first bad position */
        } else {
            out[i] = w[(long long)id * c + j];
        }
    }
}

__global__ void iota_kernel(unsigned *x, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        x[i] = (unsigned)i;
}

__device__ __forceinline__ long long lower_bound_u(const unsigned *keys, long long n, unsigned key) {
    long long lo = 0, hi = n;
    while (lo < hi) {
        long long mid = (lo + hi) >> 1;
        if (keys[mid] < key) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* One block per vocab row r: its positions are the run keys[lo..hi) == r of the sorted ids, in
 * increasing position (the sort is stable); each thread owns columns and sums them in order. */
template <typename T>
__global__ void emb_bwd_rows_kernel(T *dw, const T *dout, const unsigned *keys, const unsigned *pos, long long n,
                                    long long c, int accumulate) {
    __shared__ long long range[2];
    unsigned r = blockIdx.x;
    if (threadIdx.x == 0) {
        range[0] = lower_bound_u(keys, n, r);
        range[1] = lower_bound_u(keys, n, r + 1);
    }
    __syncthreads();
    long long lo = range[0], hi = range[1];
    T *row = dw + (long long)r * c;
    for (long long j = threadIdx.x; j < c; j += blockDim.x) {
        float s = 0.f;
        for (long long q = lo; q < hi; q++) s += to_f32(dout[(long long)pos[q] * c + j]);
        row[j] = from_f32<T>(accumulate ? to_f32(row[j]) + s : s);
    }
}

static int id_bits(long long v) {
    int bits = 1;
    while (bits < 32 && (1LL << bits) < v) bits++;
    return bits;
}

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

extern "C" int64_t embedding_forward_cuda(DType dt, void *out, const void *weight, const int32_t *ids, int64_t n,
                                          int64_t v, int64_t c, void *flag, int32_t *bad_id, void *stream) {
    if (n == 0 || c == 0) return -1;
    cudaStream_t s = (cudaStream_t)stream;
    unsigned long long *f = (unsigned long long *)flag, host_flag = 0;
    if (f) CUDA_CHECK(cudaMemsetAsync(f, 0xff, sizeof *f, s));
    long long total = n * c;
    DISPATCH_F32_BF16(dt, "embedding", emb_fwd_kernel<T><<<grid_for(total, 256), 256, 0, s>>>(
                                           (T *)out, (const T *)weight, ids, n, v, c, f));
    KERNEL_CHECK();
    if (!f) return -1;
    CUDA_CHECK(cudaMemcpyAsync(&host_flag, f, sizeof host_flag, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    if (host_flag == ~0ULL) return -1;
    CUDA_CHECK(cudaMemcpyAsync(bad_id, ids + host_flag, sizeof *bad_id, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return (int64_t)host_flag;
}

static size_t sort_temp_bytes(long long n, long long v) {
    size_t temp = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs((void *)NULL, temp, (const unsigned *)NULL, (unsigned *)NULL,
                                               (const unsigned *)NULL, (unsigned *)NULL, (int)n, 0, id_bits(v)));
    return temp;
}

extern "C" size_t embedding_backward_cuda_scratch_bytes(int64_t n, int64_t v) {
    if (n == 0) return 0;
    return 3 * align256((size_t)n * sizeof(unsigned)) + align256(sort_temp_bytes(n, v));
}

extern "C" void embedding_backward_cuda(DType dt, void *dweight, const void *dout, const int32_t *ids, int64_t n,
                                        int64_t v, int64_t c, int accumulate, void *scratch, size_t scratch_bytes,
                                        void *stream) {
    if (v == 0 || c == 0) return;
    if (n > 2147483647LL) gdp_fatal("kernel 'embedding' backward: %lld positions exceed the 32-bit sort", (long long)n);
    if (v > 2147483647LL) gdp_fatal("kernel 'embedding' backward: a vocabulary of %lld rows exceeds the grid", (long long)v);
    cudaStream_t s = (cudaStream_t)stream;
    unsigned *keys = NULL, *pos = NULL;
    if (n > 0) {
        size_t need = embedding_backward_cuda_scratch_bytes(n, v);
        if (scratch_bytes < need)
            gdp_fatal("kernel 'embedding' backward: %zu bytes of scratch given, %zu needed", scratch_bytes, need);
        size_t col = align256((size_t)n * sizeof(unsigned));
        unsigned *pos_in = (unsigned *)scratch;
        keys = (unsigned *)((char *)scratch + col);
        pos = (unsigned *)((char *)scratch + 2 * col);
        void *temp = (char *)scratch + 3 * col;
        size_t temp_bytes = scratch_bytes - 3 * col;
        iota_kernel<<<grid_for(n, 256), 256, 0, s>>>(pos_in, n);
        KERNEL_CHECK();
        CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, (const unsigned *)ids, keys, (const unsigned *)pos_in,
                                                   pos, (int)n, 0, id_bits(v), s));
    }
    int threads = c >= 128 ? 128 : (int)((c + 31) / 32 * 32);
    DISPATCH_F32_BF16(dt, "embedding", emb_bwd_rows_kernel<T><<<(unsigned)v, threads, 0, s>>>(
                                           (T *)dweight, (const T *)dout, keys, pos, n, c, accumulate));
    KERNEL_CHECK();
}
