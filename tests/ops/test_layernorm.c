/* LayerNorm forward and backward, plain and fused with the residual add and dropout in front of
 * it, against the double references (the fused op also bit for bit against the unfused kernels);
 * the reference backwards against central differences, bit-identical reruns, accumulate/alias
 * modes, bad arguments; on a CPU also the work-group-per-row kernels other devices run. */
#include <math.h>
#include <string.h>
#include "clformer/runtime.h"
#include "clformer/ref.h"
#include "clformer/ops.h"
#include "testutil.h"

/* Device output compared with a reference that starts at a float array (the += outputs). */
static void add_base(double *ref, const float *base, size_t n) {
  for (size_t i = 0; i < n; i++) ref[i] += base[i];
}

static void run_case(cf_context *ctx, test_rng *r, int N, int C) {
  const float eps = 1e-5f;
  size_t NC = (size_t)N * C;
  char what[128];
  printf("case N=%d C=%d\n", N, C);
  float *inp = test_falloc(NC), *w = test_falloc(C), *b = test_falloc(C), *dout = test_falloc(NC), *dw0 = test_falloc(C), *db0 = test_falloc(C),
        *dinp0 = test_falloc(NC);
  for (int n = 0; n < N; n++) {
    float shift = test_randf(r, -3, 3), scale = test_randf(r, 0.2f, 2);
    for (int c = 0; c < C; c++) inp[(size_t)n * C + c] = shift + scale * test_randf(r, -1, 1);
  }
  if (N > 2 && C > 1)
    for (int c = 0; c < C; c++) inp[C + c] = 0.75f;  /* a constant row: variance 0, exact mean */
  test_fill_uniform(r, w, C, -1.5f, 1.5f);
  test_fill_uniform(r, b, C, -1, 1);
  test_fill_uniform(r, dout, NC, -1, 1);
  test_fill_uniform(r, dw0, C, -1, 1);
  test_fill_uniform(r, db0, C, -1, 1);
  test_fill_uniform(r, dinp0, NC, -1, 1);

  size_t off = 1 + (size_t)(N + C) % 7;
  cf_mem d_inp = test_tensor(ctx, inp, NC, off), d_w = test_tensor(ctx, w, C, off + 1), d_b = test_tensor(ctx, b, C, 2);
  cf_mem d_out = test_tensor(ctx, NULL, NC, off), d_mean = test_tensor(ctx, NULL, N, 3), d_rstd = test_tensor(ctx, NULL, N, 1);
  cf_mem d_dout = test_tensor(ctx, dout, NC, 5), d_dinp = test_tensor(ctx, NULL, NC, off);
  cf_mem d_dw = test_tensor(ctx, dw0, C, 1), d_db = test_tensor(ctx, db0, C, 4);

  /* forward */
  double *ref = test_dalloc(NC), *rmean = test_dalloc(N), *rrstd = test_dalloc(N);
  ref_layernorm_forward(ref, rmean, rrstd, inp, w, b, N, C, eps);
  TEST_OK(cf_layernorm_forward(ctx, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C, eps));
  float *out = test_read(ctx, d_out, NC), *mean = test_read(ctx, d_mean, N), *rstd = test_read(ctx, d_rstd, N);
  snprintf(what, sizeof what, "layernorm_forward out N=%d C=%d", N, C);
  test_compare(what, out, ref, NC, 1e-5, 1e-4);
  snprintf(what, sizeof what, "layernorm_forward mean N=%d C=%d", N, C);
  test_compare(what, mean, rmean, N, 1e-5, 1e-4);
  snprintf(what, sizeof what, "layernorm_forward rstd N=%d C=%d", N, C);
  test_compare(what, rstd, rrstd, N, 1e-5, 1e-4);
  test_poison(ctx, d_out, NC);
  test_poison(ctx, d_mean, N);
  test_poison(ctx, d_rstd, N);
  TEST_OK(cf_layernorm_forward(ctx, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C, eps));
  test_check_same("layernorm_forward out", ctx, d_out, out, NC);
  test_check_same("layernorm_forward mean", ctx, d_mean, mean, N);
  test_check_same("layernorm_forward rstd", ctx, d_rstd, rstd, N);

  /* backward, from the device's saved statistics */
  double *rdinp = test_dalloc(NC), *rdw = test_dalloc(C), *rdb = test_dalloc(C);
  ref_layernorm_backward(rdinp, rdw, rdb, dout, inp, w, mean, rstd, N, C);
  add_base(rdw, dw0, C);
  add_base(rdb, db0, C);
  /* dweight/dbias sum N rows of O(1) terms in fp32: the rounding of such a sum grows like
   * sqrt(N) * eps * |partial sums|, so their atol grows with sqrt(N) (8e-5 at N = 4096). */
  double atol_w = 1e-5 * fmax(1.0, sqrt(N / 64.0));
  TEST_OK(cf_layernorm_backward(ctx, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C, 0));
  float *dinp = test_read(ctx, d_dinp, NC), *dw = test_read(ctx, d_dw, C), *db = test_read(ctx, d_db, C);
  snprintf(what, sizeof what, "layernorm_backward dinp N=%d C=%d", N, C);
  test_compare(what, dinp, rdinp, NC, 1e-5, 1e-4);
  snprintf(what, sizeof what, "layernorm_backward dweight (+=) N=%d C=%d", N, C);
  test_compare(what, dw, rdw, C, atol_w, 1e-4);
  snprintf(what, sizeof what, "layernorm_backward dbias (+=) N=%d C=%d", N, C);
  test_compare(what, db, rdb, C, atol_w, 1e-4);
  /* rerun from the same starting point: bit-identical */
  test_poison(ctx, d_dinp, NC);
  test_upload(ctx, d_dw, dw0, C);
  test_upload(ctx, d_db, db0, C);
  TEST_OK(cf_layernorm_backward(ctx, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C, 0));
  test_check_same("layernorm_backward dinp", ctx, d_dinp, dinp, NC);
  test_check_same("layernorm_backward dweight", ctx, d_dw, dw, C);
  test_check_same("layernorm_backward dbias", ctx, d_db, db, C);

  /* accumulate = 1: dinp += */
  test_upload(ctx, d_dinp, dinp0, NC);
  test_upload(ctx, d_dw, dw0, C);
  test_upload(ctx, d_db, db0, C);
  TEST_OK(cf_layernorm_backward(ctx, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C, 1));
  double *racc = test_dalloc(NC);
  for (size_t i = 0; i < NC; i++) racc[i] = rdinp[i] + dinp0[i];
  float *dacc = test_read(ctx, d_dinp, NC);
  snprintf(what, sizeof what, "layernorm_backward dinp (accumulate) N=%d C=%d", N, C);
  test_compare(what, dacc, racc, NC, 1e-5, 1e-4);

  /* dinp aliasing dout, both modes */
  for (int acc = 0; acc <= 1; acc++) {
    test_upload(ctx, d_dinp, dout, NC);
    TEST_OK(cf_layernorm_backward(ctx, d_dinp, d_dw, d_db, d_dinp, d_inp, d_w, d_mean, d_rstd, N, C, acc));
    float *al = test_read(ctx, d_dinp, NC);
    for (size_t i = 0; i < NC; i++) racc[i] = rdinp[i] + (acc ? dout[i] : 0.0);
    snprintf(what, sizeof what, "layernorm_backward dinp aliasing dout (accumulate=%d) N=%d C=%d", acc, N, C);
    test_compare(what, al, racc, NC, 1e-5, 1e-4);
    free(al);
  }

  test_free_tensors();
  free(inp); free(w); free(b); free(dout); free(dw0); free(db0); free(dinp0);
  free(ref); free(rmean); free(rrstd); free(out); free(mean); free(rstd);
  free(rdinp); free(rdw); free(rdb); free(dinp); free(dw); free(db); free(racc); free(dacc);
}

