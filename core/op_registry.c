/* Every op gdp.c knows, for `gdp gradcheck` and the op tests. Add a line when you add an op. */
#include "core/tape.h"

extern const OpDef op_add_def, op_contiguous_def, op_reshape_def, op_transpose_def;

const OpDef *const gdp_op_registry[] = {
    &op_add_def,
    &op_contiguous_def,
    &op_reshape_def,
    &op_transpose_def,
};
const int gdp_op_registry_len = (int)(sizeof(gdp_op_registry) / sizeof(gdp_op_registry[0]));
