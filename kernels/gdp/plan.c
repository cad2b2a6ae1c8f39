/* The kernel planner of the CUDA op (plan.h): the rules that pick each pass's kernel, in one place,
 * in plain C. The sizes of every candidate's shared memory come from smem.h, which the kernels are
 * checked against. */
#include "kernels/gdp/plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kernels/gdp/desc.h"
#include "kernels/gdp/smem.h"
#include "kernels/gdp/layout.h"

#define GDP_TUNING_DEFAULT                                                                                \
    {.generic = 0, .seq_tma = -1, .state_wgmma = true, .bv_state = 0, .bv_dh = 0, .bwd_a_whole_k = -1,           \
     .bwd_fuse = true, .bwd_b_split_lanes = true, .grid_y_max = 65535, .profile = false}
static GdpTuning g_tuning = GDP_TUNING_DEFAULT;

GdpTuning gdp_tuning_default(void) {
    const GdpTuning t = GDP_TUNING_DEFAULT;
    return t;
}
void gdp_set_tuning(const GdpTuning *t) { g_tuning = t ? *t : gdp_tuning_default(); }
GdpTuning gdp_get_tuning(void) { return g_tuning; }

GdpStatus gdp_device_caps_of_arch(int arch, GdpDeviceCaps *caps) {
    memset(caps, 0, sizeof *caps);
    caps->arch = arch;
    switch (arch) {
    case 80: /* A100: 164 KB a multiprocessor, 163 KB a block */
        caps->sm_count = 108, caps->smem_sm = 167936, caps->smem_block = 166912;
        return GDP_OK;
    case 86: /* RTX 3090 */
        caps->sm_count = 82, caps->smem_sm = 102400, caps->smem_block = 101376;
        return GDP_OK;
    case 89: /* RTX 4090 */
        caps->sm_count = 128, caps->smem_sm = 102400, caps->smem_block = 101376;
        return GDP_OK;
    case 90: /* H100 SXM */
        caps->wgmma = true, caps->sm_count = 132, caps->smem_sm = 233472, caps->smem_block = 232448;
        return GDP_OK;
    default:
        return gdp_fail(GDP_ERR_INVALID, "arch %d: the CUDA path supports 80, 86, 89 and 90", arch);
    }
}

const char *gdp_kernel_name(GdpKernelId k) {
    static const char *names[GDP_KERNEL_COUNT] = {
        "none",       "k_prep",      "k_prep2",      "k_prep2_fast", "k_state",      "k_state_fast", "k_state_tma",
        "k_state_wg", "k_output",    "k_output_fast", "k_dh",        "k_dh_fast",    "k_dh_tma",     "k_bwd_a",
        "k_bwd_a_fast", "k_bwd_a_kres", "k_bwd_b",    "k_bwd_b_hh",   "k_bwd_b_fast", "k_bwd_ab"};
    return k >= 0 && k < GDP_KERNEL_COUNT ? names[k] : "?";
}

/* everything a rule reads */
typedef struct Shape {
    const GdpDeviceCaps *caps;
    const GdpTuning *tu;
    GdpLayout lay;
    int ob;       /* operand bytes */
    bool bf16;
    bool split;
    bool aligned; /* 16-byte rows */
} Shape;

static void step_set(GdpStep *s, GdpKernelId k, size_t smem, const char *fmt, ...) {
    s->kernel = k;
    s->smem = smem;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->why, sizeof s->why, fmt, ap);
    va_end(ap);
}
static bool fits(const Shape *s, size_t smem) { return smem <= (size_t)s->caps->smem_block; }
static bool fast_pass(const Shape *s, unsigned part) { return s->bf16 && !(s->tu->generic & part); }
/* the fast prep, output and backward: K and V whole 64-column tiles, 16-byte rows */
static bool fast_shape(const Shape *s) {
    const GdpLayout *l = &s->lay;
    return l->K == l->KP && l->V == l->VP && l->K % GDP_TILE == 0 && l->V % GDP_TILE == 0 && s->aligned;
}
static bool kp_fast(int KP) { return KP == 64 || KP == 128 || KP == 256; }
/* the tensor-copy kernels: sm_90 code, K = V tiles of 128-byte rows, maps whose row counts fit 32 bits */
static bool tma_shape(const Shape *s) {
    const GdpLayout *l = &s->lay;
    return s->caps->arch >= 90 && l->K == 128 && l->KP == 128 && l->V == l->VP && s->aligned &&
           (long long)l->CH * l->KP < 2147483647LL;
}