/* loss = sum(out * rw) of the double reference */
static double loss(const float *inp, const float *w, const float *b, const float *rw, int N, int C, float eps) {
  size_t NC = (size_t)N * C;
  double *out = test_dalloc(NC), *m = test_dalloc(N), *rs = test_dalloc(N), l = 0;
  ref_layernorm_forward(out, m, rs, inp, w, b, N, C, eps);
  for (size_t i = 0; i < NC; i++) l += out[i] * rw[i];
  free(out); free(m); free(rs);
  return l;
}

/* Central difference of the loss in x[i]. h = 2^-17 (~7.6e-6) makes x +- h exact in float for
 * |x| < 128, so the float inputs the reference takes carry exactly the step; loss is double. */
static double central(float *x, size_t i, const float *inp, const float *w, const float *b, const float *rw, int N,
                      int C, float eps) {
  const float h = 0x1p-17f;
  float x0 = x[i];
  x[i] = x0 + h;
  double lp = loss(inp, w, b, rw, N, C, eps);
  x[i] = x0 - h;
  double lm = loss(inp, w, b, rw, N, C, eps);
  x[i] = x0;
  return (lp - lm) / (2.0 * (double)h);
}

/* The reference backward (and the device backward) against central differences. */
static void fd_case(cf_context *ctx, test_rng *r, int N, int C) {
  const float eps = 1e-5f;
  size_t NC = (size_t)N * C;
  char what[128];
  float *inp = test_falloc(NC), *w = test_falloc(C), *b = test_falloc(C), *rw = test_falloc(NC);
  test_fill_uniform(r, inp, NC, -2, 2);
  test_fill_uniform(r, w, C, -1.5f, 1.5f);
  test_fill_uniform(r, b, C, -1, 1);
  test_fill_uniform(r, rw, NC, -1, 1);
  double *fdi = test_dalloc(NC), *fdw = test_dalloc(C), *fdb = test_dalloc(C);
  for (size_t i = 0; i < NC; i++) fdi[i] = central(inp, i, inp, w, b, rw, N, C, eps);
  for (int c = 0; c < C; c++) fdw[c] = central(w, c, inp, w, b, rw, N, C, eps);
  for (int c = 0; c < C; c++) fdb[c] = central(b, c, inp, w, b, rw, N, C, eps);

  /* reference backward with its own statistics (rounded to float, as its signature takes) */
  double *out = test_dalloc(NC), *m = test_dalloc(N), *rs = test_dalloc(N), *gi = test_dalloc(NC), *gw = test_dalloc(C), *gb = test_dalloc(C);
  float *mf = test_falloc(N), *rf = test_falloc(N);
  ref_layernorm_forward(out, m, rs, inp, w, b, N, C, eps);
  for (int n = 0; n < N; n++) { mf[n] = (float)m[n]; rf[n] = (float)rs[n]; }
  ref_layernorm_backward(gi, gw, gb, rw, inp, w, mf, rf, N, C);
  /* the statistics' float rounding (~6e-8 relative) is the main error; differences are ~1e-10 */
  float *gif = test_falloc(NC), *gwf = test_falloc(C), *gbf = test_falloc(C);
  for (size_t i = 0; i < NC; i++) gif[i] = (float)gi[i];
  for (int c = 0; c < C; c++) { gwf[c] = (float)gw[c]; gbf[c] = (float)gb[c]; }
  snprintf(what, sizeof what, "ref_layernorm_backward dinp vs central differences N=%d C=%d", N, C);
  test_compare(what, gif, fdi, NC, 1e-6, 1e-5);
  snprintf(what, sizeof what, "ref_layernorm_backward dweight vs central differences N=%d C=%d", N, C);
  test_compare(what, gwf, fdw, C, 1e-6, 1e-5);
  snprintf(what, sizeof what, "ref_layernorm_backward dbias vs central differences N=%d C=%d", N, C);
  test_compare(what, gbf, fdb, C, 1e-6, 1e-5);

  /* and the device, end to end: forward for the statistics, backward from zeroed grads */
  cf_mem d_inp = test_tensor(ctx, inp, NC, 1), d_w = test_tensor(ctx, w, C, 2), d_b = test_tensor(ctx, b, C, 0), d_rw = test_tensor(ctx, rw, NC, 3);
  cf_mem d_out = test_tensor(ctx, NULL, NC, 0), d_m = test_tensor(ctx, NULL, N, 0), d_r = test_tensor(ctx, NULL, N, 0);
  cf_mem d_gi = test_tensor(ctx, NULL, NC, 1), d_gw = test_tensor(ctx, NULL, C, 0), d_gb = test_tensor(ctx, NULL, C, 0);
  TEST_OK(cf_fill(ctx, d_gw, 0, C));
  TEST_OK(cf_fill(ctx, d_gb, 0, C));
  TEST_OK(cf_layernorm_forward(ctx, d_out, d_m, d_r, d_inp, d_w, d_b, N, C, eps));
  TEST_OK(cf_layernorm_backward(ctx, d_gi, d_gw, d_gb, d_rw, d_inp, d_w, d_m, d_r, N, C, 0));
  float *dgi = test_read(ctx, d_gi, NC), *dgw = test_read(ctx, d_gw, C), *dgb = test_read(ctx, d_gb, C);
  snprintf(what, sizeof what, "device layernorm_backward dinp vs central differences N=%d C=%d", N, C);
  test_compare(what, dgi, fdi, NC, 1e-5, 1e-4);
  snprintf(what, sizeof what, "device layernorm_backward dweight vs central differences N=%d C=%d", N, C);
  test_compare(what, dgw, fdw, C, 1e-5, 1e-4);
  snprintf(what, sizeof what, "device layernorm_backward dbias vs central differences N=%d C=%d", N, C);
  test_compare(what, dgb, fdb, C, 1e-5, 1e-4);

  test_free_tensors();
  free(inp); free(w); free(b); free(rw); free(fdi); free(fdw); free(fdb); free(out); free(m); free(rs);
  free(gi); free(gw); free(gb); free(mf); free(rf); free(gif); free(gwf); free(gbf); free(dgi); free(dgw); free(dgb);
}

