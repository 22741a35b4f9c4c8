/* GEMM against the double reference, for both implementations (CLBlast and our own kernels):
 * all transpose forms, sizes at the edges of our 6 x 64 register tiles, K past 1000 (several
 * tile groups), offsets, padded rows and matrices that must stay untouched, alpha/beta (beta 0
 * over a NaN-poisoned C), the strided-batched form with odd strides, the forward layer's fused
 * bias and activation epilogue, nested batches (heads read in place), the choice of
 * implementation by $CLFORMER_GEMM, run-to-run bit equality, and (our kernels, CPU devices) no
 * read or write past either end of tightly sized operands. Relative error in the Frobenius norm
 * below 1e-5. Also the tuning file: read and written back byte for byte, malformed lines reported
 * by file and line and skipped. And the loop budget: Mesa's llvmpipe (rusticl) silently stops a
 * work-item's loops after 65535 trips in all, so our kernels, whose items loop over K and several
 * tiles, split their work under the budget the device shows (checked here under a pretended one),
 * and a product no split fits is refused by our kernels and run by CLBlast. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "base/base.h"  /* cf_read_file */
#include "gemm/loop_budget.h"
#include "gemm/tuning_file.h"
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

/* A, B and C0 of na, nb and nc floats, uniform in [-1, 1]; ref a double copy of C0 (the reference's
 * starting C). */
static void random_operands(test_rng *r, size_t na, size_t nb, size_t nc, float **A, float **B, float **C0,
                            double **ref) {
  *A = malloc(na * 4);
  *B = malloc(nb * 4);
  *C0 = malloc(nc * 4);
  *ref = malloc(nc * sizeof **ref);
  test_fill_uniform(r, *A, na, -1, 1);
  test_fill_uniform(r, *B, nb, -1, 1);
  test_fill_uniform(r, *C0, nc, -1, 1);
  for (size_t i = 0; i < nc; i++) (*ref)[i] = (*C0)[i];
}

/* C (batch x M x N, row stride ldc, matrix stride sc) = alpha op(A) op(B) + beta C */
static int ncases;
static int tight;  /* no offsets or odd padding: C's rows 64-byte aligned (ldc a multiple of 16 floats) */
static size_t lda_set, ldb_set;  /* nonzero: A's, B's row stride */

static void run_case(cf_context *ctx, cf_gemm_impl impl, test_rng *r, int ta, int tb, size_t M, size_t N, size_t K,
                     size_t batch,
                     float alpha, float beta) {
  size_t arows = ta ? K : M, acols = ta ? M : K, brows = tb ? N : K, bcols = tb ? K : N;
  size_t lda = acols + 3, ldb = bcols + 1, ldc = N + 2;  /* padded rows catch stride mix-ups */
  size_t sa = arows * lda + 5, sb = brows * ldb + 7, sc = M * ldc + 3;
  size_t offa = 11, offb = 13, offc = 17;
  if (tight) {
    lda = acols;
    ldb = bcols;
    ldc = (N + 15) / 16 * 16;
    sa = arows * lda;
    sb = brows * ldb;
    sc = M * ldc;
    offa = offb = offc = 0;
  }
  if (lda_set) {
    lda = lda_set;
    sa = arows * lda + (tight ? 0 : 5);
  }
  if (ldb_set) {
    ldb = ldb_set;
    sb = brows * ldb + (tight ? 0 : 7);
  }
  size_t na = offa + batch * sa, nb = offb + batch * sb, nc = offc + batch * sc;
  float *A, *B, *C0;
  double *ref;
  random_operands(r, na, nb, nc, &A, &B, &C0, &ref);
  for (size_t bi = 0; bi < batch; bi++)
    ref_gemm(ta, tb, M, N, K, alpha, A + offa + bi * sa, lda, B + offb + bi * sb, ldb, beta, ref + offc + bi * sc, ldc);
  cl_mem dA = test_buffer(ctx, A, na), dB = test_buffer(ctx, B, nb), dC = test_buffer(ctx, C0, nc);
  if (beta == 0) {  /* with beta 0 the old C must not matter: poison the matrices, keep the gaps */
    for (size_t bi = 0; bi < batch; bi++)
      for (size_t i = 0; i < M; i++) test_poison(ctx, cf_at(dC, offc + bi * sc + i * ldc), N);
  }
  if (batch == 1)
    TEST_OK(cf_gemm_with(ctx, impl, ta, tb, M, N, K, alpha, cf_at(dA, offa), lda, cf_at(dB, offb), ldb, beta,
                         cf_at(dC, offc), ldc));
  else
    TEST_OK(cf_gemm_batched_with(ctx, impl, ta, tb, M, N, K, alpha, cf_at(dA, offa), lda, sa, cf_at(dB, offb), ldb,
                                 sb, beta, cf_at(dC, offc), ldc, sc, batch));
  float *C = test_read(ctx, cf_at(dC, 0), nc);
  int nonfinite;
  double err = rel_fro(C, ref, nc, &nonfinite);
  char what[128];
  ncases++;
  snprintf(what, sizeof what, "%s %s%c%c M=%zu N=%zu K=%zu batch=%zu alpha=%g beta=%g", cf_gemm_impl_name(impl),
           batch > 1 ? "batched " : "",
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
  if (nonfinite == 0 && err < 1e-5 && untouched && (M * N * K * batch > 100000 || getenv("TEST_VERBOSE")))
    printf("ok   %s: relative error %.3g\n", what, err);
  free(A); free(B); free(C0); free(C); free(ref);
  cf_buffer_free(dA); cf_buffer_free(dB); cf_buffer_free(dC);
}

/* A nested batch (cf_gemm_batched_nested) as attention uses it: `inner` heads side by side in each
 * row of a wider tensor, `outer` sequences one after another; C's gaps (a padded row end, a gap
 * between sequences) must stay untouched, its matrices poisoned first when beta is 0. */
static void nested_case(cf_context *ctx, cf_gemm_impl impl, test_rng *r, int ta, int tb, size_t M, size_t N, size_t K,
                        size_t inner, size_t outer, float beta) {
  size_t arows = ta ? K : M, acols = ta ? M : K, brows = tb ? N : K, bcols = tb ? K : N;
  size_t lda = inner * acols + 1, ldb = inner * bcols + 3, ldc = inner * N + 2;
  size_t oa = arows * lda + 5, ob = brows * ldb + 7, oc = M * ldc + 3;
  size_t na = outer * oa, nb = outer * ob, nc = outer * oc;
  float *A, *B, *C0;
  double *ref;
  random_operands(r, na, nb, nc, &A, &B, &C0, &ref);
  for (size_t o = 0; o < outer; o++)
    for (size_t h = 0; h < inner; h++)
      ref_gemm(ta, tb, M, N, K, 1.0f, A + o * oa + h * acols, lda, B + o * ob + h * bcols, ldb, beta,
               ref + o * oc + h * N, ldc);
  cl_mem dA = test_buffer(ctx, A, na), dB = test_buffer(ctx, B, nb), dC = test_buffer(ctx, C0, nc);
  if (beta == 0)
    for (size_t o = 0; o < outer; o++)
      for (size_t i = 0; i < M; i++) test_poison(ctx, cf_at(dC, o * oc + i * ldc), inner * N);
  TEST_OK(cf_gemm_batched_nested_with(ctx, impl, ta, tb, M, N, K, 1.0f, cf_at(dA, 0), lda, acols, oa, cf_at(dB, 0), ldb,
                                      bcols, ob, beta, cf_at(dC, 0), ldc, N, oc, inner, outer, CF_GEMM_FULL));
  float *C = test_read(ctx, cf_at(dC, 0), nc);
  int nonfinite, untouched = 1;
  double err = rel_fro(C, ref, nc, &nonfinite);
  for (size_t i = 0; i < nc; i++) {
    size_t rel = i % oc;
    int inside = rel < M * ldc && rel % ldc < inner * N;
    if (!inside && C[i] != C0[i]) untouched = 0;
  }
  ncases++;
  TEST_ASSERT(nonfinite == 0 && err < 1e-5 && untouched,
              "%s nested %c%c M=%zu N=%zu K=%zu %zu x %zu beta %g: relative error %.3g, %d non-finite, padding %s",
              cf_gemm_impl_name(impl), ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, outer, inner, beta, err, nonfinite,
              untouched ? "intact" : "overwritten");
  free(A); free(B); free(C0); free(C); free(ref);
  cf_buffer_free(dA); cf_buffer_free(dB); cf_buffer_free(dC);
}

/* Every form, at attention's shapes and at edges (M < 6, N not a multiple of 64: the kernels that pack
 * and so run a group at a time). */
static void check_nested(cf_context *ctx, test_rng *r) {
  static const size_t shapes[][5] = {{64, 64, 64, 4, 3}, {37, 64, 37, 3, 2}, {64, 37, 64, 2, 3}, {5, 64, 9, 2, 2},
                                     {13, 70, 29, 3, 2}, {5, 64, 9, 7, 3}};
  for (int impl = CF_GEMM_CLBLAST; impl <= CF_GEMM_OWN; impl++)
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
      for (int f = 0; f < 4; f++)
        nested_case(ctx, (cf_gemm_impl)impl, r, f & 1, f >> 1, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3],
                    shapes[s][4], s % 2 ? 0.0f : 0.5f);
}

