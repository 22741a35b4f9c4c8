/* Activation, bias and fused bias + activation launchers (kernels in cl/activation.cl, one
 * instance per activation: <kernel>_<cf_activation_name>). */
#include <limits.h>
#include <stdio.h>
#include "clformer/ops.h"
#include "ops/ops_internal.h"
#include "runtime/runtime.h"

const char *cf_activation_name(cf_activation act) {
  switch (act) {
    case CF_ACT_RELU: return "relu";
    case CF_ACT_GELU_TANH: return "gelu_tanh";
    case CF_ACT_GELU_ERF: return "gelu_erf";
  }
  return NULL;
}

static cf_status check_act(cf_activation act) {
  if (!cf_activation_name(act)) return CF_FAIL(CF_ERR_INVALID_ARG, "unknown activation %d", (int)act);
  return CF_OK;
}
static cf_status check_n(size_t n) {
  if (n > INT_MAX) return CF_FAIL(CF_ERR_INVALID_ARG, "%zu elements: more than the kernels index (2^31 - 1)", n);
  return CF_OK;
}
static cf_status check_nc(int N, int C) {
  if (N < 0 || C < 1 || (size_t)N * (size_t)C > INT_MAX)
    return CF_FAIL(CF_ERR_INVALID_ARG, "bad shape N=%d C=%d", N, C);
  return CF_OK;
}

/* Elements per work-item (ACT_VW in the kernels): 16 on CPUs, 1 elsewhere. */
static int is_cpu(const cf_context *ctx) { return cf_context_cpu_shapes(ctx); }
static size_t vec_width(const cf_context *ctx) { return is_cpu(ctx) ? 16 : 1; }

/* Flat kernels: one item per vec_width elements. */
static void grid1(cf_context *ctx, size_t n, size_t *global, size_t *local) {
  *local = is_cpu(ctx) ? 8 : cf_program_wg(ctx, "activation");
  *global = (n + vec_width(ctx) - 1) / vec_width(ctx);
}

/* The (C, N) grids: one item per vec_width columns of a row; 64 columns by wg/64 rows per group
 * on GPUs. On CPUs a group walks along rows, up to 256 columns of each of 1-8 rows (whole
 * contiguous lines: groups of 8 rows of one 16-column block strode through memory at 3-4x the
 * cost). */
static void grid2(cf_context *ctx, int N, int C, size_t global[2], size_t local[2]) {
  size_t wg = cf_program_wg(ctx, "activation");
  global[0] = ((size_t)C + vec_width(ctx) - 1) / vec_width(ctx);
  global[1] = (size_t)N;
  if (is_cpu(ctx)) {
    local[0] = global[0] < 16 ? global[0] : 16;
    local[1] = local[0] >= 8 ? 1 : 8 / local[0];
    return;
  }
  local[0] = wg < 64 ? wg : 64;
  local[1] = wg / local[0];
}

/* Column reductions. CPU: one work-item per ACT_CPU_COLS (64) columns walking every row, in
 * small groups. Elsewhere: one group of wg items per min(wg, 32) columns (ACT_TX). */
static void column_grid(cf_context *ctx, int C, size_t *global, size_t *local) {
  size_t wg = cf_program_wg(ctx, "activation"), tx = wg < 32 ? wg : 32;
  if (is_cpu(ctx)) {
    *local = 1;
    *global = ((size_t)C + 63) / 64;
  } else {
    *local = wg;
    *global = ((size_t)C + tx - 1) / tx * wg;
  }
}

/* "<base>_<activation>" */
static const char *act_kernel(char *buf, size_t size, const char *base, cf_activation act) {
  snprintf(buf, size, "%s_%s", base, cf_activation_name(act));
  return buf;
}

cf_status cf_activation_forward(cf_context *ctx, cf_mem out, cf_mem inp, size_t n, cf_activation act) {
  CF_TRY(check_act(act));
  CF_TRY(check_n(n));
  size_t global, local;
  grid1(ctx, n, &global, &local);
  cf_launch L;
  char name[48];
  cf_launch_begin(&L, ctx, "activation", act_kernel(name, sizeof name, "activation_forward", act));
  cf_arg_mem(&L, out);
  cf_arg_mem(&L, inp);
  cf_arg_int(&L, (int)n);
  return cf_launch_run(&L, 1, &global, &local);
}

cf_status cf_activation_backward(cf_context *ctx, cf_mem dinp, cf_mem dout, cf_mem inp, size_t n, cf_activation act) {
  CF_TRY(check_act(act));
  CF_TRY(check_n(n));
  size_t global, local;
  grid1(ctx, n, &global, &local);
  cf_launch L;
  char name[48];
  cf_launch_begin(&L, ctx, "activation", act_kernel(name, sizeof name, "activation_backward", act));
  CF_ARG_MEMS(&L, dinp, dout, inp);
  cf_arg_int(&L, (int)n);
  return cf_launch_run(&L, 1, &global, &local);
}