/* ---------- residual + dropout + LayerNorm, fused ---------- */

/* Forward and backward of the fused op against the references, bit for bit against the unfused
 * kernels (cf_residual_dropout_forward + cf_layernorm_forward; cf_layernorm_backward +
 * cf_residual_dropout_backward), reruns, accumulate and aliasing. */
static void fused_case(cf_context *ctx, test_rng *r, int N, int C, float p) {
  const float eps = 1e-5f;
  size_t NC = (size_t)N * C;
  char what[160];
  printf("fused case N=%d C=%d p=%g\n", N, C, (double)p);
  cf_dropout d = {p, (uint32_t)(test_uniform(r) * 4e9), 7u + (uint32_t)N, 40u + (uint32_t)C, 0};
  float *inp = test_falloc(NC), *br = test_falloc(NC), *w = test_falloc(C), *b = test_falloc(C), *dout = test_falloc(NC),
        *dres0 = test_falloc(NC), *dw0 = test_falloc(C), *db0 = test_falloc(C);
  for (int n = 0; n < N; n++) {
    float shift = test_randf(r, -3, 3), scale = test_randf(r, 0.2f, 2);
    for (int c = 0; c < C; c++) inp[(size_t)n * C + c] = shift + scale * test_randf(r, -1, 1);
  }
  test_fill_uniform(r, br, NC, -1, 1);
  test_fill_uniform(r, w, C, -1.5f, 1.5f);
  test_fill_uniform(r, b, C, -1, 1);
  test_fill_uniform(r, dout, NC, -1, 1);
  test_fill_uniform(r, dres0, NC, -1, 1);
  test_fill_uniform(r, dw0, C, -1, 1);
  test_fill_uniform(r, db0, C, -1, 1);

  size_t off = 1 + (size_t)(N + 3 * C) % 5;
  cf_mem d_inp = test_tensor(ctx, inp, NC, off), d_br = test_tensor(ctx, br, NC, 3), d_w = test_tensor(ctx, w, C, 2),
         d_b = test_tensor(ctx, b, C, off);
  cf_mem d_out = test_tensor(ctx, NULL, NC, 1), d_mean = test_tensor(ctx, NULL, N, 2), d_rstd = test_tensor(ctx, NULL, N, 0),
         d_res = test_tensor(ctx, NULL, NC, off + 2);
  cf_mem u_out = test_tensor(ctx, NULL, NC, 0), u_mean = test_tensor(ctx, NULL, N, 0), u_rstd = test_tensor(ctx, NULL, N, 0),
         u_res = test_tensor(ctx, NULL, NC, 0);

  /* forward against the reference */
  double *ref = test_dalloc(NC), *rmean = test_dalloc(N), *rrstd = test_dalloc(N), *rres = test_dalloc(NC);
  ref_residual_dropout_layernorm_forward(ref, rmean, rrstd, rres, inp, br, w, b, N, C, eps, d);
  TEST_OK(cf_residual_dropout_layernorm_forward(ctx, d_out, d_mean, d_rstd, d_res, d_inp, d_br, d_w, d_b, N, C, eps, d));
  float *out = test_read(ctx, d_out, NC), *mean = test_read(ctx, d_mean, N), *rstd = test_read(ctx, d_rstd, N),
        *res = test_read(ctx, d_res, NC);
  snprintf(what, sizeof what, "residual_dropout_layernorm_forward out N=%d C=%d p=%g", N, C, (double)p);
  test_compare(what, out, ref, NC, 1e-5, 1e-4);
  snprintf(what, sizeof what, "residual_dropout_layernorm_forward res N=%d C=%d p=%g", N, C, (double)p);
  test_compare(what, res, rres, NC, 1e-5, 1e-4);
  snprintf(what, sizeof what, "residual_dropout_layernorm_forward mean N=%d C=%d p=%g", N, C, (double)p);
  test_compare(what, mean, rmean, N, 1e-5, 1e-4);
  snprintf(what, sizeof what, "residual_dropout_layernorm_forward rstd N=%d C=%d p=%g", N, C, (double)p);
  test_compare(what, rstd, rrstd, N, 1e-5, 1e-4);
  /* the unfused pair gives the same bits */
  TEST_OK(cf_residual_dropout_forward(ctx, u_res, d_inp, d_br, NC, d));
  TEST_OK(cf_layernorm_forward(ctx, u_out, u_mean, u_rstd, u_res, d_w, d_b, N, C, eps));
  test_check_same("fused forward res = unfused", ctx, u_res, res, NC);
  test_check_same("fused forward out = unfused", ctx, u_out, out, NC);
  test_check_same("fused forward mean = unfused", ctx, u_mean, mean, N);
  test_check_same("fused forward rstd = unfused", ctx, u_rstd, rstd, N);
  /* rerun into poisoned outputs: bit-identical */
  test_poison(ctx, d_out, NC);
  test_poison(ctx, d_mean, N);
  test_poison(ctx, d_rstd, N);
  test_poison(ctx, d_res, NC);
  TEST_OK(cf_residual_dropout_layernorm_forward(ctx, d_out, d_mean, d_rstd, d_res, d_inp, d_br, d_w, d_b, N, C, eps, d));
  test_check_same("fused forward out rerun", ctx, d_out, out, NC);
  test_check_same("fused forward res rerun", ctx, d_res, res, NC);
  test_check_same("fused forward mean rerun", ctx, d_mean, mean, N);
  test_check_same("fused forward rstd rerun", ctx, d_rstd, rstd, N);
  /* res in place of inp */
  test_upload(ctx, u_res, inp, NC);
  test_poison(ctx, u_out, NC);
  TEST_OK(cf_residual_dropout_layernorm_forward(ctx, u_out, u_mean, u_rstd, u_res, u_res, d_br, d_w, d_b, N, C, eps, d));
  test_check_same("fused forward res aliasing inp: res", ctx, u_res, res, NC);
  test_check_same("fused forward res aliasing inp: out", ctx, u_out, out, NC);

  /* backward from the device's res and statistics, both accumulate modes */
  double atol_w = 1e-5 * fmax(1.0, sqrt(N / 64.0));  /* as in run_case */
  cf_mem d_dout = test_tensor(ctx, dout, NC, 2), d_dinp = test_tensor(ctx, NULL, NC, off), d_dbr = test_tensor(ctx, NULL, NC, 1);
  cf_mem d_dw = test_tensor(ctx, dw0, C, 3), d_db = test_tensor(ctx, db0, C, 0);
  cf_mem u_dinp = test_tensor(ctx, NULL, NC, 0), u_dbr = test_tensor(ctx, NULL, NC, 0), u_dw = test_tensor(ctx, dw0, C, 0),
         u_db = test_tensor(ctx, db0, C, 0);
  double *rdinp = test_dalloc(NC), *rdbr = test_dalloc(NC), *rdw = test_dalloc(C), *rdb = test_dalloc(C);
  for (int acc = 0; acc <= 1; acc++) {
    for (size_t i = 0; i < NC; i++) rdinp[i] = acc ? dres0[i] : 0.0;
    for (int c = 0; c < C; c++) { rdw[c] = dw0[c]; rdb[c] = db0[c]; }
    ref_residual_dropout_layernorm_backward(rdinp, rdbr, rdw, rdb, dout, res, w, mean, rstd, N, C, d);
    if (acc) test_upload(ctx, d_dinp, dres0, NC); else test_poison(ctx, d_dinp, NC);
    test_poison(ctx, d_dbr, NC);
    test_upload(ctx, d_dw, dw0, C);
    test_upload(ctx, d_db, db0, C);
    TEST_OK(cf_residual_dropout_layernorm_backward(ctx, d_dinp, d_dbr, d_dw, d_db, d_dout, d_res, d_w, d_mean, d_rstd,
                                                   N, C, acc, d));
    float *dinp = test_read(ctx, d_dinp, NC), *dbr = test_read(ctx, d_dbr, NC), *dw = test_read(ctx, d_dw, C),
          *db = test_read(ctx, d_db, C);
    snprintf(what, sizeof what, "residual_dropout_layernorm_backward dinp (accumulate=%d) N=%d C=%d p=%g", acc, N, C, (double)p);
    test_compare(what, dinp, rdinp, NC, 1e-5, 1e-4);
    snprintf(what, sizeof what, "residual_dropout_layernorm_backward dbranch (accumulate=%d) N=%d C=%d p=%g", acc, N, C, (double)p);
    test_compare(what, dbr, rdbr, NC, 1e-5, 1e-4);
    snprintf(what, sizeof what, "residual_dropout_layernorm_backward dweight (+=) N=%d C=%d p=%g", N, C, (double)p);
    test_compare(what, dw, rdw, C, atol_w, 1e-4);
    snprintf(what, sizeof what, "residual_dropout_layernorm_backward dbias (+=) N=%d C=%d p=%g", N, C, (double)p);
    test_compare(what, db, rdb, C, atol_w, 1e-4);
    /* the unfused pair */
    if (acc) test_upload(ctx, u_dinp, dres0, NC); else test_poison(ctx, u_dinp, NC);
    test_poison(ctx, u_dbr, NC);
    test_upload(ctx, u_dw, dw0, C);
    test_upload(ctx, u_db, db0, C);
    TEST_OK(cf_layernorm_backward(ctx, u_dinp, u_dw, u_db, d_dout, d_res, d_w, d_mean, d_rstd, N, C, acc));
    TEST_OK(cf_residual_dropout_backward(ctx, u_dbr, u_dinp, NC, d));
    test_check_same("fused backward dinp = unfused", ctx, u_dinp, dinp, NC);
    test_check_same("fused backward dbranch = unfused", ctx, u_dbr, dbr, NC);
    test_check_same("fused backward dweight = unfused", ctx, u_dw, dw, C);
    test_check_same("fused backward dbias = unfused", ctx, u_db, db, C);
    /* rerun: bit-identical */
    if (acc) test_upload(ctx, d_dinp, dres0, NC); else test_poison(ctx, d_dinp, NC);
    test_poison(ctx, d_dbr, NC);
    test_upload(ctx, d_dw, dw0, C);
    test_upload(ctx, d_db, db0, C);
    TEST_OK(cf_residual_dropout_layernorm_backward(ctx, d_dinp, d_dbr, d_dw, d_db, d_dout, d_res, d_w, d_mean, d_rstd,
                                                   N, C, acc, d));
    test_check_same("fused backward dinp rerun", ctx, d_dinp, dinp, NC);
    test_check_same("fused backward dbranch rerun", ctx, d_dbr, dbr, NC);
    test_check_same("fused backward dweight rerun", ctx, d_dw, dw, C);
    test_check_same("fused backward dbias rerun", ctx, d_db, db, C);
    /* dinp aliasing dout (the incoming gradient is then dout itself) */
    for (size_t i = 0; i < NC; i++) rdinp[i] = acc ? (double)dres0[i] : 0.0;
    test_upload(ctx, u_dinp, dout, NC);
    test_poison(ctx, u_dbr, NC);
    TEST_OK(cf_residual_dropout_layernorm_backward(ctx, u_dinp, u_dbr, u_dw, u_db, u_dinp, d_res, d_w, d_mean, d_rstd,
                                                   N, C, acc, d));
    float *al = test_read(ctx, u_dinp, NC);
    double *ral = test_dalloc(NC), *ralb = test_dalloc(NC), *junk = test_dalloc(2 * (size_t)C);
    for (size_t i = 0; i < NC; i++) ral[i] = acc ? (double)dout[i] : 0.0;
    ref_residual_dropout_layernorm_backward(ral, ralb, junk, junk + C, dout, res, w, mean, rstd, N, C, d);
    snprintf(what, sizeof what, "residual_dropout_layernorm_backward dinp aliasing dout (accumulate=%d) N=%d C=%d", acc, N, C);
    test_compare(what, al, ral, NC, 1e-5, 1e-4);
    free(al); free(ral); free(ralb); free(junk);
    /* p == 0: dbranch may be dinp itself (nothing to copy) */
    if (p == 0.0f) {
      test_upload(ctx, d_dinp, dres0, NC);
      TEST_OK(cf_residual_dropout_layernorm_backward(ctx, d_dinp, d_dinp, d_dw, d_db, d_dout, d_res, d_w, d_mean, d_rstd,
                                                     N, C, 1, d));
      if (acc) test_check_same("fused backward p=0, dbranch = dinp", ctx, d_dinp, dinp, NC);
    }
    free(dinp); free(dbr); free(dw); free(db);
  }

  test_free_tensors();
  free(inp); free(br); free(w); free(b); free(dout); free(dres0); free(dw0); free(db0);
  free(ref); free(rmean); free(rrstd); free(rres); free(out); free(mean); free(rstd); free(res);
  free(rdinp); free(rdbr); free(rdw); free(rdb);
}

