/* Elementwise self-test: one small random case (sizes off the work-group grid) of every op of
 * the family against the double references, one row each. Tensors share one device buffer. */
#include <stdlib.h>
#include <string.h>
#include "clformer/runtime.h"
#include "clformer/ref.h"
#include "clformer/ops.h"
#include "clformer/check.h"
#include "runtime/runtime.h"

enum { N = 6, C = 29, NC = N * C };
/* offsets in the device buffer (and the host mirror h) */
enum { A = 0, B = A + NC, G = B + NC, BIAS = G + NC, DBIAS = BIAS + C, OUT = DBIAS + C, OUT2 = OUT + NC, TOTAL = OUT2 + NC };

typedef struct st_state {
  cf_context *ctx;
  cf_selftest *t;
  cl_mem buf;
  float *h, *got;
  double *ref;
  double t0;
  int warm;  /* a first pass that builds and warms every kernel: no rows */
} st_state;

static cf_mem at(st_state *S, size_t off) { return cf_at(S->buf, off); }

/* Restore the inputs (A, B, G, BIAS, DBIAS) the previous op may have changed; start the clock. */
static cf_status begin(st_state *S) {
  CF_TRY(cf_write(S->ctx, at(S, 0), S->h, OUT));
  CF_TRY(cf_context_finish(S->ctx));
  S->t0 = cf_now();
  return CF_OK;
}

/* Wait for the op, read n floats at off (and m more at off2), add the row. */
static cf_status end(st_state *S, const char *op, size_t off, size_t n, size_t off2, size_t m) {
  CF_TRY(cf_context_finish(S->ctx));
  double ms = 1e3 * (cf_now() - S->t0);
  if (S->warm) return CF_OK;
  CF_TRY(cf_read(S->ctx, at(S, off), S->got, n));
  CF_TRY(cf_read(S->ctx, at(S, off2), S->got + n, m));
  cf_selftest_check(S->t, op, S->got, S->ref, n + m, 1e-5, 1e-4, ms);
  return CF_OK;
}

static cf_status activations(st_state *S) {
  static const cf_activation acts[] = {CF_ACT_RELU, CF_ACT_GELU_TANH, CF_ACT_GELU_ERF};
  char op[48];
  for (int k = 0; k < 3; k++) {
    cf_activation act = acts[k];
    CF_TRY(begin(S));
    CF_TRY(cf_activation_forward(S->ctx, at(S, OUT), at(S, A), NC, act));
    ref_activation_forward(S->ref, S->h + A, NC, act);
    snprintf(op, sizeof op, "%s_forward", cf_activation_name(act));
    CF_TRY(end(S, op, OUT, NC, 0, 0));

    CF_TRY(begin(S));
    CF_TRY(cf_activation_backward(S->ctx, at(S, OUT), at(S, G), at(S, A), NC, act));
    ref_activation_backward(S->ref, S->h + G, S->h + A, NC, act);
    snprintf(op, sizeof op, "%s_backward", cf_activation_name(act));
    CF_TRY(end(S, op, OUT, NC, 0, 0));
  }
  return CF_OK;
}

static cf_status bias_ops(st_state *S) {
  const cf_activation act = CF_ACT_GELU_TANH;
  CF_TRY(begin(S));
  CF_TRY(cf_bias_forward(S->ctx, at(S, A), at(S, BIAS), N, C));
  ref_bias_forward(S->ref, S->h + A, S->h + BIAS, N, C);
  CF_TRY(end(S, "bias_forward", A, NC, 0, 0));

  CF_TRY(begin(S));
  CF_TRY(cf_bias_backward(S->ctx, at(S, DBIAS), at(S, G), N, C));
  for (int c = 0; c < C; c++) S->ref[c] = S->h[DBIAS + c];
  ref_bias_backward(S->ref, S->h + G, N, C);
  CF_TRY(end(S, "bias_backward", DBIAS, C, 0, 0));

  /* out, then the biased pre-activation left in place */
  CF_TRY(begin(S));
  CF_TRY(cf_bias_act_forward(S->ctx, at(S, OUT), at(S, A), at(S, BIAS), N, C, act));
  ref_bias_act_forward(S->ref, S->ref + NC, S->h + A, S->h + BIAS, N, C, act);
  CF_TRY(end(S, "bias_act_forward", OUT, NC, A, NC));

  /* dpre, then dbias (+=) */
  CF_TRY(begin(S));
  CF_TRY(cf_bias_act_backward(S->ctx, at(S, OUT), at(S, DBIAS), at(S, G), at(S, A), N, C, act));
  for (int c = 0; c < C; c++) S->ref[NC + c] = S->h[DBIAS + c];
  ref_bias_act_backward(S->ref, S->ref + NC, S->h + G, S->h + A, N, C, act);
  return end(S, "bias_act_backward", OUT, NC, DBIAS, C);
}