/* The causal triangles (cf_gemm_tri), batch products, against the reference. op(A) lower or upper
 * (a causal attention's probabilities, their transposes) holds zeros there; where our strip kernels
 * take the product (op(A) = A; op(A) = A^T with B read in place) they must skip them, a tile's 6
 * rows sharing one k range: the same product with NaN in the zeros 6 or more places off the
 * diagonal gives the same bits. C lower (the scores): entries j <= i as the reference, those above
 * the product or 0 (beta 0), and 0 where the kernels skip a tile (its 64 columns all 6 or more
 * past the row). lda_pad: A's rows that far apart (1024: gemm_at_rows). */
static void tri_case(cf_context *ctx, cf_gemm_impl impl, test_rng *r, int ta, int tb, size_t M, size_t N, size_t K,
                     size_t batch, cf_gemm_tri tri, size_t lda_pad) {
  size_t arows = ta ? K : M, acols = ta ? M : K, lda = lda_pad ? lda_pad : acols, ldb = tb ? K : N;
  size_t na = batch * arows * lda, nb = batch * N * K, nc = batch * M * N;
  float *A, *B, *C0;
  double *ref;
  random_operands(r, na, nb, nc, &A, &B, &C0, &ref);
  float *A_nan = malloc(na * 4);
  for (size_t x = 0; x < na; x++) {
    size_t row = x % (arows * lda) / lda, col = x % lda, i = ta ? col : row, k = ta ? row : col;
    int zero = tri == CF_GEMM_A_LOWER ? k > i : tri == CF_GEMM_A_UPPER ? k < i : 0;
    int far = tri == CF_GEMM_A_LOWER ? k >= i + 6 : tri == CF_GEMM_A_UPPER ? k + 6 <= i : 0;
    A_nan[x] = far ? NAN : zero ? 0.0f : A[x];
    if (zero) A[x] = 0.0f;
  }
  for (size_t b = 0; b < batch; b++)
    ref_gemm(ta, tb, M, N, K, 1.0f, A + b * arows * lda, lda, B + b * N * K, ldb, 0.0f, ref + b * M * N, N);
  int skips = impl == CF_GEMM_OWN && (!ta || (!tb && N % 64 == 0));
  int nan_pass = skips && tri != CF_GEMM_C_LOWER;
  float *got[2] = {NULL, NULL};
  for (int pass = 0; pass < 1 + nan_pass; pass++) {
    cl_mem dA = test_buffer(ctx, pass ? A_nan : A, na), dB = test_buffer(ctx, B, nb), dC = test_buffer(ctx, C0, nc);
    test_poison(ctx, cf_at(dC, 0), nc);
    TEST_OK(cf_gemm_batched_nested_with(ctx, impl, ta, tb, M, N, K, 1.0f, cf_at(dA, 0), lda, arows * lda, 0,
                                        cf_at(dB, 0), ldb, N * K, 0, 0.0f, cf_at(dC, 0), N, M * N, 0, batch, 1, tri));
    got[pass] = test_read(ctx, cf_at(dC, 0), nc);
    cf_buffer_free(dA); cf_buffer_free(dB); cf_buffer_free(dC);
  }
  size_t unskipped = 0, above_bad = 0;
  if (tri == CF_GEMM_C_LOWER)  /* above the diagonal: the reference's value or 0; compared as 0 after */
    for (size_t x = 0; x < nc; x++) {
      size_t i = x % (M * N) / N, j = x % N;
      if (j <= i) continue;
      if (skips && j / 64 * 64 >= i + 6 && got[0][x] != 0.0f) unskipped++;
      if (got[0][x] != 0.0f && fabs(got[0][x] - ref[x]) > 1e-4 * (1 + fabs(ref[x]))) above_bad++;
      got[0][x] = 0.0f;
      ref[x] = 0.0;
    }
  int nonfinite;
  double err = rel_fro(got[0], ref, nc, &nonfinite);
  int same = !nan_pass || memcmp(got[0], got[1], nc * 4) == 0;
  static const char *tri_names[] = {"full", "op(A) lower", "op(A) upper", "C lower"};
  ncases++;
  TEST_ASSERT(nonfinite == 0 && err < 1e-5 && same && !unskipped && !above_bad,
              "%s %c%c M=%zu N=%zu K=%zu batch %zu lda %zu, %s: relative error %.3g, %d non-finite%s; above the "
              "diagonal %zu neither the product nor 0, %zu not skipped", cf_gemm_impl_name(impl), ta ? 'T' : 'N',
              tb ? 'T' : 'N', M, N, K, batch, lda, tri_names[tri], err, nonfinite,
              same ? "" : "; with NaN in its zeros the result differs (the kernel read them)", above_bad, unskipped);
  free(A); free(A_nan); free(B); free(C0); free(ref); free(got[0]); free(got[1]);
}

