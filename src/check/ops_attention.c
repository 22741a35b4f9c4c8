/* The op table's attention rows: causal multi-head self-attention with a key padding mask and
 * dropout on the probabilities, forward and backward (from what a device forward saved). */
#include "check/op_table.h"

#define DIMS .check_dims = {.N = 14, .B = 2, .T = 7, .C = 12, .NH = 3}, \
             .test_dims = {.N = 210, .B = 3, .T = 70, .C = 40, .NH = 5}
#define TOL .atol = 1e-5, .rtol = 1e-4

static const cf_dropout drop = {0.1f, 17u, 1u, 2u, 0};

static size_t scratch(const cf_op_dims *d) { return cf_attention_scratch_floats(d->B, d->T, d->C, d->NH, drop.p > 0); }

/* the batched products counted in full (causal or not): q.k^T and p.v forward, four backward */
static double attn_fwd_flops(const cf_op_dims *d) { return 4.0 * d->B * d->T * (double)d->T * d->C; }
static double attn_bwd_flops(const cf_op_dims *d) { return 2 * attn_fwd_flops(d); }

enum { F_OUT, F_QKVP, F_ATT, F_SCRATCH, F_INP, F_MASK };
static cf_status attn_fwd(const cf_op_case *c) {
  const cf_mem *t = c->dev;
  return cf_attention_forward(c->ctx, t[F_OUT], t[F_QKVP], t[F_ATT], t[F_SCRATCH], t[F_INP], t[F_MASK], c->d.B, c->d.T,
                              c->d.C, c->d.NH, drop);
}
static void attn_fwd_ref(cf_op_case *c) {
  ref_attention_forward(c->ref[F_OUT], NULL, c->host[F_INP], CF_OP_INTS(c, F_MASK), c->d.B, c->d.T, c->d.C, c->d.NH,
                        drop);
}

enum { B_DINP, B_SCRATCH, B_DOUT, B_QKVP, B_ATT, B_MASK, B_INP, B_OUT };
static cf_status attn_bwd_prepare(cf_op_case *c) {
  const cf_mem *t = c->dev;
  return cf_attention_forward(c->ctx, t[B_OUT], t[B_QKVP], t[B_ATT], t[B_SCRATCH], t[B_INP], t[B_MASK], c->d.B, c->d.T,
                              c->d.C, c->d.NH, drop);
}
static cf_status attn_bwd(const cf_op_case *c) {
  const cf_mem *t = c->dev;
  return cf_attention_backward(c->ctx, t[B_DINP], t[B_SCRATCH], t[B_DOUT], t[B_QKVP], t[B_ATT], t[B_MASK], c->d.B,
                               c->d.T, c->d.C, c->d.NH, drop);
}
static void attn_bwd_ref(cf_op_case *c) {
  ref_attention_backward(c->ref[B_DINP], c->host[B_DOUT], c->host[B_INP], CF_OP_INTS(c, B_MASK), c->d.B, c->d.T,
                         c->d.C, c->d.NH, drop);
}

const cf_op cf_ops_attention[] = {
    {"attention_forward", "attention",
     {{"out", "NC", 0, CF_OP_OUT, 0, 0}, {"qkvp", "NC", 3, CF_OP_SCRATCH, 0, 0}, {"att", "BHTT", 0, CF_OP_SCRATCH, 0, 0},
      {"scratch", "S", 0, CF_OP_SCRATCH, 0, 0}, {"inp", "NC", 3, CF_OP_IN, 1.5f, 0}, {"key_mask", "BT", 0, CF_OP_MASK, 0, 0}},
     TOL, 0, DIMS, attn_fwd, attn_fwd_ref, .scratch = scratch, .flops = attn_fwd_flops},
    {"attention_backward", "attention",
     {{"dinp", "NC", 3, CF_OP_OUT, 0, 0}, {"scratch", "S", 0, CF_OP_SCRATCH, 0, 0}, {"dout", "NC", 0, CF_OP_IN, 0, 0},
      {"qkvp", "NC", 3, CF_OP_SAVED, 0, 0}, {"att", "BHTT", 0, CF_OP_SAVED, 0, 0}, {"key_mask", "BT", 0, CF_OP_MASK, 0, 0},
      {"inp", "NC", 3, CF_OP_IN, 1.5f, 0}, {"out", "NC", 0, CF_OP_SCRATCH, 0, 0}},
     TOL, 0, DIMS, attn_bwd, attn_bwd_ref, attn_bwd_prepare, .scratch = scratch, .flops = attn_bwd_flops},
};
const int cf_nops_attention = sizeof cf_ops_attention / sizeof *cf_ops_attention;
