/* Fused attention (cl/attention_fused.cl): the launch plan. Each kernel takes work-groups of G
 * rows (query rows for the forward and dq, key rows for dk/dv) and streams tiles of T2 rows of the
 * other side through local memory; G and T2 come from the kernel's CL_KERNEL_WORK_GROUP_SIZE and
 * the device's CL_DEVICE_LOCAL_MEM_SIZE. A device whose work-items may only loop so long (Mesa
 * llvmpipe, gemm/loop_budget.h) gets the streamed range split over several launches, the running
 * state kept in the outputs between them.
 *
 * Not here: the materialised path (attention.c), which the model can still choose. */
#include <math.h>
#include "clformer/ops.h"
#include "gemm/loop_budget.h"
#include "ops/ops_internal.h"
#include "runtime/runtime.h"

#define PROGRAM "attention_fused"
#define TILE_MAX 64 /* rows per group and per streamed tile at most (GPU shapes) */
#define CPU_LANES 16 /* rows per item in the CPU shapes (ATTF_LANES) */
#define CPU_GROUP 1  /* items per work-group in the CPU shapes */

size_t cf_attention_fused_scratch_floats(const cf_attention_dims *d) {
  if (!d || d->B <= 0 || d->NH <= 0 || d->Tq <= 0) return 0;
  return (size_t)d->B * d->NH * d->Tq;
}

static cf_status check_dims(const cf_attention_dims *d, cf_dropout drop) {
  if (!d) return CF_FAIL(CF_ERR_INVALID_ARG, "fused attention: no dimensions");
  if (d->B <= 0 || d->Tq <= 0 || d->Tk <= 0 || d->NH <= 0 || d->HS <= 0)
    return CF_FAIL(CF_ERR_INVALID_ARG, "fused attention: dimensions must be positive (B %d, Tq %d, Tk %d, NH %d, HS %d)",
                   d->B, d->Tq, d->Tk, d->NH, d->HS);
  double width = (double)d->NH * d->HS;
  if (d->ldq < width || d->ldk < width || d->ldv < width || d->ldo < width)
    return CF_FAIL(CF_ERR_INVALID_ARG, "fused attention: row strides (q %d, k %d, v %d, out %d) must hold NH x HS = %.0f",
                   d->ldq, d->ldk, d->ldv, d->ldo, width);
  double rows_q = (double)d->B * d->Tq, rows_k = (double)d->B * d->Tk, lim = 2147483647.0;
  if (rows_q * d->ldq > lim || rows_q * d->ldo > lim || rows_k * d->ldk > lim || rows_k * d->ldv > lim)
    return CF_FAIL(CF_ERR_INVALID_ARG, "fused attention: a tensor of more than 2^31 elements");
  if (!isfinite(d->scale)) return CF_FAIL(CF_ERR_INVALID_ARG, "fused attention: scale %g is not finite", (double)d->scale);
  if (!(drop.p >= 0.0f && drop.p < 1.0f))
    return CF_FAIL(CF_ERR_INVALID_ARG, "fused attention: dropout probability %g is not in [0, 1)", (double)drop.p);
  if (drop.p > 0.0f && (double)d->B * d->NH * d->Tq * d->Tk > 4294967296.0)
    return CF_FAIL(CF_ERR_INVALID_ARG, "fused attention: dropout indexes B x NH x Tq x Tk elements, more than 2^32");
  return CF_OK;
}

/* A kernel's work-group: G rows, tiles of T2 streamed rows, n launches of `chunk` streamed rows.
 * Local floats: a*G + b*T2 + c*G*T2 + e*T2 (the kernel's arrays, see cl/attention_fused.cl). */
typedef struct tiling { size_t G, T2, chunk; } tiling;
typedef struct local_use { size_t a, b, c, e; } local_use;

static size_t local_floats(local_use u, size_t G, size_t T2) { return u.a * G + u.b * T2 + u.c * G * T2 + u.e * T2; }
static size_t pow2_at_least(size_t n, size_t cap) {
  size_t p = 1;
  while (p < n && p < cap) p *= 2;
  return p;
}

