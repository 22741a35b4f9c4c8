/* Elementwise ops: activations, bias, the fused bias + activation of the FFN, inverted dropout
 * keyed by Philox, residual adds (plain and fused with dropout) and small helpers (scale, add,
 * copy). Device ops, their double-precision references, and the family's self-test.
 * Flat sizes n are element counts below 2^31; every cf_mem carries its own offset. */
#ifndef CLFORMER_ELEMENTWISE_H
#define CLFORMER_ELEMENTWISE_H

#include <stdint.h>
#include "clformer/program.h"
#include "clformer/selftest.h"

typedef enum { CF_ACT_RELU, CF_ACT_GELU_TANH, CF_ACT_GELU_ERF } cf_activation;

/* "relu", "gelu_tanh", "gelu_erf"; NULL for an unknown value. */
const char *cf_activation_name(cf_activation act);

/* ---------- activations ---------- */

/* out = act(inp); out may alias inp. */
cf_status cf_activation_forward(cf_context *ctx, cf_mem out /* (n) */, cf_mem inp /* (n) */, size_t n,
                                cf_activation act);
/* dinp = dout * act'(inp), overwritten; dinp may alias dout. ReLU'(0) = 0. */
cf_status cf_activation_backward(cf_context *ctx, cf_mem dinp /* (n) */, cf_mem dout /* (n) */,
                                 cf_mem inp /* (n) */, size_t n, cf_activation act);

/* ---------- bias ---------- */

/* x[n, c] += bias[c], in place. */
cf_status cf_bias_forward(cf_context *ctx, cf_mem x /* (N, C) */, cf_mem bias /* (C) */, int N, int C);
/* dbias[c] += sum over rows of dout[n, c], in a fixed order (deterministic). */
cf_status cf_bias_backward(cf_context *ctx, cf_mem dbias /* (C) */, cf_mem dout /* (N, C) */, int N, int C);

/* The FFN's first layer after its GEMM, in one pass: pre += bias (in place, kept for backward)
 * and out = act(pre). out must not alias pre. */
cf_status cf_bias_act_forward(cf_context *ctx, cf_mem out /* (N, C) */, cf_mem pre /* (N, C) in/out */,
                              cf_mem bias /* (C) */, int N, int C, cf_activation act);
/* dpre = dout * act'(pre) (overwritten; dpre may alias dout) and dbias += column sums of dpre,
 * in one pass and a fixed order. `pre` is the biased pre-activation bias_act_forward left. */
cf_status cf_bias_act_backward(cf_context *ctx, cf_mem dpre /* (N, C) */, cf_mem dbias /* (C) */,
                               cf_mem dout /* (N, C) */, cf_mem pre /* (N, C) */, int N, int C,
                               cf_activation act);

/* ---------- dropout ---------- */

/* Inverted dropout with probability p in [0, 1). Element i (counted from the cf_mem's offset)
 * is kept iff cf_uniform24(word i%4 of cf_random_bits(seed, step, tensor_id, i/4)) >= p, and
 * kept elements are scaled by 1/(1-p) (in float). The mask is regenerated, never stored. */
typedef struct cf_dropout {
  float p;
  uint32_t seed, step, tensor_id;
} cf_dropout;

/* 1 when element i is kept under d (the host twin of the device mask). */
int cf_dropout_keep(cf_dropout d, uint32_t i);
/* The factor kept elements are multiplied by: 1/(1-p) in float, exactly as the device uses it. */
float cf_dropout_scale(cf_dropout d);

/* x = dropout(x), in place. p == 0 is an exact identity and launches nothing. */
cf_status cf_dropout_forward(cf_context *ctx, cf_mem x /* (n) */, size_t n, cf_dropout d);
/* dx = dropout(dx) with the same mask, in place; p == 0 launches nothing. */
cf_status cf_dropout_backward(cf_context *ctx, cf_mem dx /* (n) */, size_t n, cf_dropout d);

/* ---------- residual ---------- */

/* out = inp1 + inp2; out may alias either input. */
cf_status cf_residual_forward(cf_context *ctx, cf_mem out /* (n) */, cf_mem inp1 /* (n) */,
                              cf_mem inp2 /* (n) */, size_t n);
/* out = res + dropout(branch), one pass; out may alias res or branch. With p == 0 it is the
 * plain residual. The dropout element index counts from branch's offset. */
cf_status cf_residual_dropout_forward(cf_context *ctx, cf_mem out /* (n) */, cf_mem res /* (n) */,
                                      cf_mem branch /* (n) */, size_t n, cf_dropout d);
/* Backward of the above: dres = dout (no kernel: callers reuse dout) and
 * dbranch = dropout(dout), written here; with p == 0 a copy, or nothing when dbranch is dout. */
cf_status cf_residual_dropout_backward(cf_context *ctx, cf_mem dbranch /* (n) */, cf_mem dout /* (n) */,
                                       size_t n, cf_dropout d);

/* ---------- helpers ---------- */

/* x *= alpha, in place. */
cf_status cf_scale(cf_context *ctx, cf_mem x /* (n) */, size_t n, float alpha);
/* y += x. */
cf_status cf_add_inplace(cf_context *ctx, cf_mem y /* (n) */, cf_mem x /* (n) */, size_t n);
/* dst = src (clEnqueueCopyBuffer; the ranges must not overlap unless identical). */
cf_status cf_copy(cf_context *ctx, cf_mem dst /* (n) */, cf_mem src /* (n) */, size_t n);

/* ---------- references (float inputs, double arithmetic and outputs) ----------
 * Weight-gradient references add into their outputs (+=) like the device ops; the rest write. */
double ref_activation(double x, cf_activation act);
double ref_activation_grad(double x, cf_activation act);
void ref_activation_forward(double *out, const float *inp, size_t n, cf_activation act);
void ref_activation_backward(double *dinp, const float *dout, const float *inp, size_t n, cf_activation act);
void ref_bias_forward(double *out /* (N, C) */, const float *x /* (N, C) */, const float *bias /* (C) */,
                      int N, int C);
void ref_bias_backward(double *dbias /* (C) += */, const float *dout /* (N, C) */, int N, int C);
/* pre_out = pre + bias, out = act(pre + bias). */
void ref_bias_act_forward(double *out /* (N, C) */, double *pre_out /* (N, C) */, const float *pre /* (N, C) */,
                          const float *bias /* (C) */, int N, int C, cf_activation act);
void ref_bias_act_backward(double *dpre /* (N, C) */, double *dbias /* (C) += */, const float *dout /* (N, C) */,
                           const float *pre /* (N, C) */, int N, int C, cf_activation act);
void ref_dropout_forward(double *out, const float *x, size_t n, cf_dropout d);
void ref_dropout_backward(double *dx, const float *dout, size_t n, cf_dropout d);
void ref_residual_forward(double *out, const float *inp1, const float *inp2, size_t n);
void ref_residual_dropout_forward(double *out, const float *res, const float *branch, size_t n, cf_dropout d);

/* Small random cases of every op above, one row each. Returns non-CF_OK only for an OpenCL
 * failure; a numerical mismatch is a failing row. */
cf_status cf_selftest_elementwise(cf_context *ctx, cf_selftest *t);

#endif