/* ---------------------------------------------------------------- which instantiations exist */
static bool have_state_fast(int KP, int bv, int ctpo) {
    if (!ctpo) return (KP == 64 || KP == 128) ? (bv == 128 || bv == 64 || bv == 32) : KP == 256 && (bv == 64 || bv == 32);
    if ((KP == 64 || KP == 128) && bv == 128) return ctpo == 16 || ctpo == 32 || ctpo == 64;
    if ((KP == 64 || KP == 128) && bv == 64) return ctpo == 32 || ctpo == 64;
    return KP == 256 && bv == 64 && ctpo == 32;
}
static bool have_state_tma(int bv, int ctpo) { return bv == 128 || (bv == 64 && ctpo != 16); }
static bool have_dh_fast(int KP, int bv) { return kp_fast(KP) && (bv == 64 || bv == 32 || (bv == 128 && KP != 256)); }

/* ---------------------------------------------------------------- V tiles */
/* The generic sequential passes: the state (KP x bv fp32) must fit the register accumulators
 * (KP*bv <= 16384) and the buffers the shared memory; among those, the fewest waves of CTAs (each
 * CTA runs one whole sequential chain), then a cost that grows with the tile width, then two
 * stages (prefetch) over one. */
static bool pick_generic_bv(const Shape *s, bool dh, int *bv_out, int *nst_out) {
    const GdpLayout *l = &s->lay;
    const int regs0 = dh ? s->caps->regs_dh : s->caps->regs_state, regs = regs0 > 0 ? regs0 : 128;
    const int cands[3] = {128, 64, 32};
    double best = 1e30;
    bool found = false;
    for (int ci = 0; ci < 3; ci++) {
        const int bv = cands[ci] < l->VP ? cands[ci] : l->VP;
        if (l->KP * bv > 16384) continue;
        for (int nst = 2; nst >= 1; nst--) {
            const size_t b = dh ? gdp_smem_dh(s->ob, l->KP, l->Ctp, bv, nst) : gdp_smem_state(s->ob, l->KP, bv, nst);
            if (!fits(s, b)) continue;
            int occ = (int)(s->caps->smem_sm / (b + 1024));
            const int occ_r = 65536 / (regs * 256);
            if (occ_r < occ) occ = occ_r;
            if (occ < 1) occ = 1;
            const long ctas = (long)l->N * l->H * ((l->VP + bv - 1) / bv);
            const long waves = (ctas + (long)s->caps->sm_count * occ - 1) / ((long)s->caps->sm_count * occ);
            const double cost = (double)waves * (1.0 + bv / 64.0) * (nst == 2 ? 1.0 : 1.3);
            if (cost < best) best = cost, *bv_out = bv, *nst_out = nst, found = true;
        }
    }
    return found;
}

/* The fast sequential passes: the least work on the busiest SM, ceil(CTAs / SMs) * bv columns,
 * then the widest (each CTA loads the whole W and Kwd, so narrower tiles load them more often).
 * Measured at H 6, n 2: state bv 64 (96 CTAs) beat bv 32 (192); at H 16 (B 8) state bv 128 (128
 * CTAs, one an SM) beat bv 64 (256 CTAs, two an SM), 0.236 against 0.290 ms: a third fewer bytes a
 * step, and the pass is bound by them. A forced width (tuning) is taken where a fast kernel of that
 * width fits, else none is (the generic pass then runs at that width). 0: none fits. */
static int pick_fast_bv(const Shape *s, bool dh, int forced) {
    const GdpLayout *l = &s->lay;
    const int cands[3] = {128, 64, 32};
    int best_bv = 0;
    long best = 0;
    for (int i = 0; i < 3; i++) {
        const int bv = cands[i];
        if (l->VP % bv) continue;
        const bool have = dh ? have_dh_fast(l->KP, bv) : have_state_fast(l->KP, bv, 0);
        if (!have || !fits(s, dh ? gdp_smem_dh_fast(l->KP, bv, l->Ctp) : gdp_smem_state_fast(l->KP, bv, 0, 2))) continue;
        if (forced) {
            if (forced == bv) return bv;
            continue;
        }
        const long ctas = (long)l->N * l->H * (l->VP / bv), load = (ctas + s->caps->sm_count - 1) / s->caps->sm_count * bv;
        if (!best_bv || load < best) best_bv = bv, best = load;
    }
    return best_bv;
}

