#include "kernels/add.h"
#include "kernels/column_sum.cuh"
#include "kernels/common.cuh"

template <typename TX, typename TY>
__global__ void add_fwd_kernel(TX *out, const TX *a, const TY *b, long long outer, long long inner) {
    long long n = outer * inner;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = from_f32<TX>(to_f32(a[i]) + to_f32(b[outer == 1 ? i : i % inner])); /* no 64-bit modulo when shapes match */
}

/* The same 8 elements at a time (16-byte aligned, inner a multiple of 8: a pack never crosses b's
 * end), for the residual adds. */
template <typename TX, typename TY>
__global__ void add_fwd_by8_kernel(TX *out, const TX *a, const TY *b, long long outer, long long inner) {
    const long long packs = outer * inner / 8;
    for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < packs;
         p += (long long)gridDim.x * blockDim.x) {
        const long long i = p * 8;
        float x[8], y[8];
        load8(a + i, x), load8(b + (outer == 1 ? i : i % inner), y);
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] += y[k];
        store8(out + i, x);
    }
}

template <typename T>
struct AddGrad {
    const T *dout;
    __device__ float operator()(long long i) const { return to_f32(dout[i]); }
};

extern "C" void add_forward_cuda(DType a_dt, DType b_dt, void *out, const void *a, const void *b, int64_t outer,
                                 int64_t inner, void *stream) {
    long long n = outer * inner;
    if (n == 0) return;
    DISPATCH_IN_OUT(a_dt, b_dt, "add", {
        if (rows_by8(inner, out, a, b))
            add_fwd_by8_kernel<TX, TY><<<grid_for(n / 8, 256), 256, 0, (cudaStream_t)stream>>>(
                (TX *)out, (const TX *)a, (const TY *)b, outer, inner);
        else
            add_fwd_kernel<TX, TY><<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>((TX *)out, (const TX *)a,
                                                                                     (const TY *)b, outer, inner);
    });
    KERNEL_CHECK();
}

extern "C" void add_backward_b_cuda(DType dt, void *db, const void *dout, int64_t outer, int64_t inner, int accumulate,
                                    void *stream) {
    if (inner == 0 || outer == 0) return;
    cudaStream_t st = (cudaStream_t)stream;
    if (outer == 1) { /* b has a's whole shape (a residual): a copy, or an elementwise add */
        if (accumulate)
            add_forward_cuda(dt, dt, db, db, dout, 1, inner, stream);
        else
            CUDA_CHECK(cudaMemcpyAsync(db, dout, (size_t)inner * dtype_size(dt), cudaMemcpyDeviceToDevice, st));
        return;
    }
    DISPATCH_F32_BF16(dt, "add", column_sum<T>((T *)db, AddGrad<T>{(const T *)dout}, outer, inner, accumulate, st));
    KERNEL_CHECK();
}
