/* dst = convert(src) over n elements, from src_dt to dst_dt; with `accumulate`, dst += convert(src)
 * (the sum is formed in the wider of float32 and the destination type, then rounded once).
 * CPU: f32, f64 and bf16 in any pair. CUDA: f32 and bf16 in any pair.
 * Defined in core/ops/cast.c (the CPU kernels, beside the op's tape node: the reference the CUDA
 * kernels are tested against) and kernels/cast.cu (the CUDA kernels). */
#pragma once
#include <stdint.h>

#include "base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void cast_cpu(DType dst_dt, void *dst, DType src_dt, const void *src, int64_t n, int accumulate);
void cast_cuda(DType dst_dt, void *dst, DType src_dt, const void *src, int64_t n, int accumulate, void *stream);

#ifdef __cplusplus
}
#endif
