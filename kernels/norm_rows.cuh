/* Row layout shared by the normalisation kernels (rmsnorm.cu, l2norm.cu, gated_rmsnorm.cu) when rows
 * have a multiple of 8 elements and every tensor is 16-byte aligned: a row of D elements is
 * nch = D / 8 chunks of 8, held by a group of LG lanes (a power of two), lane li owning chunks li,
 * li + LG, ..., li + (NC - 1) LG. A warp holds 32 / LG rows at once, so a row of 128 bf16 (16 chunks)
 * is 16 lanes of one 16-byte load each and a warp moves 512 bytes per load instruction, where
 * lane-per-column loops move 64. Each input is read once into registers, still packed (4 registers
 * for 8 bf16), reduced across the group with xor shuffles (a fixed order, so the same bits on every
 * run), and the outputs come from those registers: one pass over memory instead of two.
 * Rows longer than 256 * NC_max elements (4 for RMSNorm: the dw sums, x and dy of 4 chunks already take
 * about 100 registers a lane; 2 for the per-head norms), D not a multiple of 8, or misaligned tensors take
 * each op's one-warp-a-row kernels instead. */
#pragma once
#include "kernels/column_sum.cuh"
#include "kernels/common.cuh"

#define NORM_WARPS 8
#define NORM_THREADS (32 * NORM_WARPS)

/* 8 elements as loaded, still in the storage type. */
template <typename T> struct Raw8;
template <> struct Raw8<float> {
    float4 a, b;
};
template <> struct Raw8<__nv_bfloat16> {
    uint4 u;
};

__device__ __forceinline__ void raw8_load(Raw8<float> &r, const float *p) {
    r.a = reinterpret_cast<const float4 *>(p)[0], r.b = reinterpret_cast<const float4 *>(p)[1];
}
__device__ __forceinline__ void raw8_load(Raw8<__nv_bfloat16> &r, const __nv_bfloat16 *p) {
    r.u = *reinterpret_cast<const uint4 *>(p);
}
__device__ __forceinline__ void raw8_zero(Raw8<float> &r) { r.a = r.b = make_float4(0.f, 0.f, 0.f, 0.f); }
__device__ __forceinline__ void raw8_zero(Raw8<__nv_bfloat16> &r) { r.u = make_uint4(0u, 0u, 0u, 0u); }

__device__ __forceinline__ void raw8_floats(const Raw8<float> &r, float (&f)[8]) {
    f[0] = r.a.x, f[1] = r.a.y, f[2] = r.a.z, f[3] = r.a.w, f[4] = r.b.x, f[5] = r.b.y, f[6] = r.b.z, f[7] = r.b.w;
}
__device__ __forceinline__ void raw8_floats(const Raw8<__nv_bfloat16> &r, float (&f)[8]) {
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&r.u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 v = __bfloat1622float2(h[i]);
        f[2 * i] = v.x, f[2 * i + 1] = v.y;
    }
}

/* The 8 elements at p + i, or zeros (which add nothing to any sum) where they do not exist or are not
 * wanted (p is not offset then: it may be NULL). */
template <typename T>
__device__ __forceinline__ void raw8_load_if(Raw8<T> &r, const T *p, long long i, bool ok) {
    if (ok) raw8_load(r, p + i);
    else raw8_zero(r);
}

/* Sum over the LG lanes of a group (aligned lanes of one warp); every lane of the warp must call. */
template <int LG> __device__ __forceinline__ float norm_group_sum(float v) {
#pragma unroll
    for (int o = LG / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The sum of squares of a row whose chunks the group's lanes hold (r[NC], zeros past the row), over
 * the group; every lane of the warp must call. */
template <int LG, int NC, typename T> __device__ __forceinline__ float norm_group_sumsq(const Raw8<T> (&r)[NC]) {
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < NC; k++) {
        float f[8];
        raw8_floats(r[k], f);
#pragma unroll
        for (int j = 0; j < 8; j++) ss += f[j] * f[j];
    }
    return norm_group_sum<LG>(ss);
}

/* Column sums a lane holds for its chunks (acc[NC][8], zeros for chunks past nch) summed over the
 * block's rows: first across the warp's groups, then warp by warp through shared memory, always in
 * the same order, into partial[blockIdx.x * D + c]. `part` is shared memory of D floats. Every thread
 * of the block must call. */
template <int LG, int NC>
__device__ __forceinline__ void norm_block_column_sums(float *partial, float *part, float (&acc)[NC][8], int D) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nch = D >> 3;
#pragma unroll
    for (int k = 0; k < NC; k++)
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int o = LG; o < 32; o <<= 1) acc[k][j] += __shfl_xor_sync(0xffffffffu, acc[k][j], o);
    for (int w = 0; w < NORM_WARPS; w++) {
        if (warp == w && lane < LG)
#pragma unroll
            for (int k = 0; k < NC; k++) {
                const int ch = lane + k * LG;
                if (ch < nch)
#pragma unroll
                    for (int j = 0; j < 8; j++) part[8 * ch + j] = w ? part[8 * ch + j] + acc[k][j] : acc[k][j];
            }
        __syncthreads();
    }
    for (int c = threadIdx.x; c < D; c += NORM_THREADS) partial[(long long)blockIdx.x * D + c] = part[c];
}

