/* GEMM through CLBlast against the double reference: all transpose forms, odd sizes, offsets,
 * alpha/beta, and the strided-batched form. Relative error in the Frobenius norm below 1e-5. */
#include <math.h>
#include <string.h>
#include "testutil.h"

static double rel_fro(const float *out, const double *ref, size_t n, int *nonfinite) {
  double num = 0, den = 0;
  *nonfinite = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(out[i])) (*nonfinite)++;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return sqrt(num / (den > 0 ? den : 1));
}

/* C (batch x M x N, row stride ldc, matrix stride sc) = alpha op(A) op(B) + beta C */
static void run_case(cf_context *ctx, test_rng *r, int ta, int tb, size_t M, size_t N, size_t K, size_t batch,
                     float alpha, float beta) {
  size_t arows = ta ? K : M, acols = ta ? M : K, brows = tb ? N : K, bcols = tb ? K : N;
  size_t lda = acols + 3, ldb = bcols + 1, ldc = N + 2;  /* padded rows catch stride mix-ups */
  size_t sa = arows * lda + 5, sb = brows * ldb + 7, sc = M * ldc + 3;
  size_t offa = 11, offb = 13, offc = 17;
  size_t na = offa + batch * sa, nb = offb + batch * sb, nc = offc + batch * sc;
  float *A = malloc(na * 4), *B = malloc(nb * 4), *C0 = malloc(nc * 4);
  test_fill_uniform(r, A, na, -1, 1);
  test_fill_uniform(r, B, nb, -1, 1);
  test_fill_uniform(r, C0, nc, -1, 1);
  double *ref = malloc(nc * sizeof *ref);
  for (size_t i = 0; i < nc; i++) ref[i] = C0[i];
  for (size_t bi = 0; bi < batch; bi++)
    ref_gemm(ta, tb, M, N, K, alpha, A + offa + bi * sa, lda, B + offb + bi * sb, ldb, beta, ref + offc + bi * sc, ldc);
  cl_mem dA = test_buffer(ctx, A, na), dB = test_buffer(ctx, B, nb), dC = test_buffer(ctx, C0, nc);
  if (beta == 0) {  /* with beta 0 the old C must not matter: poison the matrices, keep the gaps */
    for (size_t bi = 0; bi < batch; bi++)
      for (size_t i = 0; i < M; i++) test_poison(ctx, cf_at(dC, offc + bi * sc + i * ldc), N);
  }
  if (batch == 1)
    TEST_OK(cf_gemm(ctx, ta, tb, M, N, K, alpha, cf_at(dA, offa), lda, cf_at(dB, offb), ldb, beta, cf_at(dC, offc), ldc));
  else
    TEST_OK(cf_gemm_batched(ctx, ta, tb, M, N, K, alpha, cf_at(dA, offa), lda, sa, cf_at(dB, offb), ldb, sb, beta,
                            cf_at(dC, offc), ldc, sc, batch));
  float *C = test_read(ctx, cf_at(dC, 0), nc);
  int nonfinite;
  double err = rel_fro(C, ref, nc, &nonfinite);
  char what[128];
  snprintf(what, sizeof what, "%s%c%c M=%zu N=%zu K=%zu batch=%zu alpha=%g beta=%g", batch > 1 ? "batched " : "",
           ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, batch, alpha, beta);
  /* elements outside the matrices (the padding) must be untouched */
  int untouched = 1;
  for (size_t i = 0; i < nc; i++) {
    size_t rel = i < offc ? (size_t)-1 : (i - offc) % sc, bi = i < offc ? batch : (i - offc) / sc;
    int inside = bi < batch && rel < M * ldc && rel % ldc < N;
    if (!inside && C[i] != C0[i]) untouched = 0;
  }
  TEST_ASSERT(nonfinite == 0 && err < 1e-5 && untouched, "%s: relative error %.3g, %d non-finite, padding %s", what,
              err, nonfinite, untouched ? "intact" : "overwritten");
  if (nonfinite == 0 && err < 1e-5 && untouched) printf("ok   %s: relative error %.3g\n", what, err);
  free(A); free(B); free(C0); free(C); free(ref);
  cf_buffer_free(dA); cf_buffer_free(dB); cf_buffer_free(dC);
}

int main(void) {
  cf_context *ctx = test_context();
  test_rng r = test_rng_seed(42);
  const size_t shapes[][3] = {{1, 1, 1}, {17, 33, 65}, {128, 256, 64}, {5, 1, 300}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        run_case(ctx, &r, ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], 1, 1.0f, 0.0f);
  run_case(ctx, &r, 0, 1, 17, 33, 65, 1, 0.5f, 1.0f);
  run_case(ctx, &r, 1, 0, 31, 9, 40, 1, -2.0f, 0.25f);
  /* batched: attention-like shapes (T x HS by HS x T, and T x T by T x HS) */
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) run_case(ctx, &r, ta, tb, 7, 9, 11, 6, 1.0f, 0.0f);
  run_case(ctx, &r, 0, 1, 64, 64, 16, 12, 0.25f, 0.0f);
  run_case(ctx, &r, 0, 0, 33, 16, 33, 5, 1.0f, 1.0f);
  cf_context_free(ctx);
  return test_finish("test_gemm");
}
