/* GPU handles owned by a Ctx on DEV_CUDA. Include only from files built with GDP_CUDA. */
#pragma once
#include "base/cuda_check.h"

typedef struct CudaCtx {
    int device_id;
    struct cudaDeviceProp props;
    cudaStream_t stream;
    cublasHandle_t cublas;
    cublasLtHandle_t cublaslt;
    void *lt_workspace;
    size_t lt_workspace_bytes;
} CudaCtx;

CudaCtx *cuda_ctx_create(int device_id);
void cuda_ctx_destroy(CudaCtx *c);
