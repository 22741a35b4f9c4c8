/* Shared test helpers: open the test device (skip with 77 when no OpenCL exists), seeded
 * random data, NaN poisoning, and the tolerance comparison every kernel test uses. */
#ifndef CLFORMER_TESTUTIL_H
#define CLFORMER_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include "clformer/clformer.h"

#define TEST_SKIP 77

/* Open the device named by $CLFORMER_DEVICE (else auto). Exits 77 (skip) when no OpenCL
 * platform is installed, 1 on any other failure. */
cf_context *test_context(void);

/* The defaults with a model of these sizes and no data file ("unused": the model tests feed their
 * own batches); set what else the test needs, then validate with test_validate. */
void test_model_config(cf_config *c, int layers, int d_model, int heads, int d_ff);
void test_validate(cf_config *c);  /* exits 1 on a config the validator refuses */
/* The model of config c (validated first) for batches of B sequences of T tokens, created with c->seed
 * and its weights initialised from `seed`; exits 1 on any failure. */
cf_model *test_model(cf_context *ctx, cf_config *c, int B, int T, uint64_t seed);

/* Deterministic generator (splitmix64) so every run sees the same "fresh" inputs per seed. */
typedef struct { unsigned long long s; } test_rng;
test_rng test_rng_seed(unsigned long long seed);
double test_uniform(test_rng *r);                 /* [0, 1) */
float test_randf(test_rng *r, float lo, float hi);
void test_fill_uniform(test_rng *r, float *x, size_t n, float lo, float hi);

/* Device buffer of n floats initialised from host (or poisoned with NaN when host is NULL). */
cl_mem test_buffer(cf_context *ctx, const float *host, size_t n);
/* Overwrite n floats at m with NaN, so an element the kernel forgets to write fails. */
void test_poison(cf_context *ctx, cf_mem m, size_t n);
/* Read n floats back into a malloc'd array. */
float *test_read(cf_context *ctx, cf_mem m, size_t n);

/* A device tensor of n floats at element offset `off` of its own NaN-poisoned buffer (the
 * offset convention is part of what kernel tests check), with host data copied in when given;
 * test_free_tensors() frees every one made so far. */
cf_mem test_tensor(cf_context *ctx, const float *host, size_t n, size_t off);
void test_free_tensors(void);
void test_upload(cf_context *ctx, cf_mem m, const float *host, size_t n);
double *test_dalloc(size_t n);  /* zeroed; n may be 0 */
float *test_falloc(size_t n);
/* A rerun's output must equal the first run's bit for bit. */
void test_check_same(const char *what, cf_context *ctx, cf_mem m, const float *first, size_t n);

/* |out - ref| <= atol + rtol*|ref| for every element, NaN/Inf never pass. Prints the first few
 * mismatches and the largest error, returns the number of failures (0 = pass). */
int test_compare(const char *what, const float *out, const double *ref, size_t n, double atol, double rtol);
/* Same, for a float reference. */
int test_compare_f(const char *what, const float *out, const float *ref, size_t n, double atol, double rtol);

/* Count a failure and print it; test_finish returns the exit code. */
extern int test_failures;
#define TEST_ASSERT(cond, ...)                                                       \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      test_failures++;                                                                \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                 \
      fprintf(stderr, __VA_ARGS__);                                                   \
      fputc('\n', stderr);                                                            \
    }                                                                                 \
  } while (0)
/* Abort the test on a failing clformer call. */
#define TEST_OK(expr)                                                                 \
  do {                                                                                \
    cf_status test_st_ = (expr);                                                      \
    if (test_st_ != CF_OK) {                                                          \
      fprintf(stderr, "FAIL %s:%d: %s returned %s\n", __FILE__, __LINE__, #expr,     \
              cf_status_str(test_st_));                                               \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)
int test_finish(const char *name);

/* Monotonic seconds. */
double test_now(void);

#endif
