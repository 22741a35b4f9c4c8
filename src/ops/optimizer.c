/* Launchers for the optimizer, norm and clipping kernels (cl/optimizer.cl). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "clformer/ops.h"
#include "runtime/runtime.h"

/* Blocks of about this many elements per work-group for the norms; capped so the finishing
 * pass stays one small group. Both depend on n only, so the summation order is fixed. */
#define NORM_BLOCK_ELEMS 4096
#define NORM_MAX_BLOCKS 1024
#define SEGMENT_MAX_BLOCKS 256

static cf_status check_n(const char *what, size_t n) {
  if (n > UINT32_MAX) return CF_FAIL(CF_ERR_INVALID_ARG, "%s: n = %zu exceeds 2^32 - 1", what, n);
  return CF_OK;
}

static int is_cpu(const cf_context *ctx) { return cf_context_cpu_shapes(ctx); }

static size_t elementwise_local(cf_context *ctx) { return cf_program_wg(ctx, "optimizer"); }

/* The norm kernels' grid for nb blocks: on CPUs one item per block (cl/optimizer.cl), in groups
 * of `cpu_local`; else one work-group of CF_WG per block. */
static void block_grid(cf_context *ctx, size_t nb, size_t cpu_local, size_t *global, size_t *local) {
  *local = is_cpu(ctx) ? cpu_local : cf_program_wg(ctx, "optimizer");
  *global = is_cpu(ctx) ? nb : nb * *local;
}

cf_status cf_adam_update(cf_context *ctx, cf_mem params, cf_mem grads, cf_mem m, cf_mem v, size_t n,
                         const cf_adam *h, cf_mem grad_norm, float clip_norm) {
  CF_TRY(check_n("cf_adam_update", n));
  if (!h || h->step < 1) return CF_FAIL(CF_ERR_INVALID_ARG, "cf_adam_update: step must be >= 1 (1-based)");
  double bc1 = 1.0 - pow((double)h->beta1, h->step), bc2 = 1.0 - pow((double)h->beta2, h->step);
  if (!(bc1 > 0 && bc2 > 0))
    return CF_FAIL(CF_ERR_INVALID_ARG, "cf_adam_update: betas (%g, %g) must lie in [0, 1)", h->beta1, h->beta2);
  int use_norm = grad_norm.buf != NULL && clip_norm > 0;
  cf_launch L;
  cf_launch_begin(&L, ctx, "optimizer", "adam_update");
  CF_ARG_MEMS(&L, params, grads, m, v);
  cf_arg_uint(&L, (unsigned)n);
  cf_arg_float(&L, h->lr);
  cf_arg_float(&L, h->beta1);
  cf_arg_float(&L, h->beta2);
  cf_arg_float(&L, h->eps);
  cf_arg_float(&L, h->weight_decay);
  cf_arg_int(&L, h->decoupled != 0);
  cf_arg_float(&L, (float)bc1);
  cf_arg_float(&L, (float)bc2);
  cf_arg_mem(&L, grad_norm);
  cf_arg_int(&L, use_norm);
  cf_arg_float(&L, clip_norm);
  /* CPUs: 16 elements per work-item (cl/optimizer.cl) */
  size_t local = is_cpu(ctx) ? 8 : elementwise_local(ctx), global = is_cpu(ctx) ? (n + 15) / 16 : n;
  return cf_launch_run(&L, 1, &global, &local);
}

