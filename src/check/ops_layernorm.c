/* The op table's LayerNorm rows: plain, and fused with the residual add and dropout in front. The
 * backward rows take the statistics (and the residual sum) a device forward saved, as training does. */
#include "check/op_table.h"

#define DIMS .check_dims = {.N = 5, .C = 37}, .test_dims = {.N = 33, .C = 1030}
#define TOL .atol = 1e-5, .rtol = 1e-4

static const float eps = 1e-5f;
static const cf_dropout drop = {0.1f, 0x5eed, 3, 11, 0}, no_drop = {0};

static double nc(const cf_op_dims *d) { return (double)d->N * d->C; }

enum { F_OUT, F_MEAN, F_RSTD, F_INP, F_W, F_B };
static cf_status ln_fwd(const cf_op_case *c) {
  const cf_mem *t = c->dev;
  return cf_layernorm_forward(c->ctx, t[F_OUT], t[F_MEAN], t[F_RSTD], t[F_INP], t[F_W], t[F_B], c->d.N, c->d.C, eps);
}
static void ln_fwd_ref(cf_op_case *c) {
  ref_layernorm_forward(c->ref[F_OUT], c->ref[F_MEAN], c->ref[F_RSTD], c->host[F_INP], c->host[F_W], c->host[F_B],
                        c->d.N, c->d.C, eps);
}
static double ln_fwd_bytes(const cf_op_dims *d) { return 4 * (2 * nc(d) + 2.0 * d->C + 2.0 * d->N); }

enum { B_DINP, B_DW, B_DB, B_DOUT, B_INP, B_W, B_MEAN, B_RSTD, B_OUT };
static cf_status ln_bwd_prepare(cf_op_case *c) {  /* the forward's statistics (the weight stands in for the bias) */
  const cf_mem *t = c->dev;
  return cf_layernorm_forward(c->ctx, t[B_OUT], t[B_MEAN], t[B_RSTD], t[B_INP], t[B_W], t[B_W], c->d.N, c->d.C, eps);
}
static cf_status ln_bwd(const cf_op_case *c) {
  const cf_mem *t = c->dev;
  return cf_layernorm_backward(c->ctx, t[B_DINP], t[B_DW], t[B_DB], t[B_DOUT], t[B_INP], t[B_W], t[B_MEAN], t[B_RSTD],
                               c->d.N, c->d.C, 0);
}
static void ln_bwd_ref(cf_op_case *c) {
  ref_layernorm_backward(c->ref[B_DINP], c->ref[B_DW], c->ref[B_DB], c->host[B_DOUT], c->host[B_INP], c->host[B_W],
                         c->host[B_MEAN], c->host[B_RSTD], c->d.N, c->d.C);
}
static double ln_bwd_bytes(const cf_op_dims *d) { return 4 * (3 * nc(d) + 5.0 * d->C + 2.0 * d->N); }

enum { RF_OUT, RF_MEAN, RF_RSTD, RF_RES, RF_INP, RF_BRANCH, RF_W, RF_B };
/* param 1: with dropout on the branch, 0: the plain residual add (Pre-LN's second LayerNorm) */
static cf_status rdln_fwd(const cf_op_case *c) {
  const cf_mem *t = c->dev;
  return cf_residual_dropout_layernorm_forward(c->ctx, t[RF_OUT], t[RF_MEAN], t[RF_RSTD], t[RF_RES], t[RF_INP],
                                               t[RF_BRANCH], t[RF_W], t[RF_B], c->d.N, c->d.C, eps,
                                               c->op->param ? drop : no_drop);
}
static void rdln_fwd_ref(cf_op_case *c) {
  ref_residual_dropout_layernorm_forward(c->ref[RF_OUT], c->ref[RF_MEAN], c->ref[RF_RSTD], c->ref[RF_RES],
                                         c->host[RF_INP], c->host[RF_BRANCH], c->host[RF_W], c->host[RF_B], c->d.N,
                                         c->d.C, eps, c->op->param ? drop : no_drop);
}
static double rdln_fwd_bytes(const cf_op_dims *d) { return 4 * (4 * nc(d) + 2.0 * d->C + 2.0 * d->N); }

enum { RB_DINP, RB_DBRANCH, RB_DW, RB_DB, RB_DOUT, RB_RES, RB_W, RB_MEAN, RB_RSTD, RB_INP, RB_BRANCH, RB_OUT };
static cf_status rdln_bwd_prepare(cf_op_case *c) {  /* res and the statistics (the weight stands in for the bias) */
  const cf_mem *t = c->dev;
  return cf_residual_dropout_layernorm_forward(c->ctx, t[RB_OUT], t[RB_MEAN], t[RB_RSTD], t[RB_RES], t[RB_INP],
                                               t[RB_BRANCH], t[RB_W], t[RB_W], c->d.N, c->d.C, eps, drop);
}
static cf_status rdln_bwd(const cf_op_case *c) {  /* accumulating into dinp, as the Pre-LN stream does */
  const cf_mem *t = c->dev;
  return cf_residual_dropout_layernorm_backward(c->ctx, t[RB_DINP], t[RB_DBRANCH], t[RB_DW], t[RB_DB], t[RB_DOUT],
                                                t[RB_RES], t[RB_W], t[RB_MEAN], t[RB_RSTD], c->d.N, c->d.C, 1, drop);
}
static void rdln_bwd_ref(cf_op_case *c) {
  ref_residual_dropout_layernorm_backward(c->ref[RB_DINP], c->ref[RB_DBRANCH], c->ref[RB_DW], c->ref[RB_DB],
                                          c->host[RB_DOUT], c->host[RB_RES], c->host[RB_W], c->host[RB_MEAN],
                                          c->host[RB_RSTD], c->d.N, c->d.C, drop);
}

