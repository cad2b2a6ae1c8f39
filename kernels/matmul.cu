/* cuBLAS GEMM for row-major tensors: a row-major [R, C] matrix is a column-major [C, R] one, so
 * C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T, with B passed first. */
#include "kernels/common.cuh"
#include "kernels/matmul.h"

static int to_int(long long v, const char *what) {
    if (v < 0 || v > 2147483647LL)
        gdp_fatal("kernel 'matmul': %s = %lld does not fit the 32-bit cuBLAS interface; split the product", what, v);
    return (int)v;
}

extern "C" void matmul_cuda_ex(DType dt, MatmulCompute compute, void *cublas_handle, void *c, const void *a,
                               const void *b, int64_t batch, int64_t m, int64_t n, int64_t k, int trans_a, int trans_b,
                               int64_t stride_a, int64_t stride_b, int64_t stride_c, int accumulate) {
    if (batch <= 0 || m <= 0 || n <= 0) return;
    cublasHandle_t h = (cublasHandle_t)cublas_handle;
    cudaDataType_t t;
    if (dt == GDP_F32)
        t = CUDA_R_32F;
    else if (dt == GDP_BF16)
        t = CUDA_R_16BF;
    else
        gdp_fatal("kernel 'matmul' on cuda supports f32 and bf16, not %s", dtype_name(dt));
    if (compute == MATMUL_BF16_F32_OUT && dt != GDP_BF16)
        gdp_fatal("kernel 'matmul': MATMUL_BF16_F32_OUT needs bf16 operands, got %s", dtype_name(dt));
    const cudaDataType_t tc = compute == MATMUL_BF16_F32_OUT ? CUDA_R_32F : t;
    int M = to_int(m, "M"), N = to_int(n, "N"), K = to_int(k, "K"), nb = to_int(batch, "batch");
    /* Column-major view: "A" is our B (N x K after op), "B" is our A (K x M after op). */
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    /* K = 0 is legal (C is then beta * C), but cuBLAS wants every leading dimension >= 1. */
    int ldb = GDP_MAX(trans_b ? K : N, 1), lda = GDP_MAX(trans_a ? M : K, 1), ldc = N;
    float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
    const cublasComputeType_t ct =
        dt == GDP_F32 && compute == MATMUL_BF16_INPUTS ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
    if (nb == 1)
        CUBLAS_CHECK(cublasGemmEx(h, op_b, op_a, N, M, K, &alpha, b, t, ldb, a, t, lda, &beta, c, tc, ldc,
                                  ct, CUBLAS_GEMM_DEFAULT));
    else
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, op_b, op_a, N, M, K, &alpha, b, t, ldb, (long long)stride_b, a, t,
                                                lda, (long long)stride_a, &beta, c, tc, ldc, (long long)stride_c, nb,
                                                ct, CUBLAS_GEMM_DEFAULT));
}
