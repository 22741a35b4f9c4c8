/* LayerNorm self-test: one small random case (sizes off the work-group grid) of forward and
 * backward, plain and fused with the residual add and dropout, against the double references.
 * All tensors of a case share one device buffer at offsets. */
#include <stdlib.h>
#include <string.h>
#include "clformer/runtime.h"
#include "clformer/ref.h"
#include "clformer/ops.h"
#include "clformer/check.h"
#include "runtime/runtime.h"

static cf_status selftest_fused(cf_context *ctx, cf_selftest *t);

cf_status cf_selftest_layernorm(cf_context *ctx, cf_selftest *t) {
  enum { N = 5, C = 37 };
  const float eps = 1e-5f;
  const double atol = 1e-5, rtol = 1e-4;
  /* offsets in the one device buffer (and in the host mirror h) */
  enum { INP = 0, W = INP + N * C, B = W + C, DOUT = B + C, DW = DOUT + N * C, DB = DW + C, OUT = DB + C,
         MEAN = OUT + N * C, RSTD = MEAN + N, DINP = RSTD + N, TOTAL = DINP + N * C };
  float *h = malloc(TOTAL * sizeof *h);
  double *ref = malloc((2 * N * C + 2 * C + 2 * N) * sizeof *ref);
  float *got = malloc((N * C + 2 * C + 2 * N) * sizeof *got);
  cl_mem buf = NULL;
  cf_status st = CF_OK;
  if (!h || !ref || !got) { st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); goto done; }
  unsigned long long s = 0x4c4e;
  for (int i = 0; i < OUT; i++) h[i] = cf_selftest_random(&s);
  for (int i = 0; i < N * C; i++) h[INP + i] = 2.0f * h[INP + i] + 0.5f;  /* off-centre rows */
  st = cf_buffer_create(ctx, TOTAL * sizeof(float), &buf);
  if (st == CF_OK) st = cf_write(ctx, cf_at(buf, 0), h, OUT);
  /* a first, unchecked pass pays for the program build; then the inputs are written afresh */
  if (st == CF_OK) st = cf_layernorm_forward(ctx, cf_at(buf, OUT), cf_at(buf, MEAN), cf_at(buf, RSTD), cf_at(buf, INP),
                                             cf_at(buf, W), cf_at(buf, B), N, C, eps);
  if (st == CF_OK) st = cf_layernorm_backward(ctx, cf_at(buf, DINP), cf_at(buf, DW), cf_at(buf, DB), cf_at(buf, DOUT),
                                              cf_at(buf, INP), cf_at(buf, W), cf_at(buf, MEAN), cf_at(buf, RSTD), N, C, 0);
  if (st == CF_OK) st = cf_write(ctx, cf_at(buf, 0), h, OUT);
  if (st == CF_OK) st = cf_context_finish(ctx);
  if (st != CF_OK) goto done;

  /* forward: out, then mean and rstd, checked as one row */
  double t0 = cf_now();
  st = cf_layernorm_forward(ctx, cf_at(buf, OUT), cf_at(buf, MEAN), cf_at(buf, RSTD), cf_at(buf, INP), cf_at(buf, W),
                            cf_at(buf, B), N, C, eps);
  if (st == CF_OK) st = cf_context_finish(ctx);
  double ms = 1e3 * (cf_now() - t0);
  if (st == CF_OK) st = cf_read(ctx, cf_at(buf, OUT), h + OUT, N * C + 2 * N);
  if (st != CF_OK) goto done;
  ref_layernorm_forward(ref, ref + N * C, ref + N * C + N, h + INP, h + W, h + B, N, C, eps);
  cf_selftest_check(t, "layernorm_forward", h + OUT, ref, N * C + 2 * N, atol, rtol, ms);

  /* backward from the device's saved statistics; dweight/dbias start nonzero (+=) */
  t0 = cf_now();
  st = cf_layernorm_backward(ctx, cf_at(buf, DINP), cf_at(buf, DW), cf_at(buf, DB), cf_at(buf, DOUT), cf_at(buf, INP),
                             cf_at(buf, W), cf_at(buf, MEAN), cf_at(buf, RSTD), N, C, 0);
  if (st == CF_OK) st = cf_context_finish(ctx);
  ms = 1e3 * (cf_now() - t0);
  if (st == CF_OK) st = cf_read(ctx, cf_at(buf, DINP), got, N * C);
  if (st == CF_OK) st = cf_read(ctx, cf_at(buf, DW), got + N * C, 2 * C);
  if (st != CF_OK) goto done;
  for (int c = 0; c < C; c++) {
    ref[N * C + c] = h[DW + c];
    ref[N * C + C + c] = h[DB + c];
  }
  ref_layernorm_backward(ref, ref + N * C, ref + N * C + C, h + DOUT, h + INP, h + W, h + MEAN, h + RSTD, N, C);
  cf_selftest_check(t, "layernorm_backward", got, ref, N * C + 2 * C, atol, rtol, ms);

