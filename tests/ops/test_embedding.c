/* Token + position embeddings: forward (learned and sinusoidal positions, token scaling, invalid
 * token ids) and backward (repeated tokens summed, += into existing gradients, dwpe rows beyond T
 * untouched) against the double references, the backward against central differences of the
 * reference forward, and bit-identical repeats. */
#include <math.h>
#include <string.h>
#include "clformer/ops.h"
#include "clformer/ref.h"
#include "testutil.h"

#define ATOL 1e-5
#define RTOL 1e-4

static cl_mem int_buffer(cf_context *ctx, const int *host, size_t n) {
  cl_mem b;
  TEST_OK(cf_buffer_create(ctx, (n ? n : 1) * sizeof(int), &b));
  TEST_OK(cf_write(ctx, cf_at(b, 0), host, n));
  return b;
}

/* Sinusoidal positions are computed in fp32 on the device: w_i = 10000^(-2i/C) carries a relative
 * error of a few 1e-7 (the rounded exponent and exp's own ulps), so sin(t * w_i) is off by up to
 * about 3e-7 * t. The comparison adds 4e-7 * t to atol for those outputs (4e-4 at t = 1023);
 * learned positions use the plain tolerance. Returns the number of bad elements. */
static int compare_forward(const char *what, const float *out, const double *ref, int N, int T, int C, int learned) {
  int bad = 0;
  double max_err = 0;
  for (int n = 0; n < N; n++) {
    double atol = ATOL + (learned ? 0.0 : 4e-7 * (n % T));
    for (int c = 0; c < C; c++) {
      size_t i = (size_t)n * C + c;
      double err = fabs((double)out[i] - ref[i]);
      if (!(err <= atol + RTOL * fabs(ref[i]))) {
        if (bad < 5) fprintf(stderr, "  %s[%d, %d]: got %.9g, want %.9g\n", what, n, c, out[i], ref[i]);
        bad++;
      }
      if (!(err <= max_err)) max_err = err;
    }
  }
  if (bad) {
    fprintf(stderr, "FAIL %s: %d elements out of tolerance, largest error %.3g\n", what, bad, max_err);
    test_failures++;
  } else {
    printf("ok   %s: %d x %d elements, largest error %.3g\n", what, N, C, max_err);
  }
  return bad;
}

/* tokens: ids in [0, distinct) so small `distinct` forces repeats; `invalid` puts V and -1 in. */
static void make_tokens(test_rng *r, int *tok, int N, int V, int distinct, int invalid) {
  for (int n = 0; n < N; n++) tok[n] = (int)(test_uniform(r) * distinct);
  if (invalid && N >= 3) {
    tok[1] = V;
    tok[N - 1] = -1;
  }
}

