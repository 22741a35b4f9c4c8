/* Causal multi-head self-attention, host side: argument checks, the scratch layout, and the
 * sequence of layout kernels, batched GEMMs and softmax kernels (see include/clformer/attention.h).
 *
 * Scratch layout (floats), one allocation shared by forward and backward:
 *   [0, 3*B*T*C)                 heads area (3, B, NH, T, HS): forward y in its first slot;
 *                                backward dq | dk | dv, with dy (B, NH, T, HS) parked in the dq slot
 *                                until dq is written (dy is last read by the GEMM before that).
 *   [3*B*T*C, + B*NH*T*T)        T x T area: forward P_drop (dropout only); backward P_drop for
 *                                dv, then dP (dy.v^T), turned into dpreatt in place.
 * The GEMMs compute the full T x T products; the causal half they waste is the price of
 * using CLBlast's tuned batched kernels (a fused kernel would skip it). */
#include <math.h>
#include "clformer/ops.h"
#include "clformer/gemm.h"
#include "runtime/runtime.h"

/* from dropout.c: the grid of the flat dropout kernels */
#include "ops/ops_internal.h"

size_t cf_attention_scratch_floats(int B, int T, int C, int NH, int dropout) {
  (void)dropout;
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return 0;
  return 3 * (size_t)B * T * C + (size_t)B * NH * T * T;
}

static cf_status check_args(int B, int T, int C, int NH, cf_dropout drop) {
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0)
    return CF_FAIL(CF_ERR_INVALID_ARG, "attention: dimensions must be positive (B %d, T %d, C %d, NH %d)", B, T, C, NH);
  if (C % NH)
    return CF_FAIL(CF_ERR_INVALID_ARG, "attention: C %d is not a multiple of NH %d", C, NH);
  if ((double)B * T * 3 * C > 2147483647.0 || (double)B * NH * T * T > 2147483647.0)
    return CF_FAIL(CF_ERR_INVALID_ARG, "attention: B %d, T %d, C %d, NH %d exceed 2^31 elements per tensor", B, T, C,
                   NH);
  if (!(drop.p >= 0.0f && drop.p < 1.0f))
    return CF_FAIL(CF_ERR_INVALID_ARG, "attention: dropout probability %g is not in [0, 1)", (double)drop.p);
  return CF_OK;
}

/* dst (S, B, NH, T, HS) <- src (B, T, S*C), or the inverse. */
static cf_status relayout(cf_context *ctx, const char *kernel, cf_mem dst, cf_mem src, int S, int B, int T, int C,
                          int NH) {
  int vec = (C / NH) % 4 == 0;
  cf_launch L;
  cf_launch_begin(&L, ctx, "attention", kernel);
  cf_arg_mem(&L, dst);
  cf_arg_mem(&L, src);
  CF_ARG_INTS(&L, S, B, T, C, NH, vec);
  size_t n = (size_t)S * B * T * C, local = cf_program_local(ctx, "attention", 64);
  size_t global = vec ? n / 4 : n;
  if (cf_context_cpu_shapes(ctx)) {  /* one item per row of HS floats (cl/attention.cl) */
    global = (size_t)S * B * NH * T;
    local = 16;
  }
  return cf_launch_run(&L, 1, &global, &local);
}

/* The softmax kernels' grid: on CPUs one row per work-item (B*NH*T items in small groups); else
 * one work-group per row, its local size a power of two, at most CF_WG, not much above T. */
static void softmax_grid(cf_context *ctx, int rows, int T, size_t *global, size_t *local) {
  if (cf_context_cpu_shapes(ctx)) {
    *local = 16;
    *global = (size_t)rows;
    return;
  }
  size_t l = 1;
  while (l < (size_t)T && l < cf_program_wg(ctx, "attention")) l *= 2;
  *local = l;
  *global = (size_t)rows * l;
}

/* The two softmax launches (ops_internal.h), also timed by `bench kernels`. */
cf_status cf_attention_softmax_forward_launch(cf_context *ctx, cf_mem att, cf_mem pdrop, cf_mem key_mask, int B,
                                              int NH, int T, float scale, cf_dropout drop) {
  cf_launch L;
  cf_launch_begin(&L, ctx, "attention", "attention_softmax_forward");
  CF_ARG_MEMS(&L, att,
              drop.p > 0.0f ? pdrop : att,     /* unused without dropout */
              key_mask.buf ? key_mask : att);  /* any valid buffer when there is no mask */
  CF_ARG_INTS(&L, key_mask.buf != NULL, B, NH, T);
  cf_arg_float(&L, scale);
  cf_arg_dropout(&L, drop);
  size_t global, local;
  softmax_grid(ctx, B * NH * T, T, &global, &local);
  return cf_launch_run(&L, 1, &global, &local);
}

