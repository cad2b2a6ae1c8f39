/* The CUDA op's kernel planner (kernels/gdp/plan.h) on the CPU: every supported architecture, both
 * dtypes and modes and a grid of shapes get a complete plan whose kernels exist on that architecture
 * and fit its shared memory; and the choices that carry the speed on Hopper stay where they are. */
#include <stdio.h>
#include <string.h>

#include "base/common.h"
#include "kernels/gdp/plan.h"
#include "kernels/gdp/smem.h"
#include "tests/check_main.h"

static const int archs[4] = {80, 86, 89, 90};

static GdpDesc desc_of(GdpMode mode, DType dt, int B, int T, int H, int K, int V, int n) {
    GdpDesc d;
    memset(&d, 0, sizeof d);
    d.mode = mode, d.dtype = dt, d.B = B, d.T = T, d.H = H, d.K = K, d.V = V, d.n = n;
    return d;
}

static bool hopper_only(GdpKernelId k) {
    return k == GDP_KERNEL_STATE_TMA || k == GDP_KERNEL_STATE_WG || k == GDP_KERNEL_DH_TMA;
}
static bool fast_kernel(GdpKernelId k) {
    return k == GDP_KERNEL_PREP2_FAST || k == GDP_KERNEL_STATE_FAST || k == GDP_KERNEL_STATE_TMA || k == GDP_KERNEL_STATE_WG ||
           k == GDP_KERNEL_OUTPUT_FAST || k == GDP_KERNEL_DH_FAST || k == GDP_KERNEL_DH_TMA || k == GDP_KERNEL_BWD_A_FAST ||
           k == GDP_KERNEL_BWD_A_KRES || k == GDP_KERNEL_BWD_B_FAST || k == GDP_KERNEL_BWD_AB;
}

/* a step that must run: a kernel of the pass, launchable on caps */
static void check_step(const GdpStep *s, const GdpDeviceCaps *caps, const GdpDesc *d, const char *pass,
                       const GdpKernelId *allowed, int nallowed) {
    bool ok = false;
    for (int i = 0; i < nallowed; i++) ok |= s->kernel == allowed[i];
    ck_assert_msg(ok, "sm_%d %s K %d V %d n %d: %s runs %s", caps->arch, pass, d->K, d->V, d->n, pass, gdp_kernel_name(s->kernel));
    ck_assert_msg(s->smem > 0 && s->smem <= (size_t)caps->smem_block, "sm_%d %s: %zu bytes of shared memory, the GPU allows %d",
                  caps->arch, pass, s->smem, caps->smem_block);
    ck_assert_msg(s->grid[0] > 0 && s->grid[1] > 0 && s->grid[2] > 0, "sm_%d %s: empty grid", caps->arch, pass);
    ck_assert_msg(caps->arch >= 90 || !hopper_only(s->kernel), "sm_%d %s: %s needs sm_90", caps->arch, pass, gdp_kernel_name(s->kernel));
    ck_assert_msg(d->dtype == GDP_BF16 || !fast_kernel(s->kernel), "sm_%d %s: f32 runs the bf16 kernel %s", caps->arch, pass,
                  gdp_kernel_name(s->kernel));
    ck_assert_msg(s->why[0] != 0, "sm_%d %s: no reason given", caps->arch, pass);
}