/* The streamed rows a launch may take: all of them, unless the device stops a work-item's loops
 * (gemm/loop_budget.h); then as many as the trips an item makes per streamed row and per launch
 * (counted on cl/attention_fused.cl's shapes) leave room for, in whole tiles (T2 shrinks when not
 * even one fits). */
static cf_status plan_chunk(cf_context *ctx, size_t streamed, size_t HS, tiling *t) {
  size_t budget = 0, chunk = streamed;
  CF_TRY(cf_gemm_loop_budget(ctx, &budget));
  if (budget) {
    size_t per = 2 * HS + 4 + (2 * HS + t->G - 1) / t->G + (HS + 1) / 2, fixed = 4 * HS + 16;
    if (cf_context_cpu_shapes(ctx)) { /* per 8 rows: two channel loops, 8 x 16 dropout draws; packs of 16 rows, */
      per = (2 * HS + 8 * CPU_LANES + 16) / 8 + 1;  /* and the dq kernel's D of 16 rows in its first launch */
      fixed = 7 * CPU_LANES * HS + 96;
    }
    chunk = budget * 3 / 4 > fixed + per ? (budget * 3 / 4 - fixed) / per : 1;
    while (t->T2 > chunk) t->T2 /= 2;
    chunk = chunk / t->T2 * t->T2;
  }
  t->chunk = chunk < streamed ? chunk : streamed;
  return CF_OK;
}

/* G and T2 as large as TILE_MAX, the kernel, the device and the row counts allow, halved (the
 * larger first) until local memory holds them; then the streamed rows a launch may take. */
static cf_status plan_tiles(cf_context *ctx, const char *kernel, size_t rows, size_t streamed, size_t HS, local_use u,
                            tiling *out) {
  if (cf_context_cpu_shapes(ctx)) { /* an item per 16 rows, its own slice of local memory */
    size_t floats = (u.a / HS) * CPU_GROUP * CPU_LANES * HS;
    if (floats * sizeof(float) > ctx->info.local_mem)
      return CF_FAIL(CF_ERR_INVALID_ARG, "fused attention: head size %zu needs more local memory than %s has (%llu bytes)",
                     HS, ctx->info.name, ctx->info.local_mem);
    out->G = CPU_GROUP;
    out->T2 = 1;
    return plan_chunk(ctx, streamed, HS, out);
  }
  cl_kernel k;
  size_t kwg = 0;
  CF_TRY(cf_kernel_get(ctx, PROGRAM, kernel, &k));
  CF_CHECK(clGetKernelWorkGroupInfo(k, ctx->info.device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kwg, &kwg, NULL));
  size_t cap = TILE_MAX;
  if (kwg < cap) cap = kwg;
  if (ctx->max_item[0] < cap) cap = ctx->max_item[0];
  if (ctx->info.max_work_group < cap) cap = ctx->info.max_work_group;
  size_t G = pow2_at_least(rows, cap), T2 = pow2_at_least(streamed, TILE_MAX);
  while (G > cap) G /= 2;
  while (local_floats(u, G, T2) * sizeof(float) > ctx->info.local_mem && (G > 1 || T2 > 1)) {
    if (T2 >= G && T2 > 1) T2 /= 2;
    else G /= 2;
  }
  if (local_floats(u, G, T2) * sizeof(float) > ctx->info.local_mem)
    return CF_FAIL(CF_ERR_INVALID_ARG, "fused attention: head size %zu needs more local memory than %s has (%llu bytes)",
                   HS, ctx->info.name, ctx->info.local_mem);
  out->G = G;
  out->T2 = T2;
  return plan_chunk(ctx, streamed, HS, out);
}

/* The kernel's local arrays. In the CPU shapes the first `own` of them hold each item's 16 rows
 * transposed (CPU_LANES x HS floats an item), the others are unused (one float). */
static void arg_locals(cf_launch *L, size_t n, const size_t *floats, size_t own, size_t HS) {
  int cpu = cf_context_cpu_shapes(L->ctx);
  for (size_t i = 0; i < n; i++)
    cf_arg_local(L, (cpu ? (i < own ? CPU_GROUP * CPU_LANES * HS : 1) : floats[i]) * sizeof(float));
}

