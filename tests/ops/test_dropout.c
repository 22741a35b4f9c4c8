/* Dropout and its generator: Philox4x32-10 known answers on the host, the device mask equal to
 * the host's bit for bit, forward/backward against the double reference, central differences,
 * p == 0 as an untouched buffer, mask statistics, bit-identical reruns, a tensor's mask as a slice
 * of a larger one's (group0), the 32-bit limit, bad p. */
#include <math.h>
#include <string.h>
#include "clformer/ops.h"
#include "clformer/ref.h"
#include "clformer/base.h"
#include "testutil.h"

/* Random123's known-answer vectors for philox4x32_10. */
static void philox_known_answers(void) {
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6,
       0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420,
       0x24126ea1}};
  for (int k = 0; k < 3; k++) {
    uint32_t out[4];
    cf_philox4x32_10(kat[k], kat[k] + 4, out);
    for (int j = 0; j < 4; j++)
      TEST_ASSERT(out[j] == kat[k][6 + j], "philox4x32_10 known answer %d word %d: got 0x%08x, want 0x%08x", k, j,
                  out[j], kat[k][6 + j]);
  }
  /* cf_random_bits is Philox with key (seed, tensor_id) and counter (group, step, 0, 0) */
  uint32_t a[4], b[4], ctr[4] = {77, 5, 0, 0}, key[2] = {123, 9};
  cf_random_bits(123, 5, 9, 77, a);
  cf_philox4x32_10(ctr, key, b);
  TEST_ASSERT(memcmp(a, b, sizeof a) == 0, "cf_random_bits does not follow its documented layout");
  printf("ok   philox4x32_10 known answers\n");
}

/* The device mask, read off a buffer of ones, against cf_dropout_keep: kept elements must be
 * exactly the float scale, dropped ones exactly 0. */
static void mask_matches_host(cf_context *ctx, cf_dropout d, size_t n, size_t off) {
  float *ones = test_falloc(n);
  for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
  cf_mem x = test_tensor(ctx, ones, n, off);
  TEST_OK(cf_dropout_forward(ctx, x, n, d));
  float *y = test_read(ctx, x, n), scale = cf_dropout_scale(d);
  size_t bad = 0, kept = 0;
  for (size_t i = 0; i < n; i++) {
    int keep = cf_dropout_keep(d, (uint32_t)i);
    float want = keep ? scale : 0.0f;
    kept += keep;
    if (memcmp(&y[i], &want, sizeof want)) {
      if (bad < 5) fprintf(stderr, "  mask[%zu]: device %.9g, host %.9g\n", i, y[i], want);
      bad++;
    }
  }
  TEST_ASSERT(bad == 0, "device dropout mask differs from the host's in %zu of %zu elements (p=%g seed=%u step=%u "
              "tensor=%u)", bad, n, (double)d.p, d.seed, d.step, d.tensor_id);
  /* the backward regenerates the same mask */
  TEST_OK(cf_write(ctx, x, ones, n));
  TEST_OK(cf_dropout_backward(ctx, x, n, d));
  float *yb = test_read(ctx, x, n);
  TEST_ASSERT(memcmp(y, yb, n * sizeof *y) == 0, "dropout_backward mask differs from the forward's");
  if (!bad)
    printf("ok   device mask = host mask, n=%zu p=%g seed=%u step=%u tensor=%u (kept %.4f)\n", n, (double)d.p, d.seed,
           d.step, d.tensor_id, (double)kept / n);
  free(ones); free(y); free(yb);
  test_free_tensors();
}