/* loss = sum(out * rw) + sum(res * rg) of the double reference: rg is the gradient res gets from
 * its other reader (the residual stream), which backward's accumulate mode adds. */
static double fused_loss(const float *inp, const float *br, const float *w, const float *b, const float *rw,
                         const float *rg, int N, int C, float eps, cf_dropout d) {
  size_t NC = (size_t)N * C;
  double *out = test_dalloc(NC), *res = test_dalloc(NC), *m = test_dalloc(N), *rs = test_dalloc(N), l = 0;
  ref_residual_dropout_layernorm_forward(out, m, rs, res, inp, br, w, b, N, C, eps, d);
  for (size_t i = 0; i < NC; i++) l += out[i] * rw[i] + res[i] * rg[i];
  free(out); free(res); free(m); free(rs);
  return l;
}

static double fused_central(float *x, size_t i, const float *inp, const float *br, const float *w, const float *b,
                            const float *rw, const float *rg, int N, int C, float eps, cf_dropout d) {
  const float h = 0x1p-17f;  /* as in central() */
  float x0 = x[i];
  x[i] = x0 + h;
  double lp = fused_loss(inp, br, w, b, rw, rg, N, C, eps, d);
  x[i] = x0 - h;
  double lm = fused_loss(inp, br, w, b, rw, rg, N, C, eps, d);
  x[i] = x0;
  return (lp - lm) / (2.0 * (double)h);
}