static void check_tri(cf_context *ctx, test_rng *r) {
  static const size_t shapes[][5] = {{64, 64, 64, 3, 0}, {37, 64, 37, 2, 0}, {70, 64, 70, 2, 0}, {64, 64, 100, 2, 0},
                                     {100, 64, 64, 2, 0}, {800, 64, 800, 1, 0}, {70, 64, 70, 2, 1024},
                                     {13, 70, 29, 2, 0}, {200, 200, 64, 2, 0}, {130, 192, 40, 1, 1024},
                                     {130, 64, 1000, 1, 1024}, {1001, 64, 1001, 1, 1024}};
  for (int impl = CF_GEMM_CLBLAST; impl <= CF_GEMM_OWN; impl++)
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
      for (int f = 0; f < 4; f++)
        for (int t = CF_GEMM_A_LOWER; t <= CF_GEMM_C_LOWER; t++)
          tri_case(ctx, (cf_gemm_impl)impl, r, f & 1, f >> 1, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3],
                   (cf_gemm_tri)t, shapes[s][4]);
  TEST_ASSERT(cf_gemm_batched_nested(ctx, 0, 0, 1, 1, 1, 1.0f, (cf_mem){0}, 1, 1, 0, (cf_mem){0}, 1, 1, 0, 0.0f,
                                     (cf_mem){0}, 1, 1, 0, 1, 1, (cf_gemm_tri)4) == CF_ERR_INVALID_ARG,
              "an unknown cf_gemm_tri is refused");
}

/* The forward linear layer's epilogue (cf_gemm_nt_bias_act): y = x W^T + bias, act_out = act(y),
 * against the double reference, with y and act_out poisoned and their rows padded (the padding must
 * stay untouched). Ours applies both in its stores (fused 1); CLBlast computes the product alone
 * (fused 0), which the caller completes. in_place: act_out is C itself (the ReLU FFN keeps only
 * act(y)), so C must end as act(y). */
static void epilogue_case(cf_context *ctx, cf_gemm_impl impl, test_rng *r, size_t M, size_t N, size_t K, int with_bias,
                          int with_act, cf_activation act, cf_dropout drop, int in_place) {
  size_t ldc = N + 3, nc = M * ldc;
  float *x = malloc(M * K * 4), *w = malloc(N * K * 4), *bias = malloc(N * 4), *pad = malloc(nc * 4);
  test_fill_uniform(r, x, M * K, -1, 1);
  test_fill_uniform(r, w, N * K, -1, 1);
  test_fill_uniform(r, bias, N, -1, 1);
  test_fill_uniform(r, pad, nc, -1, 1);
  cl_mem dx = test_buffer(ctx, x, M * K), dw = test_buffer(ctx, w, N * K), db = test_buffer(ctx, bias, N);
  cl_mem dy = test_buffer(ctx, pad, nc), da = test_buffer(ctx, pad, nc);
  for (size_t i = 0; i < M; i++) {
    test_poison(ctx, cf_at(dy, i * ldc), N);
    test_poison(ctx, cf_at(da, i * ldc), N);
  }
  int fused = -1;
  TEST_OK(cf_gemm_nt_bias_act_with(ctx, impl, M, N, K, cf_at(dx, 0), K, cf_at(dw, 0), K, cf_at(dy, 0), ldc,
                                   with_bias ? cf_at(db, 0) : (cf_mem){0},
                                   !with_act ? (cf_mem){0} : cf_at(in_place ? dy : da, 0), act, drop, &fused));
  int want_fused = impl == CF_GEMM_OWN;
  double *yref = malloc(nc * sizeof *yref), *aref = malloc(nc * sizeof *aref);
  for (size_t i = 0; i < nc; i++) yref[i] = aref[i] = pad[i];
  ref_gemm(0, 1, M, N, K, 1.0f, x, K, w, K, 0.0f, yref, ldc);
  for (size_t i = 0; i < M; i++)
    for (size_t j = 0; j < N; j++) {
      double *y = &yref[i * ldc + j];
      if (with_bias && fused) *y += bias[j];
      if (with_act && fused)  /* the mask over the (M, ldc) output */
        aref[i * ldc + j] = ref_activation(*y, act) *
                            (cf_dropout_keep(drop, (uint32_t)(i * ldc + j)) ? cf_dropout_scale(drop) : 0.0);
    }
  float *y = test_read(ctx, cf_at(dy, 0), nc), *a = test_read(ctx, cf_at(in_place ? dy : da, 0), nc);
  int nf_y, nf_a = 0;
  double err_y = rel_fro(y, in_place && with_act && fused ? aref : yref, nc, &nf_y), err_a = 0;
  int untouched = 1;
  for (size_t i = 0; i < nc; i++) {
    int inside = i % ldc < N;
    if (!inside && (y[i] != pad[i] || a[i] != pad[i])) untouched = 0;
  }
  if (with_act && fused) err_a = rel_fro(a, aref, nc, &nf_a);
  ncases++;
  TEST_ASSERT(fused == want_fused && nf_y == 0 && nf_a == 0 && err_y < 1e-5 && err_a < 1e-5 && untouched,
              "%s epilogue M=%zu N=%zu K=%zu bias %d %s %s dropout %g%s: fused %d (want %d), y error %.3g (%d "
              "non-finite), act error %.3g (%d non-finite), padding %s", cf_gemm_impl_name(impl), M, N, K, with_bias,
              with_act ? "act" : "no act", cf_activation_name(act), (double)drop.p, in_place ? " in place" : "",
              fused, want_fused, err_y, nf_y,
              err_a, nf_a, untouched ? "intact" : "overwritten");
  free(x); free(w); free(bias); free(pad); free(yref); free(aref); free(y); free(a);
  cf_buffer_free(dx); cf_buffer_free(dw); cf_buffer_free(db); cf_buffer_free(dy); cf_buffer_free(da);
}

/* A weight gradient with its bias's (cf_gemm_tn_dbias): C = A^T B + C and dbias += A's column sums
 * against the double reference, dbias starting nonzero; fused exactly where gemm_at_strips runs
 * (ours, M >= 6, A's rows not 4 KiB multiples apart, N a multiple of 64), else dbias untouched. */