done:
  cf_buffer_free(buf);
  free(h);
  free(ref);
  free(got);
  return st == CF_OK ? selftest_fused(ctx, t) : st;
}

/* res = inp + dropout(branch), out = LN(res) and its backward (accumulating into dinp), p = 0.1. */
static cf_status selftest_fused(cf_context *ctx, cf_selftest *t) {
  enum { N = 5, C = 37, NC = N * C };
  const float eps = 1e-5f;
  const double atol = 1e-5, rtol = 1e-4;
  const cf_dropout d = {0.1f, 0x5eed, 3, 11};
  /* inputs first (INP .. DB, written from h), then the outputs */
  enum { INP = 0, BR = INP + NC, W = BR + NC, B = W + C, DOUT = B + C, DINP = DOUT + NC, DW = DINP + NC, DB = DW + C,
         OUT = DB + C, MEAN = OUT + NC, RSTD = MEAN + N, RES = RSTD + N, DBR = RES + NC, TOTAL = DBR + NC,
         GOT = TOTAL /* host only: the backward's outputs */, HOST = GOT + 2 * NC + 2 * C };
  float *h = malloc(HOST * sizeof *h);
  double *ref = malloc((2 * NC + 2 * C + 2 * N) * sizeof *ref);
  cl_mem buf = NULL;
  cf_status st = CF_OK;
  if (!h || !ref) { st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); goto done; }
  unsigned long long s = 0x52444c4e;
  for (int i = 0; i < OUT; i++) h[i] = cf_selftest_random(&s);
  for (int i = 0; i < NC; i++) h[INP + i] = 2.0f * h[INP + i] - 0.5f;
  st = cf_buffer_create(ctx, TOTAL * sizeof(float), &buf);
#define RUN_FWD() cf_residual_dropout_layernorm_forward(ctx, cf_at(buf, OUT), cf_at(buf, MEAN), cf_at(buf, RSTD), \
      cf_at(buf, RES), cf_at(buf, INP), cf_at(buf, BR), cf_at(buf, W), cf_at(buf, B), N, C, eps, d)
#define RUN_BWD() cf_residual_dropout_layernorm_backward(ctx, cf_at(buf, DINP), cf_at(buf, DBR), cf_at(buf, DW), \
      cf_at(buf, DB), cf_at(buf, DOUT), cf_at(buf, RES), cf_at(buf, W), cf_at(buf, MEAN), cf_at(buf, RSTD), N, C, 1, d)
  /* a first, unchecked pass pays for the program build; then the inputs are written afresh */
  if (st == CF_OK) st = cf_write(ctx, cf_at(buf, 0), h, OUT);
  if (st == CF_OK) st = RUN_FWD();
  if (st == CF_OK) st = RUN_BWD();
  if (st == CF_OK) st = cf_write(ctx, cf_at(buf, 0), h, OUT);
  if (st == CF_OK) st = cf_context_finish(ctx);
  if (st != CF_OK) goto done;

  /* forward: out, mean, rstd and res, checked as one row */
  double t0 = cf_now();
  st = RUN_FWD();
  if (st == CF_OK) st = cf_context_finish(ctx);
  double ms = 1e3 * (cf_now() - t0);
  if (st == CF_OK) st = cf_read(ctx, cf_at(buf, OUT), h + OUT, RES + NC - OUT);
  if (st != CF_OK) goto done;
  ref_residual_dropout_layernorm_forward(ref, ref + NC, ref + NC + N, ref + NC + 2 * N, h + INP, h + BR, h + W, h + B, N,
                                         C, eps, d);
  cf_selftest_check(t, "residual_dropout_layernorm_forward", h + OUT, ref, 2 * NC + 2 * N, atol, rtol, ms);

  /* backward from the device's res and statistics: dinp, dbranch, dweight, dbias as one row */
  t0 = cf_now();
  st = RUN_BWD();
  if (st == CF_OK) st = cf_context_finish(ctx);
  ms = 1e3 * (cf_now() - t0);
  float *got = h + GOT;
  if (st == CF_OK) st = cf_read(ctx, cf_at(buf, DINP), got, NC + 2 * C);
  if (st == CF_OK) st = cf_read(ctx, cf_at(buf, DBR), got + NC + 2 * C, NC);
  if (st != CF_OK) goto done;
  /* reference order: dinp (NC), dweight (C), dbias (C), dbranch (NC), as read back */
  for (int i = 0; i < NC + 2 * C; i++) ref[i] = h[DINP + i];
  ref_residual_dropout_layernorm_backward(ref, ref + NC + 2 * C, ref + NC, ref + NC + C, h + DOUT, h + RES, h + W,
                                          h + MEAN, h + RSTD, N, C, d);
  cf_selftest_check(t, "residual_dropout_layernorm_backward", got, ref, 2 * NC + 2 * C, atol, rtol, ms);
#undef RUN_FWD
#undef RUN_BWD

done:
  cf_buffer_free(buf);
  free(h);
  free(ref);
  return st;
}
