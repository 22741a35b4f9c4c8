/* The op table's optimizer rows: the global gradient norm and per-segment norms, Adam and AdamW
 * (step 3) and SGD with momentum, each clipped to half the norm computed on the device, the clip on
 * its own, and the non-finite watch. */
#include <math.h>
#include "check/op_table.h"

#define DIMS .check_dims = {.N = 7, .C = 43}, .test_dims = {.N = 97, .C = 1031}
#define TOL .atol = 1e-5, .rtol = 1e-4
#define NORM_TOL .atol = 1e-6, .rtol = 1e-5

enum { NSEG = 4 };

static size_t n_of(const cf_op_dims *d) { return (size_t)d->N * (size_t)d->C; }
static size_t cn(const cf_op_case *c) { return n_of(&c->d); }

/* Segments of the flat buffer: one element, a short run, the long middle, the last element. */
static void segments(size_t n, size_t offs[NSEG], size_t counts[NSEG]) {
  size_t a = n / 8 > 1 ? n / 8 : 2;
  offs[0] = 0, counts[0] = 1;
  offs[1] = 1, counts[1] = a - 1;
  offs[2] = a, counts[2] = n - 1 - a;
  offs[3] = n - 1, counts[3] = 1;
}

static size_t norm_scratch(const cf_op_dims *d) { return cf_norm_scratch_floats(n_of(d)); }
static size_t segment_scratch(const cf_op_dims *d) {
  size_t offs[NSEG], counts[NSEG];
  segments(n_of(d), offs, counts);
  return cf_segment_norms_scratch_floats(counts, NSEG);
}

enum { N_OUT, N_X, N_SCRATCH };
static cf_status global_norm(const cf_op_case *c) {
  return cf_global_norm(c->ctx, c->dev[N_OUT], c->dev[N_X], cn(c), c->dev[N_SCRATCH]);
}
static void global_norm_ref(cf_op_case *c) { c->ref[N_OUT][0] = ref_global_norm(c->host[N_X], cn(c)); }
static double global_norm_bytes(const cf_op_dims *d) { return 4.0 * (double)n_of(d); }

static cf_status segment_norms(const cf_op_case *c) {
  size_t offs[NSEG], counts[NSEG];
  segments(cn(c), offs, counts);
  return cf_segment_norms(c->ctx, c->dev[N_OUT], c->dev[N_X], offs, counts, NSEG, c->dev[N_SCRATCH]);
}
static void segment_norms_ref(cf_op_case *c) {
  size_t offs[NSEG], counts[NSEG];
  segments(cn(c), offs, counts);
  ref_segment_norms(c->ref[N_OUT], c->host[N_X], offs, counts, NSEG);
}

/* The updates: params (and state) in place from grads, clipped to half the gradient's norm. */
enum { U_PARAMS, U_GRADS, U_NORM, U_SCRATCH, U_STATE1, U_STATE2 };
static cf_status norm_prepare(cf_op_case *c) {
  return cf_global_norm(c->ctx, c->dev[U_NORM], c->dev[U_GRADS], cn(c), c->dev[U_SCRATCH]);
}
static float clip(const cf_op_case *c) { return 0.5f * c->host[U_NORM][0]; }

static cf_adam adam_hp(int decoupled) {
  return (cf_adam){.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.98f, .eps = 1e-8f, .weight_decay = 0.1f,
                   .decoupled = decoupled, .step = 3};
}
static cf_status adam(const cf_op_case *c) {  /* param: decoupled weight decay (AdamW) */
  cf_adam hp = adam_hp(c->op->param);
  return cf_adam_update(c->ctx, c->dev[U_PARAMS], c->dev[U_GRADS], c->dev[U_STATE1], c->dev[U_STATE2], cn(c), &hp,
                        c->dev[U_NORM], clip(c));
}
static void adam_ref(cf_op_case *c) {
  cf_adam hp = adam_hp(c->op->param);
  ref_adam_update(c->ref[U_PARAMS], c->ref[U_STATE1], c->ref[U_STATE2], c->host[U_PARAMS], c->host[U_GRADS],
                  c->host[U_STATE1], c->host[U_STATE2], cn(c), &hp, c->host[U_NORM], clip(c));
}
static double adam_bytes(const cf_op_dims *d) { return 4.0 * 7 * (double)n_of(d); }  /* read p g m v, write p m v */