/* ---------------------------------------------------------------- grids */
static void grid_chunks(const Shape *s, GdpStep *st, int z) {
    st->grid[0] = s->lay.H, st->grid[1] = s->lay.NCmax, st->grid[2] = z;
}
static void grid_seq(const Shape *s, bool seq_hs, GdpStep *st, int vtiles) {
    if (seq_hs)
        st->grid[0] = s->lay.N * s->lay.H, st->grid[1] = vtiles, st->grid[2] = 1;
    else
        st->grid[0] = vtiles, st->grid[1] = s->lay.H, st->grid[2] = s->lay.N;
}

/* The generic state or dh pass as a step: its V tile and stages picked, or forced by the tuning
 * (where that width fits). GDP_ERR_UNSUPPORTED when no width fits the shared memory. */
static GdpStatus generic_seq_step(const Shape *s, bool dh, bool seq_hs, const char *why, GdpStep *st) {
    const GdpLayout *l = &s->lay;
    int bv = 0, nst = 0;
    if (!pick_generic_bv(s, dh, &bv, &nst))
        return gdp_fail(GDP_ERR_UNSUPPORTED, "gdp: K=%d needs more shared memory than this GPU has (%d bytes a block); use bf16",
                        l->K, s->caps->smem_block);
    const int forced = dh ? s->tu->bv_dh : s->tu->bv_state;
    if (forced && forced != bv) {
        const int f = forced < l->VP ? forced : l->VP;
        for (int n = 2; n >= 1; n--)
            if (l->KP * f <= 16384 && fits(s, dh ? gdp_smem_dh(s->ob, l->KP, l->Ctp, f, n) : gdp_smem_state(s->ob, l->KP, f, n))) {
                bv = f, nst = n;
                break;
            }
    }
    st->bv = bv, st->nst = nst;
    grid_seq(s, seq_hs, st, (l->VP + bv - 1) / bv);
    step_set(st, dh ? GDP_KERNEL_DH : GDP_KERNEL_STATE, dh ? gdp_smem_dh(s->ob, l->KP, l->Ctp, bv, nst) : gdp_smem_state(s->ob, l->KP, bv, nst),
             "%s; V tile %d, %d stage%s", !s->bf16 ? "f32" : (s->tu->generic & GDP_GENERIC_SEQ) ? "tuning: generic" : why, bv, nst,
             nst > 1 ? "s" : "");
    return GDP_OK;
}

/* ---------------------------------------------------------------- passes */
static void plan_prep(const Shape *s, GdpStep *st) {
    const GdpLayout *l = &s->lay;
    memset(st, 0, sizeof *st);
    st->ctp = l->Ctp;
    grid_chunks(s, st, 1);
    /* split mode's keys as loaded where n is 1, 2 or 4 (n = 64 / ctp): the slices then hold whole
     * quarters of the columns, and at K 256 split's prep keeps householder's shared memory */
    const bool raw = s->split && l->Ctp * l->n == GDP_CHUNK;
    const size_t spf = gdp_smem_prep2_fast(l->KP, l->Ctp, s->split && !raw, l->VP);
    const size_t sp2 = gdp_smem_prep2(s->ob, l->KP, l->VP, l->Ctp, s->split);
    if (fast_pass(s, GDP_GENERIC_PREP) && fast_shape(s) && kp_fast(l->KP) && fits(s, spf)) {
        st->kp = l->KP, st->variant = raw;
        step_set(st, GDP_KERNEL_PREP2_FAST, spf, "bf16, K %d compiled in%s", l->KP, raw ? ", split keys as loaded" : "");
    } else if (fits(s, sp2))
        step_set(st, GDP_KERNEL_PREP2, sp2, "%s", !s->bf16 ? "f32" : !fast_shape(s) ? "K or V not whole 64-column tiles of 16-byte rows" : !kp_fast(l->KP) ? "no fast kernel for this K" : (s->tu->generic & GDP_GENERIC_PREP) ? "tuning: generic prep" : "the fast prep's shared memory does not fit");
    else
        step_set(st, GDP_KERNEL_PREP, gdp_smem_prep(s->ob), "k_prep2's %zu bytes of shared memory do not fit", sp2);
}

