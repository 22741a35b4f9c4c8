/* Inside the ops layer (and for `bench kernels`, which times single kernels): the dropout helpers
 * shared by the kernels that apply a Philox mask (dropout, residual+dropout, attention), and the
 * attention's two softmax launches. */
#ifndef CLFORMER_OPS_INTERNAL_H
#define CLFORMER_OPS_INTERNAL_H

#include "clformer/ops.h"

cf_status cf_dropout_check(cf_dropout d, size_t n);
void cf_dropout_grid(cf_context *ctx, const char *program, size_t n, size_t *global, size_t *local);
/* out = in * mask * scale (out may be in). */
cf_status cf_dropout_apply(cf_context *ctx, cf_mem out, cf_mem in, size_t n, cf_dropout d);
/* The attention's softmax launches. att (B, NH, T, T) in place; pdrop (B, NH, T, T) written when
 * drop.p > 0; key_mask int (B, T) or buf NULL. The backward: datt (B, NH, T, T) dL/dP_drop in,
 * dL/d(q.k^T) out; att the saved P. */
cf_status cf_attention_softmax_forward_launch(cf_context *ctx, cf_mem att, cf_mem pdrop, cf_mem key_mask, int B,
                                              int NH, int T, float scale, cf_dropout drop);
cf_status cf_attention_softmax_backward_launch(cf_context *ctx, cf_mem datt, cf_mem att, int B, int NH, int T,
                                               float scale, cf_dropout drop);

/* Rows one launch of a column reduction (bias and LayerNorm parameter gradients) walks: Mesa's
 * llvmpipe ends a work-item's loops after 65535 trips in all (src/gemm/loop_budget.h), and on CPUs
 * the last item of a C that is no multiple of 64 walks the rows up to 18 times (its columns 16 or 1
 * at a time) plus its SIMD neighbour's walk. Larger N runs in launches of this many rows, each
 * adding into the gradient (tests/ops/test_loop_limits.c). */
#define CF_REDUCE_ROWS 2048
static inline int cf_reduce_rows(int N, int n0) { return N - n0 < CF_REDUCE_ROWS ? N - n0 : CF_REDUCE_ROWS; }

#endif
