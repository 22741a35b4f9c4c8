/* Causal multi-head self-attention, host side: argument checks and the sequence of batched GEMMs
 * and softmax kernels (see include/clformer/ops.h).
 *
 * The GEMMs read each head's q, k and v where the QKV projection put them, (B, T, 3C) with head h
 * at columns h*HS of each third, and write the output and dq | dk | dv the same way, as nested
 * batches (B sequences of NH heads: cf_gemm_batched_nested), so no permute runs either way.
 * Scratch: the T x T area (B, NH, T, T): forward P_drop (dropout only); backward P_drop for dv,
 * then dP (dy.v^T), turned into dpreatt in place. Every product tells the GEMM its causal triangle
 * (cf_gemm_tri), which our strip kernels skip: the softmax kernels use the scores and dP only up
 * to the diagonal and write zeros past it, so q.k^T and dy.v^T need only their lower triangles,
 * and the products that read the probabilities or dpreatt as op(A) skip its zeros. */
#include <math.h>
#include "clformer/ops.h"
#include "clformer/gemm.h"
#include "runtime/runtime.h"

/* from dropout.c: the grid of the flat dropout kernels */
#include "ops/ops_internal.h"

size_t cf_attention_scratch_floats(int B, int T, int C, int NH, int dropout) {
  (void)dropout;
  (void)C;
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return 0;
  return (size_t)B * NH * T * T;
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

/* The nested batched product of every (sequence, head): op(A) op(B) into C, each operand either a
 * head's slice of a token-row tensor (ld its row width, heads HS apart, sequences T rows apart) or
 * a T x T matrix of the (B, NH, T, T) area. */
typedef struct heads_operand {
  cf_mem m;
  size_t ld, head, seq;  /* row stride, head stride, sequence stride (floats) */
} heads_operand;

static heads_operand token_rows(cf_mem m, size_t width, int T, size_t HS) {
  heads_operand o = {m, width, HS, (size_t)T * width};
  return o;
}

static heads_operand square(cf_mem m, int T, int NH) {
  size_t TT = (size_t)T * T;
  heads_operand o = {m, (size_t)T, TT, (size_t)NH * TT};
  return o;
}

static cf_status heads_gemm(cf_context *ctx, int ta, int tb, size_t M, size_t N, size_t K, heads_operand a,
                            heads_operand b, heads_operand c, int B, int NH, cf_gemm_tri tri) {
  return cf_gemm_batched_nested(ctx, ta, tb, M, N, K, 1.0f, a.m, a.ld, a.head, a.seq, b.m, b.ld, b.head, b.seq, 0.0f,
                                c.m, c.ld, c.head, c.seq, (size_t)NH, (size_t)B, tri);
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

cf_status cf_attention_forward(cf_context *ctx, cf_mem out, cf_mem att, cf_mem scratch, cf_mem inp, cf_mem key_mask,
                               int B, int T, int C, int NH, cf_dropout drop) {
  CF_TRY(check_args(B, T, C, NH, drop));
  size_t HS = (size_t)(C / NH), W = 3 * (size_t)C;
  heads_operand q = token_rows(inp, W, T, HS), k = token_rows(cf_shift(inp, C), W, T, HS),
                v = token_rows(cf_shift(inp, 2 * (size_t)C), W, T, HS);

  /* preatt = q.k^T (scaled in the softmax) */
  CF_TRY(heads_gemm(ctx, 0, 1, T, T, HS, q, k, square(att, T, NH), B, NH, CF_GEMM_C_LOWER));
  CF_TRY(cf_attention_softmax_forward_launch(ctx, att, scratch, key_mask, B, NH, T, (float)(1.0 / sqrt((double)HS)),
                                             drop));
  /* out = P_drop.v, straight into token rows */
  return heads_gemm(ctx, 0, 0, T, HS, T, square(drop.p > 0.0f ? scratch : att, T, NH), v,
                    token_rows(out, (size_t)C, T, HS), B, NH, CF_GEMM_A_LOWER);
}

cf_status cf_attention_backward(cf_context *ctx, cf_mem dinp, cf_mem scratch, cf_mem dout, cf_mem inp, cf_mem att,
                                cf_mem key_mask, int B, int T, int C, int NH, cf_dropout drop) {
  (void)key_mask;  /* masked probabilities are zero in att: their gradients come out zero */
  CF_TRY(check_args(B, T, C, NH, drop));
  size_t HS = (size_t)(C / NH), W = 3 * (size_t)C, BNH = (size_t)B * NH, TT = (size_t)T * T;
  heads_operand q = token_rows(inp, W, T, HS), k = token_rows(cf_shift(inp, C), W, T, HS),
                v = token_rows(cf_shift(inp, 2 * (size_t)C), W, T, HS);
  heads_operand dq = token_rows(dinp, W, T, HS), dk = token_rows(cf_shift(dinp, C), W, T, HS),
                dv = token_rows(cf_shift(dinp, 2 * (size_t)C), W, T, HS), dy = token_rows(dout, (size_t)C, T, HS);
  cf_mem datt = scratch;

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
  CF_TRY(heads_gemm(ctx, 1, 0, T, HS, T, square(pd, T, NH), dy, dv, B, NH, CF_GEMM_A_UPPER));
  /* dP_drop = dy.v^T */
  CF_TRY(heads_gemm(ctx, 0, 1, T, T, HS, dy, v, square(datt, T, NH), B, NH, CF_GEMM_C_LOWER));
  CF_TRY(cf_attention_softmax_backward_launch(ctx, datt, att, B, NH, T, (float)(1.0 / sqrt((double)HS)), drop));
  /* dq = dpreatt.k, dk = dpreatt^T.q */
  CF_TRY(heads_gemm(ctx, 0, 0, T, HS, T, square(datt, T, NH), k, dq, B, NH, CF_GEMM_A_LOWER));
  return heads_gemm(ctx, 1, 0, T, HS, T, square(datt, T, NH), q, dk, B, NH, CF_GEMM_A_UPPER);
}