static void forward_backward(cf_context *ctx, test_rng *r, cf_dropout d, size_t n) {
  char what[128];
  float *x = test_falloc(n), *g = test_falloc(n);
  test_fill_uniform(r, x, n, -3, 3);
  test_fill_uniform(r, g, n, -1, 1);
  double *ref = test_dalloc(n), *gref = test_dalloc(n);
  ref_dropout_forward(ref, x, n, d);
  ref_dropout_backward(gref, g, n, d);
  cf_mem d_x = test_tensor(ctx, x, n, 1 + n % 5), d_g = test_tensor(ctx, g, n, 2);
  TEST_OK(cf_dropout_forward(ctx, d_x, n, d));
  TEST_OK(cf_dropout_backward(ctx, d_g, n, d));
  float *y = test_read(ctx, d_x, n), *gy = test_read(ctx, d_g, n);
  snprintf(what, sizeof what, "dropout_forward p=%g n=%zu", (double)d.p, n);
  test_compare(what, y, ref, n, 1e-5, 1e-4);
  snprintf(what, sizeof what, "dropout_backward p=%g n=%zu", (double)d.p, n);
  test_compare(what, gy, gref, n, 1e-5, 1e-4);
  /* rerun on the same inputs: bit-identical */
  TEST_OK(cf_write(ctx, d_x, x, n));
  TEST_OK(cf_dropout_forward(ctx, d_x, n, d));
  float *y2 = test_read(ctx, d_x, n);
  TEST_ASSERT(memcmp(y, y2, n * sizeof *y) == 0, "%s: rerun is not bit-identical", what);
  free(x); free(g); free(ref); free(gref); free(y); free(gy); free(y2);
  test_free_tensors();
}

/* Dropout is linear: the reference backward against central differences of
 * loss = sum(dropout(x) * rw), with h = 2^-17 exact in float for |x| < 128. */
static void finite_differences(cf_context *ctx, test_rng *r) {
  enum { n = 37 };
  const cf_dropout d = {0.4f, 99, 1, 2, 0};
  const float h = 0x1p-17f;
  float x[n], rw[n];
  test_fill_uniform(r, x, n, -2, 2);
  test_fill_uniform(r, rw, n, -1, 1);
  double out[n], fd[n], g[n];
  for (int i = 0; i < n; i++) {
    double l[2];
    float x0 = x[i];
    for (int s = 0; s < 2; s++) {
      x[i] = s ? x0 - h : x0 + h;
      ref_dropout_forward(out, x, n, d);
      l[s] = 0;
      for (int j = 0; j < n; j++) l[s] += out[j] * rw[j];
    }
    x[i] = x0;
    fd[i] = (l[0] - l[1]) / (2.0 * (double)h);
  }
  ref_dropout_backward(g, rw, n, d);
  float gf[n];
  for (int i = 0; i < n; i++) gf[i] = (float)g[i];
  test_compare("ref dropout_backward vs central differences", gf, fd, n, 1e-6, 1e-5);
  cf_mem d_g = test_tensor(ctx, rw, n, 3);
  TEST_OK(cf_dropout_backward(ctx, d_g, n, d));
  float *dg = test_read(ctx, d_g, n);
  test_compare("device dropout_backward vs central differences", dg, fd, n, 1e-5, 1e-4);
  free(dg);
  test_free_tensors();
}

/* p == 0: nothing launched, the buffer bit for bit as it was (NaN, -0 and all). */
static void p_zero_is_identity(cf_context *ctx, test_rng *r) {
  enum { n = 1001 };
  float x[n];
  test_fill_uniform(r, x, n, -3, 3);
  x[0] = NAN;
  x[1] = -0.0f;
  x[2] = INFINITY;
  cf_mem d_x = test_tensor(ctx, x, n, 2);
  cf_dropout d = {0.0f, 1, 2, 3, 0};
  TEST_OK(cf_dropout_forward(ctx, d_x, n, d));
  TEST_OK(cf_dropout_backward(ctx, d_x, n, d));
  float *y = test_read(ctx, d_x, n);
  TEST_ASSERT(memcmp(x, y, sizeof x) == 0, "dropout with p = 0 changed the buffer");
  printf("ok   p = 0 leaves the buffer untouched\n");
  free(y);
  test_free_tensors();
}

