/* Strided copy / accumulate: dst (contiguous, n elements) = or += src read through shape and
 * strides. The building block of gradient set-or-accumulate and of op_contiguous.
 * Defined in core/ops/copy.c (the CPU kernels, beside the op's tape node: the reference the CUDA
 * kernels are tested against) and kernels/copy.cu (the CUDA kernels). */
#pragma once
#include <stdint.h>

#include "base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define COPY_MAX_DIMS 5
typedef struct StridedLayout {
    int ndim;
    int64_t shape[COPY_MAX_DIMS];
    int64_t stride[COPY_MAX_DIMS]; /* elements */
} StridedLayout;

void copy_strided_cpu(DType dt, void *dst, const void *src, StridedLayout src_layout, int64_t n, int accumulate);
void copy_strided_cuda(DType dt, void *dst, const void *src, StridedLayout src_layout, int64_t n, int accumulate,
                       void *stream);

#ifdef __cplusplus
}
#endif