/* The fused backward (reference and device, accumulate = 1 from rg) against central differences
 * in inp, branch, weight and bias. */
static void fused_fd_case(cf_context *ctx, test_rng *r, int N, int C, float p) {
  const float eps = 1e-5f;
  size_t NC = (size_t)N * C;
  char what[160];
  cf_dropout d = {p, 1234u, 5u, 17u, 0};
  float *inp = test_falloc(NC), *br = test_falloc(NC), *w = test_falloc(C), *b = test_falloc(C), *rw = test_falloc(NC),
        *rg = test_falloc(NC);
  test_fill_uniform(r, inp, NC, -2, 2);
  test_fill_uniform(r, br, NC, -1, 1);
  test_fill_uniform(r, w, C, -1.5f, 1.5f);
  test_fill_uniform(r, b, C, -1, 1);
  test_fill_uniform(r, rw, NC, -1, 1);
  test_fill_uniform(r, rg, NC, -1, 1);
  double *fdi = test_dalloc(NC), *fdb = test_dalloc(NC), *fdw = test_dalloc(C), *fdbias = test_dalloc(C);
  for (size_t i = 0; i < NC; i++) fdi[i] = fused_central(inp, i, inp, br, w, b, rw, rg, N, C, eps, d);
  for (size_t i = 0; i < NC; i++) fdb[i] = fused_central(br, i, inp, br, w, b, rw, rg, N, C, eps, d);
  for (int c = 0; c < C; c++) fdw[c] = fused_central(w, c, inp, br, w, b, rw, rg, N, C, eps, d);
  for (int c = 0; c < C; c++) fdbias[c] = fused_central(b, c, inp, br, w, b, rw, rg, N, C, eps, d);

  /* reference backward from its own res and statistics, rounded to float as its signature takes */
  double *out = test_dalloc(NC), *res = test_dalloc(NC), *m = test_dalloc(N), *rs = test_dalloc(N);
  double *gi = test_dalloc(NC), *gb = test_dalloc(NC), *gw = test_dalloc(C), *gbias = test_dalloc(C);
  float *resf = test_falloc(NC), *mf = test_falloc(N), *rf = test_falloc(N);
  ref_residual_dropout_layernorm_forward(out, m, rs, res, inp, br, w, b, N, C, eps, d);
  for (size_t i = 0; i < NC; i++) { resf[i] = (float)res[i]; gi[i] = rg[i]; }
  for (int n = 0; n < N; n++) { mf[n] = (float)m[n]; rf[n] = (float)rs[n]; }
  ref_residual_dropout_layernorm_backward(gi, gb, gw, gbias, rw, resf, w, mf, rf, N, C, d);
  float *f = test_falloc(NC);
  struct { const char *name; const double *got, *want; size_t n; } checks[] = {
      {"dinp", gi, fdi, NC}, {"dbranch", gb, fdb, NC}, {"dweight", gw, fdw, (size_t)C}, {"dbias", gbias, fdbias, (size_t)C}};
  for (int k = 0; k < 4; k++) {
    for (size_t i = 0; i < checks[k].n; i++) f[i] = (float)checks[k].got[i];
    snprintf(what, sizeof what, "ref_residual_dropout_layernorm_backward %s vs central differences N=%d C=%d p=%g",
             checks[k].name, N, C, (double)p);
    test_compare(what, f, checks[k].want, checks[k].n, 1e-6, 1e-5);
  }

  /* the device, end to end */
  cf_mem d_inp = test_tensor(ctx, inp, NC, 1), d_br = test_tensor(ctx, br, NC, 2), d_w = test_tensor(ctx, w, C, 0),
         d_b = test_tensor(ctx, b, C, 3), d_rw = test_tensor(ctx, rw, NC, 0);
  cf_mem d_out = test_tensor(ctx, NULL, NC, 0), d_res = test_tensor(ctx, NULL, NC, 1), d_m = test_tensor(ctx, NULL, N, 0),
         d_r = test_tensor(ctx, NULL, N, 0);
  cf_mem d_gi = test_tensor(ctx, rg, NC, 2), d_gb = test_tensor(ctx, NULL, NC, 0), d_gw = test_tensor(ctx, NULL, C, 0),
         d_gbias = test_tensor(ctx, NULL, C, 0);
  TEST_OK(cf_fill(ctx, d_gw, 0, C));
  TEST_OK(cf_fill(ctx, d_gbias, 0, C));
  TEST_OK(cf_residual_dropout_layernorm_forward(ctx, d_out, d_m, d_r, d_res, d_inp, d_br, d_w, d_b, N, C, eps, d));
  TEST_OK(cf_residual_dropout_layernorm_backward(ctx, d_gi, d_gb, d_gw, d_gbias, d_rw, d_res, d_w, d_m, d_r, N, C, 1, d));
  cf_mem dev[4] = {d_gi, d_gb, d_gw, d_gbias};
  for (int k = 0; k < 4; k++) {
    float *got = test_read(ctx, dev[k], checks[k].n);
    snprintf(what, sizeof what, "device residual_dropout_layernorm_backward %s vs central differences N=%d C=%d p=%g",
             checks[k].name, N, C, (double)p);
    test_compare(what, got, checks[k].want, checks[k].n, 1e-5, 1e-4);
    free(got);
  }

  test_free_tensors();
  free(inp); free(br); free(w); free(b); free(rw); free(rg); free(fdi); free(fdb); free(fdw); free(fdbias);
  free(out); free(res); free(m); free(rs); free(gi); free(gb); free(gw); free(gbias); free(resf); free(mf); free(rf);
  free(f);
}

