/* Hopper warpgroup MMA (wgmma, sm_90a) with A from registers and B from shared memory, for the
 * sequential passes by V rows (k_state_wg). A warpgroup's m64nN fp32 accumulator is, per warp, the
 * mma.sync C fragments of its 16 rows (warp w of the group: rows 16 w ..), float[N / 8][4]; A is the
 * mma.sync A fragment of those rows at depth 16. B is described by a shared-memory descriptor
 * (wgmma_desc). Only compiled for sm_90a: elsewhere the calls trap (the host takes these kernels
 * only on compute capability 9.0, whose code in the fat binary is sm_90a's). */
#pragma once
#include <stdint.h>

namespace gdp {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GDP_WGMMA 1
#else
#define GDP_WGMMA 0
#endif

/* A 128-byte-swizzled operand (TMA's CU_TENSOR_MAP_SWIZZLE_128B boxes, base 1024-aligned): start
 * address, LBO (K-major: unused; MN-major: bytes from one 64-element atom to the next along M or N)
 * and SBO (bytes from one 8-row group to the next: 1024 for 128-byte rows) */
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (uint64_t)((lbo >> 4) & 0x3FFF) << 16 | (uint64_t)((sbo >> 4) & 0x3FFF) << 32 |
           (uint64_t)1 << 62;
}
__device__ __forceinline__ void wgmma_fence() {
#if GDP_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if GDP_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void wgmma_wait() {
#if GDP_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/* keeps the compiler from moving accumulator registers across the asynchronous products */
template <int NT> __device__ __forceinline__ void wgmma_fence_acc(float (&d)[NT][4]) {
#pragma unroll
    for (int i = 0; i < NT; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(d[i][e])::"memory");
}
template <int KS> __device__ __forceinline__ void wgmma_fence_regs(uint32_t (&a)[KS][4]) {
#pragma unroll
    for (int i = 0; i < KS; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+r"(a[i][e])::"memory");
}
/* d (m64nN, fp32) += A (registers, bf16) x B (descriptor; TB: B stored MN-major) */
template <int N, int TB> struct Wgmma;

template <int TB> struct Wgmma<16, TB> {
    static __device__ __forceinline__ void run(float (&d)[2][4], const uint32_t (&a)[4], uint64_t desc) {
#if GDP_WGMMA
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %14, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, %13;\n}\n"
                     : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(TB), "r"(1));
#else
        (void)d, (void)a, (void)desc;
        __trap();
#endif
    }
};

template <int TB> struct Wgmma<32, TB> {
    static __device__ __forceinline__ void run(float (&d)[4][4], const uint32_t (&a)[4], uint64_t desc) {
#if GDP_WGMMA
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %22, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, %21;\n}\n"
                     : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(TB), "r"(1));
#else
        (void)d, (void)a, (void)desc;
        __trap();
#endif
    }
};

template <int TB> struct Wgmma<64, TB> {
    static __device__ __forceinline__ void run(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc) {
#if GDP_WGMMA
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %37;\n}\n"
                     : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(TB), "r"(1));
#else
        (void)d, (void)a, (void)desc;
        __trap();
#endif
    }
};

template <int TB> struct Wgmma<128, TB> {
    static __device__ __forceinline__ void run(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc) {
#if GDP_WGMMA
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %70, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %69;\n}\n"
                     : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(TB), "r"(1));
#else
        (void)d, (void)a, (void)desc;
        __trap();
#endif
    }
};


} // namespace gdp
