/* The Transformer block and stacks of them, forward and backward: norm placement (Pre-LN or
 * Post-LN) lives here only, as one walk over a block's sublayers (self-attention, cross-attention
 * in an encoder-decoder's decoder, FFN) whose backward is its exact mirror; the kernels know
 * nothing of it.
 *
 * Linear layers store W as (out, in), as PyTorch does: y = x W^T + b. */
#include <math.h>
#include <string.h>
#include "clformer/ops.h"
#include "clformer/gemm.h"
#include "model/model_internal.h"
#include "runtime/runtime.h"

#define P(off) cf_at(m->params, (off))
#define G(off) cf_at(m->grads, (off))
#define A(off) cf_arena_at(&m->acts, (off))
#define S(off) cf_arena_at(&m->scratch, (off))

/* ---------- linear layers ---------- */

/* y = x W^T + b, and act_out = dropout d of act(y) when act_out.buf is set: in the product's own
 * stores where the GEMM can (cf_gemm_nt_bias_act), else by the separate kernels, which give the same
 * values. */
static cf_status linear_act_forward(cf_model *m, int N, cf_mem y, cf_mem x, size_t w, size_t b, int in, int out,
                                    cf_mem act_out, cf_dropout d) {
  cf_mem bias = b == SIZE_MAX ? (cf_mem){0} : P(b);
  int fused;
  CF_TRY(cf_gemm_nt_bias_act(m->ctx, (size_t)N, (size_t)out, (size_t)in, x, (size_t)in, P(w), (size_t)in, y,
                             (size_t)out, bias, act_out, m->act, d, &fused));
  if (fused) return CF_OK;
  if (!act_out.buf) return bias.buf ? cf_bias_forward(m->ctx, y, bias, N, out) : CF_OK;
  CF_TRY(cf_bias_act_forward(m->ctx, act_out, y, bias, N, out, m->act));
  return cf_dropout_forward(m->ctx, act_out, (size_t)N * out, d);
}

cf_status cf_linear_forward(cf_model *m, int N, cf_mem y, cf_mem x, size_t w, size_t b, int in, int out) {
  return linear_act_forward(m, N, y, x, w, b, in, out, (cf_mem){0}, (cf_dropout){0});
}

cf_status cf_linear_backward(cf_model *m, int N, cf_mem dx, size_t w, size_t b, cf_mem dy, cf_mem x, int in, int out,
                             int accumulate) {
  int fused = 0;  /* the bias gradient in the weight gradient's pass, where the GEMM can */
  CF_TRY(cf_gemm_tn_dbias(m->ctx, (size_t)out, (size_t)in, (size_t)N, dy, (size_t)out, x, (size_t)in, 1.0f, G(w),
                          (size_t)in, b != SIZE_MAX ? G(b) : (cf_mem){0}, &fused));
  if (b != SIZE_MAX && !fused) CF_TRY(cf_bias_backward(m->ctx, G(b), dy, N, out));
  if (dx.buf == NULL) return CF_OK;
  return cf_gemm(m->ctx, 0, 0, (size_t)N, (size_t)in, (size_t)out, 1.0f, dy, (size_t)out, P(w), (size_t)in,
                 accumulate ? 1.0f : 0.0f, dx, (size_t)in);
}

/* ---------- dropout keys ---------- */

/* A mask per (seed, step, tensor), over the tensor of the step's whole global batch: a micro-batch
 * whose first row is global row R (its global micro-batch number times B: cf_model_set_shard) takes
 * the mask from R's first element on (group0), so an example's masks depend on its row, not on the
 * rank or micro-batch that computes it: 2 ranks of batch B, B x accumulate 2 and one batch of 2B
 * draw the same. Rows are placed ceil(row/4) Philox groups apart: exactly the big tensor's layout
 * when a row's elements are a multiple of 4, disjoint groups otherwise. */
static uint64_t row_groups(const cf_model *m, const block_stack *s, int which) {
  uint64_t T = (uint64_t)s->T;
  uint64_t row = which == DROP_ATT_PROBS     ? (uint64_t)m->NH * T * T
                 : which == DROP_CROSS_PROBS ? (uint64_t)m->NH * T * (uint64_t)m->enc.T
                 : which == DROP_FFN_ACT     ? T * (uint64_t)m->F
                                             : T * (uint64_t)m->C;
  return (row + 3) / 4;
}