const cf_op cf_ops_layernorm[] = {
    {"layernorm_forward", "layernorm",
     {{"out", "NC", 0, CF_OP_OUT, 0, 0}, {"mean", "N", 0, CF_OP_OUT, 0, 0}, {"rstd", "N", 0, CF_OP_OUT, 0, 0},
      {"inp", "NC", 0, CF_OP_IN, 2, 0.5f}, {"weight", "C", 0, CF_OP_IN, 0, 0}, {"bias", "C", 0, CF_OP_IN, 0, 0}},
     TOL, 0, DIMS, ln_fwd, ln_fwd_ref, .bytes = ln_fwd_bytes},
    {"layernorm_backward", "layernorm",
     {{"dinp", "NC", 0, CF_OP_OUT, 0, 0}, {"dweight", "C", 0, CF_OP_ACC, 0, 0}, {"dbias", "C", 0, CF_OP_ACC, 0, 0},
      {"dout", "NC", 0, CF_OP_IN, 0, 0}, {"inp", "NC", 0, CF_OP_IN, 2, 0.5f}, {"weight", "C", 0, CF_OP_IN, 0, 0},
      {"mean", "N", 0, CF_OP_SAVED, 0, 0}, {"rstd", "N", 0, CF_OP_SAVED, 0, 0}, {"out", "NC", 0, CF_OP_SCRATCH, 0, 0}},
     TOL, 0, DIMS, ln_bwd, ln_bwd_ref, ln_bwd_prepare, .bytes = ln_bwd_bytes},
    {"residual_layernorm_forward", "layernorm",
     {{"out", "NC", 0, CF_OP_OUT, 0, 0}, {"mean", "N", 0, CF_OP_OUT, 0, 0}, {"rstd", "N", 0, CF_OP_OUT, 0, 0}, {"res", "NC", 0, CF_OP_OUT, 0, 0},
      {"inp", "NC", 0, CF_OP_IN, 2, -0.5f}, {"branch", "NC", 0, CF_OP_IN, 0, 0}, {"weight", "C", 0, CF_OP_IN, 0, 0},
      {"bias", "C", 0, CF_OP_IN, 0, 0}},
     TOL, 0, DIMS, rdln_fwd, rdln_fwd_ref, .bytes = rdln_fwd_bytes},
    {"residual_dropout_layernorm_forward", "layernorm",
     {{"out", "NC", 0, CF_OP_OUT, 0, 0}, {"mean", "N", 0, CF_OP_OUT, 0, 0}, {"rstd", "N", 0, CF_OP_OUT, 0, 0}, {"res", "NC", 0, CF_OP_OUT, 0, 0},
      {"inp", "NC", 0, CF_OP_IN, 2, -0.5f}, {"branch", "NC", 0, CF_OP_IN, 0, 0}, {"weight", "C", 0, CF_OP_IN, 0, 0},
      {"bias", "C", 0, CF_OP_IN, 0, 0}},
     TOL, 1, DIMS, rdln_fwd, rdln_fwd_ref, .bytes = rdln_fwd_bytes},
    {"residual_dropout_layernorm_backward", "layernorm",
     {{"dinp", "NC", 0, CF_OP_ACC, 0, 0}, {"dbranch", "NC", 0, CF_OP_OUT, 0, 0}, {"dweight", "C", 0, CF_OP_ACC, 0, 0},
      {"dbias", "C", 0, CF_OP_ACC, 0, 0}, {"dout", "NC", 0, CF_OP_IN, 0, 0}, {"res", "NC", 0, CF_OP_SAVED, 0, 0},
      {"weight", "C", 0, CF_OP_IN, 0, 0}, {"mean", "N", 0, CF_OP_SAVED, 0, 0}, {"rstd", "N", 0, CF_OP_SAVED, 0, 0},
      {"inp", "NC", 0, CF_OP_IN, 2, -0.5f}, {"branch", "NC", 0, CF_OP_IN, 0, 0}, {"out", "NC", 0, CF_OP_SCRATCH, 0, 0}},
     TOL, 0, DIMS, rdln_bwd, rdln_bwd_ref, rdln_bwd_prepare},
};
const int cf_nops_layernorm = sizeof cf_ops_layernorm / sizeof *cf_ops_layernorm;