/* Kept fraction near 1-p, and masks of different (seed, step, tensor_id) are different. */
static void statistics(cf_context *ctx) {
  enum { n = 1 << 20 };
  const float p = 0.3f;
  cf_dropout base = {p, 2024, 10, 4, 0};
  cf_dropout other[3] = {{p, 2025, 10, 4, 0}, {p, 2024, 11, 4, 0}, {p, 2024, 10, 5, 0}};
  float *ones = test_falloc(n);
  for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
  cf_mem x = test_tensor(ctx, ones, n, 0);
  TEST_OK(cf_dropout_forward(ctx, x, n, base));
  float *m0 = test_read(ctx, x, n);
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) kept += m0[i] != 0.0f;
  double frac = (double)kept / n, sd = sqrt(p * (1.0 - p) / n);
  TEST_ASSERT(fabs(frac - (1.0 - p)) < 5 * sd, "kept fraction %.5f, want %.5f +- %.5f", frac, 1.0 - p, 5 * sd);
  for (int k = 0; k < 3; k++) {
    TEST_OK(cf_write(ctx, x, ones, n));
    TEST_OK(cf_dropout_forward(ctx, x, n, other[k]));
    float *m = test_read(ctx, x, n);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += (m[i] != 0.0f) != (m0[i] != 0.0f);
    double want = 2.0 * p * (1.0 - p), dfrac = (double)diff / n;  /* independent masks disagree this often */
    TEST_ASSERT(fabs(dfrac - want) < 0.01, "masks for key change %d disagree in %.4f of elements, want ~%.4f", k,
                dfrac, want);
    free(m);
  }
  printf("ok   kept fraction %.5f (p = %.2f); seed, step and tensor_id each give a new mask\n", frac, (double)p);
  free(ones); free(m0);
  test_free_tensors();
}

/* group0 makes a tensor a slice of a larger one: dropout of n elements with group0 = g gives the
 * elements 4g .. 4g+n-1 of the whole's mask, bit for bit, for the flat kernel (both the 64-element
 * blocks and the partial tail) and for the fused residual add: what lets a rank or a micro-batch
 * draw the rows of the step's global batch that it computes. */
static void slice_of_the_whole(cf_context *ctx, test_rng *r) {
  enum { whole = 3 * 4096 + 20 };
  static const size_t firsts[] = {0, 4, 64, 4096 + 60, 2 * 4096};
  float *x = test_falloc(whole), *ones = test_falloc(whole);
  test_fill_uniform(r, x, whole, -2, 2);
  for (size_t i = 0; i < whole; i++) ones[i] = 1.0f;
  cf_dropout d = {0.3f, 77, 5, 9, 0};
  cf_mem all = test_tensor(ctx, x, whole, 0), sum = test_tensor(ctx, NULL, whole, 0);
  cf_mem res = test_tensor(ctx, ones, whole, 0);
  TEST_OK(cf_residual_dropout_forward(ctx, sum, res, all, whole, d));
  TEST_OK(cf_dropout_forward(ctx, all, whole, d));
  float *want = test_read(ctx, all, whole), *want_sum = test_read(ctx, sum, whole);
  for (size_t k = 0; k < sizeof firsts / sizeof *firsts; k++) {
    size_t first = firsts[k], n = whole - first;
    cf_dropout part = d;
    part.group0 = (uint32_t)(first / 4);
    cf_mem x_part = test_tensor(ctx, x + first, n, 3), s_part = test_tensor(ctx, NULL, n, 1);
    TEST_OK(cf_residual_dropout_forward(ctx, s_part, cf_shift(res, first), x_part, n, part));
    TEST_OK(cf_dropout_forward(ctx, x_part, n, part));
    float *got = test_read(ctx, x_part, n), *got_sum = test_read(ctx, s_part, n);
    TEST_ASSERT(memcmp(got, want + first, n * sizeof *got) == 0, "dropout from group %u: not the whole's elements "
                "%zu ..", part.group0, first);
    TEST_ASSERT(memcmp(got_sum, want_sum + first, n * sizeof *got) == 0, "residual dropout from group %u: not the "
                "whole's elements %zu ..", part.group0, first);
    for (size_t i = 0; i < n; i += 97)
      TEST_ASSERT(cf_dropout_keep(part, (uint32_t)i) == cf_dropout_keep(d, (uint32_t)(first + i)),
                  "host twin: element %zu from group %u", i, part.group0);
    free(got); free(got_sum);
  }
  printf("ok   dropout and residual dropout from group0 = g draw the whole's mask from element 4g on\n");
  free(x); free(ones); free(want); free(want_sum);
  test_free_tensors();
}

