/* Per-token decoder kernels (kernels/decode_step.h): one thread per channel, float math. */
#include "kernels/common.cuh"
#include "kernels/decode_step.h"

#define DECODE_CONV_MAX_W 8

__global__ void decode_conv_silu_kernel(float *y, float *cache, const float *x, const float *w, long long C, int W) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < C; c += stride) {
        const float xc = x[c];
        float acc;
        if (w) {
            const float *wc = w + c * W;
            acc = wc[W - 1] * xc;
            for (int i = 0; i < W - 1; i++) acc += wc[i] * cache[(long long)i * C + c];
            /* only this thread touches column c of the cache */
            for (int i = 0; i + 1 < W - 1; i++) cache[(long long)i * C + c] = cache[(long long)(i + 1) * C + c];
            if (W > 1) cache[(long long)(W - 2) * C + c] = xc;
        } else {
            acc = xc;
        }
        y[c] = acc * sigmoid_f32(acc);
    }
}

__global__ void decode_gate_kernel(float *g, const float *a, const float *A_log, const float *dt_bias, long long H) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long h = blockIdx.x * (long long)blockDim.x + threadIdx.x; h < H; h += stride) {
        const float z = a[h] + dt_bias[h];
        const float sp = fmaxf(z, 0.f) + log1pf(expf(-fabsf(z)));
        g[h] = -expf(A_log[h]) * sp;
    }
}

extern "C" void decode_conv_silu_step_cuda(float *y, float *cache, const float *x, const float *w, int64_t C, int W,
                                           void *stream) {
    if (C <= 0) return;
    if (w && (W < 1 || W > DECODE_CONV_MAX_W))
        gdp_fatal("kernel 'decode_conv_silu_step': conv width %d outside [1, %d]", W, DECODE_CONV_MAX_W);
    decode_conv_silu_kernel<<<grid_for(C, 256), 256, 0, (cudaStream_t)stream>>>(y, cache, x, w, C, W);
    KERNEL_CHECK();
}

extern "C" void decode_gate_cuda(float *g, const float *a, const float *A_log, const float *dt_bias, int64_t H,
                                 void *stream) {
    if (H <= 0) return;
    decode_gate_kernel<<<grid_for(H, 128), 128, 0, (cudaStream_t)stream>>>(g, a, A_log, dt_bias, H);
    KERNEL_CHECK();
}
