/* Launchers for the fused softmax cross-entropy kernels (cl/crossentropy.cl). */
#include "clformer/ops.h"
#include "runtime/runtime.h"

/* On CPUs the row kernels take one row per work-item (cl/crossentropy.cl): N items in groups of
 * 8, and the mean one item; else one work-group of CF_WG per row. */
static int is_cpu(const cf_context *ctx) { return cf_context_cpu_shapes(ctx); }

static void row_grid(cf_context *ctx, int N, size_t *global, size_t *local) {
  *local = is_cpu(ctx) ? 32 : cf_program_wg(ctx, "crossentropy");
  *global = is_cpu(ctx) ? (size_t)N : (size_t)N * *local;
}

static cf_status check_args(int N, int V, float smoothing) {
  if (N <= 0 || V <= 0) return CF_FAIL(CF_ERR_INVALID_ARG, "crossentropy: N=%d V=%d must be positive", N, V);
  if ((long long)N * V > 0xffffffffLL) return CF_FAIL(CF_ERR_INVALID_ARG, "crossentropy: N*V = %lld too large",
                                                      (long long)N * V);
  if (!(smoothing >= 0.0f && smoothing <= 1.0f))
    return CF_FAIL(CF_ERR_INVALID_ARG, "crossentropy: smoothing %g outside [0, 1]", smoothing);
  return CF_OK;
}

/* loss[0] = mean of the counted rows' losses: one work-group (one work-item on CPUs). */
static cf_status launch_mean(cf_context *ctx, cf_mem loss, cf_mem losses, cf_mem targets, int N, int V,
                             int ignore_index) {
  size_t wg = is_cpu(ctx) ? 1 : cf_program_wg(ctx, "crossentropy");
  cf_launch L;
  cf_launch_begin(&L, ctx, "crossentropy", "crossentropy_mean");
  CF_ARG_MEMS(&L, loss, losses, targets);
  CF_ARG_INTS(&L, N, V, ignore_index);
  return cf_launch_run(&L, 1, &wg, &wg);
}

cf_status cf_crossentropy_forward(cf_context *ctx, cf_mem loss, cf_mem losses, cf_mem logits, cf_mem targets, int N,
                                  int V, float smoothing, int ignore_index) {
  CF_TRY(check_args(N, V, smoothing));
  cf_launch L;
  cf_launch_begin(&L, ctx, "crossentropy", "crossentropy_forward");
  CF_ARG_MEMS(&L, losses, logits, targets);
  cf_arg_int(&L, V);
  cf_arg_float(&L, smoothing);
  cf_arg_int(&L, ignore_index);
  cf_arg_int(&L, N);
  size_t global, local;
  row_grid(ctx, N, &global, &local);
  CF_TRY(cf_launch_run(&L, 1, &global, &local));
  return launch_mean(ctx, loss, losses, targets, N, V, ignore_index);
}

cf_status cf_crossentropy_forward_backward(cf_context *ctx, cf_mem loss, cf_mem losses, cf_mem dlogits, cf_mem logits,
                                           cf_mem targets, int N, int V, float smoothing, int ignore_index,
                                           float dloss) {
  CF_TRY(check_args(N, V, smoothing));
  cf_launch L;
  cf_launch_begin(&L, ctx, "crossentropy", "crossentropy_forward_backward");
  CF_ARG_MEMS(&L, losses, dlogits, logits, targets);
  cf_arg_int(&L, V);
  cf_arg_float(&L, smoothing);
  cf_arg_int(&L, ignore_index);
  cf_arg_float(&L, dloss);
  cf_arg_int(&L, N);
  size_t global, local;
  row_grid(ctx, N, &global, &local);
  CF_TRY(cf_launch_run(&L, 1, &global, &local));
  return launch_mean(ctx, loss, losses, targets, N, V, ignore_index);
}

cf_status cf_crossentropy_backward(cf_context *ctx, cf_mem dlogits, cf_mem logits, cf_mem targets, int N, int V,
                                   float smoothing, int ignore_index, float dloss) {
  CF_TRY(check_args(N, V, smoothing));
  cf_launch L;
  cf_launch_begin(&L, ctx, "crossentropy", "crossentropy_backward");
  CF_ARG_MEMS(&L, dlogits, logits, targets);
  cf_arg_int(&L, V);
  cf_arg_float(&L, smoothing);
  cf_arg_int(&L, ignore_index);
  cf_arg_float(&L, dloss);
  cf_arg_int(&L, N);
  size_t global, local;
  row_grid(ctx, N, &global, &local);
  return cf_launch_run(&L, 1, &global, &local);
}

int cf_crossentropy_count(const int *targets, int N, int ignore_index) {
  int count = 0;
  for (int n = 0; n < N; n++) count += targets[n] != ignore_index;
  return count;
}
