/* CUDA AdamW (elementwise, grid-stride) and the deterministic gradient sum of squares: a fixed
 * grid of GRAD_SUMSQ_BLOCKS blocks writes one double partial each, then one block adds the
 * partials in a fixed tree order. No atomics: the same bits on every run and every GPU. */
#include "kernels/adamw.h"
#include "kernels/common.cuh"

__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, long long n, float lr, float beta1,
                             float beta2, float eps, float decay_mul, float step_size, float grad_scale,
                             float bc2_sqrt) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float gi = g[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = p[i] * decay_mul - step_size * (mi / denom);
    }
}

#define SUMSQ_THREADS 256

/* Fixed-order tree sum of SUMSQ_THREADS doubles in shared memory; thread 0 gets the total. */
__device__ double block_sum_double_fixed(double x, double *sh) {
    sh[threadIdx.x] = x;
    __syncthreads();
    for (int s = SUMSQ_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    return sh[0];
}

__global__ void sumsq_partial_kernel(const float *g, long long n, double *partials) {
    __shared__ double sh[SUMSQ_THREADS];
    double s = 0.0;
    for (long long i = blockIdx.x * (long long)SUMSQ_THREADS + threadIdx.x; i < n;
         i += (long long)GRAD_SUMSQ_BLOCKS * SUMSQ_THREADS) {
        double x = (double)g[i];
        s += x * x;
    }
    double t = block_sum_double_fixed(s, sh);
    if (threadIdx.x == 0) partials[blockIdx.x] = t;
}

__global__ void sumsq_final_kernel(const double *partials, double *result) {
    __shared__ double sh[SUMSQ_THREADS];
    double s = 0.0;
    for (int i = threadIdx.x; i < GRAD_SUMSQ_BLOCKS; i += SUMSQ_THREADS) s += partials[i];
    double t = block_sum_double_fixed(s, sh);
    if (threadIdx.x == 0) *result = t;
}

extern "C" void adamw_update_cuda(float *p, const float *g, float *m, float *v, int64_t n, float lr, float beta1,
                                  float beta2, float eps, float weight_decay, float grad_scale, float bc1,
                                  float bc2_sqrt, void *stream) {
    if (n <= 0) return;
    float decay_mul = 1.0f - lr * weight_decay;
    float step_size = lr / bc1;
    adamw_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(p, g, m, v, n, lr, beta1, beta2, eps, decay_mul,
                                                                       step_size, grad_scale, bc2_sqrt);
    KERNEL_CHECK();
}

extern "C" void grad_sumsq_cuda(const float *g, int64_t n, double *partials, double *result_dev, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    sumsq_partial_kernel<<<GRAD_SUMSQ_BLOCKS, SUMSQ_THREADS, 0, s>>>(g, n > 0 ? n : 0, partials);
    KERNEL_CHECK();
    sumsq_final_kernel<<<1, SUMSQ_THREADS, 0, s>>>(partials, result_dev);
    KERNEL_CHECK();
}