cf_dropout cf_block_dropout(const cf_model *m, const block_stack *s, int layer, int which, double p) {
  uint64_t first_row = (uint64_t)(m->shard_first + m->part) * (uint64_t)s->B;
  uint32_t tensor = (uint32_t)(s->first_layer + layer + 1) * 8u + (uint32_t)which;
  cf_dropout d = {m->train ? (float)p : 0.0f, (uint32_t)m->seed, m->step, tensor,
                  (uint32_t)(first_row * row_groups(m, s, which))};  /* fits: cf_block_dropout_fits */
  return d;
}

cf_status cf_block_dropout_fits(const cf_model *m, const block_stack *s, int total) {
  static const int kinds[] = {DROP_EMB, DROP_ATT_OUT, DROP_FFN_ACT, DROP_FFN_OUT};
  uint64_t most = 0, rows = (uint64_t)total * (uint64_t)s->B;  /* groups of the largest masked row */
  if (m->mc.attn_dropout > 0) most = row_groups(m, s, s->cross ? DROP_CROSS_PROBS : DROP_ATT_PROBS);
  if (m->mc.attn_dropout > 0 && row_groups(m, s, DROP_ATT_PROBS) > most) most = row_groups(m, s, DROP_ATT_PROBS);
  for (int i = 0; m->mc.dropout > 0 && i < 4; i++)
    if (row_groups(m, s, kinds[i]) > most) most = row_groups(m, s, kinds[i]);
  if (rows * most * 4 <= ((uint64_t)1 << 32)) return CF_OK;
  return CF_FAIL(CF_ERR_INVALID_ARG, "dropout over a step of %llu sequences: a masked tensor of the whole batch would "
                 "have %llu elements, and masks are numbered in 32 bits; lower the batch, the ranks or train.accumulate",
                 (unsigned long long)rows, (unsigned long long)(rows * most * 4));
}

static int rows(const block_stack *s) { return s->B * s->T; }

/* An optional buffer left out (no mask, no learned positions). */
static cf_mem absent(void) { return cf_at(NULL, 0); }

/* ---------- where things are ---------- */

/* The block input of layer l: the embedding for layer 0, else the previous block's output (the
 * last sublayer's sum under Pre-LN, its norm under Post-LN: the FFN's, res2 or norm2). */
static cf_mem block_input(const cf_model *m, const block_stack *s, int l) {
  if (l == 0) return A(s->emb);
  return A(m->mc.norm == CF_NORM_PRE ? s->la[l - 1].res2 : s->la[l - 1].norm2);
}

/* The blocks' output, before the final LayerNorm. */
static cf_mem blocks_output(const cf_model *m, const block_stack *s) { return block_input(m, s, s->L); }

cf_mem cf_stack_output(const cf_model *m, const block_stack *s) {
  return s->lnf_w != SIZE_MAX ? A(s->lnf_out) : blocks_output(m, s);
}

/* A LayerNorm: its parameters (offsets in params and grads) and its output and statistics (acts). */
typedef struct norm_at {
  size_t w, b, out, mean, rstd;
} norm_at;

enum { SUB_SELF, SUB_CROSS, SUB_FFN };

/* One residual sublayer of a block: its kind, its LayerNorm, its saved sum, its output's dropout. */
typedef struct sublayer {
  int kind;
  norm_at norm;
  size_t res;
  int drop;
} sublayer;

/* Block l's sublayers in order; how many. */
static int block_sublayers(const block_stack *s, int l, sublayer sub[3]) {
  const layer_params *p = &s->lp[l];
  const layer_acts *a = &s->la[l];
  int n = 0;
  sub[n++] = (sublayer){SUB_SELF, {p->ln1_w, p->ln1_b, a->norm1, a->mean1, a->rstd1}, a->res1, DROP_ATT_OUT};
  if (s->cross)
    sub[n++] = (sublayer){SUB_CROSS, {p->lnx_w, p->lnx_b, a->normx, a->meanx, a->rstdx}, a->resx, DROP_CROSS_OUT};
  sub[n++] = (sublayer){SUB_FFN, {p->ln2_w, p->ln2_b, a->norm2, a->mean2, a->rstd2}, a->res2, DROP_FFN_OUT};
  return n;
}

