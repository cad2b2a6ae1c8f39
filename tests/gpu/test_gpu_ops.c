/* Every registered op on CUDA, generated from the op registry (tests/support/op_checks.h, as the CPU's
 * tests/test_op_checks.c): argument errors, and f32 and bf16 against the CPU float64 path, forward
 * and backward. */
#include "core/gradcheck.h"
#include "core/op_util.h"
#include "core/tape.h"
#include "tests/gpu/gpu_test.h"
#include "tests/support/op_checks.h"

/* Each check in a fresh process (this program again, with OP_ARG_CHECK_FLAG): a CUDA context does
 * not survive a fork. Starting a CUDA context takes most of a check's time, so checks run this many
 * processes at a time (hundreds of them one after another take minutes). */
#define ARG_CHECKS_AT_ONCE 8

GPU_TEST(every_op_rejects_bad_arguments) {
    static OpArgCheck checks[1024];
    int n = op_arg_checks(checks, 1024);
    GPU_EXPECT(n <= 1024, "%d argument checks, more than the 1024 this test holds", n);
    n = GDP_MIN(n, 1024);
    char why[1024];
    for (int i0 = 0; i0 < n; i0 += ARG_CHECKS_AT_ONCE) {
        const int m = GDP_MIN(ARG_CHECKS_AT_ONCE, n - i0);
        OpArgCheckProc p[ARG_CHECKS_AT_ONCE];
        for (int j = 0; j < m; j++) p[j] = op_arg_check_start(&checks[i0 + j], i0 + j, DEV_CUDA, "/proc/self/exe");
        for (int j = 0; j < m; j++)
            GPU_EXPECT(op_arg_check_finish(&checks[i0 + j], p[j], why, sizeof why), "%s", why);
    }
    printf("  %d argument checks, %d processes at a time\n", n, ARG_CHECKS_AT_ONCE);
}

GPU_TEST(every_op_matches_cpu_f64) {
    char why[512];
    for (int i = 0; i < gdp_op_registry_len; i++) {
        const OpDef *def = gdp_op_registry[i];
        if (!gradcheck_has_case(def)) continue;
        for (uint64_t seed = 1; seed <= 3; seed++) {
            GPU_EXPECT(op_grad_check_vs_cpu(def, seed, DEV_CUDA, GDP_F32, why, sizeof why), "%s", why);
            GPU_EXPECT(op_grad_check_vs_cpu(def, seed, DEV_CUDA, GDP_BF16, why, sizeof why), "%s", why);
        }
    }
}

/* bf16 autocast's linear GEMMs (bf16 copies of f32 operands, f32 outputs and gradients): a 2-D
 * product against a transposed weight, then a batched one against a shared plain weight. */
static Tensor *autocast_linear_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    (void)user;
    if (ctx->device == DEV_CUDA) ctx->autocast_bf16 = ctx->autocast_gemm_copies = true;
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(150, 48));
    Tensor *w1 = gc_random(ctx, dt, &seed, -1, 1, SHAPE(40, 48));
    Tensor *w2 = gc_random(ctx, dt, &seed, -1, 1, SHAPE(20, 24));
    Tensor *y = op_matmul(ctx, x, w1, false, true); /* [150, 40] */
    return op_matmul(ctx, op_reshape(ctx, y, SHAPE(3, 100, 20)), w2, false, false); /* [3, 100, 24] */
}

GPU_TEST(autocast_linear_matches_cpu_f64) {
    for (uint64_t seed = 1; seed <= 3; seed++) {
        GradcheckResult r = gradcheck_vs_cpu(autocast_linear_case, NULL, seed, DEV_CUDA, GDP_F32);
        GPU_EXPECT(r.worst <= 1e-2, "autocast linear seed %llu: worst rel err %.3e > 1e-2", (unsigned long long)seed,
                   r.worst);
        GPU_EXPECT(r.worst > 1e-6, "autocast linear seed %llu: rel err %.3e is f32-exact: the bf16 path did not run",
                   (unsigned long long)seed, r.worst);
    }
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], OP_ARG_CHECK_FLAG)) op_arg_check_main(argv[2], DEV_CUDA);
    return gpu_test_run(argc, argv);
}