/* the state pass; has_o: it may make the output (the forward); keep_hd: h and Delta are kept */
static GdpStatus plan_state(const Shape *s, bool seq_hs, bool has_o, bool keep_hd, GdpStep *st) {
    const GdpLayout *l = &s->lay;
    memset(st, 0, sizeof *st);
    st->ctp = l->Ctp;
    const int bv = fast_pass(s, GDP_GENERIC_SEQ) ? pick_fast_bv(s, false, s->tu->bv_state) : 0;
    if (!bv) return generic_seq_step(s, false, seq_hs, "no fast kernel fits", st);
    st->bv = bv, st->nst = 2, st->kp = l->KP;
    grid_seq(s, seq_hs, st, l->VP / bv);
    /* The fast state pass makes the output too at bv 128, and at bv 64 where its CTAs fit one an SM
     * (the output's q and P tiles take the shared memory a second CTA had); at K 256 a CTA has an SM
     * with or without it. H200, H 16, n_h 2: forward 0.857 -> 0.722 ms (k_output took 0.21). */
    const long ctas = (long)l->N * l->H * (l->VP / bv);
    const bool out_here = has_o && fast_shape(s) && !(s->tu->generic & GDP_GENERIC_OUTPUT) &&
                          (bv == 128 || l->KP == 256 || ctas <= s->caps->sm_count);
    const int ctpo = out_here && have_state_fast(l->KP, bv, l->Ctp) && fits(s, gdp_smem_state_fast(l->KP, bv, l->Ctp, 2)) ? l->Ctp : 0;
    st->ctpo = ctpo;
    const char *out = ctpo ? ", making the output" : "";
    /* the wgmma pass wherever it applies, in every state pass of the shape, so that saved and
     * recomputed h and Delta are the same bits */
    if (s->caps->wgmma && s->tu->state_wgmma && bv == 128 && tma_shape(s) && fits(s, gdp_smem_state_wg(ctpo))) {
        step_set(st, GDP_KERNEL_STATE_WG, gdp_smem_state_wg(ctpo), "sm_90a, K = V tile 128: wgmma by V rows%s", out);
        return GDP_OK;
    }
    /* tensor copies where the pass stores h and Delta (a saving forward): fewer instructions a stage
     * than cp.async; the kernels of a pass make the same products in the same order, so the bits do
     * not depend on the choice */
    const bool tma = s->tu->seq_tma < 0 ? keep_hd : s->tu->seq_tma > 0;
    if (tma && tma_shape(s) && have_state_tma(bv, ctpo) && fits(s, gdp_smem_state_tma(bv, ctpo))) {
        step_set(st, GDP_KERNEL_STATE_TMA, gdp_smem_state_tma(bv, ctpo), "sm_90, K 128, V tile %d, tensor copies%s", bv, out);
        return GDP_OK;
    }
    step_set(st, GDP_KERNEL_STATE_FAST, gdp_smem_state_fast(l->KP, bv, ctpo, 2), "bf16, V tile %d (%ld CTAs on %d SMs)%s", bv,
             ctas, s->caps->sm_count, out);
    return GDP_OK;
}

static void plan_output(const Shape *s, const GdpStep *state, GdpStep *st) {
    const GdpLayout *l = &s->lay;
    memset(st, 0, sizeof *st);
    st->ctp = l->Ctp;
    if (state->ctpo) {
        step_set(st, GDP_KERNEL_NONE, 0, "made by the state pass");
        return;
    }
    grid_chunks(s, st, 1);
    const size_t so = gdp_smem_output_fast(l->KP, l->Ctp);
    if (fast_pass(s, GDP_GENERIC_OUTPUT) && fast_shape(s) && kp_fast(l->KP) && fits(s, so)) {
        st->kp = l->KP;
        step_set(st, GDP_KERNEL_OUTPUT_FAST, so, "bf16, K %d compiled in", l->KP);
        return;
    }
    grid_chunks(s, st, l->nvt);
    step_set(st, GDP_KERNEL_OUTPUT, gdp_smem_output(s->ob, l->Ctp), "%s", !s->bf16 ? "f32" : "no fast output for this shape");
}

