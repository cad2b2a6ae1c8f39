/* Error macros for the CUDA runtime, cuBLAS(Lt) and NCCL: each prints file:line, the failing call
 * and the library's own message, then exits. Include only from files built with CUDA. */
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "base/common.h"

#define CUDA_CHECK(call)                                                                             \
    do {                                                                                             \
        cudaError_t err_ = (call);                                                                   \
        if (err_ != cudaSuccess)                                                                     \
            gdp_fatal_at(__FILE__, __LINE__, "CUDA call failed: %s: %s", #call, cudaGetErrorString(err_)); \
    } while (0)

/* After every kernel launch. With -DGDP_DEBUG_SYNC it also synchronises, to pin faults on a launch. */
#ifdef GDP_DEBUG_SYNC
#define KERNEL_CHECK()                                \
    do {                                              \
        CUDA_CHECK(cudaGetLastError());               \
        CUDA_CHECK(cudaDeviceSynchronize());          \
    } while (0)
#else
#define KERNEL_CHECK() CUDA_CHECK(cudaGetLastError())
#endif

#define CUBLAS_CHECK(call)                                                                               \
    do {                                                                                                 \
        cublasStatus_t st_ = (call);                                                                     \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                                \
            gdp_fatal_at(__FILE__, __LINE__, "cuBLAS call failed: %s: %s", #call, cublasGetStatusString(st_)); \
    } while (0)
