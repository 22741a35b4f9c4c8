/* Inverted dropout keyed by Philox (kernels in cl/dropout.cl, mask in cl/dropout.clh), and its
 * host twin. p == 0 is an exact identity: nothing is launched. */
#include <limits.h>
#include "clformer/ops.h"
#include "clformer/base.h"
#include "ops/ops_internal.h"
#include "runtime/runtime.h"

/* Element i of a tensor that starts at element 4 * group0 of the whole (below 2^32: cf_dropout_check). */
int cf_dropout_keep(cf_dropout d, uint32_t i) {
  return cf_random_uniform(d.seed, d.step, d.tensor_id, 4u * d.group0 + i) >= d.p;
}

/* Shared with residual.c: validate p and n. */
cf_status cf_dropout_check(cf_dropout d, size_t n) {
  if (!(d.p >= 0.0f && d.p < 1.0f)) return CF_FAIL(CF_ERR_INVALID_ARG, "dropout: p must be in [0, 1), got %g", (double)d.p);
  if (n > INT_MAX) return CF_FAIL(CF_ERR_INVALID_ARG, "dropout: %zu elements: more than the kernels index", n);
  if (d.p > 0.0f && 4 * (uint64_t)d.group0 + n > ((uint64_t)1 << 32))
    return CF_FAIL(CF_ERR_INVALID_ARG, "dropout: elements %llu .. %llu of the masked whole: masks are keyed by 32-bit "
                   "element numbers", 4 * (unsigned long long)d.group0, 4 * (unsigned long long)d.group0 + n - 1);
  return CF_OK;
}

/* The grid of the flat dropout kernels of `program` for n elements: CF_DROPOUT_ITEM
 * (cl/dropout.clh) elements per work-item, 64 on CPUs, 4 elsewhere. Shared with residual.c and
 * attention.c. */
void cf_dropout_grid(cf_context *ctx, const char *program, size_t n, size_t *global, size_t *local) {
  int cpu = cf_context_cpu_shapes(ctx);
  size_t per = cpu ? 64 : 4;
  *global = (n + per - 1) / per;
  *local = cpu ? 16 : cf_program_wg(ctx, program);
}


/* out = in * mask * scale (out may be in); used by forward, backward and residual backward. */
cf_status cf_dropout_apply(cf_context *ctx, cf_mem out, cf_mem in, size_t n, cf_dropout d) {
  size_t global, local;
  cf_dropout_grid(ctx, "dropout", n, &global, &local);
  cf_launch L;
  cf_launch_begin(&L, ctx, "dropout", "dropout_forward");
  cf_arg_mem(&L, out);
  cf_arg_mem(&L, in);
  cf_arg_int(&L, (int)n);
  cf_arg_dropout(&L, d);
  return cf_launch_run(&L, 1, &global, &local);
}

cf_status cf_dropout_forward(cf_context *ctx, cf_mem x, size_t n, cf_dropout d) {
  CF_TRY(cf_dropout_check(d, n));
  if (d.p == 0.0f) return CF_OK;
  return cf_dropout_apply(ctx, x, x, n, d);
}

/* The mask is the forward's: regenerate it and apply it to the gradient. */
cf_status cf_dropout_backward(cf_context *ctx, cf_mem dx, size_t n, cf_dropout d) {
  return cf_dropout_forward(ctx, dx, n, d);
}
