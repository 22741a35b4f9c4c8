/* Inside the check layer: each family's rows of the op table (src/check/ops_<family>.c), which
 * op_table.c strings together in the self-test's order. */
#ifndef CLFORMER_CHECK_OP_TABLE_H
#define CLFORMER_CHECK_OP_TABLE_H

#include "clformer/check.h"
#include "clformer/ops.h"
#include "clformer/ref.h"
#include "runtime/runtime.h"

extern const cf_op cf_ops_layernorm[], cf_ops_elementwise[], cf_ops_attention[], cf_ops_embedding[],
    cf_ops_crossentropy[], cf_ops_optimizer[];
extern const int cf_nops_layernorm, cf_nops_elementwise, cf_nops_attention, cf_nops_embedding, cf_nops_crossentropy,
    cf_nops_optimizer;

#endif
