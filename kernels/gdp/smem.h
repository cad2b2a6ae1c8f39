/* Shared memory of every GDP kernel, in bytes, as plain C: the kernel planner (plan.c) decides
 * what fits without CUDA, and the kernels' own layouts are checked against these numbers (at
 * compile time by static_assert where the layout is a constant, else by the launch code before
 * every launch), so the two cannot drift apart.
 *
 * ob is the operand size (2 for bf16, 4 for f32); KP, VP the padded K and V; ctp the token rows
 * of a chunk (16, 32 or 64); bv the V tile of a sequential pass; nst its pipeline stages. */
#pragma once
#include <stddef.h>

#ifdef __cplusplus
#define GDP_SMEM_FN static constexpr inline
#else
#define GDP_SMEM_FN static inline
#endif

enum {
    GDP_SMEM_LDT = 72,  /* leading dimension of 64-wide operand tiles */
    GDP_SMEM_LDF = 68,  /* of 64-wide fp32 tiles */
    GDP_SMEM_LDA = 65,  /* of the fp32 64 x 64 A and T of the generic prep */
    GDP_SMEM_LDAF = 68, /* of the fast prep's A and T */
    GDP_SPLIT_FAST_RR = 64 /* split mode's largest n * n on the fast backward (n <= 8) */
};

/* a piece of shared memory carved from a block: 16-byte aligned */
GDP_SMEM_FN size_t gdp_smem_piece(size_t bytes) { return (bytes + 15) & ~(size_t)15; }
GDP_SMEM_FN size_t gdp_smem_max(size_t a, size_t b) { return a > b ? a : b; }

/* ---------------------------------------------------------------- generic kernels (f32 and bf16) */
GDP_SMEM_FN size_t gdp_smem_prep(int ob) {
    return 2 * gdp_smem_piece(64 * 4) + 3 * gdp_smem_piece((size_t)64 * GDP_SMEM_LDA * 4) +
           4 * gdp_smem_piece((size_t)64 * GDP_SMEM_LDT * ob);
}
GDP_SMEM_FN size_t gdp_smem_prep2(int ob, int KP, int VP, int ctp, int split) {
    const size_t afb = gdp_smem_max((size_t)64 * GDP_SMEM_LDA * 4, (size_t)2 * 64 * GDP_SMEM_LDT * ob);
    const size_t kw = (size_t)64 * (KP + 8) * ob;
    const size_t qv = gdp_smem_max((size_t)ctp * (KP + 8), (size_t)64 * (VP + 8)) * ob;
    return 4 * gdp_smem_piece(64 * 4) + gdp_smem_piece(afb) + gdp_smem_piece((size_t)64 * GDP_SMEM_LDA * 4) +
           gdp_smem_piece(kw) + (split && kw > afb ? gdp_smem_piece(kw) : 0) + gdp_smem_piece(qv);
}
GDP_SMEM_FN size_t gdp_smem_state(int ob, int KP, int bv, int nst) {
    const size_t stage = gdp_smem_piece(64 * 4) + 2 * gdp_smem_piece((size_t)64 * (KP + 8) * ob) +
                         gdp_smem_piece((size_t)64 * (bv + 8) * ob);
    return nst * stage + gdp_smem_piece((size_t)KP * (bv + 8) * ob);
}
GDP_SMEM_FN size_t gdp_smem_output(int ob, int ctp) {
    return 2 * gdp_smem_piece(64 * 4) + gdp_smem_piece((size_t)ctp * GDP_SMEM_LDF * 4) +
           2 * gdp_smem_piece((size_t)ctp * GDP_SMEM_LDT * ob) + 2 * gdp_smem_piece((size_t)64 * GDP_SMEM_LDT * ob);
}
GDP_SMEM_FN size_t gdp_smem_dh(int ob, int KP, int ctp, int bv, int nst) {
    const size_t stage = gdp_smem_piece(64 * 4) + 2 * gdp_smem_piece((size_t)64 * (KP + 8) * ob) +
                         gdp_smem_piece((size_t)ctp * GDP_SMEM_LDT * ob) + gdp_smem_piece((size_t)ctp * (bv + 8) * ob) +
                         (nst == 2 ? gdp_smem_piece((size_t)ctp * (KP + 8) * ob) : 0);
    return gdp_smem_piece(64 * 4) + nst * stage + gdp_smem_piece((size_t)64 * (bv + 8) * ob) +
           gdp_smem_piece((size_t)KP * (bv + 8) * ob);
}
GDP_SMEM_FN size_t gdp_smem_bwd_a(int ob, int ctp) {
    const size_t stage = ((size_t)ctp * GDP_SMEM_LDT + 4 * 64 * GDP_SMEM_LDT) * ob;
    const size_t fneed = (size_t)(64 + ctp) * GDP_SMEM_LDF * 4;
    return 4 * gdp_smem_piece(64 * 4) + gdp_smem_piece(8 * 4) + gdp_smem_piece((size_t)ctp * GDP_SMEM_LDT * ob) +
           gdp_smem_piece((size_t)64 * GDP_SMEM_LDT * ob) + 2 * gdp_smem_piece(gdp_smem_max(stage, fneed));
}
GDP_SMEM_FN size_t gdp_smem_bwd_b(int ob, int rr) {
    return 4 * gdp_smem_piece(64 * 4) + gdp_smem_piece((size_t)(rr > 0 ? rr : 1) * 4) +
           2 * gdp_smem_piece((size_t)64 * GDP_SMEM_LDF * 4) + 7 * gdp_smem_piece((size_t)64 * GDP_SMEM_LDT * ob);
}
GDP_SMEM_FN size_t gdp_smem_bwd_b_hh(int ob, int rr) {
    return 5 * gdp_smem_piece(64 * 4) + gdp_smem_piece(128 * 4) + gdp_smem_piece((size_t)(rr > 0 ? rr : 1) * 4) +
           gdp_smem_piece((size_t)64 * GDP_SMEM_LDF * 4) + 10 * gdp_smem_piece((size_t)64 * GDP_SMEM_LDT * ob);
}

