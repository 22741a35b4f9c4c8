/* The op table's embedding rows: token plus learned or sinusoidal position embeddings (tokens
 * repeat, within and across sequences), and the backward into both tables. */
#include <math.h>
#include "check/op_table.h"

#define DIMS .check_dims = {.N = 10, .B = 2, .T = 5, .C = 13, .V = 11}, \
             .test_dims = {.N = 120, .B = 3, .T = 40, .C = 67, .V = 256}
#define TOL .atol = 1e-5, .rtol = 1e-4

static float token_scale(const cf_op_dims *d) { return sqrtf((float)d->C); }
static cf_mem absent(void) { return cf_at(NULL, 0); }

/* param 1: learned positions (a wpe table, tensor 3), 0: sinusoidal */
static cf_status emb_fwd(const cf_op_case *c) {
  return cf_embedding_forward(c->ctx, c->dev[0], c->dev[1], c->dev[2], c->op->param ? c->dev[3] : absent(), c->d.B,
                              c->d.T, c->d.C, c->d.V, token_scale(&c->d));
}
static void emb_fwd_ref(cf_op_case *c) {
  ref_embedding_forward(c->ref[0], CF_OP_INTS(c, 1), c->host[2], c->op->param ? c->host[3] : NULL, c->d.B, c->d.T,
                        c->d.C, c->d.V, token_scale(&c->d));
}

/* param 1: learned positions (dwpe, tensor 1, added into too) */
static cf_status emb_bwd(const cf_op_case *c) {
  return cf_embedding_backward(c->ctx, c->dev[0], c->op->param ? c->dev[1] : absent(), c->dev[2], c->dev[3], c->d.B,
                               c->d.T, c->d.C, c->d.V, token_scale(&c->d));
}
static void emb_bwd_ref(cf_op_case *c) {
  ref_embedding_backward(c->ref[0], c->op->param ? c->ref[1] : NULL, c->host[2], CF_OP_INTS(c, 3), c->d.B, c->d.T,
                         c->d.C, c->d.V, token_scale(&c->d));
}
/* read dout and the tokens, read and write dwte (and dwpe) */
static double emb_bwd_bytes(const cf_op_dims *d) {
  return 4.0 * ((double)d->N * d->C + d->N + 2.0 * d->V * d->C);
}
static double emb_bwd_wpe_bytes(const cf_op_dims *d) { return emb_bwd_bytes(d) + 8.0 * d->T * d->C; }

const cf_op cf_ops_embedding[] = {
    {"embedding_forward", "embedding",
     {{"out", "NC", 0, CF_OP_OUT, 0, 0}, {"tokens", "BT", 0, CF_OP_INT, 0, 0}, {"wte", "VC", 0, CF_OP_IN, 0, 0}, {"wpe", "TC", 0, CF_OP_IN, 0, 0}},
     TOL, 1, DIMS, emb_fwd, emb_fwd_ref},
    {"embedding_forward_sinusoidal", "embedding",
     {{"out", "NC", 0, CF_OP_OUT, 0, 0}, {"tokens", "BT", 0, CF_OP_INT, 0, 0}, {"wte", "VC", 0, CF_OP_IN, 0, 0}}, TOL, 0, DIMS, emb_fwd,
     emb_fwd_ref},
    {"embedding_backward", "embedding",
     {{"dwte", "VC", 0, CF_OP_ACC, 0, 0}, {"dwpe", "TC", 0, CF_OP_ACC, 0, 0}, {"dout", "NC", 0, CF_OP_IN, 0, 0},
      {"tokens", "BT", 0, CF_OP_INT, 0, 0}},
     TOL, 1, DIMS, emb_bwd, emb_bwd_ref, .bytes = emb_bwd_wpe_bytes},
    {"embedding_backward_sinusoidal", "embedding",
     {{"dwte", "VC", 0, CF_OP_ACC, 0, 0}, {"unused", "", 0, CF_OP_SCRATCH, 0, 0}, {"dout", "NC", 0, CF_OP_IN, 0, 0},
      {"tokens", "BT", 0, CF_OP_INT, 0, 0}},
     TOL, 0, DIMS, emb_bwd, emb_bwd_ref, .bytes = emb_bwd_bytes},
};
const int cf_nops_embedding = sizeof cf_ops_embedding / sizeof *cf_ops_embedding;
