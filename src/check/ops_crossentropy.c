/* The op table's cross-entropy rows: softmax cross-entropy with label smoothing 0.1 and an ignored
 * row, the loss, its gradient, and both in one launch. */
#include "check/op_table.h"

#define DIMS .check_dims = {.N = 7, .V = 37}, .test_dims = {.N = 67, .V = 1000}
#define TOL .atol = 1e-5, .rtol = 1e-4

static const float smoothing = 0.1f;
enum { IGNORE = -100 };

static float dloss(const cf_op_case *c, int targets) {  /* the mean over the rows not ignored */
  return 1.0f / (float)cf_crossentropy_count(CF_OP_INTS(c, targets), c->d.N, IGNORE);
}

enum { F_LOSS, F_LOSSES, F_LOGITS, F_TARGETS };
static cf_status ce_fwd(const cf_op_case *c) {
  const cf_mem *t = c->dev;
  return cf_crossentropy_forward(c->ctx, t[F_LOSS], t[F_LOSSES], t[F_LOGITS], t[F_TARGETS], c->d.N, c->d.V, smoothing,
                                 IGNORE);
}
static void ce_fwd_ref(cf_op_case *c) {
  ref_crossentropy_forward(c->ref[F_LOSS], c->ref[F_LOSSES], c->host[F_LOGITS], CF_OP_INTS(c, F_TARGETS), c->d.N,
                           c->d.V, smoothing, IGNORE);
}

enum { B_DLOGITS, B_LOGITS, B_TARGETS };
static cf_status ce_bwd(const cf_op_case *c) {
  const cf_mem *t = c->dev;
  return cf_crossentropy_backward(c->ctx, t[B_DLOGITS], t[B_LOGITS], t[B_TARGETS], c->d.N, c->d.V, smoothing, IGNORE,
                                  dloss(c, B_TARGETS));
}
static void ce_bwd_ref(cf_op_case *c) {
  ref_crossentropy_backward(c->ref[B_DLOGITS], c->host[B_LOGITS], CF_OP_INTS(c, B_TARGETS), c->d.N, c->d.V, smoothing,
                            IGNORE, dloss(c, B_TARGETS));
}

enum { FB_LOSS, FB_LOSSES, FB_DLOGITS, FB_LOGITS, FB_TARGETS };
static cf_status ce_fwd_bwd(const cf_op_case *c) {
  const cf_mem *t = c->dev;
  return cf_crossentropy_forward_backward(c->ctx, t[FB_LOSS], t[FB_LOSSES], t[FB_DLOGITS], t[FB_LOGITS], t[FB_TARGETS],
                                          c->d.N, c->d.V, smoothing, IGNORE, dloss(c, FB_TARGETS));
}
static void ce_fwd_bwd_ref(cf_op_case *c) {
  const int *targets = CF_OP_INTS(c, FB_TARGETS);
  ref_crossentropy_forward(c->ref[FB_LOSS], c->ref[FB_LOSSES], c->host[FB_LOGITS], targets, c->d.N, c->d.V, smoothing,
                           IGNORE);
  ref_crossentropy_backward(c->ref[FB_DLOGITS], c->host[FB_LOGITS], targets, c->d.N, c->d.V, smoothing, IGNORE,
                            dloss(c, FB_TARGETS));
}

/* the logits (N, V) once per pass, the targets and losses (N) once each */
static double nv(const cf_op_dims *d) { return (double)d->N * d->V; }
static double ce_fwd_bytes(const cf_op_dims *d) { return 4 * (nv(d) + 2.0 * d->N); }
static double ce_bwd_bytes(const cf_op_dims *d) { return 4 * (2 * nv(d) + d->N); }
static double ce_fwd_bwd_bytes(const cf_op_dims *d) { return 4 * (2 * nv(d) + 2.0 * d->N); }

const cf_op cf_ops_crossentropy[] = {
    {"crossentropy_forward", "crossentropy",
     {{"loss", "", 0, CF_OP_OUT, 0, 0}, {"losses", "N", 0, CF_OP_OUT, 0, 0}, {"logits", "NV", 0, CF_OP_IN, 5, 0},
      {"targets", "N", 0, CF_OP_TARGETS, 0, 0}},
     TOL, 0, DIMS, ce_fwd, ce_fwd_ref, .bytes = ce_fwd_bytes},
    {"crossentropy_backward", "crossentropy",
     {{"dlogits", "NV", 0, CF_OP_OUT, 0, 0}, {"logits", "NV", 0, CF_OP_IN, 5, 0}, {"targets", "N", 0, CF_OP_TARGETS, 0, 0}}, TOL, 0,
     DIMS, ce_bwd, ce_bwd_ref, .bytes = ce_bwd_bytes},
    {"crossentropy_forward_backward", "crossentropy",
     {{"loss", "", 0, CF_OP_OUT, 0, 0}, {"losses", "N", 0, CF_OP_OUT, 0, 0}, {"dlogits", "NV", 0, CF_OP_OUT, 0, 0},
      {"logits", "NV", 0, CF_OP_IN, 5, 0}, {"targets", "N", 0, CF_OP_TARGETS, 0, 0}},
     TOL, 0, DIMS, ce_fwd_bwd, ce_fwd_bwd_ref, .bytes = ce_fwd_bwd_bytes},
};
const int cf_nops_crossentropy = sizeof cf_ops_crossentropy / sizeof *cf_ops_crossentropy;
