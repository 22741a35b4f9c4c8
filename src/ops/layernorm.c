/* LayerNorm launchers (kernels in cl/layernorm.cl), plain and fused with the residual add and
 * dropout in front of it. Forward: one work-group per row (on CPUs one work-item per row, in groups
 * of LN_CPU_ROWS; the column reduction one item per 64 columns). Backward: the column reduction
 * for dweight/dbias runs first, then the row kernel, so that dinp may overwrite dout. */
#include "clformer/ops.h"
#include "ops/ops_internal.h"
#include "runtime/runtime.h"

#define LN_CPU_ROWS 4

static int is_cpu(const cf_context *ctx) { return cf_context_cpu_shapes(ctx); }

/* The row kernels' grid: N groups of wg, or on CPUs N items in groups of LN_CPU_ROWS. */
static void row_grid(cf_context *ctx, int N, size_t *global, size_t *local) {
  *local = is_cpu(ctx) ? LN_CPU_ROWS : cf_program_wg(ctx, "layernorm");
  *global = is_cpu(ctx) ? (size_t)N : (size_t)N * *local;
}

static cf_status check_dims(int N, int C) {
  if (N < 0 || C < 1) return CF_FAIL(CF_ERR_INVALID_ARG, "layernorm: bad shape N=%d C=%d", N, C);
  return CF_OK;
}

static cf_status check_dims_eps(int N, int C, float eps) {
  CF_TRY(check_dims(N, C));
  if (!(eps > 0.0f)) return CF_FAIL(CF_ERR_INVALID_ARG, "layernorm: eps must be > 0, got %g", (double)eps);
  return CF_OK;
}

cf_status cf_layernorm_forward(cf_context *ctx, cf_mem out, cf_mem mean, cf_mem rstd, cf_mem inp, cf_mem weight,
                               cf_mem bias, int N, int C, float eps) {
  CF_TRY(check_dims_eps(N, C, eps));
  if (N == 0) return CF_OK;
  size_t global, local;
  row_grid(ctx, N, &global, &local);
  cf_launch L;
  cf_launch_begin(&L, ctx, "layernorm", "layernorm_forward");
  CF_ARG_MEMS(&L, out, mean, rstd, inp, weight, bias);
  cf_arg_int(&L, N);
  cf_arg_int(&L, C);
  cf_arg_float(&L, eps);
  return cf_launch_run(&L, 1, &global, &local);
}

/* dweight += sum_n dout * xhat, dbias += sum_n dout: the column reduction both backwards run first. */
static cf_status backward_params(cf_context *ctx, cf_mem dweight, cf_mem dbias, cf_mem dout, cf_mem inp, cf_mem mean,
                                 cf_mem rstd, int N, int C) {
  size_t wg = cf_program_wg(ctx, "layernorm");
  size_t tx = wg < 32 ? wg : 32;  /* LN_TX in cl/layernorm.cl */
  size_t global = ((size_t)C + tx - 1) / tx * wg, local = wg;
  if (is_cpu(ctx)) global = ((size_t)C + 63) / 64, local = 1;  /* 64 columns per item */
  for (int n0 = 0; n0 < N; n0 += CF_REDUCE_ROWS) {  /* bounded rows per launch (ops_internal.h) */
    size_t at = (size_t)n0 * C;
    cf_launch L;
    cf_launch_begin(&L, ctx, "layernorm", "layernorm_backward_params");
    CF_ARG_MEMS(&L, dweight, dbias, cf_shift(dout, at), cf_shift(inp, at), cf_shift(mean, n0), cf_shift(rstd, n0));
    cf_arg_int(&L, cf_reduce_rows(N, n0));
    cf_arg_int(&L, C);
    CF_TRY(cf_launch_run(&L, 1, &global, &local));
  }
  return CF_OK;
}

static cf_status check_accumulate(const char *op, int accumulate) {
  if (accumulate != 0 && accumulate != 1)
    return CF_FAIL(CF_ERR_INVALID_ARG, "%s: accumulate must be 0 or 1, got %d", op, accumulate);
  return CF_OK;
}

cf_status cf_layernorm_backward(cf_context *ctx, cf_mem dinp, cf_mem dweight, cf_mem dbias, cf_mem dout, cf_mem inp,
                                cf_mem weight, cf_mem mean, cf_mem rstd, int N, int C, int accumulate) {
  CF_TRY(check_dims(N, C));
  CF_TRY(check_accumulate("layernorm_backward", accumulate));
  if (N == 0) return CF_OK;
  CF_TRY(backward_params(ctx, dweight, dbias, dout, inp, mean, rstd, N, C));
  size_t global, local;
  row_grid(ctx, N, &global, &local);
  cf_launch L;
  cf_launch_begin(&L, ctx, "layernorm", "layernorm_backward");
  CF_ARG_MEMS(&L, dinp, dout, inp, weight, mean, rstd);
  CF_ARG_INTS(&L, N, C, accumulate);
  return cf_launch_run(&L, 1, &global, &local);
}

cf_status cf_residual_dropout_layernorm_forward(cf_context *ctx, cf_mem out, cf_mem mean, cf_mem rstd, cf_mem res,
                                                cf_mem inp, cf_mem branch, cf_mem weight, cf_mem bias, int N, int C,
                                                float eps, cf_dropout d) {
  CF_TRY(check_dims_eps(N, C, eps));
  CF_TRY(cf_dropout_check(d, (size_t)N * (size_t)C));
  if (N == 0) return CF_OK;
  size_t global, local;
  row_grid(ctx, N, &global, &local);
  cf_launch L;
  cf_launch_begin(&L, ctx, "layernorm", "residual_dropout_layernorm_forward");
  CF_ARG_MEMS(&L, out, mean, rstd, res, inp, branch, weight, bias);
  cf_arg_int(&L, N);
  cf_arg_int(&L, C);
  cf_arg_float(&L, eps);
  cf_arg_dropout(&L, d);
  return cf_launch_run(&L, 1, &global, &local);
}

cf_status cf_residual_dropout_layernorm_backward(cf_context *ctx, cf_mem dinp, cf_mem dbranch, cf_mem dweight,
                                                 cf_mem dbias, cf_mem dout, cf_mem res, cf_mem weight, cf_mem mean,
                                                 cf_mem rstd, int N, int C, int accumulate, cf_dropout d) {
  CF_TRY(check_dims(N, C));
  CF_TRY(check_accumulate("residual_dropout_layernorm_backward", accumulate));
  CF_TRY(cf_dropout_check(d, (size_t)N * (size_t)C));
  if (N == 0) return CF_OK;
  if (d.p == 0.0f) {  /* no mask: dbranch is dinp (a copy, or nothing when they are one tensor) */
    CF_TRY(cf_layernorm_backward(ctx, dinp, dweight, dbias, dout, res, weight, mean, rstd, N, C, accumulate));
    return cf_copy(ctx, dbranch, dinp, (size_t)N * C);
  }
  CF_TRY(backward_params(ctx, dweight, dbias, dout, res, mean, rstd, N, C));
  size_t global, local;
  row_grid(ctx, N, &global, &local);
  cf_launch L;
  cf_launch_begin(&L, ctx, "layernorm", "residual_dropout_layernorm_backward");
  CF_ARG_MEMS(&L, dinp, dbranch, dout, res, weight, mean, rstd);
  CF_ARG_INTS(&L, N, C, accumulate);
  cf_arg_dropout(&L, d);
  return cf_launch_run(&L, 1, &global, &local);
}
