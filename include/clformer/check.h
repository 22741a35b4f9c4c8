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

/* ---------- the op table: every device op described once ----------
 * A row names the op, the program holding its kernels, its tensors, its launcher and its double
 * reference (each behind a small adapter), its tolerance and the bytes it must move (or the FLOPs
 * it does, when compute-bound). The self-test,
 * tests/ops/test_ops.c and `bench kernels` all run from it. Adding an op: a kernel in cl/, a
 * launcher in src/ops/, a reference in src/ref/ and a row in src/check/ops_<family>.c. */

#define CF_OP_MAX_TENSORS 12

/* The dimensions a case is sized by (each op uses some): N rows of C channels; B sequences of T
 * tokens (N = B*T) with NH heads; V classes or vocabulary entries; S floats of scratch (from the
 * row's scratch function). */
typedef struct cf_op_dims { int N, C, B, T, NH, V; size_t S; } cf_op_dims;

/* What a tensor of a case holds before the op runs, and what the check compares after it. */
typedef enum cf_op_role {
  CF_OP_IN,       /* random input in [shift - scale, shift + scale) */
  CF_OP_INT,      /* integer input in [0, V) (tokens, targets) */
  CF_OP_TARGETS,  /* integer targets in [0, V), the third row ignored (-100) */
  CF_OP_MASK,     /* key padding mask (B, T): 1, with 0s at the right of even sequences, the left of odd ones */
  CF_OP_SAVED,    /* input computed by the row's prepare (statistics a forward saved) */
  CF_OP_SCRATCH,  /* device scratch: zeros at first, then whatever prepare and the op leave; not compared */
  CF_OP_OUT,      /* written by the op: poisoned with NaN first, compared */
  CF_OP_ACC,      /* random, added into by the op (+=), compared */
  CF_OP_INOUT,    /* random input the op overwrites in place, compared */
} cf_op_role;

typedef struct cf_op_tensor {
  const char *name;
  const char *size;   /* a product of dimension letters (N C B T H V S), times mult; "" is one element */
  int mult;           /* 0 counts as 1 */
  cf_op_role role;
  float scale, shift; /* CF_OP_IN/ACC/INOUT: scale 0 counts as 1 */
} cf_op_tensor;

struct cf_op;
/* One case of one op: its tensors on the device (each at an odd offset of its own buffer, which ends
 * where the tensor ends, so that an access past a tensor's end is past a buffer's: Oclgrind reports
 * it) and on the host, and the reference's results. */
typedef struct cf_op_case {
  cf_context *ctx;
  const struct cf_op *op;
  cf_op_dims d;
  cl_mem bufs[CF_OP_MAX_TENSORS];
  cf_mem dev[CF_OP_MAX_TENSORS];
  float *host[CF_OP_MAX_TENSORS];   /* values before the run (integer tensors hold int bits) */
  double *ref[CF_OP_MAX_TENSORS];   /* for compared tensors: the reference's result */
  size_t size[CF_OP_MAX_TENSORS];
} cf_op_case;
#define CF_OP_INTS(c, i) ((const int *)(const void *)(c)->host[i])

typedef struct cf_op {
  const char *name;                    /* the self-test row, e.g. "layernorm_forward" */
  const char *program;                 /* cl/<program>.cl */
  cf_op_tensor t[CF_OP_MAX_TENSORS];
  double atol, rtol;
  int param;                           /* a variant of the launcher (activation, decoupled, ...) */
  cf_op_dims check_dims, test_dims;    /* the self-test's small case; a larger one for the op tests */
  cf_status (*run)(const cf_op_case *c);            /* the launcher */
  void (*reference)(cf_op_case *c);                 /* into c->ref of the compared tensors */
  cf_status (*prepare)(cf_op_case *c);              /* optional: fills CF_OP_SAVED tensors (device) */
  size_t (*scratch)(const cf_op_dims *d);           /* optional: the S dimension */
  double (*bytes)(const cf_op_dims *d);             /* optional: bytes it must move at least */
  double (*flops)(const cf_op_dims *d);             /* optional: for a compute-bound op, its FLOPs */
} cf_op;

/* The table, in self-test order. */
int cf_op_count(void);
const cf_op *cf_op_get(int i);
const cf_op *cf_op_find(const char *name);

/* Allocate a case of op at dims d (pad: floats left free before each tensor, so offsets are odd),
 * fill it from seed, upload it, and run the row's prepare. */
cf_status cf_op_case_create(cf_context *ctx, const cf_op *op, const cf_op_dims *d, size_t pad, unsigned long long seed,
                            cf_op_case **out);
/* Put the case's tensors back as they were before any run (outputs poisoned again). */
cf_status cf_op_case_reset(cf_op_case *c);
/* Run the op once and wait for it; *ms its wall time. */
cf_status cf_op_case_run(cf_op_case *c, double *ms);
/* The compared tensors as the device left them, concatenated (n floats, malloc'd). */
cf_status cf_op_case_read(cf_op_case *c, float **out, size_t *n);
void cf_op_case_free(cf_op_case *c);  /* NULL is a no-op */
/* Run once unchecked (program builds), reset, run again timed, and add a row comparing every
 * compared tensor with the reference. Non-CF_OK only for an OpenCL or memory failure. */
cf_status cf_op_check(cf_context *ctx, const cf_op *op, const cf_op_dims *d, size_t pad, unsigned long long seed,
                      cf_selftest *t);

/* Every family's self-test plus GEMM, in one table. CF_OK unless OpenCL itself failed. */
cf_status cf_selftest_run(cf_context *ctx, cf_selftest *t);
void cf_selftest_print(const cf_selftest *t, FILE *f);
/* Run the self-test once per device, driver and kernel sources (the verdict is cached beside the
 * kernel binaries); CF_ERR_SELFTEST naming the failing ops when the device computes wrong. */
cf_status cf_selftest_ensure(cf_context *ctx);
/* Keep t's verdict where cf_selftest_ensure looks, when every op passed (a full run's table), so the
 * next `train` on this device does not run the self-test again. */
void cf_selftest_record(cf_context *ctx, const cf_selftest *t);

#endif