static void tn_dbias_case(cf_context *ctx, cf_gemm_impl impl, test_rng *r, size_t M, size_t N, size_t K, size_t lda) {
  float *A, *B, *C0;
  double *ref;
  random_operands(r, K * lda, K * N, M * N, &A, &B, &C0, &ref);
  float *db0 = malloc(M * 4);
  test_fill_uniform(r, db0, M, -1, 1);
  double *dref = malloc(M * sizeof *dref);
  for (size_t i = 0; i < M; i++) {
    dref[i] = db0[i];
    for (size_t k = 0; k < K; k++) dref[i] += A[k * lda + i];
  }
  ref_gemm(1, 0, M, N, K, 1.0f, A, lda, B, N, 1.0f, ref, N);
  cl_mem dA = test_buffer(ctx, A, K * lda), dB = test_buffer(ctx, B, K * N), dC = test_buffer(ctx, C0, M * N);
  cl_mem dD = test_buffer(ctx, db0, M);
  int fused = -1;
  TEST_OK(cf_gemm_tn_dbias_with(ctx, impl, M, N, K, cf_at(dA, 0), lda, cf_at(dB, 0), N, 1.0f, cf_at(dC, 0), N,
                                cf_at(dD, 0), &fused));
  size_t budget = 0;  /* a device that limits an item's loops sums the bias apart */
  TEST_OK(cf_gemm_loop_budget(ctx, &budget));
  int want = impl == CF_GEMM_OWN && M >= 6 && lda % 1024 != 0 && N % 64 == 0 && K > 0 && budget == 0;
  float *C = test_read(ctx, cf_at(dC, 0), M * N), *D = test_read(ctx, cf_at(dD, 0), M);
  int nf_c, nf_d = 0;
  double err_c = rel_fro(C, ref, M * N, &nf_c), err_d = 0;
  if (fused == 1) err_d = rel_fro(D, dref, M, &nf_d);
  int untouched = fused == 1 || memcmp(D, db0, M * 4) == 0;
  ncases++;
  TEST_ASSERT(fused == want && nf_c == 0 && nf_d == 0 && err_c < 1e-5 && err_d < 1e-5 && untouched,
              "%s tn_dbias M=%zu N=%zu K=%zu lda %zu: fused %d (want %d), C error %.3g (%d non-finite), dbias error "
              "%.3g (%d non-finite)%s", cf_gemm_impl_name(impl), M, N, K, lda, fused, want, err_c, nf_c, err_d, nf_d,
              untouched ? "" : ", dbias changed without the fused pass");
  free(A); free(B); free(C0); free(ref); free(db0); free(dref); free(C); free(D);
  cf_buffer_free(dA); cf_buffer_free(dB); cf_buffer_free(dC); cf_buffer_free(dD);
}

static void check_tn_dbias(cf_context *ctx, test_rng *r) {
  static const size_t shapes[][4] = {{256, 256, 1024, 256}, {37, 64, 50, 40}, {7, 128, 800, 7}, {768, 256, 1024, 768},
                                     {130, 64, 300, 1024}, {40, 70, 33, 40}, {5, 64, 20, 5}, {6, 64, 1, 6}};
  for (int impl = CF_GEMM_CLBLAST; impl <= CF_GEMM_OWN; impl++)
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
      tn_dbias_case(ctx, (cf_gemm_impl)impl, r, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3]);
}

static void check_epilogue(cf_context *ctx, test_rng *r) {
  static const size_t shapes[][3] = {{1, 1, 1}, {7, 65, 33}, {13, 130, 300}, {64, 1024, 256}, {37, 200, 1031},
                                     {6, 64, 16}};
  cf_dropout none = {0}, drop = {0.25f, 11u, 3u, 7u, 5u};  /* group0 odd: blocks of 64 straddle rows */
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int act = CF_ACT_RELU; act <= CF_ACT_GELU_ERF; act++) {
      cf_activation a = (cf_activation)act;
      epilogue_case(ctx, CF_GEMM_OWN, r, shapes[s][0], shapes[s][1], shapes[s][2], 1, 1, a, none, 0);
      epilogue_case(ctx, CF_GEMM_OWN, r, shapes[s][0], shapes[s][1], shapes[s][2], 1, 1, a, drop, 0);
      if (act == CF_ACT_RELU) {
        epilogue_case(ctx, CF_GEMM_OWN, r, shapes[s][0], shapes[s][1], shapes[s][2], 1, 0, a, none, 0);
        epilogue_case(ctx, CF_GEMM_OWN, r, shapes[s][0], shapes[s][1], shapes[s][2], 0, 1, a, drop, 0);
        epilogue_case(ctx, CF_GEMM_OWN, r, shapes[s][0], shapes[s][1], shapes[s][2], 1, 1, a, drop, 1);
        epilogue_case(ctx, CF_GEMM_CLBLAST, r, shapes[s][0], shapes[s][1], shapes[s][2], 1, 1, a, drop, 0);
      }
    }
  /* aligned blocks of 64 (ldc a multiple of 64 with group0 a multiple of 16: one Philox call a row's panel) */
  cf_dropout aligned = {0.25f, 11u, 3u, 7u, 16u};
  epilogue_case(ctx, CF_GEMM_OWN, r, 20, 128, 40, 1, 1, CF_ACT_RELU, aligned, 0);
  epilogue_case(ctx, CF_GEMM_OWN, r, 20, 128, 40, 1, 1, CF_ACT_RELU, aligned, 1);
}

/* The same product twice through our kernels gives the same bits. */
static void check_deterministic(cf_context *ctx, test_rng *r) {
  size_t M = 97, N = 95, K = 1031;
  float *A = malloc(M * K * 4), *B = malloc(N * K * 4);
  test_fill_uniform(r, A, M * K, -1, 1);
  test_fill_uniform(r, B, N * K, -1, 1);
  cl_mem dA = test_buffer(ctx, A, M * K), dB = test_buffer(ctx, B, N * K), dC = test_buffer(ctx, NULL, 2 * M * N);
  for (int i = 0; i < 2; i++)
    TEST_OK(cf_gemm_with(ctx, CF_GEMM_OWN, 0, 1, M, N, K, 1.0f, cf_at(dA, 0), K, cf_at(dB, 0), K, 0.0f,
                         cf_at(dC, i * M * N), N));
  float *C = test_read(ctx, cf_at(dC, 0), 2 * M * N);
  TEST_ASSERT(!memcmp(C, C + M * N, M * N * 4), "own GEMM: two runs differ");
  free(A); free(B); free(C);
  cf_buffer_free(dA); cf_buffer_free(dB); cf_buffer_free(dC);
}

/* $CLFORMER_GEMM picks the implementation; unset, auto stays auto (measured per product class,
 * test_gemm_calib), never decided by the device's type. */
static void check_choice(cf_context *ctx) {
  cf_gemm_impl got = CF_GEMM_OWN;
  unsetenv("CLFORMER_GEMM");
  TEST_OK(cf_gemm_resolve(ctx, CF_GEMM_AUTO, &got));
  TEST_ASSERT(got == CF_GEMM_AUTO, "auto resolved to %s without measuring", cf_gemm_impl_name(got));
  setenv("CLFORMER_GEMM", "clblast", 1);
  TEST_OK(cf_gemm_resolve(ctx, CF_GEMM_AUTO, &got));
  TEST_ASSERT(got == CF_GEMM_CLBLAST, "CLFORMER_GEMM=clblast chose %s", cf_gemm_impl_name(got));
  TEST_OK(cf_gemm_resolve(ctx, CF_GEMM_OWN, &got));
  TEST_ASSERT(got == CF_GEMM_OWN, "a forced implementation must win over the environment");
  setenv("CLFORMER_GEMM", "own", 1);
  TEST_OK(cf_gemm_resolve(ctx, CF_GEMM_AUTO, &got));
  TEST_ASSERT(got == CF_GEMM_OWN, "CLFORMER_GEMM=own chose %s", cf_gemm_impl_name(got));
  setenv("CLFORMER_GEMM", "fastest", 1);
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  cf_status st = cf_gemm_resolve(ctx, CF_GEMM_AUTO, &got);
  cf_set_verbosity(v);
  TEST_ASSERT(st == CF_ERR_CONFIG, "CLFORMER_GEMM=fastest gave %s", cf_status_str(st));
  unsetenv("CLFORMER_GEMM");
  /* a row stride shorter than a row is refused by both */
  cl_mem d = test_buffer(ctx, NULL, 64);
  for (int impl = CF_GEMM_CLBLAST; impl <= CF_GEMM_OWN; impl++) {
    cf_set_verbosity(-1);
    st = cf_gemm_with(ctx, (cf_gemm_impl)impl, 0, 0, 4, 4, 4, 1.0f, cf_at(d, 0), 3, cf_at(d, 16), 4, 0.0f, cf_at(d, 32), 4);
    cf_set_verbosity(v);
    TEST_ASSERT(st == CF_ERR_INVALID_ARG, "%s with lda 3 < K 4 gave %s", cf_gemm_impl_name((cf_gemm_impl)impl),
                cf_status_str(st));
  }
  cf_buffer_free(d);
}