/* The fused kernels that draw masks take group0 too: residual + dropout + LayerNorm over rows
 * r0.. of a tensor, with group0 = r0 * C / 4, gives those rows of the whole's result bit for bit
 * (C = 36: rows cut the 64-element blocks of the CPU shapes); attention over the second sequence
 * alone, with group0 = its place in the (B, NH, T, T) probabilities, gives the whole's second
 * sequence (the same products: to rounding). Under gpu_shapes_dropout, the GPU kernels' too. */
static void fused_kernels_take_group0(cf_context *ctx, test_rng *r) {
  enum { N = 8, C = 36, R0 = 3, B = 2, T = 12, AC = 8, NH = 2 };
  cf_dropout d = {0.3f, 11, 4, 21, 0};
  float x[N * C], br[N * C], w[C], bias[C];
  test_fill_uniform(r, x, N * C, -1, 1);
  test_fill_uniform(r, br, N * C, -1, 1);
  test_fill_uniform(r, w, C, 0.5, 1.5);
  test_fill_uniform(r, bias, C, -0.5, 0.5);
  cf_mem W = test_tensor(ctx, w, C, 0), Bi = test_tensor(ctx, bias, C, 0), stats = test_tensor(ctx, NULL, 4 * N, 0);
  float *whole[2], *part[2];
  for (int k = 0; k < 2; k++) {  /* k 0: rows 0..N-1 from group 0; k 1: rows R0.. from group R0 * C / 4 */
    size_t first = k ? (size_t)R0 * C : 0, n = (size_t)N * C - first;
    cf_dropout dk = d;
    dk.group0 = (uint32_t)(first / 4);
    cf_mem out = test_tensor(ctx, NULL, n, 1), res = test_tensor(ctx, NULL, n, 2);
    cf_mem xk = test_tensor(ctx, x + first, n, 0), bk = test_tensor(ctx, br + first, n, 0);
    TEST_OK(cf_residual_dropout_layernorm_forward(ctx, out, stats, cf_shift(stats, N), res, xk, bk, W, Bi, (int)(n / C),
                                                  C, 1e-5f, dk));
    float **dst = k ? part : whole;
    dst[0] = test_read(ctx, out, n);
    dst[1] = test_read(ctx, res, n);
  }
  size_t tail = (size_t)(N - R0) * C;
  TEST_ASSERT(!memcmp(part[0], whole[0] + R0 * C, tail * sizeof(float)) &&
              !memcmp(part[1], whole[1] + R0 * C, tail * sizeof(float)),
              "residual dropout LayerNorm from row %d (group0 %d): not the whole's rows", R0, R0 * C / 4);
  for (int k = 0; k < 2; k++) { free(whole[k]); free(part[k]); }
  float inp[B * T * 3 * AC];
  test_fill_uniform(r, inp, B * T * 3 * AC, -1, 1);
  float *outs[2];
  for (int k = 0; k < 2; k++) {  /* k 0: both sequences; k 1: the second alone */
    int b = k ? 1 : B;
    cf_dropout dk = d;
    dk.group0 = k ? NH * T * T / 4 : 0;
    size_t rows = (size_t)b * T;
    cf_mem out = test_tensor(ctx, NULL, rows * AC, 0);
    cf_mem att = test_tensor(ctx, NULL, (size_t)b * NH * T * T, 0);
    cf_mem scr = test_tensor(ctx, NULL, cf_attention_scratch_floats(b, T, AC, NH, 1), 0);
    cf_mem in = test_tensor(ctx, inp + (B - b) * T * 3 * AC, 3 * rows * AC, 0);
    TEST_OK(cf_attention_forward(ctx, out, att, scr, in, cf_at(NULL, 0), b, T, AC, NH, dk));
    outs[k] = test_read(ctx, out, (size_t)b * T * AC);
  }
  double ref[T * AC];
  for (int i = 0; i < T * AC; i++) ref[i] = outs[0][T * AC + i];
  test_compare("attention of sequence 1 alone (group0) against the whole's", outs[1], ref, T * AC, 1e-6, 1e-5);
  free(outs[0]); free(outs[1]);
  printf("ok   residual dropout LayerNorm and attention take group0: rows of the whole\n");
  test_free_tensors();
}

