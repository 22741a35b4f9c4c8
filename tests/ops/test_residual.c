/* Residual adds (plain and fused with dropout), their backward, and the helpers scale, add and
 * copy: against the double references, central differences, aliasing as documented,
 * bit-identical reruns, bad arguments. */
#include <limits.h>
#include <math.h>
#include <string.h>
#include "clformer/ops.h"
#include "clformer/ref.h"
#include "testutil.h"

/* out = a + b, then out = res + dropout(branch) for p = 0 and p > 0, each also in place. */
static void residual_case(cf_context *ctx, test_rng *r, size_t n, float p) {
  char what[128];
  cf_dropout d = {p, 555, 3, (uint32_t)n, 0};
  float *a = test_falloc(n), *b = test_falloc(n);
  test_fill_uniform(r, a, n, -3, 3);
  test_fill_uniform(r, b, n, -3, 3);
  double *ref = test_dalloc(n);
  ref_residual_dropout_forward(ref, a, b, n, d);
  cf_mem d_a = test_tensor(ctx, a, n, 1), d_b = test_tensor(ctx, b, n, 2 + n % 3), d_out = test_tensor(ctx, NULL, n, 3);

  TEST_OK(cf_residual_dropout_forward(ctx, d_out, d_a, d_b, n, d));
  float *out = test_read(ctx, d_out, n);
  snprintf(what, sizeof what, "residual_dropout_forward p=%g n=%zu", (double)p, n);
  test_compare(what, out, ref, n, 1e-5, 1e-4);
  test_poison(ctx, d_out, n);
  TEST_OK(cf_residual_dropout_forward(ctx, d_out, d_a, d_b, n, d));
  test_check_same(what, ctx, d_out, out, n);
  /* out aliasing res, then branch */
  TEST_OK(cf_residual_dropout_forward(ctx, d_a, d_a, d_b, n, d));
  snprintf(what, sizeof what, "residual_dropout_forward p=%g n=%zu out aliasing res", (double)p, n);
  test_check_same(what, ctx, d_a, out, n);
  test_upload(ctx, d_a, a, n);
  TEST_OK(cf_residual_dropout_forward(ctx, d_b, d_a, d_b, n, d));
  snprintf(what, sizeof what, "residual_dropout_forward p=%g n=%zu out aliasing branch", (double)p, n);
  test_check_same(what, ctx, d_b, out, n);
  test_upload(ctx, d_b, b, n);

  if (p == 0.0f) {  /* the plain residual and add_inplace give the same sums */
    test_poison(ctx, d_out, n);
    TEST_OK(cf_residual_forward(ctx, d_out, d_a, d_b, n));
    snprintf(what, sizeof what, "residual_forward n=%zu", n);
    float *o = test_read(ctx, d_out, n);
    test_compare(what, o, ref, n, 1e-5, 1e-4);
    free(o);
    TEST_OK(cf_residual_forward(ctx, d_b, d_a, d_b, n));
    snprintf(what, sizeof what, "residual_forward n=%zu out aliasing inp2", n);
    test_check_same(what, ctx, d_b, out, n);
    test_upload(ctx, d_b, b, n);
    TEST_OK(cf_add_inplace(ctx, d_a, d_b, n));
    snprintf(what, sizeof what, "add_inplace n=%zu", n);
    o = test_read(ctx, d_a, n);
    test_compare(what, o, ref, n, 1e-5, 1e-4);
    free(o);
  }
  free(a); free(b); free(ref); free(out);
  test_free_tensors();
}

/* dbranch = dropout(dout): a kernel for p > 0, a copy for p == 0, nothing when it is dout. */
static void residual_backward_case(cf_context *ctx, test_rng *r, size_t n, float p) {
  char what[128];
  cf_dropout d = {p, 8, 1, 2, 0};
  float *g = test_falloc(n);
  test_fill_uniform(r, g, n, -1, 1);
  double *ref = test_dalloc(n);
  ref_dropout_backward(ref, g, n, d);
  cf_mem d_g = test_tensor(ctx, g, n, 2), d_db = test_tensor(ctx, NULL, n, 1);
  TEST_OK(cf_residual_dropout_backward(ctx, d_db, d_g, n, d));
  float *db = test_read(ctx, d_db, n);
  snprintf(what, sizeof what, "residual_dropout_backward p=%g n=%zu", (double)p, n);
  test_compare(what, db, ref, n, 1e-5, 1e-4);
  if (p == 0.0f) TEST_ASSERT(memcmp(db, g, n * sizeof *g) == 0, "%s: not an exact copy", what);
  test_poison(ctx, d_db, n);
  TEST_OK(cf_residual_dropout_backward(ctx, d_db, d_g, n, d));
  test_check_same(what, ctx, d_db, db, n);
  /* dbranch aliasing dout */
  TEST_OK(cf_residual_dropout_backward(ctx, d_g, d_g, n, d));
  snprintf(what, sizeof what, "residual_dropout_backward p=%g n=%zu dbranch aliasing dout", (double)p, n);
  test_check_same(what, ctx, d_g, db, n);
  free(g); free(ref); free(db);
  test_free_tensors();
}

/* loss = sum((res + dropout(branch)) * rw): dres = rw (callers reuse dout), dbranch from the
 * backward, both against central differences (h = 2^-17, exact in float for |x| < 128). */
