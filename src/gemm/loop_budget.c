/* The loop-trip budget of a device's work-items (loop_budget.h): gemm_loop_probe in cl/gemm.cl,
 * run once per context, its answer kept in the context's extension slot. */
#include <stdlib.h>
#include "gemm/loop_budget.h"
#include "runtime/runtime.h"

/* What the probe's one item is asked to run: past llvmpipe's 65535 with room to spare, and short
 * where nothing stops it (about half a millisecond on PoCL). */
#define PROBE_TRIPS (1u << 18)

typedef struct loop_state {
  int probed;     /* the probe ran (or a test set the budget) */
  size_t budget;  /* 0: no limit */
} loop_state;
static const char loop_key;  /* its address names the slot */

static cf_status loop_state_get(cf_context *ctx, loop_state **out) {
  return cf_context_ext_zeroed(ctx, &loop_key, sizeof **out, (void **)out);
}

/* The trips the one item of gemm_loop_probe made of PROBE_TRIPS. */
static cf_status probe_run(cf_context *ctx, unsigned *trips) {
  cl_mem buf = NULL;
  CF_TRY(cf_buffer_create(ctx, 4 * sizeof(unsigned), &buf));
  unsigned data[4] = {0, 0, 1, 1};  /* out[0], a spare, in[0], in[1] */
  cf_status st = cf_write(ctx, cf_at(buf, 0), data, 4);
  if (st == CF_OK) {
    cf_launch L;
    cf_launch_begin(&L, ctx, "gemm", "gemm_loop_probe");
    cf_arg_mem(&L, cf_at(buf, 0));
    cf_arg_mem(&L, cf_at(buf, 2));
    cf_arg_uint(&L, PROBE_TRIPS);
    size_t global[1] = {1}, local[1] = {1};
    st = cf_launch_run(&L, 1, global, local);
  }
  if (st == CF_OK) st = cf_read(ctx, cf_at(buf, 0), data, 4);
  cf_buffer_free(buf);
  if (st == CF_OK) *trips = data[0];
  return st;
}

cf_status cf_gemm_loop_budget(cf_context *ctx, size_t *out) {
  loop_state *s;
  CF_TRY(loop_state_get(ctx, &s));
  if (!s->probed) {
    unsigned trips = 0;
    CF_TRY(probe_run(ctx, &trips));
    s->probed = 1;
    s->budget = trips < PROBE_TRIPS ? trips : 0;
    if (s->budget)
      cf_log(2, "note: %s stops a work-item's loops after %zu trips in all (Mesa llvmpipe's loop limiter); "
             "GEMM work is split to stay under it", ctx->info.name, s->budget);
  }
  *out = s->budget;
  return CF_OK;
}

cf_status cf_gemm_loop_budget_set(cf_context *ctx, size_t budget) {
  loop_state *s;
  CF_TRY(loop_state_get(ctx, &s));
  s->probed = 1;
  s->budget = budget;
  return CF_OK;
}