cf_status cf_bias_forward(cf_context *ctx, cf_mem x, cf_mem bias, int N, int C) {
  CF_TRY(check_nc(N, C));
  size_t global[2], local[2];
  grid2(ctx, N, C, global, local);
  cf_launch L;
  cf_launch_begin(&L, ctx, "activation", "bias_forward");
  cf_arg_mem(&L, x);
  cf_arg_mem(&L, bias);
  cf_arg_int(&L, N);
  cf_arg_int(&L, C);
  return cf_launch_run(&L, 2, global, local);
}

cf_status cf_bias_backward(cf_context *ctx, cf_mem dbias, cf_mem dout, int N, int C) {
  CF_TRY(check_nc(N, C));
  if (N == 0) return CF_OK;
  size_t global, local;
  column_grid(ctx, C, &global, &local);
  for (int n0 = 0; n0 < N; n0 += CF_REDUCE_ROWS) {  /* bounded rows per launch (ops_internal.h) */
    cf_launch L;
    cf_launch_begin(&L, ctx, "activation", "bias_backward");
    cf_arg_mem(&L, dbias);
    cf_arg_mem(&L, cf_shift(dout, (size_t)n0 * C));
    cf_arg_int(&L, cf_reduce_rows(N, n0));
    cf_arg_int(&L, C);
    CF_TRY(cf_launch_run(&L, 1, &global, &local));
  }
  return CF_OK;
}

cf_status cf_bias_act_forward(cf_context *ctx, cf_mem out, cf_mem pre, cf_mem bias, int N, int C, cf_activation act) {
  CF_TRY(check_act(act));
  CF_TRY(check_nc(N, C));
  size_t global[2], local[2];
  grid2(ctx, N, C, global, local);
  cf_launch L;
  char name[48];
  cf_launch_begin(&L, ctx, "activation", act_kernel(name, sizeof name, "bias_act_forward", act));
  CF_ARG_MEMS(&L, out, pre, bias);
  cf_arg_int(&L, N);
  cf_arg_int(&L, C);
  return cf_launch_run(&L, 2, global, local);
}

/* The bias_act_backward launches: the mask of d, or with d.p 0 every element's factor `scale`. */
static cf_status bias_act_backward_run(cf_context *ctx, cf_mem dpre, cf_mem dbias, cf_mem dout, cf_mem pre, int N,
                                       int C, cf_activation act, cf_dropout d, float scale) {
  if (N == 0) return CF_OK;
  size_t global, local;
  column_grid(ctx, C, &global, &local);
  char name[48];
  act_kernel(name, sizeof name, "bias_act_backward", act);
  for (int n0 = 0; n0 < N; n0 += CF_REDUCE_ROWS) {  /* bounded rows per launch (ops_internal.h) */
    size_t at = (size_t)n0 * C;
    cf_launch L;
    cf_launch_begin(&L, ctx, "activation", name);
    CF_ARG_MEMS(&L, cf_shift(dpre, at), dbias, cf_shift(dout, at), cf_shift(pre, at));
    cf_arg_int(&L, cf_reduce_rows(N, n0));
    cf_arg_int(&L, C);
    cf_arg_float(&L, d.p);
    cf_arg_float(&L, scale);
    CF_ARG_UINTS(&L, d.seed, d.step, d.tensor_id, d.group0);
    cf_arg_uint(&L, (unsigned)at);  /* the launch's first element in the mask (< 2^32: cf_dropout_check) */
    CF_TRY(cf_launch_run(&L, 1, &global, &local));
  }
  return CF_OK;
}

cf_status cf_bias_act_backward(cf_context *ctx, cf_mem dpre, cf_mem dbias, cf_mem dout, cf_mem pre, int N, int C,
                               cf_activation act, cf_dropout d) {
  CF_TRY(check_act(act));
  CF_TRY(check_nc(N, C));
  CF_TRY(cf_dropout_check(d, (size_t)N * (size_t)C));
  return bias_act_backward_run(ctx, dpre, dbias, dout, pre, N, C, act, d, cf_dropout_scale(d));
}

cf_status cf_bias_relu_backward_from_output(cf_context *ctx, cf_mem dpre, cf_mem dbias, cf_mem dout, cf_mem out, int N,
                                            int C, cf_dropout d) {
  CF_TRY(check_nc(N, C));
  CF_TRY(cf_dropout_check(d, (size_t)N * (size_t)C));
  cf_dropout no_mask = {0};
  return bias_act_backward_run(ctx, dpre, dbias, dout, out, N, C, CF_ACT_RELU, no_mask, cf_dropout_scale(d));
}