/* Whether the last block computes the final LayerNorm, fused with its last residual add (Pre-LN). */
static int final_norm_in_block(const cf_model *m, const block_stack *s) {
  return m->mc.norm == CF_NORM_PRE && s->L > 0 && s->lnf_w != SIZE_MAX;
}

/* Pre-LN: the LayerNorm that reads block l's output (LN1 of block l + 1, or the final one), which
 * block l computes fused with its last residual add; 0 when there is none. */
static int next_norm(const block_stack *s, int l, norm_at *n) {
  if (l + 1 < s->L) {
    const layer_params *p = &s->lp[l + 1];
    const layer_acts *a = &s->la[l + 1];
    *n = (norm_at){p->ln1_w, p->ln1_b, a->norm1, a->mean1, a->rstd1};
    return 1;
  }
  if (s->lnf_w == SIZE_MAX) return 0;
  *n = (norm_at){s->lnf_w, s->lnf_b, s->lnf_out, s->lnf_mean, s->lnf_rstd};
  return 1;
}

/* ---------- sublayers forward ---------- */

/* Self-attention over the fused projection qkv (B, T, 3C), read in place by the fused kernels:
 * q, k, v at channel offsets 0, C, 2C of each row; the output (B, T, C). */
static cf_attention_dims self_dims(const cf_model *m, const block_stack *s) {
  int C = m->C, HS = C / m->NH;
  cf_attention_dims d = {s->B, s->T, s->T, m->NH, HS, s->causal, 3 * C, 3 * C, 3 * C, C, (float)(1.0 / sqrt((double)HS))};
  return d;
}

/* Cross-attention: queries (B, T, C) of the decoder, keys | values (B, S, 2C) of the memory. */
static cf_attention_dims cross_dims(const cf_model *m, const block_stack *s) {
  int C = m->C, HS = C / m->NH;
  cf_attention_dims d = {s->B, s->T, m->enc.T, m->NH, HS, 0, C, 2 * C, 2 * C, C, (float)(1.0 / sqrt((double)HS))};
  return d;
}

static cf_dropout probs_key(const cf_model *m, const block_stack *s, int l, int which) {
  return cf_block_dropout(m, s, l, which, m->mc.attn_dropout);
}

/* Incremental decoding: the new position's key and value (of each of the rows in qkv) join block
 * l's cache, and its query attends to every position cached so far (the cache's key lengths). */
static cf_status cached_self_attention(cf_model *m, const block_stack *s, int l) {
  const decode_cache *c = &m->cache;
  int C = m->C, HS = C / m->NH;
  size_t block = (size_t)c->rows * c->len * 2 * C;
  cf_mem qkv = A(s->la[l].qkv), kv = cf_at(c->kv, (size_t)l * block);
  CF_TRY(cf_copy_rows(m->ctx, cf_shift(kv, (size_t)c->pos * 2 * C), (size_t)c->len * 2 * C, cf_shift(qkv, C), 3 * C,
                      2 * (size_t)C, (size_t)c->rows));
  cf_attention_dims d = {c->rows, 1, c->len, m->NH, HS, 0, 3 * C, 2 * C, 2 * C, C, (float)(1.0 / sqrt((double)HS))};
  cf_dropout none = {0};
  return cf_attention_fused_forward(m->ctx, A(s->la[l].atty), A(s->la[l].att), S(m->s_attn), qkv, kv, cf_shift(kv, C),
                                    cf_at(c->lens, 0), &d, none);
}

