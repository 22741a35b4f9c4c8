/* Activation, bias and fused bias + activation launchers (kernels in cl/activation.cl). */
#include <limits.h>
#include "clformer/elementwise.h"
#include "internal.h"

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

/* Local size of the (C, N) elementwise grids: 64 columns by wg/64 rows. */
static void grid2(cf_context *ctx, int N, int C, size_t global[2], size_t local[2]) {
  size_t wg = cf_context_wg(ctx);
  local[0] = wg < 64 ? wg : 64;
  local[1] = wg / local[0];
  global[0] = (size_t)C;
  global[1] = (size_t)N;
}

/* Column reductions: one group of wg items per min(wg, 32) columns (ACT_TX in the kernel). */
static size_t column_groups(cf_context *ctx, int C) {
  size_t wg = cf_context_wg(ctx), tx = wg < 32 ? wg : 32;
  return ((size_t)C + tx - 1) / tx * wg;
}

cf_status cf_activation_forward(cf_context *ctx, cf_mem out, cf_mem inp, size_t n, cf_activation act) {
  CF_TRY(check_act(act));
  CF_TRY(check_n(n));
  size_t local = cf_context_wg(ctx);
  cf_launch L;
  cf_launch_begin(&L, ctx, "activation", "activation_forward");
  cf_arg_mem(&L, out);
  cf_arg_mem(&L, inp);
  cf_arg_int(&L, (int)n);
  cf_arg_int(&L, (int)act);
  return cf_launch_run(&L, 1, &n, &local);
}

cf_status cf_activation_backward(cf_context *ctx, cf_mem dinp, cf_mem dout, cf_mem inp, size_t n, cf_activation act) {
  CF_TRY(check_act(act));
  CF_TRY(check_n(n));
  size_t local = cf_context_wg(ctx);
  cf_launch L;
  cf_launch_begin(&L, ctx, "activation", "activation_backward");
  cf_arg_mem(&L, dinp);
  cf_arg_mem(&L, dout);
  cf_arg_mem(&L, inp);
  cf_arg_int(&L, (int)n);
  cf_arg_int(&L, (int)act);
  return cf_launch_run(&L, 1, &n, &local);
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
  size_t global = column_groups(ctx, C), local = cf_context_wg(ctx);
  cf_launch L;
  cf_launch_begin(&L, ctx, "activation", "bias_backward");
  cf_arg_mem(&L, dbias);
  cf_arg_mem(&L, dout);
  cf_arg_int(&L, N);
  cf_arg_int(&L, C);
  return cf_launch_run(&L, 1, &global, &local);
}

cf_status cf_bias_act_forward(cf_context *ctx, cf_mem out, cf_mem pre, cf_mem bias, int N, int C, cf_activation act) {
  CF_TRY(check_act(act));
  CF_TRY(check_nc(N, C));
  size_t global[2], local[2];
  grid2(ctx, N, C, global, local);
  cf_launch L;
  cf_launch_begin(&L, ctx, "activation", "bias_act_forward");
  cf_arg_mem(&L, out);
  cf_arg_mem(&L, pre);
  cf_arg_mem(&L, bias);
  cf_arg_int(&L, N);
  cf_arg_int(&L, C);
  cf_arg_int(&L, (int)act);
  return cf_launch_run(&L, 2, global, local);
}

cf_status cf_bias_act_backward(cf_context *ctx, cf_mem dpre, cf_mem dbias, cf_mem dout, cf_mem pre, int N, int C,
                               cf_activation act) {
  CF_TRY(check_act(act));
  CF_TRY(check_nc(N, C));
  if (N == 0) return CF_OK;
  size_t global = column_groups(ctx, C), local = cf_context_wg(ctx);
  cf_launch L;
  cf_launch_begin(&L, ctx, "activation", "bias_act_backward");
  cf_arg_mem(&L, dpre);
  cf_arg_mem(&L, dbias);
  cf_arg_mem(&L, dout);
  cf_arg_mem(&L, pre);
  cf_arg_int(&L, N);
  cf_arg_int(&L, C);
  cf_arg_int(&L, (int)act);
  return cf_launch_run(&L, 1, &global, &local);
}