/* Every case of the original CLBlast test, plus the edges of our tiles, for one implementation. */
static void run_all(cf_context *ctx, cf_gemm_impl impl, test_rng *r) {
  const size_t shapes[][3] = {{1, 1, 1}, {17, 33, 65}, {128, 256, 64}, {5, 1, 300}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        run_case(ctx, impl, r, ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], 1, 1.0f, 0.0f);
  run_case(ctx, impl, r, 0, 1, 17, 33, 65, 1, 0.5f, 1.0f);
  run_case(ctx, impl, r, 1, 0, 31, 9, 40, 1, -2.0f, 0.25f);
  /* batched: attention-like shapes (T x HS by HS x T, and T x T by T x HS) */
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) run_case(ctx, impl, r, ta, tb, 7, 9, 11, 6, 1.0f, 0.0f);
  run_case(ctx, impl, r, 0, 1, 64, 64, 16, 12, 0.25f, 0.0f);
  run_case(ctx, impl, r, 0, 0, 33, 16, 33, 5, 1.0f, 1.0f);

  /* edges of the 6-row, 64-column tiles (and of 12 x 32, the tiles before): every (M, N) pair, K and
   * the transposes cycling */
  const size_t edge[] = {1, 5, 6, 7, 11, 12, 13, 31, 32, 33, 63, 64, 65, 97, 129};
  const size_t ne = sizeof edge / sizeof *edge;
  for (size_t i = 0; i < ne; i++)
    for (size_t j = 0; j < ne; j++) {
      int t = (int)((i + 2 * j) % 4);
      float beta = (i + j) % 3 == 0 ? 0.5f : 0.0f;
      run_case(ctx, impl, r, t & 1, t >> 1, edge[i], edge[j], edge[(i + j) % ne], 1, (i + j) % 2 ? 1.0f : -0.75f, beta);
    }
  for (size_t k = 0; k < ne; k++)
    for (int t = 0; t < 4; t++) run_case(ctx, impl, r, t & 1, t >> 1, 13, 33, edge[k], 1, 1.0f, 0.0f);
  /* K past 1000: several groups of row tiles, the last one partial */
  for (int t = 0; t < 4; t++) run_case(ctx, impl, r, t & 1, t >> 1, 97, 65, 1031, 1, 1.0f, t == 3 ? 1.0f : 0.0f);
  /* partial column panels over a long K, packed by the items: a float at a time, the pack of one
   * 1100 x 1 panel took 70k loop trips, past the 65535 after which llvmpipe (rusticl) stops an item's
   * loops (NT 97 x 65 x 1031 gave 3185 NaNs there); now whole vectors, a few thousand trips */
  run_case(ctx, impl, r, 0, 1, 6, 1, 1100, 1, 1.0f, 0.0f);
  run_case(ctx, impl, r, 0, 1, 6, 127, 1100, 1, 1.0f, 0.0f);
  run_case(ctx, impl, r, 0, 0, 6, 127, 1100, 1, 1.0f, 0.0f);
  /* batched with odd sizes (run_case pads rows and matrices by odd amounts) */
  for (int t = 0; t < 4; t++) run_case(ctx, impl, r, t & 1, t >> 1, 13, 33, 31, 3, 1.0f, t == 2 ? -1.0f : 0.0f);
  for (int t = 0; t < 4; t++) run_case(ctx, impl, r, t & 1, t >> 1, 64, 64, 64, 4, 0.125f, 0.0f);
  /* op(B) packed where its 64 x K panel is too big for half of PoCL's 1 MiB of local memory: the global scratch */
  run_case(ctx, impl, r, 0, 1, 7, 70, 2100, 2, 1.0f, 0.0f);
  /* small products in odd batches */
  run_case(ctx, impl, r, 0, 1, 9, 70, 33, 13, 1.0f, 0.5f);
  run_case(ctx, impl, r, 0, 0, 5, 64, 20, 37, -1.0f, 0.0f);
  /* the model's shapes, small: forward x W^T, dW += dy^T x, dx = dy W */
  run_case(ctx, impl, r, 0, 1, 512, 768, 256, 1, 1.0f, 0.0f);
  run_case(ctx, impl, r, 1, 0, 256, 256, 1024, 1, 1.0f, 1.0f);
  run_case(ctx, impl, r, 0, 0, 1024, 256, 256, 1, 1.0f, 0.0f);
  /* A^T read in place (gemm_at_strips; gemm_at where op(B) is packed: the last row tile,
   * 250 = 41 * 6 + 4, slides up over the tile above), and packed (rows 4 KiB apart: by the items of
   * gemm_at_rows, eight row tiles each, or by gemm_pack_at where op(B) is packed), with beta != 0 */
  run_case(ctx, impl, r, 1, 0, 250, 64, 77, 1, 1.0f, 0.5f);
  run_case(ctx, impl, r, 1, 1, 250, 64, 77, 2, -1.0f, 1.0f);
  run_case(ctx, impl, r, 1, 0, 40, 300, 50, 1, 1.0f, 0.5f);
  lda_set = 1024;
  run_case(ctx, impl, r, 1, 0, 250, 64, 77, 1, 1.0f, 0.5f);
  run_case(ctx, impl, r, 1, 0, 300, 40, 50, 1, 1.0f, 0.5f);
  /* gemm_pack_at's groups of eight 6-row panels over 64-k blocks: two whole groups, one of a single
   * partial panel, K = 2 * 64 + 2, batched */
  run_case(ctx, impl, r, 1, 0, 100, 300, 130, 2, 1.0f, 0.0f);
  run_case(ctx, impl, r, 1, 1, 100, 300, 130, 2, 0.5f, 1.0f);
  lda_set = 0;
  /* K past 768 in slices inside the kernels, C accumulating after the first (B read in place: NN with
   * N a multiple of 64, and TN, A^T packed or read in place), beta 0 over poison and beta != 0,
   * batched with offsets */
  run_case(ctx, impl, r, 0, 0, 37, 128, 1100, 2, 0.5f, 0.5f);
  run_case(ctx, impl, r, 0, 0, 37, 128, 1100, 1, 1.0f, 0.0f);
  ldb_set = 1024;
  run_case(ctx, impl, r, 1, 0, 13, 128, 1100, 2, 1.0f, 0.5f);  /* A^T in place */
  run_case(ctx, impl, r, 1, 0, 13, 128, 1100, 1, 1.0f, 0.0f);
  lda_set = 2048;
  run_case(ctx, impl, r, 1, 0, 30, 320, 900, 1, -1.0f, 0.0f);  /* A^T packed */
  run_case(ctx, impl, r, 1, 0, 30, 192, 900, 2, 1.0f, 0.5f);
  for (size_t m = 1; m < 6; m++)  /* gemm_at_rows with M < 6: one partial row tile, packed */
    run_case(ctx, impl, r, 1, 0, m, 192, m % 2 ? 1100 : 7, 3, 1.0f, m % 2 ? 0.0f : 0.5f);
  lda_set = 1024;  /* gemm_at_rows: six items of eight row tiles a matrix, the last with a partial tile */
  ldb_set = 0;
  run_case(ctx, impl, r, 1, 0, 250, 128, 1100, 2, 1.0f, 0.5f);
  lda_set = ldb_set = 0;
  tight = 1;  /* C's rows aligned (whole-float16 stores) */
  run_case(ctx, impl, r, 0, 0, 20, 128, 1000, 2, 1.0f, 0.0f);
  tight = 0;
  /* K = 0: C = beta C in every form, batched */
  for (int t = 0; t < 4; t++) run_case(ctx, impl, r, t & 1, t >> 1, 13, 70, 0, 2, 1.0f, 0.5f);
  /* C's rows 64-byte aligned (our kernels store whole float16s), full and partial column panels */
  tight = 1;
  /* A^T read in place with lda 6 = M, the value that also means "packed" to gemm_at (one tile: the
   * same layout either way), with B in place (gemm_at_strips) and packed (gemm_at) */
  for (int tb = 0; tb < 2; tb++) run_case(ctx, impl, r, 1, tb, 6, 64, 37, 3, 1.0f, 0.5f);
  for (int t = 0; t < 4; t++) {
    run_case(ctx, impl, r, t & 1, t >> 1, 40, 64, 50, 1, 1.0f, t & 1 ? 0.5f : 0.0f);
    run_case(ctx, impl, r, t & 1, t >> 1, 13, 33, 20, 3, -0.5f, t >> 1 ? 1.0f : 0.0f);
  }
  tight = 0;
}

