#include "testutil.h"
#include <math.h>
#include <string.h>
#include <time.h>

int test_failures = 0;

cf_context *test_context(void) {
  cf_context *ctx;
  cf_status st = cf_context_create(NULL, &ctx);
  if (st == CL_PLATFORM_NOT_FOUND_KHR) {
    fprintf(stderr, "SKIP: no OpenCL platform installed\n");
    exit(TEST_SKIP);
  }
  if (st != CF_OK) {
    fprintf(stderr, "FAIL: cannot open an OpenCL device: %s\n", cf_status_str(st));
    exit(1);
  }
  return ctx;
}

test_rng test_rng_seed(unsigned long long seed) {
  test_rng r = {seed * 0x9e3779b97f4a7c15ULL + 1};
  return r;
}

static unsigned long long next64(test_rng *r) {
  unsigned long long z = (r->s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double test_uniform(test_rng *r) { return (double)(next64(r) >> 11) * (1.0 / 9007199254740992.0); }
float test_randf(test_rng *r, float lo, float hi) { return lo + (hi - lo) * (float)test_uniform(r); }
void test_fill_uniform(test_rng *r, float *x, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) x[i] = test_randf(r, lo, hi);
}

cl_mem test_buffer(cf_context *ctx, const float *host, size_t n) {
  cl_mem b;
  TEST_OK(cf_buffer_create(ctx, n * sizeof(float), &b));
  if (host) TEST_OK(cf_write(ctx, cf_at(b, 0), host, n));
  else test_poison(ctx, cf_at(b, 0), n);
  return b;
}

void test_poison(cf_context *ctx, cf_mem m, size_t n) {
  float *nan = malloc((n ? n : 1) * sizeof *nan);
  for (size_t i = 0; i < n; i++) nan[i] = NAN;
  TEST_OK(cf_write(ctx, m, nan, n));
  free(nan);
}

float *test_read(cf_context *ctx, cf_mem m, size_t n) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  TEST_OK(cf_read(ctx, m, x, n));
  return x;
}

static int compare(const char *what, const float *out, const double *refd, const float *reff, size_t n, double atol,
                   double rtol) {
  int bad = 0;
  double max_err = 0;
  size_t max_i = 0;
  for (size_t i = 0; i < n; i++) {
    double ref = refd ? refd[i] : (double)reff[i];
    double err = fabs((double)out[i] - ref);
    int ok = isfinite(out[i]) && isfinite(ref) && err <= atol + rtol * fabs(ref);
    if (!isfinite(err) || err > max_err) { max_err = isfinite(err) ? err : INFINITY; max_i = i; }
    if (!ok) {
      if (bad < 5) fprintf(stderr, "  %s[%zu]: got %.9g, want %.9g (err %.3g)\n", what, i, out[i], ref, err);
      bad++;
    }
  }
  if (bad) fprintf(stderr, "FAIL %s: %d of %zu elements out of tolerance (atol %g, rtol %g); largest error %.3g at %zu\n",
                   what, bad, n, atol, rtol, max_err, max_i);
  else printf("ok   %s: %zu elements, largest error %.3g\n", what, n, max_err);
  test_failures += bad ? 1 : 0;
  return bad;
}

int test_compare(const char *what, const float *out, const double *ref, size_t n, double atol, double rtol) {
  return compare(what, out, ref, NULL, n, atol, rtol);
}
int test_compare_f(const char *what, const float *out, const float *ref, size_t n, double atol, double rtol) {
  return compare(what, out, NULL, ref, n, atol, rtol);
}

int test_finish(const char *name) {
  if (test_failures) {
    fprintf(stderr, "%s: %d check(s) FAILED\n", name, test_failures);
    return 1;
  }
  printf("%s: all checks passed\n", name);
  return 0;
}

double test_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static cl_mem tensors[128];
static int ntensors;

cf_mem test_tensor(cf_context *ctx, const float *host, size_t n, size_t off) {
  if (ntensors == (int)(sizeof tensors / sizeof *tensors)) {
    fprintf(stderr, "FAIL: test_tensor: more than %d live tensors\n", ntensors);
    exit(1);
  }
  cl_mem b = test_buffer(ctx, NULL, n + off);
  if (host) TEST_OK(cf_write(ctx, cf_at(b, off), host, n));
  tensors[ntensors++] = b;
  return cf_at(b, off);
}

void test_free_tensors(void) {
  while (ntensors) cf_buffer_free(tensors[--ntensors]);
}

void test_upload(cf_context *ctx, cf_mem m, const float *host, size_t n) { TEST_OK(cf_write(ctx, m, host, n)); }
double *test_dalloc(size_t n) { return calloc(n ? n : 1, sizeof(double)); }
float *test_falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

void test_check_same(const char *what, cf_context *ctx, cf_mem m, const float *first, size_t n) {
  float *again = test_read(ctx, m, n);
  TEST_ASSERT(memcmp(again, first, n * sizeof *first) == 0, "%s: rerun is not bit-identical", what);
  free(again);
}

void test_model_config(cf_config *c, int layers, int d_model, int heads, int d_ff) {
  cf_config_defaults(c);
  snprintf(c->data.train, sizeof c->data.train, "unused");
  c->model.layers = layers;
  c->model.d_model = d_model;
  c->model.heads = heads;
  c->model.d_ff = d_ff;
}

void test_validate(cf_config *c) {
  if (cf_config_validate(c) == CF_OK) return;
  fprintf(stderr, "FAIL the test's config: %s\n", cf_last_error());
  exit(1);
}

cf_model *test_model(cf_context *ctx, cf_config *c, int B, int T, uint64_t seed) {
  test_validate(c);
  cf_model *m;
  TEST_OK(cf_model_create(ctx, &c->model, &c->optim, c->seed, B, T, &m));
  TEST_OK(cf_model_init(m, seed));
  return m;
}