static void run_case(cf_context *ctx, int B, int T, int Tmax, int C, int V, int learned, float scale, int distinct,
                     int invalid, unsigned long long seed) {
  test_rng r = test_rng_seed(seed);
  int N = B * T;
  size_t NC = (size_t)N * C, VC = (size_t)V * C, PC = (size_t)Tmax * C;
  int *tok = malloc((size_t)N * sizeof *tok);
  float *wte = malloc(VC * sizeof *wte), *wpe = malloc(PC * sizeof *wpe), *dout = malloc(NC * sizeof *dout);
  float *dwte0 = malloc(VC * sizeof *dwte0), *dwpe0 = malloc(PC * sizeof *dwpe0);
  make_tokens(&r, tok, N, V, distinct, invalid);
  test_fill_uniform(&r, wte, VC, -1.0f, 1.0f);
  test_fill_uniform(&r, wpe, PC, -1.0f, 1.0f);
  test_fill_uniform(&r, dout, NC, -1.0f, 1.0f);
  test_fill_uniform(&r, dwte0, VC, -1.0f, 1.0f);
  test_fill_uniform(&r, dwpe0, PC, -1.0f, 1.0f);
  cl_mem btok = int_buffer(ctx, tok, (size_t)N), bwte = test_buffer(ctx, wte, VC), bwpe = test_buffer(ctx, wpe, PC);
  cl_mem bout = test_buffer(ctx, NULL, NC + 2), bdout = test_buffer(ctx, dout, NC);
  cl_mem bdwte = test_buffer(ctx, dwte0, VC), bdwpe = test_buffer(ctx, dwpe0, PC);
  cf_mem wpe_m = learned ? cf_at(bwpe, 0) : cf_at(NULL, 0), dwpe_m = learned ? cf_at(bdwpe, 0) : cf_at(NULL, 0);
  char what[128], tag[96];
  snprintf(tag, sizeof tag, "B=%d T=%d C=%d V=%d %s scale=%.3g%s", B, T, C, V, learned ? "learned" : "sinusoidal",
           scale, distinct < V ? " repeats" : "");

  /* forward, output at offset 1 between two NaN guards */
  TEST_OK(cf_embedding_forward(ctx, cf_at(bout, 1), cf_at(btok, 0), cf_at(bwte, 0), wpe_m, B, T, C, V, scale));
  float *out = test_read(ctx, cf_at(bout, 0), NC + 2);
  double *ref = malloc(NC * sizeof *ref);
  ref_embedding_forward(ref, tok, wte, learned ? wpe : NULL, B, T, C, V, scale);
  snprintf(what, sizeof what, "embedding_forward %s", tag);
  compare_forward(what, out + 1, ref, N, T, C, learned);
  TEST_ASSERT(isnan(out[0]) && isnan(out[NC + 1]), "embedding_forward wrote outside its output");
  test_poison(ctx, cf_at(bout, 0), NC + 2);
  TEST_OK(cf_embedding_forward(ctx, cf_at(bout, 1), cf_at(btok, 0), cf_at(bwte, 0), wpe_m, B, T, C, V, scale));
  float *out2 = test_read(ctx, cf_at(bout, 0), NC + 2);
  TEST_ASSERT(!memcmp(out + 1, out2 + 1, NC * sizeof(float)), "embedding_forward %s not bit-identical", tag);

  /* backward adds into random existing gradients */
  TEST_OK(cf_embedding_backward(ctx, cf_at(bdwte, 0), dwpe_m, cf_at(bdout, 0), cf_at(btok, 0), B, T, C, V, scale));
  float *dwte = test_read(ctx, cf_at(bdwte, 0), VC), *dwpe = test_read(ctx, cf_at(bdwpe, 0), PC);
  double *rdwte = malloc(VC * sizeof *rdwte), *rdwpe = malloc(PC * sizeof *rdwpe);
  for (size_t i = 0; i < VC; i++) rdwte[i] = dwte0[i];
  for (size_t i = 0; i < PC; i++) rdwpe[i] = dwpe0[i];
  ref_embedding_backward(rdwte, learned ? rdwpe : NULL, dout, tok, B, T, C, V, scale);
  snprintf(what, sizeof what, "embedding_backward dwte %s", tag);
  test_compare(what, dwte, rdwte, VC, ATOL, RTOL);
  snprintf(what, sizeof what, "embedding_backward dwpe %s", tag);
  if (learned) test_compare(what, dwpe, rdwpe, PC, ATOL, RTOL);
  else TEST_ASSERT(!memcmp(dwpe, dwpe0, PC * sizeof(float)), "sinusoidal backward touched dwpe");

  /* again from the same starting gradients: bit-identical */
  TEST_OK(cf_write(ctx, cf_at(bdwte, 0), dwte0, VC));
  TEST_OK(cf_write(ctx, cf_at(bdwpe, 0), dwpe0, PC));
  TEST_OK(cf_embedding_backward(ctx, cf_at(bdwte, 0), dwpe_m, cf_at(bdout, 0), cf_at(btok, 0), B, T, C, V, scale));
  float *dwte2 = test_read(ctx, cf_at(bdwte, 0), VC), *dwpe2 = test_read(ctx, cf_at(bdwpe, 0), PC);
  TEST_ASSERT(!memcmp(dwte, dwte2, VC * sizeof(float)) && !memcmp(dwpe, dwpe2, PC * sizeof(float)),
              "embedding_backward %s not bit-identical on repeat", tag);

  free(tok), free(wte), free(wpe), free(dout), free(dwte0), free(dwpe0), free(out), free(out2), free(ref);
  free(dwte), free(dwpe), free(rdwte), free(rdwpe), free(dwte2), free(dwpe2);
  cf_buffer_free(btok), cf_buffer_free(bwte), cf_buffer_free(bwpe), cf_buffer_free(bout), cf_buffer_free(bdout);
  cf_buffer_free(bdwte), cf_buffer_free(bdwpe);
}

/* L = sum(out * W) with the reference forward in double; central differences in each wte and wpe
 * entry (h = 2^-17: x +- h is exact in float for |x| < 64). The device backward with dout = W
 * and the reference backward must both match. */
