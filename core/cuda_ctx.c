#include "core/cuda_ctx.h"

CudaCtx *cuda_ctx_create(int device_id) {
    CudaCtx *c = (CudaCtx *)xcalloc(1, sizeof(CudaCtx));
    c->device_id = device_id;
    CUDA_CHECK(cudaSetDevice(device_id));
    CUDA_CHECK(cudaGetDeviceProperties(&c->props, device_id));
    /* A blocking stream on purpose: device_memcpy/memset use the legacy default stream, which then
     * orders itself after this stream's earlier kernels and before its later ones. */
    CUDA_CHECK(cudaStreamCreate(&c->stream));
    CUBLAS_CHECK(cublasCreate(&c->cublas));
    CUBLAS_CHECK(cublasSetStream(c->cublas, c->stream));
    CUBLAS_CHECK(cublasLtCreate(&c->cublaslt));
    /* 32 MiB is what cuBLASLt's heuristics want for large Hopper GEMMs. */
    c->lt_workspace_bytes = 32u << 20;
    CUDA_CHECK(cudaMalloc(&c->lt_workspace, c->lt_workspace_bytes));
    return c;
}

void cuda_ctx_destroy(CudaCtx *c) {
    if (!c) return;
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    CUDA_CHECK(cudaFree(c->lt_workspace));
    CUBLAS_CHECK(cublasLtDestroy(c->cublaslt));
    CUBLAS_CHECK(cublasDestroy(c->cublas));
    CUDA_CHECK(cudaStreamDestroy(c->stream));
    free(c);
}
