/* Every registered op on CUDA (f32 and bf16) against the CPU float64 path, forward and backward. */
#include "core/gradcheck.h"
#include "core/tape.h"
#include "tests/gpu/gpu_test.h"

static Tensor *registry_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    return ((const OpDef *)user)->gradcheck_case(ctx, dt, seed);
}

GPU_TEST(every_op_matches_cpu_f64) {
    for (int i = 0; i < gdp_op_registry_len; i++) {
        const OpDef *def = gdp_op_registry[i];
        if (!def->gradcheck_case) continue;
        for (uint64_t seed = 1; seed <= 3; seed++) {
            GradcheckResult r32 = gradcheck_vs_cpu(registry_case, (void *)def, seed, DEV_CUDA, GDP_F32);
            GradcheckResult r16 = gradcheck_vs_cpu(registry_case, (void *)def, seed, DEV_CUDA, GDP_BF16);
            GPU_EXPECT(r32.worst <= 1e-4, "%s f32 seed %llu: worst rel err %.3e", def->name, (unsigned long long)seed, r32.worst);
            double b16 = def->bf16_tol > 0 ? def->bf16_tol : 1e-2;
            GPU_EXPECT(r16.worst <= b16, "%s bf16 seed %llu: worst rel err %.3e > %.0e", def->name, (unsigned long long)seed,
                       r16.worst, b16);
        }
    }
}

int main(void) { return gpu_test_main(); }