static cf_status sgd(const cf_op_case *c) {
  return cf_sgd_update(c->ctx, c->dev[U_PARAMS], c->dev[U_GRADS], c->dev[U_STATE1], cn(c), 0.1f, 0.9f, 0.01f,
                       c->dev[U_NORM], clip(c));
}
static void sgd_ref(cf_op_case *c) {
  ref_sgd_update(c->ref[U_PARAMS], c->ref[U_STATE1], c->host[U_PARAMS], c->host[U_GRADS], c->host[U_STATE1], cn(c),
                 0.1f, 0.9f, 0.01f, c->host[U_NORM], clip(c));
}

static cf_status clip_by_norm(const cf_op_case *c) {
  return cf_clip_by_norm(c->ctx, c->dev[U_PARAMS], cn(c), c->dev[U_NORM], clip(c));
}
static void clip_by_norm_ref(cf_op_case *c) {
  ref_clip_by_norm(c->ref[U_PARAMS], c->host[U_PARAMS], cn(c), c->host[U_NORM][0], clip(c));
}

/* The watch at a healthy step (the path every training step takes): state stays as it is. The
 * paths that store a non-finite loss are tests/ops/test_optimizer.c's (non-finite never compares);
 * param 1: the loss above the limit, the path that stores finite values. */
enum { W_STATE, W_LOSS, W_NORM };
static cf_status watch_healthy(cf_op_case *c) {
  c->host[W_STATE][0] = 0;
  return cf_write(c->ctx, c->dev[W_STATE], c->host[W_STATE], 3);
}
static float watch_limit(const cf_op_case *c) { return c->op->param ? -2.0f : 2.0f; }  /* inputs lie in [-1, 1) */
static cf_status divergence_watch(const cf_op_case *c) {
  return cf_divergence_watch(c->ctx, c->dev[W_STATE], c->dev[W_LOSS], c->dev[W_NORM], watch_limit(c));
}
static void divergence_watch_ref(cf_op_case *c) {
  ref_divergence_watch(c->ref[W_STATE], c->host[W_STATE], c->host[W_LOSS][0], c->host[W_NORM][0], watch_limit(c));
}

/* At the bad step: a NaN planted in segment 1, an infinity in segment 3 (the last element). */
enum { F_FLAGS, F_STATE, F_X, F_TABLE };
static cf_status segments_bad_step(cf_op_case *c) {
  size_t offs[NSEG], counts[NSEG], n = cn(c);
  uint32_t table[2 * NSEG];
  segments(n, offs, counts);
  CF_TRY(cf_segment_table(offs, counts, NSEG, table));
  c->host[F_X][offs[1] + counts[1] / 2] = NAN;
  c->host[F_X][n - 1] = INFINITY;
  float state[3] = {1, 0, 0};
  CF_TRY(cf_write(c->ctx, c->dev[F_X], c->host[F_X], n));
  CF_TRY(cf_write(c->ctx, c->dev[F_STATE], state, 3));
  return cf_write(c->ctx, c->dev[F_TABLE], table, 2 * NSEG);
}
static cf_status nonfinite_segments(const cf_op_case *c) {
  return cf_nonfinite_segments(c->ctx, c->dev[F_FLAGS], c->dev[F_STATE], c->dev[F_X], c->dev[F_TABLE], NSEG);
}
static void nonfinite_segments_ref(cf_op_case *c) {
  size_t offs[NSEG], counts[NSEG];
  segments(cn(c), offs, counts);
  ref_nonfinite_segments(c->ref[F_FLAGS], c->host[F_FLAGS], c->host[F_STATE], c->host[F_X], offs, counts, NSEG);
}

