/* Fused softmax cross-entropy with label smoothing and an ignore index: forward (per-row losses
 * and the device-reduced mean) and backward against the double references, backward against
 * central differences of the reference loss, in-place backward, determinism; the fused forward +
 * backward against the same references and (on CPUs) the separate launches' bits. */
#include <math.h>
#include <string.h>
#include "clformer/ops.h"
#include "clformer/ref.h"
#include "testutil.h"

#define ATOL 1e-5
#define RTOL 1e-4
#define IGNORE (-100)

static cl_mem int_buffer(cf_context *ctx, const int *host, size_t n) {
  cl_mem b;
  TEST_OK(cf_buffer_create(ctx, (n ? n : 1) * sizeof(int), &b));
  TEST_OK(cf_write(ctx, cf_at(b, 0), host, n));
  return b;
}

/* Targets in [0, V); every 5th row ignored when `ignore`, and row 3 (if any) out of range (V),
 * which the kernels must treat as ignored without reading out of bounds. */
static void make_targets(test_rng *r, int *targets, int N, int V, int ignore) {
  for (int n = 0; n < N; n++) {
    targets[n] = (int)(test_uniform(r) * V);
    if (ignore && n % 5 == 1) targets[n] = IGNORE;
    if (ignore && n == 3) targets[n] = V;
  }
}

static int ref_count(const int *targets, int N, int V) {
  int c = 0;
  for (int n = 0; n < N; n++) c += targets[n] != IGNORE && targets[n] >= 0 && targets[n] < V;
  return c;
}

