/* The op table's attention rows: causal multi-head self-attention with a key padding mask and
 * dropout on the probabilities, forward and backward (from what a device forward saved), materialised
 * (cf_attention_*) and fused (cf_attention_fused_*: causal, padded and cross-attention variants). */
#include <math.h>
#include "check/op_table.h"

#define DIMS .check_dims = {.N = 14, .B = 2, .T = 7, .C = 12, .NH = 3}, \
             .test_dims = {.N = 210, .B = 3, .T = 70, .C = 40, .NH = 5}
#define TOL .atol = 1e-5, .rtol = 1e-4

static const cf_dropout drop = {0.1f, 17u, 1u, 2u, 0};

static size_t scratch(const cf_op_dims *d) { return cf_attention_scratch_floats(d->B, d->T, d->C, d->NH, drop.p > 0); }

/* the batched products counted in full (causal or not): q.k^T and p.v forward, four backward;
 * the GEMMs skip most of the causal triangles' other half (cf_gemm_tri), so the rate read from
 * this count is of the full products, about twice the work done at large T */
static double attn_fwd_flops(const cf_op_dims *d) { return 4.0 * d->B * d->T * (double)d->T * d->C; }
static double attn_bwd_flops(const cf_op_dims *d) { return 2 * attn_fwd_flops(d); }

enum { F_OUT, F_ATT, F_SCRATCH, F_INP, F_MASK };
static cf_status attn_fwd(const cf_op_case *c) {
  const cf_mem *t = c->dev;
  return cf_attention_forward(c->ctx, t[F_OUT], t[F_ATT], t[F_SCRATCH], t[F_INP], t[F_MASK], c->d.B, c->d.T, c->d.C,
                              c->d.NH, drop);
}
static void attn_fwd_ref(cf_op_case *c) {
  ref_attention_forward(c->ref[F_OUT], NULL, c->host[F_INP], CF_OP_INTS(c, F_MASK), c->d.B, c->d.T, c->d.C, c->d.NH,
                        drop);
}

enum { B_DINP, B_SCRATCH, B_DOUT, B_ATT, B_MASK, B_INP, B_OUT };
static cf_status attn_bwd_prepare(cf_op_case *c) {
  const cf_mem *t = c->dev;
  return cf_attention_forward(c->ctx, t[B_OUT], t[B_ATT], t[B_SCRATCH], t[B_INP], t[B_MASK], c->d.B, c->d.T, c->d.C,
                              c->d.NH, drop);
}
static cf_status attn_bwd(const cf_op_case *c) {
  const cf_mem *t = c->dev;
  return cf_attention_backward(c->ctx, t[B_DINP], t[B_SCRATCH], t[B_DOUT], t[B_INP], t[B_ATT], t[B_MASK], c->d.B,
                               c->d.T, c->d.C, c->d.NH, drop);
}
static void attn_bwd_ref(cf_op_case *c) {
  ref_attention_backward(c->ref[B_DINP], c->host[B_DOUT], c->host[B_INP], CF_OP_INTS(c, B_MASK), c->d.B, c->d.T,
                         c->d.C, c->d.NH, drop);
}

/* ---------- fused attention (cf_attention_fused_*) ----------
 * The key length is dimension V (so that Tq = T and Tk = V may differ) and the key lengths an
 * integer tensor in [0, V), some sequences padded entirely; param: 1 causal, 2 padded. */
#define FUSED_CAUSAL 1
#define FUSED_PADDED 2
#define SELF_DIMS .check_dims = {.N = 14, .B = 2, .T = 7, .C = 12, .NH = 3, .V = 7}, \
                  .test_dims = {.N = 210, .B = 3, .T = 70, .C = 40, .NH = 5, .V = 70}
#define CROSS_DIMS .check_dims = {.N = 10, .B = 2, .T = 5, .C = 12, .NH = 3, .V = 9}, \
                   .test_dims = {.N = 111, .B = 3, .T = 37, .C = 40, .NH = 5, .V = 70}

