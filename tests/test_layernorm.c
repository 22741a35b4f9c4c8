/* LayerNorm forward and backward against the double reference, the reference backward against
 * central differences, bit-identical reruns, accumulate/alias modes, bad arguments. */
#include <math.h>
#include <string.h>
#include "clformer/layernorm.h"
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

static void bad_arguments(cf_context *ctx) {
  cf_mem z = test_tensor(ctx, NULL, 16, 0);
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  TEST_ASSERT(cf_layernorm_forward(ctx, z, z, z, z, z, z, 2, 0, 1e-5f) == CF_ERR_INVALID_ARG, "C = 0 accepted");
  TEST_ASSERT(cf_layernorm_forward(ctx, z, z, z, z, z, z, -1, 4, 1e-5f) == CF_ERR_INVALID_ARG, "N < 0 accepted");
  TEST_ASSERT(cf_layernorm_forward(ctx, z, z, z, z, z, z, 2, 4, 0.0f) == CF_ERR_INVALID_ARG, "eps = 0 accepted");
  TEST_ASSERT(cf_layernorm_backward(ctx, z, z, z, z, z, z, z, z, 2, 4, 2) == CF_ERR_INVALID_ARG,
              "accumulate = 2 accepted");
  cf_set_verbosity(v);
  cf_clear_error();
  /* N = 0 is a no-op, not an error */
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
  bad_arguments(ctx);
  cf_context_free(ctx);
  return test_finish("test_layernorm");
}