/* The forward of RMSNorm (MEAN: r = rsqrt(mean of the squares + eps), y = x r w, w may be NULL) and of
 * the L2 norm (!MEAN: r = rsqrt(sum of the squares + eps), y = x r, no weight) on row groups of C
 * elements; rstd[row] = r. */
template <typename TX, typename TY, int LG, int NC, bool MEAN>
__global__ void __launch_bounds__(NORM_THREADS)
    norm_rows_fwd_kernel(TY *y, float *rstd, const TX *x, const TX *w, long long rows, int C, float eps) {
    const int li = threadIdx.x & (LG - 1), nch = C >> 3;
    const long long row = blockIdx.x * (long long)(NORM_THREADS / LG) + threadIdx.x / LG;
    const bool ok = row < rows;
    const long long off = ok ? row * C : 0;
    Raw8<TX> rx[NC];
#pragma unroll
    for (int k = 0; k < NC; k++) raw8_load_if(rx[k], x, off + 8 * (li + k * LG), ok && li + k * LG < nch);
    const float ss = norm_group_sumsq<LG>(rx);
    if (!ok) return;
    const float r = 1.f / sqrtf((MEAN ? ss / (float)C : ss) + eps);
    if (li == 0) rstd[row] = r;
#pragma unroll
    for (int k = 0; k < NC; k++) {
        const int ch = li + k * LG;
        if (ch >= nch) continue;
        float f[8];
        raw8_floats(rx[k], f);
        if (MEAN) {
            float wv[8] = {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f};
            if (w) load8(w + 8 * ch, wv);
#pragma unroll
            for (int j = 0; j < 8; j++) f[j] = f[j] * r * wv[j];
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) f[j] *= r;
        }
        store8(y + off + 8 * ch, f);
    }
}

/* Which (LG, NC) holds rows of D elements, or -1 for the one-column-a-lane kernels: D a multiple of
 * 8, at most max_nc chunks a lane, and every pointer (NULL counts as aligned) 16-byte aligned. */
static inline int norm_shape(long long D, int max_nc, const void *p0, const void *p1 = 0, const void *p2 = 0,
                             const void *p3 = 0, const void *p4 = 0, const void *p5 = 0) {
    const uintptr_t bits =
        (uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2 | (uintptr_t)p3 | (uintptr_t)p4 | (uintptr_t)p5;
    const long long nch = D / 8;
    if (D % 8 || (bits & 15) || nch > 32LL * max_nc) return -1;
    if (nch <= 8) return 0;
    if (nch <= 16) return 1;
    return (int)(1 + (nch + 31) / 32); /* NC = shape - 1 from here */
}
/* Rows a block covers in one step of its row loop. */
static inline long long norm_rows_per_step(int shape) { return NORM_THREADS / (shape == 0 ? 8 : shape == 1 ? 16 : 32); }

/* Runs the body with constexpr LG and NC for a norm_shape of 0..3 (rows up to 512 elements) or 0..5
 * (up to 1024). */
#define NORM_CASE_(k, lg, nc, ...)          \
    case k: {                               \
        constexpr int LG = lg, NC = nc;     \
        __VA_ARGS__;                        \
    } break;
#define NORM_CASES_512_(...)                \
    NORM_CASE_(0, 8, 1, __VA_ARGS__)        \
    NORM_CASE_(1, 16, 1, __VA_ARGS__)       \
    NORM_CASE_(2, 32, 1, __VA_ARGS__)       \
    NORM_CASE_(3, 32, 2, __VA_ARGS__)
#define NORM_SHAPES_512(shape, ...)                                       \
    switch (shape) {                                                      \
        NORM_CASES_512_(__VA_ARGS__)                                      \
    default: gdp_fatal("norm kernels: row shape %d out of range", shape); \
    }
#define NORM_SHAPES_1024(shape, ...)                                      \
    switch (shape) {                                                      \
        NORM_CASES_512_(__VA_ARGS__)                                      \
        NORM_CASE_(4, 32, 3, __VA_ARGS__)                                 \
        NORM_CASE_(5, 32, 4, __VA_ARGS__)                                 \
    default: gdp_fatal("norm kernels: row shape %d out of range", shape); \
    }