/* Work-groups of G items, one per tile of G rows of each (sequence, head); in the CPU shapes an
 * item per 16 rows, CPU_GROUP to a group. */
static size_t grid_items(cf_context *ctx, const cf_attention_dims *d, size_t rows, size_t G) {
  if (cf_context_cpu_shapes(ctx)) {
    size_t items = (size_t)d->B * d->NH * ((rows + CPU_LANES - 1) / CPU_LANES);
    return (items + CPU_GROUP - 1) / CPU_GROUP * CPU_GROUP;
  }
  return (size_t)d->B * d->NH * ((rows + G - 1) / G) * G;
}

/* The arguments every kernel shares after its tensors: the key lengths and the dimensions. */
static void arg_dims(cf_launch *L, cf_mem key_len, cf_mem any, const cf_attention_dims *d) {
  cf_arg_mem(L, key_len.buf ? key_len : any); /* any valid buffer when there is none */
  CF_ARG_INTS(L, key_len.buf != NULL, d->B, d->NH, d->Tq, d->Tk, d->HS, d->causal, d->ldq, d->ldk, d->ldv, d->ldo);
}

cf_status cf_attention_fused_forward(cf_context *ctx, cf_mem out, cf_mem lse, cf_mem scratch, cf_mem q, cf_mem k,
                                     cf_mem v, cf_mem key_len, const cf_attention_dims *d, cf_dropout drop) {
  CF_TRY(check_dims(d, drop));
  size_t HS = (size_t)d->HS;
  local_use u = {2 * HS, 2 * HS, 1, 0}; /* qs, acc; ks, vs; ss */
  tiling t;
  CF_TRY(plan_tiles(ctx, "attention_fused_forward", (size_t)d->Tq, (size_t)d->Tk, HS, u, &t));
  size_t local = t.G, global = grid_items(ctx, d, (size_t)d->Tq, t.G);
  for (size_t c = 0; c < (size_t)d->Tk; c += t.chunk) {
    size_t end = c + t.chunk < (size_t)d->Tk ? c + t.chunk : (size_t)d->Tk;
    cf_launch L;
    cf_launch_begin(&L, ctx, PROGRAM, "attention_fused_forward");
    CF_ARG_MEMS(&L, out, lse, scratch, q, k, v);
    arg_dims(&L, key_len, q, d);
    CF_ARG_INTS(&L, (int)t.T2, (int)c, (int)end, c == 0, end == (size_t)d->Tk);
    cf_arg_float(&L, d->scale);
    cf_arg_dropout(&L, drop);
    arg_locals(&L, 5, (const size_t[]){HS * t.G, HS * t.G, t.T2 * HS, t.T2 * HS, t.T2 * t.G}, 2, HS);
    CF_TRY(cf_launch_run(&L, 1, &global, &local));
  }
  return CF_OK;
}

/* The two backward kernels' tilings, planned before anything is launched. */
static cf_status plan_backward(cf_context *ctx, const cf_attention_dims *d, tiling *dq, tiling *dkv) {
  size_t HS = (size_t)d->HS;
  local_use u_dq = {3 * HS, 2 * HS, 0, 0};  /* qs, dos, dqs; ks, vs */
  local_use u_dkv = {4 * HS, 2 * HS, 0, 2}; /* ks, vs, dks, dvs; qs, dos; ls, Ds */
  CF_TRY(plan_tiles(ctx, "attention_fused_backward_dq", (size_t)d->Tq, (size_t)d->Tk, HS, u_dq, dq));
  return plan_tiles(ctx, "attention_fused_backward_dkv", (size_t)d->Tk, (size_t)d->Tq, HS, u_dkv, dkv);
}