static GdpStatus plan_dh(const Shape *s, bool seq_hs, GdpStep *st) {
    const GdpLayout *l = &s->lay;
    memset(st, 0, sizeof *st);
    st->ctp = l->Ctp;
    if (fast_pass(s, GDP_GENERIC_SEQ) && l->K == l->KP && l->V == l->VP && s->aligned) {
        const int bv = pick_fast_bv(s, true, s->tu->bv_dh);
        if (bv) {
            st->bv = bv, st->nst = 2, st->kp = l->KP;
            grid_seq(s, seq_hs, st, l->VP / bv);
            if (s->tu->seq_tma != 0 && tma_shape(s) && (bv == 128 || bv == 64) && fits(s, gdp_smem_dh_tma(bv, l->Ctp)))
                step_set(st, GDP_KERNEL_DH_TMA, gdp_smem_dh_tma(bv, l->Ctp), "sm_90, K 128, V tile %d, tensor copies", bv);
            else
                step_set(st, GDP_KERNEL_DH_FAST, gdp_smem_dh_fast(l->KP, bv, l->Ctp), "bf16, V tile %d", bv);
            return GDP_OK;
        }
    }
    return generic_seq_step(s, true, seq_hs, l->K != l->KP || l->V != l->VP || !s->aligned ? "K or V padded, or rows not 16-byte" : "no fast kernel fits", st);
}

static void plan_bwd(const Shape *s, GdpStep *a, GdpStep *b) {
    const GdpLayout *l = &s->lay;
    memset(a, 0, sizeof *a);
    memset(b, 0, sizeof *b);
    a->ctp = b->ctp = l->Ctp;
    const bool fast = fast_pass(s, GDP_GENERIC_BWD) && fast_shape(s);
    const size_t skres = gdp_smem_bwd_a_kres(l->Ctp), sbf = gdp_smem_bwd_b_fast();
    /* the whole-K bwd_a at K 128 (V <= 128) where two CTAs fit an SM (16 and 32 chunk tokens) */
    const bool kres_shape = fast && l->KP == 128 && l->nvt <= 2 && fits(s, skres);
    const bool kres = kres_shape && (s->tu->bwd_a_whole_k < 0 ? l->Ctp <= 32 : s->tu->bwd_a_whole_k > 0);
    const int rr = s->split ? l->n * l->n : 0;
    const bool wsl8 = (l->K / l->n) % 8 == 0; /* split mode: slices of whole 8-column groups */
    const bool fast_b = fast && fits(s, sbf);
    int kind = -1;
    if (fast_b && !s->split)
        kind = GDP_BWDB_HOUSEHOLDER;
    else if (fast_b && wsl8 && (l->n == 2 || l->n == 4) && s->tu->bwd_b_split_lanes)
        kind = GDP_BWDB_SPLIT_LANES + l->n;
    else if (fast_b && rr <= GDP_SPLIT_FAST_RR && wsl8)
        kind = GDP_BWDB_SPLIT_TILES;
    const char *kind_name = kind == GDP_BWDB_HOUSEHOLDER ? "householder" : kind == GDP_BWDB_SPLIT_TILES ? "split, rows summed in fp32 tiles" : "split, rows summed across lanes";
    /* In one CTA bwd_b reads bwd_a's dW and dK_w from L2, written microseconds before, and drops
     * them there once read (H 16, n_h 3: ~0.6 GB of the two kernels' ~3.7 GB) */
    if (kres && kind >= 0 && s->tu->bwd_fuse && l->Ctp <= 32 && fits(s, gdp_smem_bwd_ab(l->Ctp))) {
        a->variant = kind, a->kp = 128;
        grid_chunks(s, a, 1);
        step_set(a, GDP_KERNEL_BWD_AB, gdp_smem_bwd_ab(l->Ctp), "K 128, %d chunk tokens: bwd_a and bwd_b (%s) in one CTA", l->Ctp, kind_name);
        step_set(b, GDP_KERNEL_NONE, 0, "in k_bwd_ab");
        return;
    }
    if (kres) {
        a->kp = 128;
        grid_chunks(s, a, 1);
        step_set(a, GDP_KERNEL_BWD_A_KRES, skres, "K 128, %d chunk tokens: whole K in one CTA", l->Ctp);
    } else if (fast) {
        a->grid[0] = l->nkt, a->grid[1] = l->H, a->grid[2] = l->NCmax; /* a chunk's K tiles side by side: L2 shares dO, D, dD */
        step_set(a, GDP_KERNEL_BWD_A_FAST, gdp_smem_bwd_a_fast(l->Ctp), "bf16, a CTA per (K tile, chunk)");
    } else {
        grid_chunks(s, a, l->nkt);
        step_set(a, GDP_KERNEL_BWD_A, gdp_smem_bwd_a(s->ob, l->Ctp), "%s", !s->bf16 ? "f32" : "no fast bwd_a for this shape");
    }
    grid_chunks(s, b, 1);
    const size_t shh = gdp_smem_bwd_b_hh(s->ob, rr);
    if (kind >= 0) {
        b->variant = kind;
        step_set(b, GDP_KERNEL_BWD_B_FAST, sbf, "bf16, %s", kind_name);
    } else if (!s->split && fits(s, shh)) {
        step_set(b, GDP_KERNEL_BWD_B_HH, shh, "householder, raw tiles double-buffered");
    } else if (s->split && rr <= GDP_SPLIT_FAST_RR && fits(s, shh)) {
        b->variant = 1;
        step_set(b, GDP_KERNEL_BWD_B_HH, shh, "split with n*n <= %d, raw tiles double-buffered", GDP_SPLIT_FAST_RR);
    } else
        step_set(b, GDP_KERNEL_BWD_B, gdp_smem_bwd_b(s->ob, rr), "%s", s->split && rr > GDP_SPLIT_FAST_RR ? "split with n*n > 64" : "the double-buffered kernel does not fit");
}