#define UPDATE_TENSORS(params_role)                                                                      \
  {"params", "NC", 0, params_role, 0, 0}, {"grads", "NC", 0, CF_OP_IN, 0, 0}, {"grad_norm", "", 0, CF_OP_SAVED, 0, 0},     \
      {"scratch", "S", 0, CF_OP_SCRATCH, 0, 0}
/* Adam's second moments are >= 0 */
#define ADAM_TENSORS                                                                                     \
  {UPDATE_TENSORS(CF_OP_INOUT), {"m", "NC", 0, CF_OP_INOUT, 0, 0}, {"v", "NC", 0, CF_OP_INOUT, 0.01f, 0.01f}}

const cf_op cf_ops_optimizer[] = {
    {"global_norm", "optimizer",
     {{"out", "", 0, CF_OP_OUT, 0, 0}, {"x", "NC", 0, CF_OP_IN, 0, 0}, {"scratch", "S", 0, CF_OP_SCRATCH, 0, 0}}, NORM_TOL, 0, DIMS,
     global_norm, global_norm_ref, .scratch = norm_scratch, .bytes = global_norm_bytes},
    {"segment_norms", "optimizer",
     {{"out", "", NSEG, CF_OP_OUT, 0, 0}, {"x", "NC", 0, CF_OP_IN, 0, 0}, {"scratch", "S", 0, CF_OP_SCRATCH, 0, 0}}, NORM_TOL, 0, DIMS,
     segment_norms, segment_norms_ref, .scratch = segment_scratch},
    {"divergence_watch", "optimizer",
     {{"state", "", 3, CF_OP_INOUT, 0, 0}, {"loss", "", 0, CF_OP_IN, 0, 0}, {"norm", "", 0, CF_OP_IN, 0, 0}}, NORM_TOL, 0,
     DIMS, divergence_watch, divergence_watch_ref, watch_healthy},
    {"divergence_watch_above", "optimizer",
     {{"state", "", 3, CF_OP_INOUT, 0, 0}, {"loss", "", 0, CF_OP_IN, 0, 0}, {"norm", "", 0, CF_OP_IN, 0, 0}}, NORM_TOL, 1,
     DIMS, divergence_watch, divergence_watch_ref, watch_healthy},
    {"nonfinite_segments", "optimizer",
     {{"flags", "", NSEG, CF_OP_OUT, 0, 0}, {"state", "", 3, CF_OP_SAVED, 0, 0}, {"x", "NC", 0, CF_OP_IN, 0, 0},
      {"table", "", 2 * NSEG, CF_OP_SAVED, 0, 0}},
     NORM_TOL, 0, DIMS, nonfinite_segments, nonfinite_segments_ref, segments_bad_step},
    {"adam_update", "optimizer", ADAM_TENSORS, TOL, 0, DIMS, adam, adam_ref, norm_prepare, norm_scratch, adam_bytes},
    {"adamw_update", "optimizer", ADAM_TENSORS, TOL, 1, DIMS, adam, adam_ref, norm_prepare, norm_scratch, adam_bytes},
    {"sgd_update", "optimizer", {UPDATE_TENSORS(CF_OP_INOUT), {"momentum", "NC", 0, CF_OP_INOUT, 0, 0}}, TOL, 0, DIMS, sgd,
     sgd_ref, norm_prepare, norm_scratch},
    {"clip_by_norm", "optimizer", {UPDATE_TENSORS(CF_OP_INOUT)}, TOL, 0, DIMS, clip_by_norm, clip_by_norm_ref,
     norm_prepare, norm_scratch},
};
const int cf_nops_optimizer = sizeof cf_ops_optimizer / sizeof *cf_ops_optimizer;