/* CLBlast under tuned parameters as `clformer tune` writes them (here hand-picked, unlike the
 * defaults: local-memory Xgemm tiles, every helper kernel retuned): once with the indirect kernel
 * for every product (pad/transpose helpers around Xgemm), once with the direct kernel for all. */
static void check_tuned(cf_context *ctx, test_rng *r) {
  char dir[] = "/tmp/clformer-test-tune-XXXXXX", path[4200], summary[512];
  TEST_ASSERT(mkdtemp(dir) != NULL, "mkdtemp failed");
  const char *old = getenv("CLFORMER_CACHE_DIR");
  char *saved = old ? strdup(old) : NULL;
  setenv("CLFORMER_CACHE_DIR", dir, 1);
  unsetenv("CLFORMER_TUNE");
  TEST_ASSERT(cf_gemm_tune_path(ctx, path, sizeof path), "no tuning file path");
  const char *common =
      "# test\n"
      "clblast Xgemm GEMMK=0 KREG=1 KWG=16 KWI=2 MDIMA=8 MDIMC=8 MWG=32 NDIMB=8 NDIMC=8 NWG=32 SA=1 SB=1 STRM=1 STRN=0 "
      "VWM=2 VWN=2\n"
      "clblast XgemmDirect KWID=2 MDIMAD=8 MDIMCD=8 NDIMBD=8 NDIMCD=8 PADA=1 PADB=0 VWMD=2 VWND=2 WGD=16\n"
      "clblast Padtranspose PADTRA_PAD=1 PADTRA_TILE=8 PADTRA_WPT=2\n"
      "clblast Transpose TRA_DIM=8 TRA_PAD=1 TRA_SHUFFLE=0 TRA_WPT=2\n"
      "clblast Pad PAD_DIMX=16 PAD_DIMY=8 PAD_WPTX=2 PAD_WPTY=1\n"
      "clblast Copy COPY_DIMX=16 COPY_DIMY=8 COPY_VW=2 COPY_WPT=2\n";
  const size_t sizes[2] = {1, 100000};  /* XGEMM_MIN_INDIRECT_SIZE: all indirect, all direct */
  for (int i = 0; i < 2; i++) {
    FILE *f = fopen(path, "w");
    TEST_ASSERT(f != NULL, "cannot write %s", path);
    if (!f) break;
    fprintf(f, "%sclblast GemmRoutine XGEMM_MIN_INDIRECT_SIZE=%zu\n", common, sizes[i]);
    fclose(f);
    cf_gemm_tune_reload(ctx);
    TEST_ASSERT(cf_gemm_tune_summary(ctx, summary, sizeof summary), "tuning file not applied");
    const char *want[] = {"Xgemm", "XgemmDirect", "Padtranspose", "Transpose", "Pad", "Copy", "XGEMM_MIN_INDIRECT_SIZE="};
    for (size_t w = 0; w < sizeof want / sizeof *want; w++)
      TEST_ASSERT(strstr(summary, want[w]) != NULL, "%s not applied (applied: %s)", want[w], summary);
    int before = ncases;
    run_all(ctx, CF_GEMM_CLBLAST, r);
    printf("tuned CLBlast, XGEMM_MIN_INDIRECT_SIZE=%zu: %d cases (%s)\n", sizes[i], ncases - before, summary);
  }
  unlink(path);
  rmdir(dir);
  if (saved) setenv("CLFORMER_CACHE_DIR", saved, 1);
  else unsetenv("CLFORMER_CACHE_DIR");
  free(saved);
  cf_gemm_tune_reload(ctx);  /* CLBlast keeps the last parameters for this process; the table is reread */
}

/* The tuning file as `clformer tune` writes it: read, it holds what the lines say; written back, the
 * same bytes. Malformed lines are reported as file:line and skipped, the lines after them kept. */
static const char tuning_text[] =
    "# clformer 0.1.0 tune, 2026-01-01 00:00:00\n"
    "# device: D | P | OpenCL 3.0 P | driver 1.0\n"
    "# clblast KERNEL NAME=VALUE...: CLBlastOverrideParameters\n"
    "# choice OP M N K BATCH IMPL OWN_GFLOPS CLBLAST_GFLOPS\n"
    "clblast Xgemm GEMMK=0 KWG=16 MWG=64\n"
    "clblast GemmRoutine XGEMM_MIN_INDIRECT_SIZE=384\n"
    "choice NT 1024 768 256 1 own 148.35 22.11\n"
    "choice TN 64 32 64 4 clblast 1.00 2.50\n";