/* A second context on the same device that runs the work-group-per-row kernels (the GPU shapes,
 * CLFORMER_KERNEL_SHAPES=gpu), so that a CPU device checks them too; NULL when the first context
 * already has them. */
static cf_context *group_path_context(const cf_context *first) {
  if (!cf_context_cpu_shapes(first)) return NULL;
  setenv("CLFORMER_KERNEL_SHAPES", "gpu", 1);
  cf_context *g = test_context();
  unsetenv("CLFORMER_KERNEL_SHAPES");
  return g;
}

static void bad_arguments(cf_context *ctx) {
  cf_mem z = test_tensor(ctx, NULL, 16, 0);
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  TEST_ASSERT(cf_layernorm_forward(ctx, z, z, z, z, z, z, 2, 0, 1e-5f) == CF_ERR_INVALID_ARG, "C = 0 accepted");
  TEST_ASSERT(cf_layernorm_forward(ctx, z, z, z, z, z, z, -1, 4, 1e-5f) == CF_ERR_INVALID_ARG, "N < 0 accepted");
  TEST_ASSERT(cf_layernorm_forward(ctx, z, z, z, z, z, z, 2, 4, 0.0f) == CF_ERR_INVALID_ARG, "eps = 0 accepted");
  TEST_ASSERT(cf_layernorm_backward(ctx, z, z, z, z, z, z, z, z, 2, 4, 2) == CF_ERR_INVALID_ARG,
              "accumulate = 2 accepted");
  cf_dropout d = {0.1f, 1, 2, 3, 0}, bad_p = {1.0f, 1, 2, 3, 0};
  TEST_ASSERT(cf_residual_dropout_layernorm_forward(ctx, z, z, z, z, z, z, z, z, 2, 0, 1e-5f, d) == CF_ERR_INVALID_ARG,
              "fused: C = 0 accepted");
  TEST_ASSERT(cf_residual_dropout_layernorm_forward(ctx, z, z, z, z, z, z, z, z, 2, 4, 0.0f, d) == CF_ERR_INVALID_ARG,
              "fused: eps = 0 accepted");
  TEST_ASSERT(cf_residual_dropout_layernorm_forward(ctx, z, z, z, z, z, z, z, z, 2, 4, 1e-5f, bad_p) == CF_ERR_INVALID_ARG,
              "fused: p = 1 accepted");
  TEST_ASSERT(cf_residual_dropout_layernorm_forward(ctx, z, z, z, z, z, z, z, z, 65536, 65536, 1e-5f, d) == CF_ERR_INVALID_ARG,
              "fused: N*C beyond 2^31 - 1 accepted");
  TEST_ASSERT(cf_residual_dropout_layernorm_backward(ctx, z, z, z, z, z, z, z, z, z, 2, 4, 2, d) == CF_ERR_INVALID_ARG,
              "fused: accumulate = 2 accepted");
  TEST_ASSERT(cf_residual_dropout_layernorm_backward(ctx, z, z, z, z, z, z, z, z, z, 2, 4, 0, bad_p) == CF_ERR_INVALID_ARG,
              "fused: p = 1 accepted in backward");
  cf_set_verbosity(v);
  cf_clear_error();
  /* N = 0 is a no-op, not an error */
  TEST_ASSERT(cf_residual_dropout_layernorm_forward(ctx, z, z, z, z, z, z, z, z, 0, 4, 1e-5f, d) == CF_OK, "fused: N = 0 rejected");
  TEST_ASSERT(cf_residual_dropout_layernorm_backward(ctx, z, z, z, z, z, z, z, z, z, 0, 4, 0, d) == CF_OK, "fused: N = 0 rejected");
  TEST_ASSERT(cf_layernorm_forward(ctx, z, z, z, z, z, z, 0, 4, 1e-5f) == CF_OK, "N = 0 rejected");
  TEST_ASSERT(cf_layernorm_backward(ctx, z, z, z, z, z, z, z, z, 0, 4, 0) == CF_OK, "N = 0 rejected");
  test_free_tensors();
}