static GdpStatus refuse_smem(const Shape *s, const GdpDesc *desc, const GdpStep *st) {
    return gdp_fail(GDP_ERR_UNSUPPORTED,
                    "gdp: %s at K=%d, V=%d, n=%d (%s) needs %zu bytes of shared memory, this GPU allows %d a block; %s",
                    gdp_kernel_name(st->kernel), desc->K, desc->V, desc->n, s->bf16 ? "bf16" : "f32", st->smem,
                    s->caps->smem_block,
                    !s->bf16              ? "use bf16 on this GPU (the f32 kernels need a Hopper GPU's shared memory)"
                    : s->lay.Ctp == 64 ? "use n >= 2 on this GPU (n = 1 makes 64-token chunks, whose tiles need a Hopper GPU)"
                                       : "this shape needs a Hopper GPU");
}

GdpStatus gdp_plan_kernels(const GdpDesc *desc, const GdpDeviceCaps *caps, const GdpTuning *tuning, bool saved,
                           bool aligned16, GdpKernelPlan *plan) {
    memset(plan, 0, sizeof *plan);
    GdpStatus st = gdp_validate(desc);
    if (st != GDP_OK) return st;
    if (desc->dtype != GDP_F32 && desc->dtype != GDP_BF16)
        return gdp_fail(GDP_ERR_UNSUPPORTED, "gdp: dtype %s is not supported on CUDA; use GDP_BF16 or GDP_F32",
                        dtype_name(desc->dtype));
    if (desc->K > 256 || desc->V > 256)
        return gdp_fail(GDP_ERR_UNSUPPORTED, "gdp: K=%d, V=%d; the CUDA path supports K and V up to 256", desc->K, desc->V);
    if (desc->n > GDP_CHUNK)
        return gdp_fail(GDP_ERR_UNSUPPORTED, "gdp: n=%d; the CUDA path supports n up to %d (one token per chunk)", desc->n,
                        GDP_CHUNK);
    Shape s;
    memset(&s, 0, sizeof s);
    s.caps = caps;
    s.tu = tuning ? tuning : &g_tuning;
    gdp_layout_make(desc, &s.lay);
    s.bf16 = desc->dtype == GDP_BF16;
    s.ob = s.bf16 ? 2 : 4;
    s.split = desc->mode == GDP_MODE_SPLIT;
    s.aligned = aligned16 && desc->K % 8 == 0 && desc->V % 8 == 0;
    const int ymax = s.tu->grid_y_max >= 1 && s.tu->grid_y_max <= 65535 ? s.tu->grid_y_max : 65535;
    plan->seq_hs = s.lay.N > ymax;
    plan_prep(&s, &plan->prep);
    st = plan_state(&s, plan->seq_hs, true, saved, &plan->state);
    if (st != GDP_OK) return st;
    plan_output(&s, &plan->state, &plan->output);
    /* the generic kernels have no smaller variant: a shape whose tiles do not fit is refused here,
     * the forward outright, the backward in the plan (an inference-only caller can still run) */
    const GdpStep *fwd[] = {&plan->prep, &plan->state, &plan->output};
    for (size_t i = 0; i < sizeof fwd / sizeof fwd[0]; i++)
        if (fwd[i]->kernel != GDP_KERNEL_NONE && !fits(&s, fwd[i]->smem)) return refuse_smem(&s, desc, fwd[i]);
    if (!saved) st = plan_state(&s, plan->seq_hs, false, false, &plan->state_recompute);
    if (st == GDP_OK) st = plan_dh(&s, plan->seq_hs, &plan->dh);
    if (st == GDP_OK) {
        plan_bwd(&s, &plan->bwd_a, &plan->bwd_b);
        const GdpStep *bwd[] = {&plan->state_recompute, &plan->dh, &plan->bwd_a, &plan->bwd_b};
        for (size_t i = 0; st == GDP_OK && i < sizeof bwd / sizeof bwd[0]; i++)
            if (bwd[i]->kernel != GDP_KERNEL_NONE && !fits(&s, bwd[i]->smem)) st = refuse_smem(&s, desc, bwd[i]);
    }
    plan->dmask = s.split;
    if (st != GDP_OK) {
        plan->backward_refused = true;
        snprintf(plan->backward_why, sizeof plan->backward_why, "%s", gdp_last_error());
        memset(&plan->state_recompute, 0, sizeof plan->state_recompute);
        memset(&plan->dh, 0, sizeof plan->dh);
        memset(&plan->bwd_a, 0, sizeof plan->bwd_a);
        memset(&plan->bwd_b, 0, sizeof plan->bwd_b);
        plan->dmask = false;
    }
    return GDP_OK;
}

