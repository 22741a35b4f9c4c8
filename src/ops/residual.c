/* Residual adds (plain and fused with dropout) and the small helpers scale, add and copy
 * (kernels in cl/residual.cl and cl/elementwise.cl). */
#include <limits.h>
#include "clformer/ops.h"
#include "runtime/runtime.h"

/* from dropout.c */
#include "ops/ops_internal.h"

static cf_status check_n(size_t n) {
  if (n > INT_MAX) return CF_FAIL(CF_ERR_INVALID_ARG, "%zu elements: more than the kernels index (2^31 - 1)", n);
  return CF_OK;
}

cf_status cf_residual_forward(cf_context *ctx, cf_mem out, cf_mem inp1, cf_mem inp2, size_t n) {
  CF_TRY(check_n(n));
  size_t local = cf_program_wg(ctx, "residual");
  cf_launch L;
  cf_launch_begin(&L, ctx, "residual", "residual_forward");
  CF_ARG_MEMS(&L, out, inp1, inp2);
  cf_arg_int(&L, (int)n);
  return cf_launch_run(&L, 1, &n, &local);
}

cf_status cf_residual_dropout_forward(cf_context *ctx, cf_mem out, cf_mem res, cf_mem branch, size_t n, cf_dropout d) {
  CF_TRY(cf_dropout_check(d, n));
  if (d.p == 0.0f) return cf_residual_forward(ctx, out, res, branch, n);
  size_t global, local;
  cf_dropout_grid(ctx, "residual", n, &global, &local);
  cf_launch L;
  cf_launch_begin(&L, ctx, "residual", "residual_dropout_forward");
  CF_ARG_MEMS(&L, out, res, branch);
  cf_arg_int(&L, (int)n);
  cf_arg_dropout(&L, d);
  return cf_launch_run(&L, 1, &global, &local);
}

cf_status cf_residual_dropout_backward(cf_context *ctx, cf_mem dbranch, cf_mem dout, size_t n, cf_dropout d) {
  CF_TRY(cf_dropout_check(d, n));
  if (d.p == 0.0f) return cf_copy(ctx, dbranch, dout, n);
  return cf_dropout_apply(ctx, dbranch, dout, n, d);
}

cf_status cf_scale(cf_context *ctx, cf_mem x, size_t n, float alpha) {
  CF_TRY(check_n(n));
  size_t local = cf_program_wg(ctx, "elementwise");
  cf_launch L;
  cf_launch_begin(&L, ctx, "elementwise", "scale");
  cf_arg_mem(&L, x);
  cf_arg_float(&L, alpha);
  cf_arg_int(&L, (int)n);
  return cf_launch_run(&L, 1, &n, &local);
}

cf_status cf_add_inplace(cf_context *ctx, cf_mem y, cf_mem x, size_t n) { return cf_residual_forward(ctx, y, y, x, n); }

cf_status cf_copy(cf_context *ctx, cf_mem dst, cf_mem src, size_t n) {
  if (n == 0 || (dst.buf == src.buf && dst.off == src.off)) return CF_OK;
  CF_CHECK(clEnqueueCopyBuffer(ctx->queue, src.buf, dst.buf, src.off * sizeof(float), dst.off * sizeof(float),
                               n * sizeof(float), 0, NULL, NULL));
  return CF_OK;
}