static void check_plan(const GdpKernelPlan *p, const GdpDeviceCaps *caps, const GdpDesc *d, bool saved) {
    static const GdpKernelId prep[] = {GDP_KERNEL_PREP, GDP_KERNEL_PREP2, GDP_KERNEL_PREP2_FAST};
    static const GdpKernelId state[] = {GDP_KERNEL_STATE, GDP_KERNEL_STATE_FAST, GDP_KERNEL_STATE_TMA, GDP_KERNEL_STATE_WG};
    static const GdpKernelId output[] = {GDP_KERNEL_OUTPUT, GDP_KERNEL_OUTPUT_FAST};
    static const GdpKernelId dh[] = {GDP_KERNEL_DH, GDP_KERNEL_DH_FAST, GDP_KERNEL_DH_TMA};
    static const GdpKernelId bwd_a[] = {GDP_KERNEL_BWD_A, GDP_KERNEL_BWD_A_FAST, GDP_KERNEL_BWD_A_KRES, GDP_KERNEL_BWD_AB};
    static const GdpKernelId bwd_b[] = {GDP_KERNEL_BWD_B, GDP_KERNEL_BWD_B_HH, GDP_KERNEL_BWD_B_FAST};
    check_step(&p->prep, caps, d, "prep", prep, 3);
    check_step(&p->state, caps, d, "state", state, 4);
    if (p->state.ctpo == 0) check_step(&p->output, caps, d, "output", output, 2);
    else ck_assert_msg(p->output.kernel == GDP_KERNEL_NONE, "the state pass makes o, yet %s runs", gdp_kernel_name(p->output.kernel));
    if (p->backward_refused) { /* an inference-only plan: the forward checked, the backward says why not */
        ck_assert_msg(caps->arch < 90 && strstr(p->backward_why, "shared memory"), "sm_%d: backward refused: %s",
                      caps->arch, p->backward_why);
        ck_assert(p->dh.kernel == GDP_KERNEL_NONE && p->bwd_a.kernel == GDP_KERNEL_NONE && !p->dmask);
        return;
    }
    if (!saved) {
        check_step(&p->state_recompute, caps, d, "state (recompute)", state, 4);
        ck_assert_msg(p->state_recompute.ctpo == 0, "the backward's state pass makes no output");
    }
    check_step(&p->dh, caps, d, "dh", dh, 3);
    check_step(&p->bwd_a, caps, d, "bwd_a", bwd_a, 4);
    if (p->bwd_a.kernel == GDP_KERNEL_BWD_AB) ck_assert_int_eq(p->bwd_b.kernel, GDP_KERNEL_NONE);
    else check_step(&p->bwd_b, caps, d, "bwd_b", bwd_b, 3);
    ck_assert(p->dmask == (d->mode == GDP_MODE_SPLIT));
    /* the tensor-copy and wgmma kernels are instantiated at K 128 and these V tiles only */
    const GdpStep *st[2] = {&p->state, saved ? &p->state : &p->state_recompute};
    for (int i = 0; i < 2; i++) {
        if (st[i]->kernel == GDP_KERNEL_STATE_TMA)
            ck_assert_msg(st[i]->bv == 128 || (st[i]->bv == 64 && st[i]->ctpo != 16), "k_state_tma at bv %d o%d", st[i]->bv, st[i]->ctpo);
        if (st[i]->kernel == GDP_KERNEL_STATE_WG) ck_assert(st[i]->bv == 128 && st[i]->kp == 128);
    }
    if (p->dh.kernel == GDP_KERNEL_DH_TMA) ck_assert_msg(p->dh.bv == 128 || p->dh.bv == 64, "k_dh_tma at bv %d", p->dh.bv);
}

/* f32 at the base preset's head on an A100: the forward fits (so inference runs in f32 there), the
 * backward's tiles do not, and the plan says so instead of refusing the forward with it. */
START_TEST(f32_on_an_a100_plans_the_forward_and_refuses_the_backward) {
    GdpDeviceCaps caps;
    ck_assert_int_eq(gdp_device_caps_of_arch(80, &caps), GDP_OK);
    GdpDesc d = desc_of(GDP_MODE_HOUSEHOLDER, GDP_F32, 1, 256, 6, 128, 128, 2);
    GdpKernelPlan p;
    ck_assert_int_eq(gdp_plan_kernels(&d, &caps, NULL, false, true, &p), GDP_OK);
    ck_assert(p.backward_refused);
    ck_assert_ptr_nonnull(strstr(p.backward_why, "use bf16"));
    ck_assert(p.prep.kernel != GDP_KERNEL_NONE && p.state.kernel != GDP_KERNEL_NONE);
    d.dtype = GDP_BF16;
    ck_assert_int_eq(gdp_plan_kernels(&d, &caps, NULL, false, true, &p), GDP_OK);
    ck_assert(!p.backward_refused);
    ck_assert_int_eq(gdp_device_caps_of_arch(86, &caps), GDP_OK); /* 99 KB: the f32 forward state pass does not fit */
    d.dtype = GDP_F32;
    ck_assert_int_eq(gdp_plan_kernels(&d, &caps, NULL, false, true, &p), GDP_ERR_UNSUPPORTED);
}
END_TEST