static cf_status self_attention_forward(cf_model *m, const block_stack *s, int l, cf_mem inp) {
  const layer_params *p = &s->lp[l];
  const layer_acts *a = &s->la[l];
  int C = m->C, N = rows(s);
  CF_TRY(cf_linear_forward(m, N, A(a->qkv), inp, p->qkv_w, p->qkv_b, C, 3 * C));
  if (s->decoding) {
    CF_TRY(cached_self_attention(m, s, l));
  } else if (m->mc.attention == CF_ATTENTION_FUSED) {  /* att holds the rows' logsumexp (layout.c) */
    cf_attention_dims d = self_dims(m, s);
    cf_mem qkv = A(a->qkv);
    CF_TRY(cf_attention_fused_forward(m->ctx, A(a->atty), A(a->att), S(m->s_attn), qkv, cf_shift(qkv, C),
                                      cf_shift(qkv, 2 * C), s->key_len, &d, probs_key(m, s, l, DROP_ATT_PROBS)));
  } else {
    CF_TRY(cf_attention_forward(m->ctx, A(a->atty), A(a->att), S(m->s_attn), A(a->qkv), absent(), s->B,
                                s->T, C, m->NH, probs_key(m, s, l, DROP_ATT_PROBS)));
  }
  return cf_linear_forward(m, N, S(m->s_branch), A(a->atty), p->proj_w, p->proj_b, C, C);
}

cf_status cf_cross_memory(cf_model *m) {
  cf_mem memory = cf_stack_output(m, &m->enc);
  for (int l = 0; l < m->dec.L; l++)
    CF_TRY(cf_linear_forward(m, rows(&m->enc), A(m->dec.la[l].xkv), memory, m->dec.lp[l].xkv_w, m->dec.lp[l].xkv_b,
                             m->C, 2 * m->C));
  return CF_OK;
}

/* Keys and values come from cf_cross_memory, computed once the encoder has run. */
static cf_status cross_attention_forward(cf_model *m, const block_stack *s, int l, cf_mem inp) {
  const layer_params *p = &s->lp[l];
  const layer_acts *a = &s->la[l];
  int C = m->C, N = rows(s);
  CF_TRY(cf_linear_forward(m, N, A(a->xq), inp, p->xq_w, p->xq_b, C, C));
  cf_attention_dims d = cross_dims(m, s);
  CF_TRY(cf_attention_fused_forward(m->ctx, A(a->xatty), A(a->xlse), S(m->s_attn), A(a->xq), A(a->xkv),
                                    cf_shift(A(a->xkv), C), m->enc.key_len, &d, probs_key(m, s, l, DROP_CROSS_PROBS)));
  return cf_linear_forward(m, N, S(m->s_branch), A(a->xatty), p->xproj_w, p->xproj_b, C, C);
}

static cf_status ffn_forward(cf_model *m, const block_stack *s, int l, cf_mem inp) {
  const layer_params *p = &s->lp[l];
  const layer_acts *a = &s->la[l];
  int N = rows(s), C = m->C, F = m->F;
  CF_TRY(linear_act_forward(m, N, A(a->h), inp, p->fc1_w, p->fc1_b, C, F, A(a->a),
                            cf_block_dropout(m, s, l, DROP_FFN_ACT, m->mc.dropout)));
  return cf_linear_forward(m, N, S(m->s_branch), A(a->a), p->fc2_w, p->fc2_b, F, C);
}

/* The sublayer's branch F(inp) into s_branch. */
static cf_status sublayer_forward(cf_model *m, const block_stack *s, int l, int kind, cf_mem inp) {
  if (kind == SUB_SELF) return self_attention_forward(m, s, l, inp);
  if (kind == SUB_CROSS) return cross_attention_forward(m, s, l, inp);
  return ffn_forward(m, s, l, inp);
}

/* res = x + dropout(branch in s_branch), then the LayerNorm n of res: one kernel. */
static cf_status residual_norm_forward(cf_model *m, const block_stack *s, size_t res, cf_mem x, norm_at n, cf_dropout d) {
  return cf_residual_dropout_layernorm_forward(m->ctx, A(n.out), A(n.mean), A(n.rstd), A(res), x, S(m->s_branch),
                                               P(n.w), P(n.b), rows(s), m->C, (float)m->mc.ln_eps, d);
}

/* Pre-LN: x = x + F(LN(x)) per sublayer, each residual add fused with the LayerNorm of its sum (the
 * next sublayer's, then the next block's LN1 or the final LayerNorm), so LN1(x) is computed here
 * only for the embedding. Post-LN: x = LN(x + F(x)) per sublayer. */