cf_status cf_attention_softmax_backward_launch(cf_context *ctx, cf_mem datt, cf_mem att, int B, int NH, int T,
                                               float scale, cf_dropout drop) {
  cf_launch L;
  cf_launch_begin(&L, ctx, "attention", "attention_softmax_backward");
  cf_arg_mem(&L, datt);
  cf_arg_mem(&L, att);
  CF_ARG_INTS(&L, B, NH, T);
  cf_arg_float(&L, scale);
  cf_arg_dropout(&L, drop);
  size_t global, local;
  softmax_grid(ctx, B * NH * T, T, &global, &local);
  return cf_launch_run(&L, 1, &global, &local);
}

cf_status cf_attention_forward(cf_context *ctx, cf_mem out, cf_mem qkvp, cf_mem att, cf_mem scratch, cf_mem inp,
                               cf_mem key_mask, int B, int T, int C, int NH, cf_dropout drop) {
  CF_TRY(check_args(B, T, C, NH, drop));
  size_t HS = (size_t)(C / NH), BNH = (size_t)B * NH, BTC = (size_t)B * T * C, TT = (size_t)T * T;
  cf_mem q = qkvp, k = cf_shift(qkvp, BTC), v = cf_shift(qkvp, 2 * BTC);
  cf_mem y = scratch, pdrop = cf_shift(scratch, 3 * BTC);

  CF_TRY(relayout(ctx, "attention_rows_to_heads", qkvp, inp, 3, B, T, C, NH));
  /* preatt = q.k^T (scaled in the softmax) */
  CF_TRY(cf_gemm_batched(ctx, 0, 1, T, T, HS, 1.0f, q, HS, T * HS, k, HS, T * HS, 0.0f, att, T, TT, BNH));

  CF_TRY(cf_attention_softmax_forward_launch(ctx, att, pdrop, key_mask, B, NH, T, (float)(1.0 / sqrt((double)HS)),
                                             drop));

  /* y = P_drop.v, then back to token rows */
  CF_TRY(cf_gemm_batched(ctx, 0, 0, T, HS, T, 1.0f, drop.p > 0.0f ? pdrop : att, T, TT, v, HS, T * HS, 0.0f, y, HS,
                         T * HS, BNH));
  return relayout(ctx, "attention_heads_to_rows", out, y, 1, B, T, C, NH);
}

cf_status cf_attention_backward(cf_context *ctx, cf_mem dinp, cf_mem scratch, cf_mem dout, cf_mem qkvp, cf_mem att,
                                cf_mem key_mask, int B, int T, int C, int NH, cf_dropout drop) {
  CF_TRY(check_args(B, T, C, NH, drop));
  size_t HS = (size_t)(C / NH), BNH = (size_t)B * NH, BTC = (size_t)B * T * C, TT = (size_t)T * T;
  cf_mem q = qkvp, k = cf_shift(qkvp, BTC), v = cf_shift(qkvp, 2 * BTC);
  cf_mem dq = scratch, dk = cf_shift(scratch, BTC), dv = cf_shift(scratch, 2 * BTC);
  cf_mem dy = dq, datt = cf_shift(scratch, 3 * BTC);

  CF_TRY(relayout(ctx, "attention_rows_to_heads", dy, dout, 1, B, T, C, NH));

  /* dv = P_drop^T.dy; P_drop regenerated into the T x T area, which dP overwrites next */
  cf_mem pd = att;
  if (drop.p > 0.0f) {
    int n = (int)(BNH * TT);
    cf_launch L;
    cf_launch_begin(&L, ctx, "attention", "attention_dropout");
    cf_arg_mem(&L, datt);
    cf_arg_mem(&L, att);
    cf_arg_int(&L, n);
    cf_arg_dropout(&L, drop);
    size_t global, local;
    cf_dropout_grid(ctx, "attention", (size_t)n, &global, &local);
    CF_TRY(cf_launch_run(&L, 1, &global, &local));
    pd = datt;
  }
  CF_TRY(cf_gemm_batched(ctx, 1, 0, T, HS, T, 1.0f, pd, T, TT, dy, HS, T * HS, 0.0f, dv, HS, T * HS, BNH));
  /* dP_drop = dy.v^T */
  CF_TRY(cf_gemm_batched(ctx, 0, 1, T, T, HS, 1.0f, dy, HS, T * HS, v, HS, T * HS, 0.0f, datt, T, TT, BNH));

  CF_TRY(cf_attention_softmax_backward_launch(ctx, datt, att, B, NH, T, (float)(1.0 / sqrt((double)HS)), drop));

  /* dq = dpreatt.k (overwrites dy, no longer needed), dk = dpreatt^T.q */
  CF_TRY(cf_gemm_batched(ctx, 0, 0, T, HS, T, 1.0f, datt, T, TT, k, HS, T * HS, 0.0f, dq, HS, T * HS, BNH));
  CF_TRY(cf_gemm_batched(ctx, 1, 0, T, HS, T, 1.0f, datt, T, TT, q, HS, T * HS, 0.0f, dk, HS, T * HS, BNH));
  return relayout(ctx, "attention_heads_to_rows", dinp, scratch, 3, B, T, C, NH);
}
