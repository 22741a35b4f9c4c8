/* Dropout internals shared by the kernels that apply a Philox mask (dropout, residual+dropout,
 * attention): argument checks, the launch grid, and the five mask arguments every such kernel takes. */
#ifndef CLFORMER_DROPOUT_INTERNAL_H
#define CLFORMER_DROPOUT_INTERNAL_H

#include "clformer/ops.h"

cf_status cf_dropout_check(cf_dropout d, size_t n);
void cf_dropout_grid(const cf_context *ctx, size_t n, size_t *global, size_t *local);
/* out = in * mask * scale (out may be in). */
cf_status cf_dropout_apply(cf_context *ctx, cf_mem out, cf_mem in, size_t n, cf_dropout d);
/* p, scale, seed, step, tensor_id, in that order. */
void cf_arg_dropout(cf_launch *L, cf_dropout d);

#endif
