/* clformer/check.h: the device self-test. */
#ifndef CLFORMER_CHECK_H
#define CLFORMER_CHECK_H

#include <stdio.h>
#include "clformer/runtime.h"

/* Device self-test: every kernel family runs small random cases against the library's
 * double-precision references and adds one row per op to a table. */
typedef struct cf_selftest_row {
  char op[48];       /* e.g. "layernorm_forward" */
  double max_err;    /* largest |out - ref| */
  double worst;      /* largest |out - ref| / (atol + rtol*|ref|); passes when <= 1 and finite */
  double atol, rtol;
  int pass;
  double ms;         /* wall time of the device side, ms */
} cf_selftest_row;

typedef struct cf_selftest {
  cf_selftest_row rows[128];
  int n;
} cf_selftest;

/* Compare n device outputs with a double reference under atol/rtol and append a row
 * (NaN or Inf never passes). Returns the row's pass flag. */
int cf_selftest_check(cf_selftest *t, const char *op, const float *out, const double *ref, size_t n,
                      double atol, double rtol, double ms);

/* Deterministic inputs for the self-tests: splitmix64, uniform in [-1, 1). */
float cf_selftest_random(unsigned long long *state);

int cf_selftest_failures(const cf_selftest *t);

/* Each family's part of the self-test. */
/* Small random cases of every op above, one row each. Returns non-CF_OK only for an OpenCL
 * failure; a numerical mismatch is a failing row. */
cf_status cf_selftest_elementwise(cf_context *ctx, cf_selftest *t);
/* Small random cases of layernorm_forward and layernorm_backward and of the fused pair, one row
 * each. Returns non-CF_OK only for an OpenCL failure; a numerical mismatch is a failing row. */
cf_status cf_selftest_layernorm(cf_context *ctx, cf_selftest *t);
/* Small random forward and backward cases (with key mask and dropout), one row each. */
cf_status cf_selftest_attention(cf_context *ctx, cf_selftest *t);
cf_status cf_selftest_embedding(cf_context *ctx, cf_selftest *t);
cf_status cf_selftest_crossentropy(cf_context *ctx, cf_selftest *t);
cf_status cf_selftest_optimizer(cf_context *ctx, cf_selftest *t);
/* Every family's self-test plus GEMM, in one table. CF_OK unless OpenCL itself failed. */
cf_status cf_selftest_run(cf_context *ctx, cf_selftest *t);
void cf_selftest_print(const cf_selftest *t, FILE *f);
/* Run the self-test once per device, driver and kernel sources (the verdict is cached beside the
 * kernel binaries); CF_ERR_SELFTEST naming the failing ops when the device computes wrong. */
cf_status cf_selftest_ensure(cf_context *ctx);

#endif