static void run_case(cf_context *ctx, int N, int V, float eps, int ignore, float scale, unsigned long long seed) {
  test_rng r = test_rng_seed(seed);
  size_t NV = (size_t)N * V;
  float *logits = malloc(NV * sizeof *logits);
  int *targets = malloc((size_t)N * sizeof *targets);
  test_fill_uniform(&r, logits, NV, -scale, scale);
  make_targets(&r, targets, N, V, ignore);
  int count = ref_count(targets, N, V);
  float dloss = count ? 1.0f / (float)count : 0.0f;

  cl_mem bl = test_buffer(ctx, logits, NV), bt = int_buffer(ctx, targets, (size_t)N);
  cl_mem bloss = test_buffer(ctx, NULL, 1), blosses = test_buffer(ctx, NULL, (size_t)N);
  cl_mem bd = test_buffer(ctx, NULL, NV);
  char what[96];

  /* forward */
  TEST_OK(cf_crossentropy_forward(ctx, cf_at(bloss, 0), cf_at(blosses, 0), cf_at(bl, 0), cf_at(bt, 0), N, V, eps,
                                  IGNORE));
  float *losses = test_read(ctx, cf_at(blosses, 0), (size_t)N), *loss = test_read(ctx, cf_at(bloss, 0), 1);
  double *rlosses = malloc((size_t)N * sizeof *rlosses), rloss;
  ref_crossentropy_forward(&rloss, rlosses, logits, targets, N, V, eps, IGNORE);
  snprintf(what, sizeof what, "crossentropy_forward N=%d V=%d eps=%.1f losses", N, V, eps);
  test_compare(what, losses, rlosses, (size_t)N, ATOL, RTOL);
  snprintf(what, sizeof what, "crossentropy_forward N=%d V=%d eps=%.1f mean (count %d)", N, V, eps, count);
  test_compare(what, loss, &rloss, 1, ATOL, RTOL);
  for (int n = 0; n < N; n++)
    if (!(targets[n] >= 0 && targets[n] < V)) TEST_ASSERT(losses[n] == 0.0f, "ignored row %d has loss %g", n, losses[n]);

  /* forward again: bit-identical */
  test_poison(ctx, cf_at(blosses, 0), (size_t)N);
  test_poison(ctx, cf_at(bloss, 0), 1);
  TEST_OK(cf_crossentropy_forward(ctx, cf_at(bloss, 0), cf_at(blosses, 0), cf_at(bl, 0), cf_at(bt, 0), N, V, eps,
                                  IGNORE));
  float *losses2 = test_read(ctx, cf_at(blosses, 0), (size_t)N), *loss2 = test_read(ctx, cf_at(bloss, 0), 1);
  TEST_ASSERT(!memcmp(losses, losses2, (size_t)N * sizeof(float)) && !memcmp(loss, loss2, sizeof(float)),
              "crossentropy_forward N=%d V=%d not bit-identical on repeat", N, V);

  /* backward into a separate buffer */
  TEST_OK(cf_crossentropy_backward(ctx, cf_at(bd, 0), cf_at(bl, 0), cf_at(bt, 0), N, V, eps, IGNORE, dloss));
  float *d = test_read(ctx, cf_at(bd, 0), NV);
  double *rd = malloc(NV * sizeof *rd);
  ref_crossentropy_backward(rd, logits, targets, N, V, eps, IGNORE, dloss);
  snprintf(what, sizeof what, "crossentropy_backward N=%d V=%d eps=%.1f", N, V, eps);
  test_compare(what, d, rd, NV, ATOL, RTOL);
  test_poison(ctx, cf_at(bd, 0), NV);
  TEST_OK(cf_crossentropy_backward(ctx, cf_at(bd, 0), cf_at(bl, 0), cf_at(bt, 0), N, V, eps, IGNORE, dloss));
  float *d2 = test_read(ctx, cf_at(bd, 0), NV);
  TEST_ASSERT(!memcmp(d, d2, NV * sizeof(float)), "crossentropy_backward N=%d V=%d not bit-identical on repeat", N, V);

  /* backward in place (dlogits = logits) gives the same bits */
  TEST_OK(cf_crossentropy_backward(ctx, cf_at(bl, 0), cf_at(bl, 0), cf_at(bt, 0), N, V, eps, IGNORE, dloss));
  float *d3 = test_read(ctx, cf_at(bl, 0), NV);
  TEST_ASSERT(!memcmp(d, d3, NV * sizeof(float)), "crossentropy_backward N=%d V=%d in place differs", N, V);

  /* forward and backward in one launch: the references' tolerance, and on CPUs the separate
   * launches' bits; into a separate buffer, then in place (bl holds d3 now: restore the logits) */
  int cpu = (cf_context_device(ctx)->type & CL_DEVICE_TYPE_CPU) != 0;
  for (int inplace = 0; inplace < 2; inplace++) {
    TEST_OK(cf_write(ctx, cf_at(bl, 0), logits, NV));
    cl_mem dst = inplace ? bl : bd;
    if (!inplace) test_poison(ctx, cf_at(bd, 0), NV);
    test_poison(ctx, cf_at(blosses, 0), (size_t)N);
    test_poison(ctx, cf_at(bloss, 0), 1);
    TEST_OK(cf_crossentropy_forward_backward(ctx, cf_at(bloss, 0), cf_at(blosses, 0), cf_at(dst, 0), cf_at(bl, 0),
                                             cf_at(bt, 0), N, V, eps, IGNORE, dloss));
    float *fl = test_read(ctx, cf_at(blosses, 0), (size_t)N), *fm = test_read(ctx, cf_at(bloss, 0), 1);
    float *fd = test_read(ctx, cf_at(dst, 0), NV);
    snprintf(what, sizeof what, "crossentropy_forward_backward N=%d V=%d eps=%.1f%s losses", N, V, eps,
             inplace ? " in place" : "");
    test_compare(what, fl, rlosses, (size_t)N, ATOL, RTOL);
    snprintf(what, sizeof what, "crossentropy_forward_backward N=%d V=%d eps=%.1f%s mean", N, V, eps,
             inplace ? " in place" : "");
    test_compare(what, fm, &rloss, 1, ATOL, RTOL);
    snprintf(what, sizeof what, "crossentropy_forward_backward N=%d V=%d eps=%.1f%s dlogits", N, V, eps,
             inplace ? " in place" : "");
    test_compare(what, fd, rd, NV, ATOL, RTOL);
    if (cpu) {
      TEST_ASSERT(!memcmp(fl, losses, (size_t)N * sizeof(float)) && !memcmp(fm, loss, sizeof(float)),
                  "crossentropy_forward_backward N=%d V=%d%s: losses differ from the forward's", N, V,
                  inplace ? " in place" : "");
      TEST_ASSERT(!memcmp(fd, d, NV * sizeof(float)),
                  "crossentropy_forward_backward N=%d V=%d%s: dlogits differ from the backward's", N, V,
                  inplace ? " in place" : "");
    }
    free(fl), free(fm), free(fd);
  }

  free(logits), free(targets), free(losses), free(loss), free(losses2), free(loss2), free(rlosses);
  free(d), free(d2), free(d3), free(rd);
  cf_buffer_free(bl), cf_buffer_free(bt), cf_buffer_free(bloss), cf_buffer_free(blosses), cf_buffer_free(bd);
}