static cf_attention_dims fused_dims(const cf_op_case *c) {
  int HS = c->d.C / c->d.NH;
  cf_attention_dims d = {c->d.B, c->d.T, c->d.V, c->d.NH, HS, (c->op->param & FUSED_CAUSAL) != 0,
                         c->d.C, c->d.C, c->d.C, c->d.C, (float)(1.0 / sqrt((double)HS))};
  return d;
}
/* dropout on the causal and cross rows, none on the padded one */
static cf_dropout fused_drop(const cf_op_case *c) {
  cf_dropout none = {0};
  return c->op->param == (FUSED_CAUSAL | FUSED_PADDED) ? none : drop;
}
static size_t fused_scratch(const cf_op_dims *d) { return (size_t)d->B * d->NH * d->T; }
static double fused_fwd_flops(const cf_op_dims *d) { return 4.0 * d->B * d->T * (double)d->V * d->C; }
static double fused_bwd_flops(const cf_op_dims *d) { return 2 * fused_fwd_flops(d); }

enum { FF_OUT, FF_LSE, FF_SCRATCH, FF_Q, FF_K, FF_V, FF_LEN };
static cf_mem fused_len(const cf_op_case *c, int i) {
  return c->op->param & FUSED_PADDED ? c->dev[i] : cf_at(NULL, 0);
}
static const int *fused_len_host(const cf_op_case *c, int i) {
  return c->op->param & FUSED_PADDED ? CF_OP_INTS(c, i) : NULL;
}
static cf_status fused_fwd(const cf_op_case *c) {
  const cf_mem *t = c->dev;
  cf_attention_dims d = fused_dims(c);
  return cf_attention_fused_forward(c->ctx, t[FF_OUT], t[FF_LSE], t[FF_SCRATCH], t[FF_Q], t[FF_K], t[FF_V],
                                    fused_len(c, FF_LEN), &d, fused_drop(c));
}
static void fused_fwd_ref(cf_op_case *c) {
  cf_attention_dims d = fused_dims(c);
  ref_attention_fused_forward(c->ref[FF_OUT], c->ref[FF_LSE], c->host[FF_Q], c->host[FF_K], c->host[FF_V],
                              fused_len_host(c, FF_LEN), &d, fused_drop(c));
}

enum { FB_DQ, FB_DK, FB_DV, FB_SCRATCH, FB_DOUT, FB_Q, FB_K, FB_V, FB_OUT, FB_LSE, FB_LEN };
static cf_status fused_bwd_prepare(cf_op_case *c) {
  const cf_mem *t = c->dev;
  cf_attention_dims d = fused_dims(c);
  return cf_attention_fused_forward(c->ctx, t[FB_OUT], t[FB_LSE], t[FB_SCRATCH], t[FB_Q], t[FB_K], t[FB_V],
                                    fused_len(c, FB_LEN), &d, fused_drop(c));
}
static cf_status fused_bwd(const cf_op_case *c) {
  const cf_mem *t = c->dev;
  cf_attention_dims d = fused_dims(c);
  return cf_attention_fused_backward(c->ctx, t[FB_DQ], t[FB_DK], t[FB_DV], t[FB_SCRATCH], t[FB_DOUT], t[FB_Q],
                                     t[FB_K], t[FB_V], t[FB_OUT], t[FB_LSE], fused_len(c, FB_LEN), &d, fused_drop(c));
}
static void fused_bwd_ref(cf_op_case *c) {
  cf_attention_dims d = fused_dims(c);
  ref_attention_fused_backward(c->ref[FB_DQ], c->ref[FB_DK], c->ref[FB_DV], c->host[FB_DOUT], c->host[FB_Q],
                               c->host[FB_K], c->host[FB_V], fused_len_host(c, FB_LEN), &d, fused_drop(c));
}