START_TEST(every_arch_dtype_and_shape_gets_a_complete_plan) {
    static const int Ks[] = {16, 64, 96, 100, 128, 192, 256}, Vs[] = {32, 64, 100, 128, 256}, ns[] = {1, 2, 3, 4, 8, 64};
    static const int BTH[][3] = {{1, 1, 1}, {8, 2048, 16}, {2, 8192, 6}, {1, 65, 3}, {12, 512, 6}};
    int plans = 0, refused = 0, forward_only = 0;
    for (int a = 0; a < 4; a++) {
        GdpDeviceCaps caps;
        ck_assert_int_eq(gdp_device_caps_of_arch(archs[a], &caps), GDP_OK);
        for (int dt = 0; dt < 2; dt++)
            for (int mode = 0; mode < 2; mode++)
                for (size_t ki = 0; ki < GDP_ARRAY_LEN(Ks); ki++)
                    for (size_t vi = 0; vi < GDP_ARRAY_LEN(Vs); vi++)
                        for (size_t ni = 0; ni < GDP_ARRAY_LEN(ns); ni++)
                            for (size_t si = 0; si < GDP_ARRAY_LEN(BTH); si++) {
                                const int K = Ks[ki], n = ns[ni];
                                if (mode == 1 && K % n) continue; /* split mode: K divisible by r */
                                GdpDesc d = desc_of(mode ? GDP_MODE_SPLIT : GDP_MODE_HOUSEHOLDER, dt ? GDP_BF16 : GDP_F32,
                                                    BTH[si][0], BTH[si][1], BTH[si][2], K, Vs[vi], n);
                                for (int saved = 0; saved < 2; saved++) {
                                    GdpKernelPlan p;
                                    const GdpStatus st = gdp_plan_kernels(&d, &caps, NULL, saved, true, &p);
                                    /* the generic tiles outgrow the 99-163 KB of shared memory before Hopper at
                                     * some shapes: a refusal that says what to change */
                                    if (st == GDP_ERR_UNSUPPORTED && archs[a] < 90) {
                                        ck_assert_ptr_nonnull(strstr(gdp_last_error(), "shared memory"));
                                        ck_assert_msg(!(dt && K % 64 == 0 && Vs[vi] % 64 == 0 && n >= 2 && n <= 8), "sm_%d bf16 K %d V %d n %d refused: %s",
                                                      archs[a], K, Vs[vi], n, gdp_last_error());
                                        refused++;
                                        continue;
                                    }
                                    ck_assert_msg(st == GDP_OK, "sm_%d %s K %d V %d n %d: %s", archs[a], dt ? "bf16" : "f32", K, Vs[vi], n,
                                                  gdp_last_error());
                                    check_plan(&p, &caps, &d, saved);
                                    if (p.backward_refused) {
                                        ck_assert_msg(!(dt && K % 64 == 0 && Vs[vi] % 64 == 0 && n >= 2 && n <= 8),
                                                      "sm_%d bf16 K %d V %d n %d: backward refused: %s", archs[a], K,
                                                      Vs[vi], n, p.backward_why);
                                        forward_only++;
                                    }
                                    plans++;
                                }
                            }
    }
    ck_assert_int_gt(plans, 5000);
    ck_assert_int_gt(forward_only, 0);
    printf("%d plans (%d of them forward only), %d refused before Hopper (generic tiles over the shared memory)\n",
           plans, forward_only, refused);
}
END_TEST

/* The default shape of `gdp bench op` on an H100: the kernels its measured speed comes from. */
START_TEST(hopper_default_shape_keeps_its_kernels) {
    GdpDeviceCaps caps;
    gdp_device_caps_of_arch(90, &caps);
    GdpDesc d = desc_of(GDP_MODE_HOUSEHOLDER, GDP_BF16, 8, 2048, 16, 128, 128, 2);
    GdpKernelPlan p;
    ck_assert_int_eq(gdp_plan_kernels(&d, &caps, NULL, true, true, &p), GDP_OK);
    ck_assert_int_eq(p.prep.kernel, GDP_KERNEL_PREP2_FAST);
    ck_assert_int_eq(p.state.kernel, GDP_KERNEL_STATE_WG);
    ck_assert_int_eq(p.state.ctpo, 32); /* the state pass makes o */
    ck_assert_int_eq(p.output.kernel, GDP_KERNEL_NONE);
    ck_assert_int_eq(p.dh.kernel, GDP_KERNEL_DH_TMA);
    ck_assert_int_eq(p.bwd_a.kernel, GDP_KERNEL_BWD_AB);
    ck_assert_int_eq(p.bwd_a.variant, GDP_BWDB_HOUSEHOLDER);
    /* tuned off, the state pass falls back to tensor copies (a saving forward), then to cp.async */
    GdpTuning t = gdp_tuning_default();
    t.state_wgmma = false;
    ck_assert_int_eq(gdp_plan_kernels(&d, &caps, &t, true, true, &p), GDP_OK);
    ck_assert_int_eq(p.state.kernel, GDP_KERNEL_STATE_TMA);
    ck_assert_int_eq(gdp_plan_kernels(&d, &caps, &t, false, true, &p), GDP_OK);
    ck_assert_int_eq(p.state.kernel, GDP_KERNEL_STATE_FAST);
    ck_assert_int_eq(p.state_recompute.kernel, GDP_KERNEL_STATE_FAST);
    ck_assert_int_eq(p.state_recompute.ctpo, 0);
    /* everything generic: the f32 path's kernels on bf16 */
    t = gdp_tuning_default();
    t.generic = GDP_GENERIC_ALL;
    ck_assert_int_eq(gdp_plan_kernels(&d, &caps, &t, false, true, &p), GDP_OK);
    ck_assert_int_eq(p.prep.kernel, GDP_KERNEL_PREP2);
    ck_assert_int_eq(p.state.kernel, GDP_KERNEL_STATE);
    ck_assert_int_eq(p.output.kernel, GDP_KERNEL_OUTPUT);
    ck_assert_int_eq(p.dh.kernel, GDP_KERNEL_DH);
    ck_assert_int_eq(p.bwd_a.kernel, GDP_KERNEL_BWD_A);
}
END_TEST

