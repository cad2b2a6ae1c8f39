/* Host side shared by the pass families: how a planned step is launched. Each family file (prep.cu,
 * state.cu, ...) maps a GdpStep to its kernel instantiation and launches it through launch_step;
 * launch.cu executes a whole plan. */
#pragma once
#include <cuda.h> /* CUtensorMap */
#include <cudaTypedefs.h>
#include <stdio.h>
#include <string.h>

#include "kernels/gdp/device.cuh"
#include "kernels/gdp/plan.h"
#include "kernels/gdp/smem.h"

namespace gdp {

#define GDP_CU(call)                                                                                          \
    do {                                                                                                      \
        cudaError_t e_ = (call);                                                                              \
        if (e_ != cudaSuccess)                                                                                \
            return gdp_fail(GDP_ERR_CUDA, "%s: CUDA call failed: %s: %s (%s:%d)", L.who, #call,               \
                            cudaGetErrorString(e_), __FILE__, __LINE__);                                      \
    } while (0)

/* one call's context: who is calling (for messages), its layout and tuning, the stream */
struct Launch {
    const char *who;
    const GdpLayout *lay;
    const GdpTuning *tu;
    cudaStream_t st;
};

/* The planner's shared-memory size must be the kernel's own layout's; a difference is a bug in
 * smem.h or in a kernel's carving, never the caller's. */
static inline GdpStatus check_smem(const Launch &L, const GdpStep &s, size_t kernel_bytes) {
    if (s.smem == kernel_bytes) return GDP_OK;
    return gdp_fail(GDP_ERR_INTERNAL, "%s: %s: the plan gives %zu bytes of shared memory, the kernel's layout %zu (%s:%d)", L.who,
                    gdp_kernel_name(s.kernel), s.smem, kernel_bytes, __FILE__, __LINE__);
}

template <typename K, typename... Extra>
static GdpStatus launch_grid(const Launch &L, const GdpStep &s, K kernel, dim3 grid, const Params &P, const Extra &...extra) {
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return GDP_OK;
    if (s.smem > 48 * 1024) {
        GDP_CU(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s.smem));
        /* the largest shared-memory carveout, so that the occupancy the sizes allow is reached */
        GDP_CU(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared));
    }
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    if (L.tu->profile) {
        GDP_CU(cudaEventCreate(&e0));
        GDP_CU(cudaEventCreate(&e1));
        GDP_CU(cudaEventRecord(e0, L.st));
    }
    kernel<<<grid, NTHREADS, s.smem, L.st>>>(P, extra...);
    GDP_CU(cudaGetLastError());
    if (L.tu->profile) {
        GDP_CU(cudaEventRecord(e1, L.st));
        GDP_CU(cudaEventSynchronize(e1));
        float ms = 0.f;
        GDP_CU(cudaEventElapsedTime(&ms, e0, e1));
        fprintf(stderr, "gdp profile: %-13s grid %ux%ux%u smem %6zu bv %3d  %8.3f ms\n", gdp_kernel_name(s.kernel), grid.x,
                grid.y, grid.z, s.smem, P.bv, ms);
        GDP_CU(cudaEventDestroy(e0));
        GDP_CU(cudaEventDestroy(e1));
    }
    return GDP_OK;
}

/* A step as planned. Chunk grids (the chunk count in y, or in z where chunk_z) go out in launches of
 * at most grid_y_max chunks, each from chunk P.ci0: a grid's y and z hold at most 65535. */
template <typename K, typename... Extra>
static GdpStatus launch_step(const Launch &L, const GdpStep &s, K kernel, const Params &P, bool chunk_grid, bool chunk_z,
                             const Extra &...extra) {
    if (!kernel)
        return gdp_fail(GDP_ERR_INTERNAL, "%s: %s has no instantiation for this step (K %d, bv %d, ct %d, variant %d) (%s:%d)", L.who,
                        gdp_kernel_name(s.kernel), s.kp, s.bv, s.ctp, s.variant, __FILE__, __LINE__);
    if (!chunk_grid) return launch_grid(L, s, kernel, dim3(s.grid[0], s.grid[1], s.grid[2]), P, extra...);
    const int ymax = L.tu->grid_y_max >= 1 && L.tu->grid_y_max <= 65535 ? L.tu->grid_y_max : 65535;
    const int nchunks = chunk_z ? s.grid[2] : s.grid[1];
    Params piece = P;
    for (piece.ci0 = 0; piece.ci0 < nchunks; piece.ci0 += ymax) {
        const int n = nchunks - piece.ci0 < ymax ? nchunks - piece.ci0 : ymax;
        const dim3 grid = chunk_z ? dim3(s.grid[0], s.grid[1], n) : dim3(s.grid[0], n, s.grid[2]);
        GdpStatus r = launch_grid(L, s, kernel, grid, piece, extra...);
        if (r != GDP_OK) return r;
    }
    return GDP_OK;
}