/* ---------------------------------------------------------------- bf16 fast kernels */
GDP_SMEM_FN size_t gdp_smem_prep2_fast(int KP, int ctp, int split_r, int VP) {
    const size_t ldk = (size_t)KP + 8;
    const size_t afb = gdp_smem_max((size_t)2 * 64 * GDP_SMEM_LDT * 2, (size_t)64 * GDP_SMEM_LDAF * 4);
    const size_t off_kw = 4 * 64 * 4 + afb + (size_t)64 * GDP_SMEM_LDAF * 4;
    const int r_in_tf = 64 * ldk * 2 <= (size_t)64 * GDP_SMEM_LDAF * 4;
    const size_t qv = gdp_smem_max((size_t)ctp * ldk, (size_t)64 * (VP + 8));
    return off_kw + (size_t)(split_r && !r_in_tf ? 2 : 1) * 64 * ldk * 2 + qv * 2;
}
/* ctpo: the output's token rows that the state pass makes (0: none); ns: pipeline stages */
GDP_SMEM_FN size_t gdp_smem_state_fast(int KP, int bv, int ctpo, int ns) {
    const size_t ldk = (size_t)KP + 8, lds = (size_t)bv + 8, qt = (size_t)ctpo * ldk * 2;
    const int qone = KP > 128 && ctpo > 0; /* q single-buffered at K 256 */
    const size_t stage = 256 + 2 * 64 * ldk * 2 + 64 * lds * 2 + (qone ? 0 : qt) + (size_t)ctpo * GDP_SMEM_LDT * 2;
    return ns * stage + (size_t)KP * lds * 2 + (qone ? qt : 0);
}
GDP_SMEM_FN size_t gdp_smem_output_fast(int KP, int ctp) {
    const size_t ldk = (size_t)KP + 8, lds = 72;
    const size_t stage0 = (size_t)ctp * ldk * 2 + (size_t)ctp * GDP_SMEM_LDT * 2 + 64 * 4;
    return stage0 + 2 * ((size_t)KP * lds * 2 + 64 * lds * 2);
}
/* the tensor-copy kernels (K = KP = 128): boxes of 128-byte rows, a base aligned to 1024 */
GDP_SMEM_FN size_t gdp_smem_state_tma_stage(int bv, int ctpo) {
    return 2 * (size_t)64 * 128 * 2 + (size_t)64 * bv * 2 + (size_t)ctpo * 128 * 2 + (size_t)ctpo * 64 * 2;
}
GDP_SMEM_FN size_t gdp_smem_state_tma(int bv, int ctpo) {
    return 2 * gdp_smem_state_tma_stage(bv, ctpo) + (size_t)128 * bv * 2 + 2 * 64 * 4 + 16 + 1024;
}
GDP_SMEM_FN size_t gdp_smem_state_wg(int ctpo) {
    return 2 * gdp_smem_state_tma_stage(128, ctpo) + (size_t)128 * 128 * 2 + (size_t)64 * 128 * 2 + (size_t)ctpo * 136 * 2 +
           2 * 64 * 4 + 32 + 1024;
}
GDP_SMEM_FN size_t gdp_smem_dh_fast(int KP, int bv, int ctp) {
    const size_t ldk = (size_t)KP + 8, lds = (size_t)bv + 8, qt = (size_t)ctp * ldk * 2;
    const int qone = KP > 128;
    const size_t stage = 256 + 2 * 64 * ldk * 2 + (size_t)ctp * GDP_SMEM_LDT * 2 + (size_t)ctp * lds * 2 + (qone ? 0 : qt);
    return 2 * stage + 64 * lds * 2 + (size_t)KP * lds * 2 + (qone ? qt : 0);
}
GDP_SMEM_FN size_t gdp_smem_dh_tma(int bv, int ctp) {
    const size_t stage = 2 * (size_t)64 * 128 * 2 + (size_t)ctp * 64 * 2 + (size_t)ctp * bv * 2 + (size_t)ctp * 128 * 2;
    return 2 * stage + (size_t)64 * bv * 2 + (size_t)128 * bv * 2 + 2 * 64 * 4 + 16 + 1024;
}
/* Gs, rowf, qf [64]; red [8]; the row-dot partials [64][2] twice and [ctp][column tiles] (<= 128) */
#define GDP_SMEM_BWD_A_SCALARS (3 * 64 + 8 + 2 * 128 + 128)
GDP_SMEM_FN size_t gdp_smem_bwd_a_fast(int ctp) {
    const size_t qt = (size_t)ctp * GDP_SMEM_LDT, tile = (size_t)64 * GDP_SMEM_LDT;
    return GDP_SMEM_BWD_A_SCALARS * 4 + (qt + tile + 2 * (qt + 4 * tile)) * 2;
}
GDP_SMEM_FN size_t gdp_smem_bwd_a_kres(int ctp) {
    const size_t ld = 136, stage = 2 * (size_t)64 * GDP_SMEM_LDT;
    return GDP_SMEM_BWD_A_SCALARS * 4 +
           2 * ((size_t)(2 * 64 + ctp) * ld + (size_t)(ctp + 64) * ld + 2 * stage + (size_t)ctp * GDP_SMEM_LDT);
}
GDP_SMEM_FN size_t gdp_smem_bwd_b_fast(void) {
    const size_t scalars = 4 * 64 + 2 * 128 + GDP_SPLIT_FAST_RR + 8 * 8 * 8;
    return scalars * 4 + (size_t)12 * 64 * GDP_SMEM_LDT * 2;
}
GDP_SMEM_FN size_t gdp_smem_bwd_ab(int ctp) { return gdp_smem_max(gdp_smem_bwd_a_kres(ctp), gdp_smem_bwd_b_fast()); }