/* Central differences of L = w * mean loss (the reference forward, in double) with respect to
 * every logit. h = 2^-17 keeps x +- h exact in float for |x| < 64, so the reference sees exactly
 * the perturbed inputs. Both the device backward (dloss = w / count) and the reference backward
 * must match. */
static void fd_case(cf_context *ctx, int N, int V, float eps) {
  test_rng r = test_rng_seed(99 + V);
  size_t NV = (size_t)N * V;
  float *x = malloc(NV * sizeof *x);
  int *targets = malloc((size_t)N * sizeof *targets);
  test_fill_uniform(&r, x, NV, -3.0f, 3.0f);
  make_targets(&r, targets, N, V, 1);
  int count = ref_count(targets, N, V);
  double w = 0.5 + test_uniform(&r), h = ldexp(1.0, -17);
  double *fd = malloc(NV * sizeof *fd), *losses = malloc((size_t)N * sizeof *losses), lp, lm;
  for (size_t i = 0; i < NV; i++) {
    float keep = x[i];
    x[i] = (float)(keep + h);
    ref_crossentropy_forward(&lp, losses, x, targets, N, V, eps, IGNORE);
    x[i] = (float)(keep - h);
    ref_crossentropy_forward(&lm, losses, x, targets, N, V, eps, IGNORE);
    x[i] = keep;
    fd[i] = w * (lp - lm) / (2 * h);
  }
  double *rd = malloc(NV * sizeof *rd);
  ref_crossentropy_backward(rd, x, targets, N, V, eps, IGNORE, w / count);
  float *rdf = malloc(NV * sizeof *rdf);
  for (size_t i = 0; i < NV; i++) rdf[i] = (float)rd[i];
  char what[96];
  snprintf(what, sizeof what, "crossentropy ref backward vs finite differences N=%d V=%d eps=%.1f", N, V, eps);
  test_compare(what, rdf, fd, NV, 1e-7, 1e-5);  /* float rounding of the reference only */

  cl_mem bl = test_buffer(ctx, x, NV), bt = int_buffer(ctx, targets, (size_t)N), bd = test_buffer(ctx, NULL, NV);
  TEST_OK(cf_crossentropy_backward(ctx, cf_at(bd, 0), cf_at(bl, 0), cf_at(bt, 0), N, V, eps, IGNORE,
                                   (float)(w / count)));
  float *d = test_read(ctx, cf_at(bd, 0), NV);
  snprintf(what, sizeof what, "crossentropy device backward vs finite differences N=%d V=%d eps=%.1f", N, V, eps);
  test_compare(what, d, fd, NV, ATOL, RTOL);
  free(x), free(targets), free(fd), free(losses), free(rd), free(rdf), free(d);
  cf_buffer_free(bl), cf_buffer_free(bt), cf_buffer_free(bd);
}

static void test_count(void) {
  int t[] = {1, IGNORE, 3, IGNORE, 0};
  TEST_ASSERT(cf_crossentropy_count(t, 5, IGNORE) == 3, "cf_crossentropy_count");
  TEST_ASSERT(cf_crossentropy_count(t, 0, IGNORE) == 0, "cf_crossentropy_count N=0");
}

int main(void) {
  cf_context *ctx = test_context();
  test_count();
  float eps[] = {0.0f, 0.1f};
  for (int e = 0; e < 2; e++) {
    run_case(ctx, 1, 256, eps[e], 0, 4.0f, 1);
    run_case(ctx, 1, 1, eps[e], 0, 4.0f, 2);     /* V = 1: loss 0, grad 0 */
    run_case(ctx, 37, 256, eps[e], 1, 4.0f, 3);
    run_case(ctx, 23, 50, eps[e], 1, 4.0f, 4);   /* odd V below the work-group size */
    run_case(ctx, 9, 1001, eps[e], 1, 8.0f, 5);  /* V above the work-group size, not a multiple */
    run_case(ctx, 6, 1, eps[e], 1, 4.0f, 6);     /* every row ignored or V=1 */
  }
  run_case(ctx, 4, 50257, 0.1f, 1, 10.0f, 7);    /* a GPT-2-sized vocabulary */
  run_case(ctx, 4096, 256, 0.1f, 1, 6.0f, 8);    /* the large case */
  run_case(ctx, 13, 256, 0.1f, 1, 40.0f, 9);     /* wide logits: the max subtraction matters */
  fd_case(ctx, 6, 7, 0.0f);
  fd_case(ctx, 6, 7, 0.1f);
  fd_case(ctx, 4, 50, 0.1f);
  cf_context_free(ctx);
  return test_finish("test_crossentropy");
}
