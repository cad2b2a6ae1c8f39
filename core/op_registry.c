/* Every op gdp.c knows, for `gdp gradcheck` and the op tests. Add a line when you add an op. */
#include "core/ops.h"
#include "core/tape.h"

extern const OpDef op_add_def, op_add_bf16_to_f32_def, op_add_by8_def, op_contiguous_def, op_reshape_def,
    op_transpose_def;
extern const OpDef op_mul_def, op_scale_def, op_cast_def, op_matmul_def, op_matmul_tt_def, op_matmul_shared_def,
    op_matmul_shared_ta_def, op_matmul_bf16_by_f32_def, op_sum_def, op_mean_def, op_embedding_def,
    op_cross_entropy_def, op_cross_entropy_by8_def; /* helper opsa */
extern const OpDef op_gated_deltaproduct_def;
extern const OpDef op_rmsnorm_def, op_rmsnorm_to_bf16_def,
    op_l2norm_def, op_conv1d_causal_def, op_conv1d_causal_silu_def, op_conv1d_causal_docs_def,
    op_conv1d_causal_silu_docs_def, op_gated_rmsnorm_def, op_gated_rmsnorm_odd_def, op_swiglu_def,
    op_swiglu_packed_def; /* helper opsb */
#define PW_EXTERN(E, name, lo, hi) extern const OpDef op_##name##_def;
GDP_POINTWISE_OPS(PW_EXTERN)
#undef PW_EXTERN

const OpDef *const gdp_op_registry[] = {
    &op_add_def,
    &op_add_bf16_to_f32_def,
    &op_add_by8_def,
    &op_contiguous_def,
    &op_reshape_def,
    &op_transpose_def,
    &op_mul_def,
    &op_scale_def,
    &op_cast_def,
    &op_matmul_def,
    &op_matmul_tt_def,
    &op_matmul_shared_def,
    &op_matmul_shared_ta_def,
    &op_matmul_bf16_by_f32_def,
    &op_sum_def,
    &op_mean_def,
    &op_embedding_def,
    &op_cross_entropy_def,
    &op_cross_entropy_by8_def,
    &op_gated_deltaproduct_def,
#define PW_ENTRY(E, name, lo, hi) &op_##name##_def,
    GDP_POINTWISE_OPS(PW_ENTRY)
#undef PW_ENTRY
    &op_rmsnorm_def,
    &op_rmsnorm_to_bf16_def,
    &op_l2norm_def,
    &op_conv1d_causal_def,
    &op_conv1d_causal_silu_def,
    &op_conv1d_causal_docs_def,
    &op_conv1d_causal_silu_docs_def,
    &op_gated_rmsnorm_def,
    &op_gated_rmsnorm_odd_def,
    &op_swiglu_def,
    &op_swiglu_packed_def,
    &op_grad_boundary_def,
    &op_checkpoint_def,
};
const int gdp_op_registry_len = (int)(sizeof(gdp_op_registry) / sizeof(gdp_op_registry[0]));
