#include "kernels/add.h"
#include "kernels/column_sum.cuh"
#include "kernels/common.cuh"

template <typename TX, typename TY>
__global__ void add_fwd_kernel(TX *out, const TX *a, const TY *b, long long outer, long long inner) {
    long long n = outer * inner;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = from_f32<TX>(to_f32(a[i]) + to_f32(b[outer == 1 ? i : i % inner])); /* no 64-bit modulo when shapes match */
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
    DISPATCH_IN_OUT(a_dt, b_dt, "add", add_fwd_kernel<TX, TY><<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(
                                           (TX *)out, (const TX *)a, (const TY *)b, outer, inner));
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