#define FUSED_FWD_TENSORS                                                                                    \
  {{"out", "BTC", 0, CF_OP_OUT, 0, 0}, {"lse", "BHT", 0, CF_OP_OUT, 0, 0}, {"scratch", "S", 0, CF_OP_SCRATCH, 0, 0}, \
   {"q", "BTC", 0, CF_OP_IN, 1.5f, 0}, {"k", "BVC", 0, CF_OP_IN, 1.5f, 0}, {"v", "BVC", 0, CF_OP_IN, 0, 0},         \
   {"key_len", "B", 0, CF_OP_INT, 0, 0}}
#define FUSED_BWD_TENSORS                                                                                        \
  {{"dq", "BTC", 0, CF_OP_OUT, 0, 0}, {"dk", "BVC", 0, CF_OP_OUT, 0, 0}, {"dv", "BVC", 0, CF_OP_OUT, 0, 0},         \
   {"scratch", "S", 0, CF_OP_SCRATCH, 0, 0}, {"dout", "BTC", 0, CF_OP_IN, 0, 0}, {"q", "BTC", 0, CF_OP_IN, 1.5f, 0}, \
   {"k", "BVC", 0, CF_OP_IN, 1.5f, 0}, {"v", "BVC", 0, CF_OP_IN, 0, 0}, {"out", "BTC", 0, CF_OP_SAVED, 0, 0},       \
   {"lse", "BHT", 0, CF_OP_SAVED, 0, 0}, {"key_len", "B", 0, CF_OP_INT, 0, 0}}
#define FUSED_ROWS(name, param, dims)                                                                         \
  {name "_forward", "attention_fused", FUSED_FWD_TENSORS, TOL, param, dims, fused_fwd, fused_fwd_ref,         \
   .scratch = fused_scratch, .flops = fused_fwd_flops},                                                      \
  {name "_backward", "attention_fused", FUSED_BWD_TENSORS, TOL, param, dims, fused_bwd, fused_bwd_ref,        \
   fused_bwd_prepare, .scratch = fused_scratch, .flops = fused_bwd_flops}


const cf_op cf_ops_attention[] = {
    {"attention_forward", "attention",
     {{"out", "NC", 0, CF_OP_OUT, 0, 0}, {"att", "BHTT", 0, CF_OP_SCRATCH, 0, 0},
      {"scratch", "S", 0, CF_OP_SCRATCH, 0, 0}, {"inp", "NC", 3, CF_OP_IN, 1.5f, 0}, {"key_mask", "BT", 0, CF_OP_MASK, 0, 0}},
     TOL, 0, DIMS, attn_fwd, attn_fwd_ref, .scratch = scratch, .flops = attn_fwd_flops},
    {"attention_backward", "attention",
     {{"dinp", "NC", 3, CF_OP_OUT, 0, 0}, {"scratch", "S", 0, CF_OP_SCRATCH, 0, 0}, {"dout", "NC", 0, CF_OP_IN, 0, 0},
      {"att", "BHTT", 0, CF_OP_SAVED, 0, 0}, {"key_mask", "BT", 0, CF_OP_MASK, 0, 0},
      {"inp", "NC", 3, CF_OP_IN, 1.5f, 0}, {"out", "NC", 0, CF_OP_SCRATCH, 0, 0}},
     TOL, 0, DIMS, attn_bwd, attn_bwd_ref, attn_bwd_prepare, .scratch = scratch, .flops = attn_bwd_flops},
    FUSED_ROWS("attention_fused", FUSED_CAUSAL, SELF_DIMS),
    FUSED_ROWS("attention_fused_padded", FUSED_CAUSAL | FUSED_PADDED, SELF_DIMS),
    FUSED_ROWS("attention_fused_cross", FUSED_PADDED, CROSS_DIMS),
};
const int cf_nops_attention = sizeof cf_ops_attention / sizeof *cf_ops_attention;
