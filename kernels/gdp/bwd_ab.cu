/* Passes 6 and 7 in one CTA. */
#include "kernels/gdp/launch.cuh"
#include "kernels/gdp/bwd_a_kres.cuh"
#include "kernels/gdp/bwd_b_fast.cuh"

namespace gdp {

/* ---------------------------------------------------------------- 7d. bwd_a + bwd_b in one CTA */
/* k_bwd_ab: k_bwd_a_kres and then k_bwd_b_fast on the same chunk, in one CTA (GdpTuning.bwd_fuse
 * false runs them as two kernels). bwd_b's inputs from bwd_a, the chunk's dW and dK_w (32 KB at K 128), were
 * written by this CTA microseconds before, and its dDelta tiles were read by bwd_a: L2 serves them
 * instead of DRAM (H 16, n_h 3: ~0.6 GB of the two kernels' ~3.7 GB). Once bwd_b has read dW and dK_w
 * they are dead, so their lines still in L2 are discarded, never written back. Shared memory is
 * the larger of the two kernels' (both fit two CTAs an SM); the products, their order and rounding
 * are the two kernels' own, so gradients are the same bits. */
__device__ __forceinline__ void l2_discard_line(const void *p) {
    asm volatile("discard.global.L2 [%0], 128;\n" ::"l"(p) : "memory");
}
template <int CTP, int KIND> __global__ void __launch_bounds__(NTHREADS, 2) k_bwd_ab(Params P) {
    extern __shared__ __align__(16) char smem[];
    ChunkCtx c;
    if (!chunk_ctx(P, c)) return;
    bwd_a_kres_chunk<CTP, KIND != GDP_BWDB_HOUSEHOLDER, (KIND > GDP_BWDB_SPLIT_LANES)>(P, c, smem);
    __syncthreads(); /* bwd_a's dW, dK_w and dGa stores before bwd_b reads them; its staging tile before bwd_b's loads */
    bwd_b_fast_chunk<KIND>(P, c, smem);
    if (P.dw_discard) { /* every read of them completed before bwd_b's last barrier */
        const int bytes = 64 * P.KP * (int)sizeof(bf16_t);
        const char *dw = (const char *)((const bf16_t *)P.dW + c.ch * P.sW), *dkw = (const char *)((const bf16_t *)P.dKw + c.ch * P.sW);
        for (int off = threadIdx.x * 128; off < bytes; off += NTHREADS * 128) {
            l2_discard_line(dw + off);
            l2_discard_line(dkw + off);
        }
    }
}

/* ---------------------------------------------------------------- host */
template <int CTP> static void (*bwd_ab_kernel(int kind))(Params) {
    return kind == GDP_BWDB_HOUSEHOLDER ? k_bwd_ab<CTP, GDP_BWDB_HOUSEHOLDER>
         : kind == GDP_BWDB_SPLIT_LANES + 2 ? k_bwd_ab<CTP, GDP_BWDB_SPLIT_LANES + 2>
         : kind == GDP_BWDB_SPLIT_LANES + 4 ? k_bwd_ab<CTP, GDP_BWDB_SPLIT_LANES + 4>
         : kind == GDP_BWDB_SPLIT_TILES ? k_bwd_ab<CTP, GDP_BWDB_SPLIT_TILES> : nullptr;
}
GdpStatus run_bwd_ab(const Launch &L, const GdpStep &s, const Params &P) {
    return launch_step(L, s, s.ctp == 16 ? bwd_ab_kernel<16>(s.variant) : s.ctp == 32 ? bwd_ab_kernel<32>(s.variant) : nullptr, P, true, false);
}

} // namespace gdp