int main(void) {
  cf_context *ctx = test_context();
  test_rng r = test_rng_seed(20240611);
  static const int cases[][2] = {{1, 1}, {3, 1}, {1, 7}, {4, 33}, {5, 300}, {33, 257}, {7, 1000}, {4096, 512}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(ctx, &r, cases[k][0], cases[k][1]);
  fd_case(ctx, &r, 3, 6);
  fd_case(ctx, &r, 2, 1);
  fd_case(ctx, &r, 2, 11);
  static const int fused[][2] = {{1, 1}, {3, 1}, {1, 7}, {5, 33}, {9, 70}, {33, 257}, {7, 1000}, {4096, 512}};
  for (size_t k = 0; k < sizeof fused / sizeof fused[0]; k++) {
    fused_case(ctx, &r, fused[k][0], fused[k][1], 0.0f);
    fused_case(ctx, &r, fused[k][0], fused[k][1], 0.1f);
  }
  fused_fd_case(ctx, &r, 3, 6, 0.0f);
  fused_fd_case(ctx, &r, 3, 6, 0.25f);
  fused_fd_case(ctx, &r, 2, 1, 0.25f);
  fused_fd_case(ctx, &r, 3, 13, 0.1f);
  bad_arguments(ctx);

  cf_context *g = group_path_context(ctx);
  cf_context_free(ctx);
  if (g) {
    printf("the work-group-per-row kernels (CF_DEVICE_IS_CPU 0) on this CPU:\n");
    static const int small[][2] = {{1, 1}, {3, 1}, {4, 33}, {5, 300}, {33, 257}};
    for (size_t k = 0; k < sizeof small / sizeof small[0]; k++) {
      run_case(g, &r, small[k][0], small[k][1]);
      fused_case(g, &r, small[k][0], small[k][1], 0.0f);
      fused_case(g, &r, small[k][0], small[k][1], 0.1f);
    }
    fused_fd_case(g, &r, 3, 13, 0.1f);
    cf_context_free(g);
  }
  return test_finish("test_layernorm");
}