cf_status cf_sgd_update(cf_context *ctx, cf_mem params, cf_mem grads, cf_mem momentum_buf, size_t n, float lr,
                        float momentum, float weight_decay, cf_mem grad_norm, float clip_norm) {
  CF_TRY(check_n("cf_sgd_update", n));
  if (momentum != 0.0f && !momentum_buf.buf)
    return CF_FAIL(CF_ERR_INVALID_ARG, "cf_sgd_update: momentum %g needs a momentum buffer", momentum);
  int use_norm = grad_norm.buf != NULL && clip_norm > 0;
  cf_launch L;
  cf_launch_begin(&L, ctx, "optimizer", "sgd_update");
  CF_ARG_MEMS(&L, params, grads, momentum_buf);
  cf_arg_int(&L, momentum_buf.buf != NULL);
  cf_arg_uint(&L, (unsigned)n);
  cf_arg_float(&L, lr);
  cf_arg_float(&L, momentum);
  cf_arg_float(&L, weight_decay);
  cf_arg_mem(&L, grad_norm);
  cf_arg_int(&L, use_norm);
  cf_arg_float(&L, clip_norm);
  size_t local = elementwise_local(ctx);
  return cf_launch_run(&L, 1, &n, &local);
}

cf_status cf_clip_by_norm(cf_context *ctx, cf_mem x, size_t n, cf_mem norm, float clip_norm) {
  CF_TRY(check_n("cf_clip_by_norm", n));
  if (!(clip_norm > 0)) return CF_OK;
  if (!norm.buf) return CF_FAIL(CF_ERR_INVALID_ARG, "cf_clip_by_norm: no norm buffer");
  cf_launch L;
  cf_launch_begin(&L, ctx, "optimizer", "clip_by_norm");
  cf_arg_mem(&L, x);
  cf_arg_uint(&L, (unsigned)n);
  cf_arg_mem(&L, norm);
  cf_arg_float(&L, clip_norm);
  size_t local = elementwise_local(ctx);
  return cf_launch_run(&L, 1, &n, &local);
}

/* ---------- norms ---------- */

static size_t blocks_for(size_t n, size_t cap) {
  size_t nb = (n + NORM_BLOCK_ELEMS - 1) / NORM_BLOCK_ELEMS;
  return nb < 1 ? 1 : nb > cap ? cap : nb;
}

size_t cf_norm_scratch_floats(size_t n) { return blocks_for(n, NORM_MAX_BLOCKS); }

cf_status cf_global_norm(cf_context *ctx, cf_mem out, cf_mem x, size_t n, cf_mem scratch) {
  CF_TRY(check_n("cf_global_norm", n));
  size_t wg = cf_program_wg(ctx, "optimizer"), nb = blocks_for(n, NORM_MAX_BLOCKS);
  cf_launch L;
  cf_launch_begin(&L, ctx, "optimizer", "sumsq_partials");
  cf_arg_mem(&L, scratch);
  cf_arg_mem(&L, x);
  cf_arg_uint(&L, (unsigned)n);
  cf_arg_uint(&L, (unsigned)nb);
  size_t global, local;
  block_grid(ctx, nb, 4, &global, &local);
  CF_TRY(cf_launch_run(&L, 1, &global, &local));
  cf_launch_begin(&L, ctx, "optimizer", "norm_finish");
  cf_arg_mem(&L, out);
  cf_arg_mem(&L, scratch);
  cf_arg_uint(&L, (unsigned)nb);
  if (is_cpu(ctx)) wg = 1;
  return cf_launch_run(&L, 1, &wg, &wg);
}

static size_t segment_blocks(size_t count) { return count ? blocks_for(count, SEGMENT_MAX_BLOCKS) : 0; }

/* scratch layout: [partials: nb floats][block table: 4*nb uints][segment table: 2*nseg uints] */
size_t cf_segment_norms_scratch_floats(const size_t *counts, int nseg) {
  size_t nb = 0;
  for (int s = 0; s < nseg; s++) nb += segment_blocks(counts[s]);
  return 5 * nb + 2 * (size_t)(nseg > 0 ? nseg : 0);
}