static char *write_temp(const char *dir, const char *name, const char *text) {
  char *path = malloc(4200);
  snprintf(path, 4200, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  TEST_ASSERT(f != NULL, "cannot write %s", path);
  if (f) {
    fputs(text, f);
    fclose(f);
  }
  return path;
}

/* Read path with reports on, returning what went to stderr (malloc'd) in *err. */
static int read_capturing(const char *path, cf_tuning_file *tf, char **err) {
  int v = cf_verbosity();
  cf_set_verbosity(1);
  fflush(stderr);
  FILE *cap = tmpfile();
  int saved = dup(2);
  if (cap) dup2(fileno(cap), 2);
  int r = cf_tuning_file_read(path, tf, 1);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  cf_set_verbosity(v);
  *err = calloc(1, 8192);
  if (cap) {
    rewind(cap);
    size_t n = fread(*err, 1, 8191, cap);
    (*err)[n] = 0;
    fclose(cap);
  }
  return r;
}

static void check_tuning_file(void) {
  char dir[] = "/tmp/clformer-test-tuning-file-XXXXXX";
  TEST_ASSERT(mkdtemp(dir) != NULL, "mkdtemp failed");
  cf_tuning_file tf = {0};
  char *err = NULL, *text = NULL;
  char *good = write_temp(dir, "good.txt", tuning_text), *again = malloc(4200);
  snprintf(again, 4200, "%s/sub/again.txt", dir);
  TEST_ASSERT(read_capturing(good, &tf, &err) == 1, "cannot read %s", good);
  TEST_ASSERT(!err[0], "a well-formed file reported: %s", err);
  TEST_ASSERT(tf.nclblast == 2 && tf.nchoices == 2, "read %d clblast and %d choice lines", tf.nclblast, tf.nchoices);
  if (tf.nclblast == 2 && tf.nchoices == 2) {
    const cf_tuning_clblast *x = &tf.clblast[0], *g = &tf.clblast[1];
    TEST_ASSERT(!strcmp(x->kernel, "Xgemm") && x->nparams == 3 && !strcmp(x->params[2].name, "MWG") &&
                    x->params[2].value == 64, "Xgemm line read wrong");
    TEST_ASSERT(!strcmp(g->kernel, "GemmRoutine") && g->nparams == 1 && g->params[0].value == 384,
                "GemmRoutine line read wrong");
    const cf_tuning_choice *c = &tf.choices[0], *d = &tf.choices[1];
    TEST_ASSERT(!c->ta && c->tb && c->M == 1024 && c->N == 768 && c->K == 256 && c->batch == 1 &&
                    c->impl == CF_GEMM_OWN && fabs(c->own_gflops - 148.35) < 1e-9 &&
                    fabs(c->clblast_gflops - 22.11) < 1e-9, "first choice read wrong");
    TEST_ASSERT(d->ta && !d->tb && d->batch == 4 && d->impl == CF_GEMM_CLBLAST, "second choice read wrong");
    TEST_ASSERT(tf.comment && !strcmp(tf.comment, "clformer 0.1.0 tune, 2026-01-01 00:00:00\n"
                                                  "device: D | P | OpenCL 3.0 P | driver 1.0"),
                "header comment read as '%s'", tf.comment ? tf.comment : "(none)");
  }
  TEST_ASSERT(cf_tuning_file_write(&tf, again) == CF_OK, "cannot write %s", again);
  TEST_ASSERT(cf_read_file(again, &text, NULL) == CF_OK && !strcmp(text, tuning_text),
              "written back differently:\n%s", text ? text : "(unreadable)");
  free(text);
  free(err);

  /* malformed lines among good ones: lines 9-14 reported, the blank line 15 not, line 16 kept */
  char bad_text[2048];
  snprintf(bad_text, sizeof bad_text, "%schoice garbage\nclblast Xgemm\nclblast\nclblast Copy COPY_DIMX=-1\n"
           "choice NX 1 2 3 1 own 1 2\nfrobnicate 1 2\n\nchoice NN 2 3 4 1 clblast 5.5 6.5\n", tuning_text);
  char *bad = write_temp(dir, "bad.txt", bad_text);
  TEST_ASSERT(read_capturing(bad, &tf, &err) == 1, "cannot read %s", bad);
  TEST_ASSERT(tf.nclblast == 2 && tf.nchoices == 3 && tf.choices[2].M == 2,
              "with malformed lines: %d clblast and %d choice lines", tf.nclblast, tf.nchoices);
  for (int line = 9; line <= 16; line++) {
    char where[4300];
    snprintf(where, sizeof where, "%s:%d:", bad, line);
    TEST_ASSERT((strstr(err, where) != NULL) == (line <= 14), "line %d %sreported: %s", line,
                line <= 14 ? "not " : "", err);
  }
  free(err);
  TEST_ASSERT(cf_tuning_file_read("/nonexistent/tuning.txt", &tf, 1) == 0 && tf.nclblast == 0,
              "a missing file reads as something");
  cf_tuning_file_free(&tf);
  unlink(good);
  unlink(bad);
  unlink(again);
  *strrchr(again, '/') = 0;
  rmdir(again);
  rmdir(dir);
  free(good);
  free(bad);
  free(again);
}

/* n floats in host memory that touch an inaccessible page at their end (at_end) or their start,
 * wrapped in a buffer with CL_MEM_USE_HOST_PTR: on a CPU device (PoCL uses the pointer itself) a
 * kernel that reads or writes outside them faults. */
typedef struct {
  void *map;
  size_t map_bytes;
  float *p;
  cl_mem buf;
} guarded;

static guarded guarded_make(cf_context *ctx, size_t n, int at_end) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = n * sizeof(float);
  size_t pages = (bytes + page - 1) / page + 1;
  guarded g = {NULL, pages * page, NULL, NULL};
  g.map = mmap(NULL, g.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TEST_ASSERT(g.map != MAP_FAILED, "mmap of %zu bytes failed", g.map_bytes);
  if (g.map == MAP_FAILED) exit(1);
  char *base = g.map;
  if (at_end) {
    TEST_ASSERT(mprotect(base + (pages - 1) * page, page, PROT_NONE) == 0, "mprotect failed");
    g.p = (float *)(base + (pages - 1) * page - bytes);
  } else {
    TEST_ASSERT(mprotect(base, page, PROT_NONE) == 0, "mprotect failed");
    g.p = (float *)(base + page);
  }
  cl_int err;
  g.buf = clCreateBuffer(cf_context_cl(ctx), CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, g.p, &err);
  TEST_ASSERT(err == CL_SUCCESS, "clCreateBuffer(CL_MEM_USE_HOST_PTR) failed: %d", err);
  if (err != CL_SUCCESS) exit(1);
  return g;
}

static void guarded_free(guarded *g) {
  clReleaseMemObject(g->buf);
  munmap(g->map, g->map_bytes);
}

/* One batched product through our kernels on operands with no padding at all (lda the row length
 * unless given, matrices back to back), each against a guard page at one end; C poisoned when
 * beta is 0. */
static void guarded_case(cf_context *ctx, test_rng *r, int ta, int tb, size_t M, size_t N, size_t K, size_t lda,
                         size_t batch, float beta, int at_end) {
  size_t arows = ta ? K : M, acols = ta ? M : K, brows = tb ? N : K, bcols = tb ? K : N;
  if (!lda) lda = acols;
  size_t ldb = bcols, ldc = N;
  size_t sa = (arows - 1) * lda + acols, sb = brows * ldb, sc = M * ldc;  /* A's last row unpadded too */
  guarded A = guarded_make(ctx, batch * sa, at_end), B = guarded_make(ctx, batch * sb, at_end),
          C = guarded_make(ctx, batch * sc, at_end);
  test_fill_uniform(r, A.p, batch * sa, -1, 1);
  test_fill_uniform(r, B.p, batch * sb, -1, 1);
  test_fill_uniform(r, C.p, batch * sc, -1, 1);
  double *ref = malloc(batch * sc * sizeof *ref);
  for (size_t i = 0; i < batch * sc; i++) ref[i] = C.p[i];
  for (size_t bi = 0; bi < batch; bi++)
    ref_gemm(ta, tb, M, N, K, 1.0f, A.p + bi * sa, lda, B.p + bi * sb, ldb, beta, ref + bi * sc, ldc);
  if (beta == 0.0f)
    for (size_t i = 0; i < batch * sc; i++) C.p[i] = NAN;
  TEST_OK(cf_gemm_batched_with(ctx, CF_GEMM_OWN, ta, tb, M, N, K, 1.0f, cf_at(A.buf, 0), lda, sa, cf_at(B.buf, 0),
                               ldb, sb, beta, cf_at(C.buf, 0), ldc, sc, batch));
  float *out = test_read(ctx, cf_at(C.buf, 0), batch * sc);
  int nonfinite;
  double err = rel_fro(out, ref, batch * sc, &nonfinite);
  ncases++;
  TEST_ASSERT(nonfinite == 0 && err < 1e-5, "own guarded %c%c M=%zu N=%zu K=%zu lda=%zu batch=%zu beta=%g, guard %s: "
              "relative error %.3g, %d non-finite", ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, lda, batch, beta,
              at_end ? "after" : "before", err, nonfinite);
  free(out);
  free(ref);
  guarded_free(&A);
  guarded_free(&B);
  guarded_free(&C);
}

/* Every path of our kernels with its operands against guard pages: the column strips (B in place,
 * slices of K; B packed by the items), A^T read in place (the last row tile sliding up) and packed
 * by gemm_at_rows's items (eight row tiles, fewer, M < 6), gemm_at with op(B) packed. */
static void check_guarded(cf_context *ctx, test_rng *r) {
  if (!(cf_context_device(ctx)->type & CL_DEVICE_TYPE_CPU)) return;  /* elsewhere the host pointer is copied */
  static const struct { int ta, tb; size_t M, N, K, lda, batch; float beta; } cases[] = {
      {0, 0, 37, 128, 1100, 0, 2, 0.0f},    /* strips, B in place, slices */
      {0, 1, 37, 100, 300, 0, 2, 0.5f},     /* strips, B^T packed by the items */
      {0, 0, 5, 100, 9, 0, 1, 0.0f},        /* strips, N not a multiple of 64: B packed */
      {1, 0, 250, 128, 77, 0, 1, 0.5f},     /* gemm_at_strips, the last row tile sliding up */
      {1, 0, 13, 64, 1100, 0, 2, 0.0f},     /* gemm_at_strips, slices */
      {1, 0, 5, 128, 1100, 0, 2, 0.0f},     /* gemm_at_rows, M < 6 */
      {1, 0, 1, 64, 3, 0, 1, 0.0f},         /* gemm_at_rows, M = 1 */
      {1, 0, 250, 128, 900, 1024, 2, 0.0f}, /* gemm_at_rows, eight-tile items and a partial one */
      {1, 0, 96, 64, 9, 1024, 1, 0.5f},     /* gemm_at_rows, whole eight-tile items only */
      {1, 0, 250, 100, 77, 0, 2, 0.0f},     /* gemm_at, A^T in place, op(B) packed */
      {1, 0, 5, 100, 77, 0, 2, 0.0f},       /* gemm_at, A^T packed by gemm_pack_at */
      {1, 1, 250, 64, 900, 1024, 2, 0.5f},  /* gemm_at, both packed */
  };
  for (int at_end = 0; at_end < 2; at_end++)
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
      guarded_case(ctx, r, cases[i].ta, cases[i].tb, cases[i].M, cases[i].N, cases[i].K, cases[i].lda,
                   cases[i].batch, cases[i].beta, at_end);
}

/* The device's loop budget (0 or at least what any GEMM needs), then our kernels planned under a
 * pretended budget of 30000 trips an item: every split path (more parts for the strips, more column
 * groups and fewer row tiles for gemm_at_rows) computes right, and a K no split brings under the
 * budget is refused by our kernels (naming the limit) while auto runs it on CLBlast. */
static void check_loop_budget(cf_context *ctx, test_rng *r) {
  size_t probed = 1;
  TEST_OK(cf_gemm_loop_budget(ctx, &probed));
  TEST_ASSERT(probed == 0 || probed >= 30000, "loop budget %zu", probed);
  if (probed)
    printf("note: %s stops a work-item's loops after %zu trips (Mesa llvmpipe's loop limiter); our kernels split "
           "their work under it\n", cf_context_device(ctx)->name, probed);
  TEST_OK(cf_gemm_loop_budget_set(ctx, 30000));
  run_case(ctx, CF_GEMM_OWN, r, 0, 1, 97, 65, 1031, 1, 1.0f, 0.0f);   /* strips, B^T packed by the items */
  run_case(ctx, CF_GEMM_OWN, r, 0, 0, 400, 128, 1100, 2, 1.0f, 0.5f); /* strips, B in place, slices */
  run_case(ctx, CF_GEMM_OWN, r, 1, 0, 400, 128, 1100, 1, 1.0f, 0.0f); /* gemm_at_strips */
  lda_set = 1024;
  run_case(ctx, CF_GEMM_OWN, r, 1, 0, 250, 640, 1100, 1, 1.0f, 0.5f); /* gemm_at_rows: 3 tiles, 1 panel an item */
  lda_set = 0;
  run_case(ctx, CF_GEMM_AUTO, r, 0, 1, 13, 70, 5000, 1, 1.0f, 0.0f);  /* too long for ours: CLBlast */
  cl_mem d = test_buffer(ctx, NULL, 70 * 5000 + 13 * 5000 + 13 * 70);
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  cf_status st = cf_gemm_with(ctx, CF_GEMM_OWN, 0, 1, 13, 70, 5000, 1.0f, cf_at(d, 0), 5000, cf_at(d, 13 * 5000), 5000,
                              0.0f, cf_at(d, 83 * 5000), 70);
  cf_set_verbosity(v);
  TEST_ASSERT(st == CF_ERR_INVALID_ARG, "own GEMM with K 5000 under a budget of 30000 trips gave %s", cf_status_str(st));
  TEST_ASSERT(strstr(cf_last_error(), "loop") != NULL, "the refusal names the loop limit: %s", cf_last_error());
  cf_buffer_free(d);
  TEST_OK(cf_gemm_loop_budget_set(ctx, probed));
}

int main(void) {
  check_tuning_file();
  cf_context *ctx = test_context();
  test_rng r = test_rng_seed(42);
  check_choice(ctx);
  run_all(ctx, CF_GEMM_CLBLAST, &r);
  run_all(ctx, CF_GEMM_OWN, &r);
  check_deterministic(ctx, &r);
  check_epilogue(ctx, &r);
  check_nested(ctx, &r);
  check_tri(ctx, &r);
  check_tn_dbias(ctx, &r);
  check_guarded(ctx, &r);
  check_loop_budget(ctx, &r);
  check_tuned(ctx, &r);
  printf("%d cases\n", ncases);
  cf_gemm_scratch_free(ctx);
  cf_context_free(ctx);
  return test_finish("test_gemm");
}
