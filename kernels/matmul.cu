/* cuBLAS GEMM for row-major tensors: a row-major [R, C] matrix is a column-major [C, R] one, so
 * C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T, with B passed first. */
#include "kernels/common.cuh"
#include "kernels/matmul.h"

static int to_int(long long v, const char *what) {
    if (v < 0 || v > 2147483647LL)
        gdp_fatal("kernel 'matmul': %s = %lld does not fit the 32-bit cuBLAS interface; split the product", what, v);
    return (int)v;
}

/* out = (accumulate ? out : 0) + sum over s of part[s], in slice order (deterministic). */
template <typename T>
__global__ void split_k_reduce_kernel(T *out, const float *part, long long mn, int slices, int accumulate) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < mn; i += (long long)gridDim.x * blockDim.x) {
        float t = accumulate ? to_f32(out[i]) : 0.f;
        for (int s = 0; s < slices; s++) t += part[s * mn + i];
        out[i] = from_f32<T>(t);
    }
}

extern "C" int matmul_cuda_pick_split_k(int64_t batch, int64_t m, int64_t n, int64_t k) {
    /* A weight gradient (M, N = a layer's dims, K = every token of the step) has too few
     * 128x128 output tiles to fill 132 SMs; slicing K gives each slice its own tiles. */
    if (batch != 1 || k < 4096) return 1;
    const int64_t tiles = ((m + 127) / 128) * ((n + 127) / 128), target = 2 * 132;
    int s = 1;
    while (s < MATMUL_MAX_SPLIT_K && tiles * s * 2 <= target && k % (s * 2) == 0 && k / (s * 2) >= 1024) s *= 2;
    return s;
}

extern "C" size_t matmul_cuda_workspace_bytes(int split_k, int64_t m, int64_t n) {
    return split_k > 1 ? (size_t)split_k * (size_t)m * (size_t)n * sizeof(float) : 0;
}

extern "C" void matmul_cuda_ex(DType dt, MatmulCompute compute, void *cublas_handle, void *c, const void *a,
                               const void *b, int64_t batch, int64_t m, int64_t n, int64_t k, int trans_a, int trans_b,
                               int64_t stride_a, int64_t stride_b, int64_t stride_c, int accumulate, int split_k,
                               float *workspace) {
    if (batch <= 0 || m <= 0 || n <= 0) return;
    cublasHandle_t h = (cublasHandle_t)cublas_handle;
    cudaDataType_t t;
    if (dt == GDP_F32)
        t = CUDA_R_32F;
    else if (dt == GDP_BF16)
        t = CUDA_R_16BF;
    else
        gdp_fatal("kernel 'matmul' on cuda supports f32 and bf16, not %s", dtype_name(dt));
    if (split_k > 1 && (batch != 1 || k % split_k || !workspace))
        gdp_fatal("kernel 'matmul': split_k %d needs batch 1 (got %lld), K %lld divisible by it and a workspace",
                  split_k, (long long)batch, (long long)k);
    int M = to_int(m, "M"), N = to_int(n, "N"), K = to_int(k, "K"), nb = to_int(batch, "batch");
    /* Column-major view: "A" is our B (N x K after op), "B" is our A (K x M after op). */
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    /* K = 0 is legal (C is then beta * C), but cuBLAS wants every leading dimension >= 1. */
    int ldb = GDP_MAX(trans_b ? K : N, 1), lda = GDP_MAX(trans_a ? M : K, 1), ldc = N;
    float alpha = 1.f, beta = accumulate ? 1.f : 0.f, zero = 0.f;
    const cublasComputeType_t ct =
        dt == GDP_F32 && compute == MATMUL_BF16_INPUTS ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
    if (split_k > 1) {
        /* Slice s takes K columns [s Ks, (s+1) Ks) of op(A) and rows of op(B) into f32 partials
         * [split_k, M, N], then one pass sums them in slice order into C. */
        const int Ks = K / split_k;
        const long long sa = trans_a ? (long long)Ks * M : Ks, sb = trans_b ? Ks : (long long)Ks * N;
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, op_b, op_a, N, M, Ks, &alpha, b, t, ldb, sb, a, t, lda, sa, &zero,
                                                workspace, CUDA_R_32F, ldc, (long long)M * N, split_k, ct,
                                                CUBLAS_GEMM_DEFAULT));
        cudaStream_t st;
        CUBLAS_CHECK(cublasGetStream(h, &st));
        const long long mn = (long long)M * N;
        DISPATCH_F32_BF16(dt, "matmul", split_k_reduce_kernel<T><<<grid_for(mn, 256), 256, 0, st>>>(
                                            (T *)c, workspace, mn, split_k, accumulate));
        KERNEL_CHECK();
        return;
    }
    if (nb == 1)
        CUBLAS_CHECK(cublasGemmEx(h, op_b, op_a, N, M, K, &alpha, b, t, ldb, a, t, lda, &beta, c, t, ldc,
                                  ct, CUBLAS_GEMM_DEFAULT));
    else
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, op_b, op_a, N, M, K, &alpha, b, t, ldb, (long long)stride_b, a, t,
                                                lda, (long long)stride_a, &beta, c, t, ldc, (long long)stride_c, nb,
                                                ct, CUBLAS_GEMM_DEFAULT));
}

extern "C" void matmul_cuda(DType dt, void *cublas_handle, void *c, const void *a, const void *b, int64_t batch,
                            int64_t m, int64_t n, int64_t k, int trans_a, int trans_b, int64_t stride_a,
                            int64_t stride_b, int64_t stride_c, int accumulate) {
    matmul_cuda_ex(dt, MATMUL_EXACT, cublas_handle, c, a, b, batch, m, n, k, trans_a, trans_b, stride_a, stride_b,
                   stride_c, accumulate, 1, NULL);
}