static cf_status block_forward(cf_model *m, const block_stack *s, int l) {
  sublayer sub[3];
  int n = block_sublayers(s, l, sub), pre = m->mc.norm == CF_NORM_PRE;
  cf_mem x = block_input(m, s, l);
  if (pre && l == 0)
    CF_TRY(cf_layernorm_forward(m->ctx, A(sub[0].norm.out), A(sub[0].norm.mean), A(sub[0].norm.rstd), x,
                                P(sub[0].norm.w), P(sub[0].norm.b), rows(s), m->C, (float)m->mc.ln_eps));
  for (int i = 0; i < n; i++) {
    CF_TRY(sublayer_forward(m, s, l, sub[i].kind, pre ? A(sub[i].norm.out) : x));
    cf_dropout d = cf_block_dropout(m, s, l, sub[i].drop, m->mc.dropout);
    norm_at after = sub[i].norm;
    int has_norm = !pre || (i + 1 < n ? (after = sub[i + 1].norm, 1) : next_norm(s, l, &after));
    if (has_norm) CF_TRY(residual_norm_forward(m, s, sub[i].res, x, after, d));
    else CF_TRY(cf_residual_dropout_forward(m->ctx, A(sub[i].res), x, S(m->s_branch), (size_t)rows(s) * m->C, d));
    x = A(pre ? sub[i].res : sub[i].norm.out);
  }
  return CF_OK;
}

cf_status cf_stack_forward(cf_model *m, const block_stack *s) {
  for (int l = 0; l < s->L; l++) CF_TRY(block_forward(m, s, l));
  if (s->lnf_w == SIZE_MAX || final_norm_in_block(m, s)) return CF_OK;
  return cf_layernorm_forward(m->ctx, A(s->lnf_out), A(s->lnf_mean), A(s->lnf_rstd), blocks_output(m, s), P(s->lnf_w),
                              P(s->lnf_b), rows(s), m->C, (float)m->mc.ln_eps);
}

/* ---------- sublayers backward ---------- */

/* The gradient of a residual branch's output: dropout's backward of dres, into s_branch, or
 * dres itself when there is no dropout (no copy). */
static cf_status branch_grad(cf_model *m, const block_stack *s, cf_mem dres, cf_dropout d, cf_mem *dbranch) {
  if (d.p == 0.0f) { *dbranch = dres; return CF_OK; }
  *dbranch = S(m->s_branch);
  return cf_residual_dropout_backward(m->ctx, *dbranch, dres, (size_t)rows(s) * m->C, d);
}

/* The backward of residual_norm_forward: dres = (accumulate: +=) the LayerNorm's input gradient
 * from dnorm, and *dbranch = dropout's backward of dres (s_branch, or dres itself without
 * dropout), in one kernel. */
static cf_status residual_norm_backward(cf_model *m, const block_stack *s, cf_mem dres, cf_mem dnorm, size_t res,
                                        norm_at n, int accumulate, cf_dropout d, cf_mem *dbranch) {
  *dbranch = d.p == 0.0f ? dres : S(m->s_branch);
  return cf_residual_dropout_layernorm_backward(m->ctx, dres, *dbranch, G(n.w), G(n.b), dnorm, A(res), P(n.w),
                                                A(n.mean), A(n.rstd), rows(s), m->C, accumulate, d);
}

/* dout -> the FFN's gradients; d(input) written (or added, accumulate) into dinp */
static cf_status ffn_backward(cf_model *m, const block_stack *s, int l, cf_mem dinp, cf_mem dout, cf_mem inp,
                              int accumulate) {
  const layer_params *p = &s->lp[l];
  const layer_acts *a = &s->la[l];
  int N = rows(s), C = m->C, F = m->F;
  CF_TRY(cf_linear_backward(m, N, S(m->s_wide), p->fc2_w, p->fc2_b, dout, A(a->a), F, C, 0));
  cf_dropout d = cf_block_dropout(m, s, l, DROP_FFN_ACT, m->mc.dropout);
  if (m->act == CF_ACT_RELU)  /* h is the dropped output there (layout.c): its zeros are the mask */
    CF_TRY(cf_bias_relu_backward_from_output(m->ctx, S(m->s_wide), G(p->fc1_b), S(m->s_wide), A(a->a), N, F, d));
  else
    CF_TRY(cf_bias_act_backward(m->ctx, S(m->s_wide), G(p->fc1_b), S(m->s_wide), A(a->h), N, F, m->act, d));
  return cf_linear_backward(m, N, dinp, p->fc1_w, SIZE_MAX, S(m->s_wide), inp, C, F, accumulate);
}

