/* Batched row-major GEMM: for every b < batch,
 *     C_b[M,N] = op(A_b) op(B_b)          (accumulate 0)
 *     C_b[M,N] = C_b + op(A_b) op(B_b)    (accumulate 1)
 * op(A) is A stored [M,K], or with trans_a A stored [K,M] and transposed; op(B) is B stored
 * [K,N], or with trans_b B stored [N,K] and transposed. A_b = A + b * stride_a (in elements) and
 * likewise for B and C; a stride of 0 shares one matrix across the batch (a weight).
 * CPU: f32 and f64, cache-blocked and packed, OpenMP over (batch, row block); each element of C
 * is summed by one thread in a fixed order, so the result does not depend on the thread count.
 * CUDA: f32 and bf16 through cuBLAS with fp32 compute (CUBLAS_COMPUTE_32F, no TF32), on the
 * stream the handle is bound to. matmul_cuda_ex with MATMUL_BF16_INPUTS lets cuBLAS round f32
 * operands to bf16 for the tensor cores (CUBLAS_COMPUTE_32F_FAST_16BF: fp32 accumulation and fp32
 * output); that path reads f32 and ran at a third to a half of the bf16 rate on the H200 (`gdp bench
 * matmul`). MATMUL_BF16_F32_OUT takes bf16 A and B and writes (or accumulates into) an f32 C, at the
 * bf16 rate: the weight gradients under bf16 activations, and every GEMM of the f32-activation
 * operand copies (core/ops/matmul.c).
 * Defined in core/ops/matmul.c (the CPU kernels, beside the op's tape node: the reference the CUDA
 * kernels are tested against) and kernels/matmul.cu (the CUDA kernels). */
#pragma once
#include <stdint.h>

#include "base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void matmul_cpu(DType dt, void *c, const void *a, const void *b, int64_t batch, int64_t m, int64_t n, int64_t k,
                int trans_a, int trans_b, int64_t stride_a, int64_t stride_b, int64_t stride_c, int accumulate);

typedef enum MatmulCompute {
    MATMUL_EXACT = 0,       /* the inputs' own precision */
    MATMUL_BF16_INPUTS = 1, /* f32 operands rounded to bf16 inside cuBLAS */
    MATMUL_BF16_F32_OUT = 2, /* bf16 operands (dt must be bf16), f32 C: bf16 autocast's GEMMs */
} MatmulCompute;

/* cublas_handle: a cublasHandle_t (ctx->cuda->cublas), already bound to the context's stream. */
void matmul_cuda_ex(DType dt, MatmulCompute compute, void *cublas_handle, void *c, const void *a, const void *b,
                    int64_t batch, int64_t m, int64_t n, int64_t k, int trans_a, int trans_b, int64_t stride_a,
                    int64_t stride_b, int64_t stride_c, int accumulate);

#ifdef __cplusplus
}
#endif
