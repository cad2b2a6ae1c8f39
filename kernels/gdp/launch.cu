/* Host side of the CUDA op: the public entry points check their arguments, ask the planner
 * (plan.c) which kernels run, and execute that plan pass by pass (each pass family's file launches
 * its own kernels). Nothing here chooses a kernel. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/gdp/launch.cuh"

namespace gdp {

/* never launched: its attributes say which architecture's code this build loaded on the device */
__global__ void k_arch_probe() {}

/* The caps of the current device for the plan, read once a device. The code's architecture is the
 * lower of the card's and the loaded code's (a compute_80 PTX build runs the Ampere kernels on a
 * Hopper card); wgmma needs both to be 9.0, the sm_90a code. */
static GdpStatus device_caps(const Launch &L, bool bf16, GdpDeviceCaps &caps) {
    enum { MAXDEV = 64 };
    static GdpDeviceCaps cache[MAXDEV][2];
    static bool have[MAXDEV][2];
    int dev = 0;
    GDP_CU(cudaGetDevice(&dev));
    if (dev < MAXDEV && have[dev][bf16]) {
        caps = cache[dev][bf16];
        return GDP_OK;
    }
    int major = 0, minor = 0;
    memset(&caps, 0, sizeof caps);
    GDP_CU(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    GDP_CU(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    GDP_CU(cudaDeviceGetAttribute(&caps.sm_count, cudaDevAttrMultiProcessorCount, dev));
    GDP_CU(cudaDeviceGetAttribute(&caps.smem_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    GDP_CU(cudaDeviceGetAttribute(&caps.smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    cudaFuncAttributes fa;
    GDP_CU(cudaFuncGetAttributes(&fa, k_arch_probe));
    const int card = major * 10 + minor;
    caps.arch = fa.ptxVersion < card ? fa.ptxVersion : card;
    if (caps.arch < 80)
        return gdp_fail(GDP_ERR_UNSUPPORTED, "%s: compute capability %d.%d (code for sm_%d); the CUDA path needs sm_80 or later",
                        L.who, major, minor, caps.arch);
    caps.wgmma = card == 90 && fa.ptxVersion == 90;
    caps.regs_state = generic_state_regs(bf16);
    caps.regs_dh = generic_dh_regs(bf16);
    if (dev < MAXDEV) cache[dev][bf16] = caps, have[dev][bf16] = true;
    return GDP_OK;
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

static GdpStatus check_common(const char *who, const GdpDesc *d) {
    GdpStatus s = gdp_validate(d);
    if (s != GDP_OK) return s;
    if (d->dtype != GDP_F32 && d->dtype != GDP_BF16)
        return gdp_fail(GDP_ERR_UNSUPPORTED, "%s: dtype %s is not supported on CUDA; use GDP_BF16 or GDP_F32", who,
                        dtype_name(d->dtype));
    if (d->K > 256 || d->V > 256)
        return gdp_fail(GDP_ERR_UNSUPPORTED, "%s: K=%d, V=%d; the CUDA path supports K and V up to 256", who, d->K, d->V);
    if (d->n > GDP_CHUNK)
        return gdp_fail(GDP_ERR_UNSUPPORTED, "%s: n=%d; the CUDA path supports n up to %d (one token per chunk)", who,
                        d->n, GDP_CHUNK);
    return GDP_OK;
}
static void fill_params(const GdpDesc *d, const GdpLayout &pl, void *ws, void *scratch, Params &P) {
    memset(&P, 0, sizeof P);
    P.mode = (int)d->mode;
    P.B = d->B;
    P.T = d->T;
    P.H = d->H;
    P.K = d->K;
    P.V = d->V;
    P.n = d->n;
    P.KP = pl.KP;
    P.VP = pl.VP;
    P.Ct = pl.Ct;
    P.Ctp = pl.Ctp;
    P.N = pl.N;
    P.NCmax = pl.NCmax;
    P.nkt = pl.nkt;
    P.nvt = pl.nvt;
    P.scale = (float)gdp_effective_scale(d);
    P.ninv = 65536 / d->n + 1;
    P.sinv = 65536 / (d->K / d->n > 0 ? d->K / d->n : 1) + 1;
    P.wsl8 = (d->K / d->n) % 8 == 0;
    P.cu = d->cu_seqlens;
    /* the uniform chunk context's division by invariant integers: with 2^(l-1) < ncs <= 2^l,
     * mul = ceil(2^(30+l) / ncs) < 2^31, and (4 ci mul) / 2^(32+l) is ci / ncs plus less than 2^-l
     * <= 1/ncs, which never reaches the next integer */
    P.ncs = (d->T + pl.Ct - 1) / pl.Ct;
    while ((1 << P.ncs_shift) < P.ncs) P.ncs_shift++;
    P.ncs_mul = (unsigned)((((uint64_t)1 << (30 + P.ncs_shift)) + P.ncs - 1) / P.ncs);
    char *w = (char *)ws;
    P.seq = (GdpSeqInfo *)(w + pl.o_seq);
    P.chunk = (GdpChunkInfo *)(w + pl.o_chunk);
    P.G = (float *)(w + pl.o_G);
    P.W = w + pl.o_W;
    P.Kwd = w + pl.o_Kwd;
    P.U = w + pl.o_U;
    P.P = w + pl.o_P;
    P.h = w + pl.o_h;
    P.D = w + pl.o_D;
    P.Tsave = w + pl.o_T;
    if (scratch) {
        char *b = (char *)scratch - pl.bytes_saved; /* the o_d* offsets count from the start of ws */
        P.dh = b + pl.o_dh;
        P.dD = b + pl.o_dD;
        P.dW = b + pl.o_dW;
        P.dKw = b + pl.o_dKw;
        P.dGa = (float *)(b + pl.o_dGa);
        P.dM = (float *)(b + pl.o_dM);
    }
    P.sW = pl.sW;
    P.sU = pl.sU;
    P.sP = pl.sP;
    P.sH = pl.sH;
    P.sD = pl.sD;
}

/* the inputs the forward and the backward share (GdpForwardArgs and GdpBackwardArgs name them alike) */
template <typename Args> static void set_inputs(Params &P, const Args *a) {
    P.q = a->q;
    P.k = a->k;
    P.v = a->v;
    P.beta = a->beta;
    P.g = (const float *)a->g;
    P.mask = (const float *)a->mask;
    P.h0 = (const float *)a->h0;
}

/* the forward's passes as planned */
static GdpStatus run_forward(const Launch &L, const GdpKernelPlan &plan, Params &P, bool bf16, bool forward) {
    GdpStatus s = run_tables(L, P);
    if (s == GDP_OK) s = run_prep(L, plan.prep, P, bf16);
    if (s != GDP_OK) return s;
    const GdpStep &state = forward ? plan.state : plan.state_recompute;
    P.bv = state.bv, P.nst = state.nst;
    P.fast_out = state.ctpo != 0;
    s = run_state(L, state, P, bf16);
    if (s != GDP_OK || !forward || plan.output.kernel == GDP_KERNEL_NONE) return s;
    return run_output(L, plan.output, P, bf16);
}

template <typename IT> static GdpStatus forward_impl(const GdpDesc *d, const GdpForwardArgs *a, void *ws, cudaStream_t st) {
    GdpTuning tu = gdp_get_tuning();
    GdpLayout pl;
    gdp_layout_make(d, &pl);
    const Launch L = {"gdp_forward_cuda", &pl, &tu, st};
    const bool bf16 = std::is_same<IT, __nv_bfloat16>::value;
    Params P;
    fill_params(d, pl, a->saved ? a->saved : ws, nullptr, P);
    if (!a->saved) P.Tsave = nullptr; /* only a saving forward keeps T (its buffer has room for it) */
    set_inputs(P, a);
    P.o = a->o;
    P.ht = (float *)a->ht;
    P.veck = d->K % 8 == 0 && aligned16(a->q) && aligned16(a->k);
    P.vecv = d->V % 8 == 0 && aligned16(a->v) && aligned16(a->o);
    P.keep_hd = a->saved != nullptr;
    GdpDeviceCaps caps;
    GdpKernelPlan plan;
    GdpStatus s = device_caps(L, bf16, caps);
    if (s == GDP_OK) s = gdp_plan_kernels(d, &caps, &tu, a->saved != nullptr, P.veck && P.vecv, &plan);
    if (s != GDP_OK) return s;
    P.seq_hv = plan.seq_hs;
    return run_forward(L, plan, P, bf16, true);
}

template <typename IT> static GdpStatus backward_impl(const GdpDesc *d, const GdpBackwardArgs *a, void *ws, cudaStream_t st) {
    GdpTuning tu = gdp_get_tuning();
    GdpLayout pl;
    gdp_layout_make(d, &pl);
    const Launch L = {"gdp_backward_cuda", &pl, &tu, st};
    const bool bf16 = std::is_same<IT, __nv_bfloat16>::value;
    Params P;
    /* with a saved forward, its buffer holds the tables through T and ws is the scratch alone */
    if (a->saved)
        fill_params(d, pl, (void *)a->saved, ws, P);
    else
        fill_params(d, pl, ws, (char *)ws + pl.bytes_saved, P);
    set_inputs(P, a);
    P.d_o = a->d_o;
    P.dht = (const float *)a->dht;
    P.dq = a->dq;
    P.dk = a->dk;
    P.dv = a->dv;
    P.dbeta = a->dbeta;
    P.dg = (float *)a->dg;
    P.dmask = (float *)a->dmask;
    P.dh0 = (float *)a->dh0;
    P.veck = d->K % 8 == 0 && aligned16(a->q) && aligned16(a->k) && aligned16(a->dq) && aligned16(a->dk);
    P.vecv = d->V % 8 == 0 && aligned16(a->v) && aligned16(a->d_o) && aligned16(a->dv);
    GdpDeviceCaps caps;
    GdpKernelPlan plan;
    GdpStatus s = device_caps(L, bf16, caps);
    if (s == GDP_OK) s = gdp_plan_kernels(d, &caps, &tu, a->saved != nullptr, P.veck && P.vecv, &plan);
    if (s != GDP_OK) return s;
    if (plan.backward_refused) return gdp_fail(GDP_ERR_UNSUPPORTED, "%s: %s", L.who, plan.backward_why);
    P.seq_hv = plan.seq_hs;
    if (!a->saved) {
        s = run_forward(L, plan, P, bf16, false);
        if (s != GDP_OK) return s;
    }
    P.bv = plan.dh.bv, P.nst = plan.dh.nst;
    s = run_dh(L, plan.dh, P, bf16);
    if (s != GDP_OK) return s;
    if (plan.bwd_a.kernel == GDP_KERNEL_BWD_AB) {
        /* bwd_b drops each chunk's dW and dK_w from L2 once read: they must be whole 128-byte lines */
        P.dw_discard = ((uintptr_t)P.dW & 127) == 0 && ((uintptr_t)P.dKw & 127) == 0 && (P.sW * 2) % 128 == 0;
        s = run_bwd_ab(L, plan.bwd_a, P);
    } else {
        s = run_bwd_a(L, plan.bwd_a, P, bf16);
        if (s == GDP_OK) s = run_bwd_b(L, plan.bwd_b, P, bf16);
    }
    if (s == GDP_OK && plan.dmask && P.dmask) s = run_dmask(L, P);
    return s;
}

} // namespace gdp

/* ---------------------------------------------------------------- public API */
/* the plan of a descriptor that gdp_validate accepts; false (sizes 0) for any other */
static bool plan_for(const GdpDesc *desc, GdpLayout *pl) {
    if (gdp_validate(desc) != GDP_OK) return false;
    gdp_layout_make(desc, pl);
    return true;
}

/* the kernels move 16 bytes at a time from every region of the saved buffer */
static GdpStatus check_saved_aligned(const char *who, const void *saved) {
    if (((uintptr_t)saved & 15) != 0) return gdp_fail(GDP_ERR_INVALID, "%s: the saved buffer must be 16-byte aligned", who);
    return GDP_OK;
}

extern "C" size_t gdp_forward_workspace_bytes(const GdpDesc *desc) {
    GdpLayout pl;
    return plan_for(desc, &pl) ? pl.bytes_fwd : 0;
}

extern "C" size_t gdp_backward_workspace_bytes(const GdpDesc *desc) {
    GdpLayout pl;
    return plan_for(desc, &pl) ? pl.bytes_bwd : 0;
}

extern "C" size_t gdp_saved_bytes(const GdpDesc *desc) {
    GdpLayout pl;
    return plan_for(desc, &pl) ? pl.bytes_saved : 0;
}

extern "C" size_t gdp_backward_scratch_bytes(const GdpDesc *desc) {
    GdpLayout pl;
    return plan_for(desc, &pl) ? pl.bytes_scratch : 0;
}

extern "C" GdpStatus gdp_forward_cuda(const GdpDesc *desc, const GdpForwardArgs *args, void *workspace,
                                      size_t workspace_bytes, void *stream) {
    const char *who = "gdp_forward_cuda";
    GdpStatus s = gdp::check_common(who, desc);
    if (s != GDP_OK) return s;
    s = gdp_check_forward_args(who, desc, args);
    if (s != GDP_OK) return s;
    if (args->saved) { /* the saved buffer is the workspace; the workspace argument is not used */
        const size_t need = gdp_saved_bytes(desc);
        if (args->saved_bytes < need)
            return gdp_fail(GDP_ERR_WORKSPACE, "%s: the saved buffer has %zu bytes, %zu are needed (gdp_saved_bytes)",
                            who, args->saved_bytes, need);
        s = check_saved_aligned(who, args->saved);
        if (s != GDP_OK) return s;
    } else {
        const size_t need = gdp_forward_workspace_bytes(desc);
        if (!workspace || workspace_bytes < need)
            return gdp_fail(GDP_ERR_WORKSPACE,
                            "%s: the workspace has %zu bytes, %zu are needed (gdp_forward_workspace_bytes)", who,
                            workspace ? workspace_bytes : (size_t)0, need);
    }
    gdp_clear_error();
    cudaStream_t st = (cudaStream_t)stream;
    return desc->dtype == GDP_BF16 ? gdp::forward_impl<__nv_bfloat16>(desc, args, workspace, st)
                                   : gdp::forward_impl<float>(desc, args, workspace, st);
}

extern "C" GdpStatus gdp_backward_cuda(const GdpDesc *desc, const GdpBackwardArgs *args, void *workspace,
                                       size_t workspace_bytes, void *stream) {
    const char *who = "gdp_backward_cuda";
    GdpStatus s = gdp::check_common(who, desc);
    if (s != GDP_OK) return s;
    s = gdp_check_backward_args(who, desc, args);
    if (s != GDP_OK) return s;
    const size_t need = args->saved ? gdp_backward_scratch_bytes(desc) : gdp_backward_workspace_bytes(desc);
    if (!workspace || workspace_bytes < need)
        return gdp_fail(GDP_ERR_WORKSPACE, "%s: the workspace has %zu bytes, %zu are needed (%s)", who,
                        workspace ? workspace_bytes : (size_t)0, need,
                        args->saved ? "gdp_backward_scratch_bytes, with a saved forward" : "gdp_backward_workspace_bytes");
    if (args->saved) {
        s = check_saved_aligned(who, args->saved);
        if (s != GDP_OK) return s;
    }
    gdp_clear_error();
    cudaStream_t st = (cudaStream_t)stream;
    return desc->dtype == GDP_BF16 ? gdp::backward_impl<__nv_bfloat16>(desc, args, workspace, st)
                                   : gdp::backward_impl<float>(desc, args, workspace, st);
}

extern "C" GdpStatus gdp_plan_device(const GdpDesc *desc, bool saved, GdpDeviceCaps *caps, GdpKernelPlan *plan) {
    const GdpTuning tu = gdp_get_tuning();
    GdpLayout pl;
    memset(&pl, 0, sizeof pl);
    const gdp::Launch L = {"gdp_plan_device", &pl, &tu, nullptr};
    GdpStatus s = gdp::check_common(L.who, desc);
    if (s == GDP_OK) s = gdp::device_caps(L, desc->dtype == GDP_BF16, *caps);
    return s == GDP_OK ? gdp_plan_kernels(desc, caps, &tu, saved, true, plan) : s;
}