/* d(attention output) goes to s_datt, so dinp may be any of the stream buffers. */
static cf_status self_attention_backward(cf_model *m, const block_stack *s, int l, cf_mem dinp, cf_mem dout,
                                         cf_mem inp, int accumulate) {
  const layer_params *p = &s->lp[l];
  const layer_acts *a = &s->la[l];
  int C = m->C, N = rows(s);
  CF_TRY(cf_linear_backward(m, N, S(m->s_datt), p->proj_w, p->proj_b, dout, A(a->atty), C, C, 0));
  cf_dropout key = probs_key(m, s, l, DROP_ATT_PROBS);
  if (m->mc.attention == CF_ATTENTION_FUSED) {  /* dq | dk | dv straight into s_dqkv (B, T, 3C) */
    cf_attention_dims d = self_dims(m, s);
    cf_mem qkv = A(a->qkv), dqkv = S(m->s_dqkv);
    CF_TRY(cf_attention_fused_backward(m->ctx, dqkv, cf_shift(dqkv, C), cf_shift(dqkv, 2 * C), S(m->s_attn),
                                       S(m->s_datt), qkv, cf_shift(qkv, C), cf_shift(qkv, 2 * C), A(a->atty), A(a->att),
                                       s->key_len, &d, key));
  } else {
    CF_TRY(cf_attention_backward(m->ctx, S(m->s_dqkv), S(m->s_attn), S(m->s_datt), A(a->qkv), A(a->att), absent(),
                                 s->B, s->T, C, m->NH, key));
  }
  return cf_linear_backward(m, N, dinp, p->qkv_w, p->qkv_b, S(m->s_dqkv), inp, C, 3 * C, accumulate);
}

/* dq (N, C) and dk | dv (N_src, 2C) side by side in s_dqkv; the memory's gradient summed over the
 * decoder's blocks in s_dmem (the last block, whose backward runs first, writes it). */
static cf_status cross_attention_backward(cf_model *m, const block_stack *s, int l, cf_mem dinp, cf_mem dout,
                                          cf_mem inp, int accumulate) {
  const layer_params *p = &s->lp[l];
  const layer_acts *a = &s->la[l];
  int C = m->C, N = rows(s);
  CF_TRY(cf_linear_backward(m, N, S(m->s_datt), p->xproj_w, p->xproj_b, dout, A(a->xatty), C, C, 0));
  cf_attention_dims d = cross_dims(m, s);
  cf_mem dq = S(m->s_dqkv), dkv = cf_shift(dq, (size_t)N * C);
  CF_TRY(cf_attention_fused_backward(m->ctx, dq, dkv, cf_shift(dkv, C), S(m->s_attn), S(m->s_datt), A(a->xq), A(a->xkv),
                                     cf_shift(A(a->xkv), C), A(a->xatty), A(a->xlse), m->enc.key_len, &d,
                                     probs_key(m, s, l, DROP_CROSS_PROBS)));
  CF_TRY(cf_linear_backward(m, rows(&m->enc), S(m->s_dmem), p->xkv_w, p->xkv_b, dkv, cf_stack_output(m, &m->enc), C,
                            2 * C, l != s->L - 1));
  return cf_linear_backward(m, N, dinp, p->xq_w, p->xq_b, dq, inp, C, C, accumulate);
}

static cf_status sublayer_backward(cf_model *m, const block_stack *s, int l, int kind, cf_mem dinp, cf_mem dout,
                                   cf_mem inp, int accumulate) {
  if (kind == SUB_SELF) return self_attention_backward(m, s, l, dinp, dout, inp, accumulate);
  if (kind == SUB_CROSS) return cross_attention_backward(m, s, l, dinp, dout, inp, accumulate);
  return ffn_backward(m, s, l, dinp, dout, inp, accumulate);
}

/* Pre-LN, the mirror of block_forward's fusion: s_res holds on entry the gradient of the output of
 * next_norm (and s_stream, for the last block, nothing yet), s_stream on return d(block input)
 * but for the part through LN1, whose gradient (for l > 0) s_res holds for the block before to
 * run fused with its last residual's. */