static cf_status dropout_ops(st_state *S) {
  const cf_dropout d = {0.25f, 1234u, 7u, 3u};
  CF_TRY(begin(S));
  CF_TRY(cf_dropout_forward(S->ctx, at(S, A), NC, d));
  ref_dropout_forward(S->ref, S->h + A, NC, d);
  CF_TRY(end(S, "dropout_forward", A, NC, 0, 0));

  CF_TRY(begin(S));
  CF_TRY(cf_dropout_backward(S->ctx, at(S, G), NC, d));
  ref_dropout_backward(S->ref, S->h + G, NC, d);
  CF_TRY(end(S, "dropout_backward", G, NC, 0, 0));

  CF_TRY(begin(S));
  CF_TRY(cf_residual_forward(S->ctx, at(S, OUT), at(S, A), at(S, B), NC));
  ref_residual_forward(S->ref, S->h + A, S->h + B, NC);
  CF_TRY(end(S, "residual_forward", OUT, NC, 0, 0));

  CF_TRY(begin(S));
  CF_TRY(cf_residual_dropout_forward(S->ctx, at(S, OUT), at(S, A), at(S, B), NC, d));
  ref_residual_dropout_forward(S->ref, S->h + A, S->h + B, NC, d);
  CF_TRY(end(S, "residual_dropout_forward", OUT, NC, 0, 0));

  CF_TRY(begin(S));
  CF_TRY(cf_residual_dropout_backward(S->ctx, at(S, OUT), at(S, G), NC, d));
  ref_dropout_backward(S->ref, S->h + G, NC, d);
  return end(S, "residual_dropout_backward", OUT, NC, 0, 0);
}

static cf_status helpers(st_state *S) {
  CF_TRY(begin(S));
  CF_TRY(cf_scale(S->ctx, at(S, A), NC, -0.375f));
  for (int i = 0; i < NC; i++) S->ref[i] = -0.375 * S->h[A + i];
  CF_TRY(end(S, "scale", A, NC, 0, 0));

  CF_TRY(begin(S));
  CF_TRY(cf_add_inplace(S->ctx, at(S, A), at(S, B), NC));
  ref_residual_forward(S->ref, S->h + A, S->h + B, NC);
  CF_TRY(end(S, "add_inplace", A, NC, 0, 0));

  CF_TRY(begin(S));
  CF_TRY(cf_copy(S->ctx, at(S, OUT), at(S, B), NC));
  for (int i = 0; i < NC; i++) S->ref[i] = S->h[B + i];
  return end(S, "copy", OUT, NC, 0, 0);
}

cf_status cf_selftest_elementwise(cf_context *ctx, cf_selftest *t) {
  st_state S = {ctx, t, NULL, malloc(TOTAL * sizeof(float)), malloc(2 * NC * sizeof(float)),
                malloc(2 * NC * sizeof(double)), 0, 0};
  cf_status st = CF_OK;
  if (!S.h || !S.got || !S.ref) { st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); goto done; }
  unsigned long long s = 0x656c74;
  for (int i = 0; i < TOTAL; i++) S.h[i] = cf_selftest_random(&s);
  for (int i = 0; i < NC; i++) S.h[A + i] *= 4.0f;  /* activations see [-4, 4) */
  st = cf_buffer_create(ctx, TOTAL * sizeof(float), &S.buf);
  /* the first pass pays for program builds; the second is checked and timed */
  for (S.warm = 1; S.warm >= 0 && st == CF_OK; S.warm--) {
    if (st == CF_OK) st = activations(&S);
    if (st == CF_OK) st = bias_ops(&S);
    if (st == CF_OK) st = dropout_ops(&S);
    if (st == CF_OK) st = helpers(&S);
  }
done:
  cf_buffer_free(S.buf);
  free(S.h);
  free(S.got);
  free(S.ref);
  return st;
}