/* ---------------------------------------------------------------- tensor maps (sm_90 kernels) */
/* cuTensorMapEncodeTiled through the runtime (no link against the driver library); null if absent */
static inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
        return nullptr;
    return (PFN_cuTensorMapEncodeTiled_v12000)fn;
}
/* a bf16 tensor (rank 2 or 3; dims innermost first, the outer dims' strides in bytes) read and written
 * as boxes of 128-byte rows, swizzled (Swz128) */
static inline bool encode_bf16(PFN_cuTensorMapEncodeTiled_v12000 enc, CUtensorMap *m, const void *base, int rank,
                               const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box) {
    const cuuint32_t es[3] = {1, 1, 1};
    return enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, (cuuint32_t)rank, (void *)base, dims, strides, box, es,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
/* A workspace array of CH chunk tiles, each rows_per_chunk rows of `width` bf16, in boxes of 64
 * columns x box_rows rows (W, Kwd, U, Delta, h, P and their gradients) */
static inline bool encode_chunk_tiles(PFN_cuTensorMapEncodeTiled_v12000 enc, CUtensorMap *m, const void *base,
                                      const GdpLayout &pl, int width, int rows_per_chunk, int box_rows) {
    const cuuint64_t dims[2] = {(cuuint64_t)width, (cuuint64_t)pl.CH * rows_per_chunk}, strides[1] = {(cuuint64_t)width * 2};
    const cuuint32_t box[2] = {64, (cuuint32_t)box_rows};
    return encode_bf16(enc, m, base, 2, dims, strides, box);
}
/* A token-major input (q, dO: [B T][H][width] bf16) in boxes of 64 columns x one head x box_rows tokens */
static inline bool encode_token_rows(PFN_cuTensorMapEncodeTiled_v12000 enc, CUtensorMap *m, const void *base, const Params &P,
                                     int width, int box_rows) {
    const cuuint64_t dims[3] = {(cuuint64_t)width, (cuuint64_t)P.H, (cuuint64_t)P.B * P.T};
    const cuuint64_t strides[2] = {(cuuint64_t)width * 2, (cuuint64_t)P.H * width * 2};
    const cuuint32_t box[3] = {64, 1, (cuuint32_t)box_rows};
    return encode_bf16(enc, m, base, 3, dims, strides, box);
}
static inline GdpStatus tensor_map_failed(const Launch &L, const GdpStep &s) {
    return gdp_fail(GDP_ERR_CUDA, "%s: %s: a tensor map could not be encoded (cuTensorMapEncodeTiled)", L.who,
                    gdp_kernel_name(s.kernel));
}

/* the pass families (each in its own file) */
GdpStatus run_tables(const Launch &L, const Params &P);
GdpStatus run_prep(const Launch &L, const GdpStep &s, const Params &P, bool bf16);
GdpStatus run_state(const Launch &L, const GdpStep &s, const Params &P, bool bf16);
GdpStatus run_output(const Launch &L, const GdpStep &s, const Params &P, bool bf16);
GdpStatus run_dh(const Launch &L, const GdpStep &s, const Params &P, bool bf16);
GdpStatus run_bwd_a(const Launch &L, const GdpStep &s, const Params &P, bool bf16);
GdpStatus run_bwd_b(const Launch &L, const GdpStep &s, const Params &P, bool bf16);
GdpStatus run_bwd_ab(const Launch &L, const GdpStep &s, const Params &P);
GdpStatus run_dmask(const Launch &L, const Params &P);
/* registers of the generic state and dh kernels, for the planner's occupancy (0 when unknown) */
int generic_state_regs(bool bf16);
int generic_dh_regs(bool bf16);

} // namespace gdp