/* make_D: the first launch also computes D for its rows (the CPU kernel; out is read then). */
static cf_status backward_dq(cf_context *ctx, cf_mem dq, cf_mem dout, cf_mem q, cf_mem k, cf_mem v, cf_mem lse,
                             cf_mem D, cf_mem out, int make_D, cf_mem key_len, const cf_attention_dims *d,
                             cf_dropout drop, tiling t) {
  size_t HS = (size_t)d->HS;
  size_t local = t.G, global = grid_items(ctx, d, (size_t)d->Tq, t.G);
  for (size_t c = 0; c < (size_t)d->Tk; c += t.chunk) {
    size_t end = c + t.chunk < (size_t)d->Tk ? c + t.chunk : (size_t)d->Tk;
    cf_launch L;
    cf_launch_begin(&L, ctx, PROGRAM, "attention_fused_backward_dq");
    CF_ARG_MEMS(&L, dq, dout, q, k, v, lse, D, out);
    cf_arg_int(&L, make_D && c == 0);
    arg_dims(&L, key_len, q, d);
    CF_ARG_INTS(&L, (int)t.T2, (int)c, (int)end, c > 0);
    cf_arg_float(&L, d->scale);
    cf_arg_dropout(&L, drop);
    arg_locals(&L, 5, (const size_t[]){HS * t.G, HS * t.G, HS * t.G, t.T2 * HS, t.T2 * HS}, 3, HS);
    CF_TRY(cf_launch_run(&L, 1, &global, &local));
  }
  return CF_OK;
}

static cf_status backward_dkv(cf_context *ctx, cf_mem dk, cf_mem dv, cf_mem dout, cf_mem q, cf_mem k, cf_mem v,
                              cf_mem lse, cf_mem D, cf_mem key_len, const cf_attention_dims *d, cf_dropout drop,
                              tiling t) {
  size_t HS = (size_t)d->HS;
  size_t local = t.G, global = grid_items(ctx, d, (size_t)d->Tk, t.G);
  for (size_t c = 0; c < (size_t)d->Tq; c += t.chunk) {
    size_t end = c + t.chunk < (size_t)d->Tq ? c + t.chunk : (size_t)d->Tq;
    cf_launch L;
    cf_launch_begin(&L, ctx, PROGRAM, "attention_fused_backward_dkv");
    CF_ARG_MEMS(&L, dk, dv, dout, q, k, v, lse, D);
    arg_dims(&L, key_len, q, d);
    CF_ARG_INTS(&L, (int)t.T2, (int)c, (int)end, c > 0);
    cf_arg_float(&L, d->scale);
    cf_arg_dropout(&L, drop);
    arg_locals(&L, 8, (const size_t[]){HS * t.G, HS * t.G, HS * t.G, HS * t.G, t.T2 * HS, t.T2 * HS, t.T2, t.T2}, 4,
               HS);
    CF_TRY(cf_launch_run(&L, 1, &global, &local));
  }
  return CF_OK;
}

cf_status cf_attention_fused_backward(cf_context *ctx, cf_mem dq, cf_mem dk, cf_mem dv, cf_mem scratch, cf_mem dout,
                                      cf_mem q, cf_mem k, cf_mem v, cf_mem out, cf_mem lse, cf_mem key_len,
                                      const cf_attention_dims *d, cf_dropout drop) {
  CF_TRY(check_dims(d, drop));
  tiling t_dq, t_dkv;
  CF_TRY(plan_backward(ctx, d, &t_dq, &t_dkv));
  /* D = rowsum(dout * out) (B, NH, Tq) into the scratch: P's part of every row's softmax backward;
   * on CPUs the dq kernel's first launch computes its own rows' (one launch and pass fewer) */
  int cpu = cf_context_cpu_shapes(ctx);
  if (!cpu) {
    cf_launch L;
    cf_launch_begin(&L, ctx, PROGRAM, "attention_fused_dot");
    CF_ARG_MEMS(&L, scratch, dout, out);
    CF_ARG_INTS(&L, d->B, d->NH, d->Tq, d->HS, d->ldo);
    size_t local = 64, global = (size_t)d->B * d->NH * d->Tq;
    if (local > ctx->kernel_wg_floor) local = ctx->kernel_wg_floor; /* the program is loaded: within every kernel's */
    CF_TRY(cf_launch_run(&L, 1, &global, &local));
  }
  CF_TRY(backward_dq(ctx, dq, dout, q, k, v, lse, scratch, out, cpu, key_len, d, drop, t_dq));
  return backward_dkv(ctx, dk, dv, dout, q, k, v, lse, scratch, key_len, d, drop, t_dkv);
}