static void finite_differences(cf_context *ctx, test_rng *r) {
  enum { n = 29 };
  const cf_dropout d = {0.35f, 12, 34, 56, 0};
  const float h = 0x1p-17f;
  float res[n], br[n], rw[n];
  test_fill_uniform(r, res, n, -2, 2);
  test_fill_uniform(r, br, n, -2, 2);
  test_fill_uniform(r, rw, n, -1, 1);
  double out[n], fdr[n], fdb[n], g[n];
  for (int t = 0; t < 2; t++) {
    float *v = t ? br : res;
    double *fd = t ? fdb : fdr;
    for (int i = 0; i < n; i++) {
      double l[2];
      float v0 = v[i];
      for (int s = 0; s < 2; s++) {
        v[i] = s ? v0 - h : v0 + h;
        ref_residual_dropout_forward(out, res, br, n, d);
        l[s] = 0;
        for (int j = 0; j < n; j++) l[s] += out[j] * rw[j];
      }
      v[i] = v0;
      fd[i] = (l[0] - l[1]) / (2.0 * (double)h);
    }
  }
  test_compare("dres = dout vs central differences", rw, fdr, n, 1e-6, 1e-5);
  ref_dropout_backward(g, rw, n, d);
  float gf[n];
  for (int i = 0; i < n; i++) gf[i] = (float)g[i];
  test_compare("ref dbranch vs central differences", gf, fdb, n, 1e-6, 1e-5);
  cf_mem d_rw = test_tensor(ctx, rw, n, 1), d_db = test_tensor(ctx, NULL, n, 0);
  TEST_OK(cf_residual_dropout_backward(ctx, d_db, d_rw, n, d));
  float *db = test_read(ctx, d_db, n);
  test_compare("device residual_dropout_backward vs central differences", db, fdb, n, 1e-5, 1e-4);
  free(db);
  test_free_tensors();
}

static void helpers_case(cf_context *ctx, test_rng *r, size_t n) {
  char what[128];
  float *x = test_falloc(n), *y = test_falloc(n);
  test_fill_uniform(r, x, n, -3, 3);
  test_fill_uniform(r, y, n, -3, 3);
  double *ref = test_dalloc(n);
  cf_mem d_x = test_tensor(ctx, x, n, 3), d_y = test_tensor(ctx, y, n, 0), d_c = test_tensor(ctx, NULL, n, 2);

  const float alpha = -0.3f;
  for (size_t i = 0; i < n; i++) ref[i] = (double)alpha * x[i];
  TEST_OK(cf_scale(ctx, d_x, n, alpha));
  float *s = test_read(ctx, d_x, n);
  snprintf(what, sizeof what, "scale n=%zu", n);
  test_compare(what, s, ref, n, 1e-5, 1e-4);
  test_upload(ctx, d_x, x, n);
  TEST_OK(cf_scale(ctx, d_x, n, alpha));
  test_check_same(what, ctx, d_x, s, n);

  test_upload(ctx, d_x, x, n);
  ref_residual_forward(ref, y, x, n);
  TEST_OK(cf_add_inplace(ctx, d_y, d_x, n));
  float *a = test_read(ctx, d_y, n);
  snprintf(what, sizeof what, "add_inplace n=%zu", n);
  test_compare(what, a, ref, n, 1e-5, 1e-4);
  test_upload(ctx, d_y, y, n);
  TEST_OK(cf_add_inplace(ctx, d_y, d_x, n));
  test_check_same(what, ctx, d_y, a, n);

  TEST_OK(cf_copy(ctx, d_c, d_x, n));
  snprintf(what, sizeof what, "copy n=%zu", n);
  test_check_same(what, ctx, d_c, x, n);
  TEST_OK(cf_copy(ctx, d_c, d_c, n));  /* onto itself: a no-op, not CL_MEM_COPY_OVERLAP */
  test_check_same(what, ctx, d_c, x, n);
  printf("ok   copy n=%zu (exact)\n", n);
  free(x); free(y); free(ref); free(s); free(a);
  test_free_tensors();
}

static void bad_arguments(cf_context *ctx) {
  cf_mem z = test_tensor(ctx, NULL, 16, 0);
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  cf_dropout bad = {1.0f, 1, 2, 3, 0}, nan = {NAN, 1, 2, 3, 0};
  TEST_ASSERT(cf_residual_dropout_forward(ctx, z, z, z, 16, bad) == CF_ERR_INVALID_ARG, "p = 1 accepted");
  TEST_ASSERT(cf_residual_dropout_forward(ctx, z, z, z, 16, nan) == CF_ERR_INVALID_ARG, "p = NaN accepted");
  TEST_ASSERT(cf_residual_dropout_backward(ctx, z, z, 16, bad) == CF_ERR_INVALID_ARG, "p = 1 accepted");
  TEST_ASSERT(cf_residual_forward(ctx, z, z, z, (size_t)INT_MAX + 1) == CF_ERR_INVALID_ARG, "n > INT_MAX accepted");
  TEST_ASSERT(cf_scale(ctx, z, (size_t)INT_MAX + 1, 2.0f) == CF_ERR_INVALID_ARG, "n > INT_MAX accepted");
  cf_set_verbosity(v);
  cf_clear_error();
  TEST_ASSERT(cf_copy(ctx, z, z, 0) == CF_OK, "n = 0 copy rejected");
  TEST_ASSERT(cf_residual_forward(ctx, z, z, z, 0) == CF_OK, "n = 0 rejected");
  test_free_tensors();
}

int main(void) {
  cf_context *ctx = test_context();
  test_rng r = test_rng_seed(99);
  static const size_t sizes[] = {1, 3, 6, 1001, 4096 * 512};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    residual_case(ctx, &r, sizes[s], 0.0f);
    residual_case(ctx, &r, sizes[s], 0.2f);
    residual_backward_case(ctx, &r, sizes[s], 0.0f);
    residual_backward_case(ctx, &r, sizes[s], 0.2f);
    helpers_case(ctx, &r, sizes[s]);
  }
  finite_differences(ctx, &r);
  bad_arguments(ctx);
  cf_context_free(ctx);
  return test_finish("test_residual");
}