cf_status cf_segment_norms(cf_context *ctx, cf_mem out, cf_mem x, const size_t *offsets, const size_t *counts,
                           int nseg, cf_mem scratch) {
  if (nseg <= 0) return nseg == 0 ? CF_OK : CF_FAIL(CF_ERR_INVALID_ARG, "cf_segment_norms: nseg = %d", nseg);
  size_t nb = 0;
  for (int s = 0; s < nseg; s++) {
    if (offsets[s] + counts[s] > UINT32_MAX || x.off + offsets[s] + counts[s] > UINT32_MAX)
      return CF_FAIL(CF_ERR_INVALID_ARG, "cf_segment_norms: segment %d ends beyond 2^32 elements", s);
    nb += segment_blocks(counts[s]);
  }
  size_t ntable = 4 * nb + 2 * (size_t)nseg;
  uint32_t *table = malloc(ntable * sizeof *table);
  if (!table) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  uint32_t *blk = table, *seg = table + 4 * nb;
  size_t g = 0;
  for (int s = 0; s < nseg; s++) {
    size_t k = segment_blocks(counts[s]);
    seg[2 * s] = (uint32_t)g;
    seg[2 * s + 1] = (uint32_t)k;
    for (size_t j = 0; j < k; j++, g++) {
      blk[4 * g] = (uint32_t)offsets[s];
      blk[4 * g + 1] = (uint32_t)counts[s];
      blk[4 * g + 2] = (uint32_t)j;
      blk[4 * g + 3] = (uint32_t)k;
    }
  }
  cf_status st = cf_write(ctx, cf_shift(scratch, nb), table, ntable);
  free(table);
  CF_TRY(st);
  cf_launch L;
  if (nb > 0) {
    cf_launch_begin(&L, ctx, "optimizer", "segment_sumsq_partials");
    CF_ARG_MEMS(&L, scratch, cf_shift(scratch, nb), x);
    size_t global, local;
    block_grid(ctx, nb, 1, &global, &local);  /* exactly nb items: the kernel has no guard */
    CF_TRY(cf_launch_run(&L, 1, &global, &local));
  }
  cf_launch_begin(&L, ctx, "optimizer", "segment_norms_finish");
  CF_ARG_MEMS(&L, out, scratch, cf_shift(scratch, 5 * nb));
  cf_arg_int(&L, nseg);
  size_t global = (size_t)nseg, local = cf_program_local(ctx, "optimizer", 64);
  return cf_launch_run(&L, 1, &global, &local);
}

/* ---------- the non-finite watch ---------- */

cf_status cf_divergence_watch(cf_context *ctx, cf_mem state, cf_mem loss, cf_mem norm, float loss_limit) {
  cf_launch L;
  cf_launch_begin(&L, ctx, "optimizer", "divergence_watch");
  CF_ARG_MEMS(&L, state, loss, norm);
  cf_arg_float(&L, loss_limit);
  size_t one = 1;
  return cf_launch_run(&L, 1, &one, &one);
}

cf_status cf_segment_table(const size_t *offsets, const size_t *counts, int nseg, uint32_t *table) {
  for (int s = 0; s < nseg; s++) {
    if (offsets[s] + counts[s] > UINT32_MAX)
      return CF_FAIL(CF_ERR_INVALID_ARG, "cf_segment_table: segment %d ends beyond 2^32 elements", s);
    table[2 * s] = (uint32_t)offsets[s];
    table[2 * s + 1] = (uint32_t)counts[s];
  }
  return CF_OK;
}

cf_status cf_nonfinite_segments(cf_context *ctx, cf_mem flags, cf_mem state, cf_mem x, cf_mem table, int nseg) {
  if (nseg <= 0) return nseg == 0 ? CF_OK : CF_FAIL(CF_ERR_INVALID_ARG, "cf_nonfinite_segments: nseg = %d", nseg);
  cf_launch L;
  cf_launch_begin(&L, ctx, "optimizer", "nonfinite_segments");
  CF_ARG_MEMS(&L, flags, state, x, table);
  cf_arg_int(&L, nseg);
  size_t global = (size_t)nseg;
  return cf_launch_run(&L, 1, &global, NULL);
}