static void print_step(FILE *out, const char *pass, const GdpStep *s) {
    if (s->kernel == GDP_KERNEL_NONE) {
        fprintf(out, "  %-16s -             %s\n", pass, s->why);
        return;
    }
    char tiles[64] = "";
    int n = 0;
    if (s->kp) n += snprintf(tiles + n, sizeof tiles - n, " K%d", s->kp);
    if (s->bv) n += snprintf(tiles + n, sizeof tiles - n, " bv%d", s->bv);
    if (s->ctpo) n += snprintf(tiles + n, sizeof tiles - n, " o%d", s->ctpo);
    snprintf(tiles + n, sizeof tiles - n, " ct%d", s->ctp);
    fprintf(out, "  %-16s %-13s%-18s grid %dx%dx%d  smem %6zu  %s\n", pass, gdp_kernel_name(s->kernel), tiles, s->grid[0],
            s->grid[1], s->grid[2], s->smem, s->why);
}

void gdp_plan_print(const GdpKernelPlan *p, const GdpDesc *d, const GdpDeviceCaps *caps, bool saved, FILE *out) {
    fprintf(out, "plan: sm_%d%s (%d SMs, %d bytes of shared memory a block), %s %s, B %d T %d H %d K %d V %d n %d%s, %s\n",
            caps->arch, caps->wgmma ? "a" : "", caps->sm_count, caps->smem_block, d->dtype == GDP_BF16 ? "bf16" : "f32",
            d->mode == GDP_MODE_SPLIT ? "split" : "householder", d->B, d->T, d->H, d->K, d->V, d->n,
            d->cu_seqlens ? " varlen" : "", saved ? "forward saved for the backward" : "backward recomputes the forward");
    fprintf(out, "  forward          tables, chunks\n");
    print_step(out, "forward prep", &p->prep);
    print_step(out, "forward state", &p->state);
    print_step(out, "forward output", &p->output);
    if (!saved && !p->backward_refused) {
        print_step(out, "backward prep", &p->prep);
        print_step(out, "backward state", &p->state_recompute);
    }
    if (p->backward_refused) {
        fprintf(out, "  backward         refused: %s\n", p->backward_why);
        return;
    }
    print_step(out, "backward dh", &p->dh);
    print_step(out, "backward bwd_a", &p->bwd_a);
    print_step(out, "backward bwd_b", &p->bwd_b);
    if (p->dmask) fprintf(out, "  backward dmask   k_dmask       fixed-order sum of the per-chunk mask gradients\n");
    if (p->seq_hs) fprintf(out, "  sequential grids (sequences x heads, V tiles): more sequences than a grid's z holds\n");
}