/* A mask numbered past 2^32 elements is refused (the kernels index in 32 bits); p = 0 needs none. */
static void past_32_bits(cf_context *ctx) {
  cf_mem z = test_tensor(ctx, NULL, 16, 0);
  cf_dropout d = {0.5f, 1, 2, 3, (1u << 30) - 2};  /* elements 2^32 - 8 .. 2^32 + 7 */
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  TEST_ASSERT(cf_dropout_forward(ctx, z, 8, d) == CF_OK, "the last 8 elements of 2^32 refused");
  TEST_ASSERT(cf_dropout_forward(ctx, z, 16, d) == CF_ERR_INVALID_ARG, "elements past 2^32 accepted");
  d.p = 0.0f;
  TEST_ASSERT(cf_dropout_forward(ctx, z, 16, d) == CF_OK, "p = 0 past 2^32 refused");
  cf_set_verbosity(v);
  cf_clear_error();
  printf("ok   masks past 2^32 elements are refused\n");
  test_free_tensors();
}

static void bad_arguments(cf_context *ctx) {
  cf_mem z = test_tensor(ctx, NULL, 16, 0);
  static const float bad[] = {1.0f, -0.1f, 1.5f, NAN, INFINITY};
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  for (int k = 0; k < 5; k++) {
    cf_dropout d = {bad[k], 1, 2, 3, 0};
    TEST_ASSERT(cf_dropout_forward(ctx, z, 16, d) == CF_ERR_INVALID_ARG, "p = %g accepted", (double)bad[k]);
    TEST_ASSERT(cf_dropout_backward(ctx, z, 16, d) == CF_ERR_INVALID_ARG, "p = %g accepted", (double)bad[k]);
  }
  cf_set_verbosity(v);
  cf_clear_error();
  test_free_tensors();
}

int main(void) {
  philox_known_answers();
  cf_context *ctx = test_context();
  test_rng r = test_rng_seed(4242);
  mask_matches_host(ctx, (cf_dropout){0.3f, 1234, 0, 0, 0}, 100003, 5);
  mask_matches_host(ctx, (cf_dropout){0.5f, 0xffffffffu, 0xfffffffeu, 0xdeadbeefu, 0}, 4099, 0);
  mask_matches_host(ctx, (cf_dropout){0.9f, 7, 123456, 3, 0}, 1, 3);
  mask_matches_host(ctx, (cf_dropout){0.3f, 1234, 0, 0, 123457}, 100003, 5);
  mask_matches_host(ctx, (cf_dropout){0.5f, 9, 8, 7, (1u << 30) - 2000}, 8000, 1);  /* up to element 2^32 - 1 */
  static const size_t sizes[] = {1, 3, 4, 5, 1001, 4096 * 512};
  static const float ps[] = {0.1f, 0.5f, 0.9f};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (int k = 0; k < 3; k++)
      forward_backward(ctx, &r, (cf_dropout){ps[k], 31337, (uint32_t)s, (uint32_t)k, 0}, sizes[s]);
  finite_differences(ctx, &r);
  p_zero_is_identity(ctx, &r);
  statistics(ctx);
  slice_of_the_whole(ctx, &r);
  fused_kernels_take_group0(ctx, &r);
  past_32_bits(ctx);
  bad_arguments(ctx);
  cf_context_free(ctx);
  return test_finish("test_dropout");
}