static void fd_case(cf_context *ctx, int learned) {
  int B = 2, T = 3, Tmax = 4, C = 5, V = 7, N = B * T;
  float scale = 1.7f;
  size_t NC = (size_t)N * C, VC = (size_t)V * C, PC = (size_t)Tmax * C;
  test_rng r = test_rng_seed(500 + learned);
  int tok[6] = {2, 5, 2, 2, 0, 5};  /* repeats, and tokens 1, 3, 4, 6 unused */
  float *wte = malloc(VC * sizeof *wte), *wpe = malloc(PC * sizeof *wpe), *W = malloc(NC * sizeof *W);
  test_fill_uniform(&r, wte, VC, -1.0f, 1.0f);
  test_fill_uniform(&r, wpe, PC, -1.0f, 1.0f);
  test_fill_uniform(&r, W, NC, -1.0f, 1.0f);
  double *out = malloc(NC * sizeof *out), h = ldexp(1.0, -17);
  size_t np = VC + (learned ? PC : 0);
  double *fd = malloc(np * sizeof *fd);
  for (size_t k = 0; k < np; k++) {
    float *x = k < VC ? &wte[k] : &wpe[k - VC];
    float keep = *x;
    double l[2];
    for (int sgn = 0; sgn < 2; sgn++) {
      *x = (float)(keep + (sgn ? -h : h));
      ref_embedding_forward(out, tok, wte, learned ? wpe : NULL, B, T, C, V, scale);
      l[sgn] = 0;
      for (size_t i = 0; i < NC; i++) l[sgn] += out[i] * W[i];
    }
    *x = keep;
    fd[k] = (l[0] - l[1]) / (2 * h);
  }
  double *rd = calloc(np, sizeof *rd);
  ref_embedding_backward(rd, learned ? rd + VC : NULL, W, tok, B, T, C, V, scale);
  float *rdf = malloc(np * sizeof *rdf);
  for (size_t k = 0; k < np; k++) rdf[k] = (float)rd[k];
  char what[96];
  snprintf(what, sizeof what, "embedding ref backward vs finite differences (%s)", learned ? "learned" : "sinusoidal");
  test_compare(what, rdf, fd, np, 1e-7, 1e-5);

  cl_mem btok = int_buffer(ctx, tok, (size_t)N), bW = test_buffer(ctx, W, NC);
  cl_mem bdwte = test_buffer(ctx, NULL, VC), bdwpe = test_buffer(ctx, NULL, PC);
  TEST_OK(cf_fill(ctx, cf_at(bdwte, 0), 0.0f, VC));
  TEST_OK(cf_fill(ctx, cf_at(bdwpe, 0), 0.0f, PC));
  TEST_OK(cf_embedding_backward(ctx, cf_at(bdwte, 0), learned ? cf_at(bdwpe, 0) : cf_at(NULL, 0), cf_at(bW, 0),
                                cf_at(btok, 0), B, T, C, V, scale));
  float *d = malloc(np * sizeof *d);
  TEST_OK(cf_read(ctx, cf_at(bdwte, 0), d, VC));
  if (learned) TEST_OK(cf_read(ctx, cf_at(bdwpe, 0), d + VC, PC));
  snprintf(what, sizeof what, "embedding device backward vs finite differences (%s)", learned ? "learned" : "sinusoidal");
  test_compare(what, d, fd, np, ATOL, RTOL);
  free(wte), free(wpe), free(W), free(out), free(fd), free(rd), free(rdf), free(d);
  cf_buffer_free(btok), cf_buffer_free(bW), cf_buffer_free(bdwte), cf_buffer_free(bdwpe);
}

static void test_check_tokens(void) {
  int t[] = {0, 5, 255, 256, -1};
  TEST_ASSERT(cf_embedding_check_tokens(t, 3, 256) == -1, "valid tokens rejected");
  TEST_ASSERT(cf_embedding_check_tokens(t, 5, 256) == 3, "token 256 of V=256 not found");
  TEST_ASSERT(cf_embedding_check_tokens(t + 4, 1, 256) == 0, "token -1 not found");
}

int main(void) {
  cf_context *ctx = test_context();
  test_check_tokens();
  for (int learned = 0; learned < 2; learned++) {
    run_case(ctx, 1, 1, 1, 1, 1, learned, 1.0f, 1, 0, 1);          /* single row, C = 1, V = 1 */
    run_case(ctx, 3, 7, 10, 13, 256, learned, 1.0f, 256, 0, 2);   /* T < T_max, C not a multiple of anything */
    run_case(ctx, 2, 9, 9, 5, 50, learned, sqrtf(5.0f), 3, 1, 3); /* odd C, repeats, invalid ids */
    run_case(ctx, 2, 37, 40, 300, 97, learned, 1.0f, 97, 0, 4);   /* C above the work-group size */
  }
  run_case(ctx, 4, 1024, 1024, 512, 256, 1, sqrtf(512.0f), 256, 0, 5);  /* the large case */
  run_case(ctx, 4, 1024, 1024, 512, 256, 0, sqrtf(512.0f), 3, 0, 6);    /* large, sinusoidal, heavy repeats */
  fd_case(ctx, 1);
  fd_case(ctx, 0);
  cf_context_free(ctx);
  return test_finish("test_embedding");
}