static cf_status block_backward_pre(cf_model *m, const block_stack *s, int l) {
  sublayer sub[3];
  int n = block_sublayers(s, l, sub);
  cf_mem dx = S(m->s_stream), dres = S(m->s_res), dbranch;
  for (int i = n - 1; i >= 0; i--) {
    /* x_out = x_in + F(LN(x_in)), read by the next LayerNorm: dx (+)= LNnext'(dres); then
     * dres = d(LN(x_in)) through F */
    cf_dropout d = cf_block_dropout(m, s, l, sub[i].drop, m->mc.dropout);
    norm_at next;
    if (i + 1 < n) CF_TRY(residual_norm_backward(m, s, dx, dres, sub[i].res, sub[i + 1].norm, 1, d, &dbranch));
    else if (next_norm(s, l, &next)) CF_TRY(residual_norm_backward(m, s, dx, dres, sub[i].res, next, l + 1 < s->L, d, &dbranch));
    else CF_TRY(branch_grad(m, s, dx, d, &dbranch));
    CF_TRY(sublayer_backward(m, s, l, sub[i].kind, dres, dbranch, A(sub[i].norm.out), 0));
  }
  if (l > 0) return CF_OK;
  norm_at ln1 = sub[0].norm;
  return cf_layernorm_backward(m->ctx, dx, G(ln1.w), G(ln1.b), dres, block_input(m, s, 0), P(ln1.w), A(ln1.mean),
                               A(ln1.rstd), rows(s), m->C, 1);
}

/* Post-LN: s_stream holds d(block output) on entry and d(block input) on return; each sublayer
 * x_out = LN(x_in + F(x_in)) takes d(x_out) in one of s_stream and s_res and leaves d(x_in) in the
 * other (dr = LN'(d x_out); d x_in = dr + F'(dr)). */
static cf_status block_backward_post(cf_model *m, const block_stack *s, int l) {
  sublayer sub[3];
  int n = block_sublayers(s, l, sub);
  cf_mem buf[2] = {S(m->s_stream), S(m->s_res)}, dbranch;
  int cur = 0;
  for (int i = n - 1; i >= 0; i--) {
    cf_dropout d = cf_block_dropout(m, s, l, sub[i].drop, m->mc.dropout);
    cf_mem in = i == 0 ? block_input(m, s, l) : A(sub[i - 1].norm.out);
    CF_TRY(residual_norm_backward(m, s, buf[!cur], buf[cur], sub[i].res, sub[i].norm, 0, d, &dbranch));
    CF_TRY(sublayer_backward(m, s, l, sub[i].kind, buf[!cur], dbranch, in, 1));
    cur = !cur;
  }
  return cur == 0 ? CF_OK : cf_copy(m->ctx, buf[0], buf[1], (size_t)rows(s) * m->C);
}

/* Where the gradients final after block l's backward begin: its LN1 is done by block l - 1 under
 * Pre-LN (fused with that block's last residual), so from its attention on; from its start else. */
static size_t block_done_from(const cf_model *m, const block_stack *s, int l) {
  return m->mc.norm == CF_NORM_PRE && l > 0 ? s->lp[l].qkv_w : s->lp[l].ln1_w;
}

cf_status cf_stack_backward(cf_model *m, const block_stack *s) {
  if (s->lnf_w != SIZE_MAX && !final_norm_in_block(m, s)) {
    CF_TRY(cf_layernorm_backward(m->ctx, S(m->s_stream), G(s->lnf_w), G(s->lnf_b), S(m->s_res), blocks_output(m, s),
                                 P(s->lnf_w), A(s->lnf_mean), A(s->lnf_rstd), rows(s), m->C, 0));
    CF_TRY(cf_tell_grads_ready(m, s->lnf_w));
  }
  for (int l = s->L - 1; l >= 0; l--) {
    CF_TRY(m->mc.norm == CF_NORM_PRE ? block_backward_pre(m, s, l) : block_backward_post(m, s, l));
    CF_TRY(cf_tell_grads_ready(m, block_done_from(m, s, l)));
  }
  return CF_OK;
}