/* Before Hopper the same shape runs the cp.async kernels; on the 99 KB cards bwd_a and bwd_b no
 * longer fit one CTA together and run apart. */
START_TEST(ampere_and_ada_take_the_cp_async_kernels) {
    GdpDesc d = desc_of(GDP_MODE_HOUSEHOLDER, GDP_BF16, 8, 2048, 16, 128, 128, 2);
    for (int a = 0; a < 3; a++) {
        GdpDeviceCaps caps;
        gdp_device_caps_of_arch(archs[a], &caps);
        GdpKernelPlan p;
        ck_assert_int_eq(gdp_plan_kernels(&d, &caps, NULL, true, true, &p), GDP_OK);
        ck_assert_int_eq(p.prep.kernel, GDP_KERNEL_PREP2_FAST);
        ck_assert_int_eq(p.state.kernel, GDP_KERNEL_STATE_FAST);
        ck_assert_int_eq(p.dh.kernel, gdp_smem_dh_fast(128, 32, 32) <= (size_t)caps.smem_block ? GDP_KERNEL_DH_FAST : GDP_KERNEL_DH);
        const bool fused_fits = gdp_smem_bwd_ab(32) <= (size_t)caps.smem_block;
        ck_assert(fused_fits == (p.bwd_a.kernel == GDP_KERNEL_BWD_AB));
    }
}
END_TEST

/* Unaligned rows keep every pass on the generic kernels; too many sequences switch the sequential
 * grids' form; what the CUDA path cannot run is an error that says why. */
START_TEST(edges_of_the_plan) {
    GdpDeviceCaps caps;
    gdp_device_caps_of_arch(90, &caps);
    GdpDesc d = desc_of(GDP_MODE_HOUSEHOLDER, GDP_BF16, 8, 256, 4, 128, 128, 1);
    GdpKernelPlan p;
    ck_assert_int_eq(gdp_plan_kernels(&d, &caps, NULL, false, false, &p), GDP_OK);
    ck_assert_int_eq(p.prep.kernel, GDP_KERNEL_PREP2);
    ck_assert_int_eq(p.dh.kernel, GDP_KERNEL_DH);
    ck_assert_int_eq(p.bwd_a.kernel, GDP_KERNEL_BWD_A);
    ck_assert(!p.seq_hs);
    GdpTuning t = gdp_tuning_default();
    t.grid_y_max = 4;
    ck_assert_int_eq(gdp_plan_kernels(&d, &caps, &t, false, true, &p), GDP_OK);
    ck_assert(p.seq_hs); /* 8 sequences over a z of 4 */
    ck_assert_int_eq(p.state.grid[0], 8 * 4);
    d.K = 512;
    ck_assert_int_eq(gdp_plan_kernels(&d, &caps, NULL, false, true, &p), GDP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(gdp_last_error(), "K and V up to 256"));
    ck_assert_int_eq(gdp_device_caps_of_arch(75, &caps), GDP_ERR_INVALID);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("gdp_plan");
    TCase *tc = tcase_create("plan");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, every_arch_dtype_and_shape_gets_a_complete_plan);
    tcase_add_test(tc, f32_on_an_a100_plans_the_forward_and_refuses_the_backward);
    tcase_add_test(tc, hopper_default_shape_keeps_its_kernels);
    tcase_add_test(tc, ampere_and_ada_take_the_cp_async_kernels);
    tcase_add_test(tc, edges_of_the_plan);
    suite_add_tcase(s, tc);
    return s;
}

GDP_TEST_MAIN(make_suite)
