/* The Transformer LM: parameter layout and initialisation, forward and backward passes, the
 * optimizer step. Norm placement (Pre-LN or Post-LN) lives in block_forward/block_backward only,
 * as two readable call sequences with backward their exact mirror; the kernels know nothing of it.
 *
 * Linear layers store W as (out, in), as PyTorch does: y = x W^T + b. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "clformer/ops.h"
#include "clformer/runtime.h"
#include "clformer/gemm.h"
#include "clformer/model.h"
#include "clformer/base.h"
#include "model/model_internal.h"
#include "runtime/runtime.h"

enum { DROP_EMB = 0, DROP_ATT_PROBS, DROP_ATT_OUT, DROP_FFN_ACT, DROP_FFN_OUT };


/* Allocate what the layout asks for: the flat buffers, then each arena's segments. */
static cf_status allocate(cf_model *m) {
  cf_model_flat_bytes f = cf_model_flat_sizes(m);
  const size_t bytes[] = {f.params, f.grads, f.m1, f.m2};
  cl_mem *mems[] = {&m->params, &m->grads, &m->m1, &m->m2};
  for (int i = 0; i < 4; i++) {
    CF_TRY(cf_buffer_create(m->ctx, bytes[i], mems[i]));
    m->bytes += bytes[i];
  }
  CF_TRY(cf_upload_create(m->ctx, &m->tokens, "token ids", f.tokens / sizeof(int)));
  CF_TRY(cf_upload_create(m->ctx, &m->targets, "targets", f.targets / sizeof(int)));
  m->bytes += f.tokens + f.targets;
  cf_arena *arenas[] = {&m->acts, &m->scratch};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < arenas[k]->n; i++) {
      struct cf_segment *s = &arenas[k]->seg[i];
      CF_TRY(cf_buffer_create(m->ctx, s->floats * 4, &s->buf));
      m->bytes += s->floats * 4;
    }
  return CF_OK;
}

cf_status cf_model_fits(const cf_memory_plan *p) {
  if (p->fits) return CF_OK;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  cf_model_plan_write(p, "  ", f);
  fclose(f);
  while (len && text[len - 1] == '\n') text[--len] = 0;
  cf_status st = CF_FAIL(CF_ERR_CONFIG, "the model does not fit %s at batch %d x %d tokens:\n%s\n%s", p->device,
                         p->batch, p->seq_len, text,
                         p->max_batch ? "lower data.batch_size (and raise train.accumulate to keep the tokens per step)"
                                      : "no batch size fits: choose a smaller model (model.d_model, model.layers, "
                                        "model.d_ff) or data.seq_len");
  free(text);
  return st;
}

cf_status cf_model_create(cf_context *ctx, const cf_model_config *mc, const cf_optim_config *oc,
                          unsigned long long seed, int B, int T, cf_model **out) {
  *out = NULL;
  cf_model *m = calloc(1, sizeof *m);
  if (!m) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  m->ctx = ctx;
  m->seed = seed;
  m->parts = 1;
  cf_status st = cf_model_lay_out(m, mc, oc, B, T);
  if (st == CF_OK) st = cf_model_plan(mc, oc, B, T, cf_context_device(ctx), &m->plan);
  if (st == CF_OK) st = cf_model_fits(&m->plan);
  if (st == CF_OK) st = allocate(m);
  if (st == CF_OK) st = cf_model_watch_setup(m);
  if (st != CF_OK) {
    cf_model_free(m);
    return st;
  }
  *out = m;
  return CF_OK;
}

void cf_model_free(cf_model *m) {
  if (!m) return;
  cf_model_watch_release(m);
  cl_mem mems[] = {m->params, m->grads, m->m1, m->m2};
  for (int i = 0; i < 4; i++) cf_buffer_free(mems[i]);
  cf_upload_free(&m->tokens);
  cf_upload_free(&m->targets);
  cf_model_lay_out_free(m);
  free(m);
}

int cf_model_num_views(const cf_model *m) { return m->nviews; }
const cf_tensor_view *cf_model_view(const cf_model *m, int i) { return &m->views[i]; }
const cf_tensor_view *cf_model_find_view(const cf_model *m, const char *name) {
  for (int i = 0; i < m->nviews; i++)
    if (!strcmp(m->views[i].name, name)) return &m->views[i];
  return NULL;
}
size_t cf_model_num_params(const cf_model *m) {
  size_t n = 0;
  for (int i = 0; i < m->nviews; i++) n += m->views[i].numel;
  return n;
}
size_t cf_model_device_bytes(const cf_model *m) { return m->bytes; }
const cf_memory_plan *cf_model_memory_plan(const cf_model *m) { return &m->plan; }
size_t cf_model_flat_floats(const cf_model *m) { return m->nparams; }
cf_context *cf_model_context(const cf_model *m) { return m->ctx; }
int cf_model_batch(const cf_model *m) { return m->B; }
int cf_model_seq_len(const cf_model *m) { return m->T; }
int cf_model_vocab(const cf_model *m) { return m->V; }

/* ---------- initialisation ---------- */

static uint32_t name_hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

/* Tensor `id`'s k-th number, uniform in [0, 1) (24 bits): the stream every Xavier draw has used. */
static double init_uniform(uint64_t seed, uint32_t id, size_t k) {
  return cf_random_uniform((uint32_t)seed, (uint32_t)(seed >> 32) ^ 0x1417u, id, (uint32_t)k);
}

/* Tensor `id`'s k-th number, standard normal: Box-Muller on two 32-bit words of Philox group k (a
 * stream of its own, 0x2417, so no Xavier draw is reused). |z| < 6.7 (u1 is at least 2^-32). */
static double init_normal(uint64_t seed, uint32_t id, size_t k) {
  uint32_t w[4];
  cf_random_bits((uint32_t)seed, (uint32_t)(seed >> 32) ^ 0x2417u, id, (uint32_t)k, w);
  double u1 = ((double)w[0] + 1.0) / 4294967296.0, u2 = (double)w[1] / 4294967296.0;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* One matrix's initial values: Xavier-uniform (the fused qkv weight as three C x C matrices, each
 * on its own), or for an embedding or the output projection under model.init: fairseq,
 * normal(0, C^-1/2) as fairseq's Transformer draws them (nn.init.normal_(std=embed_dim ** -0.5)). */
static void init_matrix(const cf_model *m, const cf_tensor_view *v, uint64_t seed, float *w) {
  uint32_t id = name_hash(v->name);
  if (v->kind == CF_INIT_EMBED && m->mc.init == CF_WEIGHT_INIT_FAIRSEQ) {
    double sd = 1.0 / sqrt((double)m->C);
    for (size_t k = 0; k < v->numel; k++) w[k] = (float)(init_normal(seed, id, k) * sd);
    return;
  }
  int rows = v->shape[0], cols = v->shape[1];
  if (strstr(v->name, "attn.qkv.weight")) rows /= 3;
  double bound = sqrt(6.0 / (rows + cols));
  for (size_t k = 0; k < v->numel; k++) w[k] = (float)((2.0 * init_uniform(seed, id, k) - 1.0) * bound);
}

cf_status cf_model_init(cf_model *m, uint64_t seed) {
  float *host = calloc(m->nparams ? m->nparams : 1, sizeof *host);
  if (!host) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  for (int i = 0; i < m->nviews; i++) {
    const cf_tensor_view *v = &m->views[i];
    float *w = host + v->off;
    if (v->kind == CF_INIT_ONE) for (size_t k = 0; k < v->numel; k++) w[k] = 1.0f;
    if (v->kind == CF_INIT_XAVIER || v->kind == CF_INIT_EMBED) init_matrix(m, v, seed, w);
  }
  cf_status st = cf_write(m->ctx, cf_at(m->params, 0), host, m->nparams);
  free(host);
  CF_TRY(st);
  size_t n1 = m->oc.name == CF_OPTIM_SGD && m->oc.momentum == 0 ? 1 : m->nparams;
  CF_TRY(cf_fill(m->ctx, cf_at(m->m1, 0), 0.0f, n1));
  if (m->oc.name != CF_OPTIM_SGD) CF_TRY(cf_fill(m->ctx, cf_at(m->m2, 0), 0.0f, m->nparams));
  return CF_OK;
}

/* ---------- building blocks ---------- */

#define P(off) cf_at(m->params, (off))
#define G(off) cf_at(m->grads, (off))
#define A(off) cf_arena_at(&m->acts, (off))
#define S(off) cf_arena_at(&m->scratch, (off))

/* y (N, out) = x (N, in) W^T + b */
static cf_status linear_forward(cf_model *m, cf_mem y, cf_mem x, size_t w, size_t b, int in, int out) {
  int N = m->B * m->T;
  CF_TRY(cf_gemm(m->ctx, 0, 1, (size_t)N, (size_t)out, (size_t)in, 1.0f, x, (size_t)in, P(w), (size_t)in, 0.0f, y, (size_t)out));
  return b == SIZE_MAX ? CF_OK : cf_bias_forward(m->ctx, y, P(b), N, out);
}

/* dW += dy^T x, db += colsum(dy), dx = dy W (+ dx when accumulate) */
static cf_status linear_backward(cf_model *m, cf_mem dx, size_t w, size_t b, cf_mem dy, cf_mem x, int in, int out,
                                 int accumulate) {
  size_t N = (size_t)m->B * m->T;
  CF_TRY(cf_gemm(m->ctx, 1, 0, (size_t)out, (size_t)in, N, 1.0f, dy, (size_t)out, x, (size_t)in, 1.0f, G(w), (size_t)in));
  if (b != SIZE_MAX) CF_TRY(cf_bias_backward(m->ctx, G(b), dy, (int)N, out));
  if (dx.buf == NULL) return CF_OK;
  return cf_gemm(m->ctx, 0, 0, N, (size_t)in, (size_t)out, 1.0f, dy, (size_t)out, P(w), (size_t)in,
                 accumulate ? 1.0f : 0.0f, dx, (size_t)in);
}

/* A mask per (seed, step, tensor), over the tensor of the step's whole global batch: a micro-batch
 * whose first row is global row R (its global micro-batch number times B: cf_model_set_shard) takes
 * the mask from R's first element on (group0), so an example's masks depend on its row, not on the
 * rank or micro-batch that computes it: 2 ranks of batch B, B x accumulate 2 and one batch of 2B
 * draw the same. Rows are placed ceil(row/4) Philox groups apart: exactly the big tensor's layout
 * when a row's elements are a multiple of 4, disjoint groups otherwise. */
static uint64_t dropout_row_groups(const cf_model *m, int which) {
  uint64_t row = which == DROP_ATT_PROBS ? (uint64_t)m->NH * m->T * m->T
                 : which == DROP_FFN_ACT ? (uint64_t)m->T * m->F
                                         : (uint64_t)m->T * m->C;
  return (row + 3) / 4;
}

static cf_dropout dropout_key(const cf_model *m, int layer, int which, double p) {
  uint64_t first_row = (uint64_t)(m->shard_first + m->part) * (uint64_t)m->B;
  cf_dropout d = {m->train ? (float)p : 0.0f, (uint32_t)m->seed, m->step, (uint32_t)(layer + 1) * 8u + (uint32_t)which,
                  (uint32_t)(first_row * dropout_row_groups(m, which))};  /* fits: dropout_fits */
  return d;
}

/* Whether the masks of a step of `total` micro-batches are numbered within 32 bits (the kernels'
 * element index): the largest masked tensor of the whole global batch below 2^32 elements. */
static cf_status dropout_fits(const cf_model *m, int total) {
  uint64_t most = 0, rows = (uint64_t)total * (uint64_t)m->B;  /* groups of the largest masked row */
  if (m->mc.attn_dropout > 0) most = dropout_row_groups(m, DROP_ATT_PROBS);
  for (int which = DROP_EMB; m->mc.dropout > 0 && which <= DROP_FFN_OUT; which++)
    if (which != DROP_ATT_PROBS && dropout_row_groups(m, which) > most) most = dropout_row_groups(m, which);
  if (rows * most * 4 <= ((uint64_t)1 << 32)) return CF_OK;
  return CF_FAIL(CF_ERR_INVALID_ARG, "dropout over a step of %llu sequences: a masked tensor of the whole batch would "
                 "have %llu elements, and masks are numbered in 32 bits; lower the batch, the ranks or train.accumulate",
                 (unsigned long long)rows, (unsigned long long)(rows * most * 4));
}

static cf_dropout attn_key(const cf_model *m, int layer) {
  return dropout_key(m, layer, DROP_ATT_PROBS, m->mc.attn_dropout);
}

/* An optional buffer left out (no mask, no learned positions, no momentum, no clipping norm). */
static cf_mem absent(void) { return cf_at(NULL, 0); }

/* The block input of layer l: the embedding for layer 0, else the previous block's output. */
static cf_mem block_input(const cf_model *m, int l) {
  if (l == 0) return A(m->emb);
  return A(m->mc.norm == CF_NORM_PRE ? m->la[l - 1].res2 : m->la[l - 1].norm2);
}
static cf_mem model_output(const cf_model *m) { return block_input(m, m->L); }

/* A LayerNorm: its parameters (offsets in params and grads) and its output and statistics (acts). */
typedef struct norm_at {
  size_t w, b, out, mean, rstd;
} norm_at;

static norm_at ln1_at(const cf_model *m, int l) {
  norm_at n = {m->lp[l].ln1_w, m->lp[l].ln1_b, m->la[l].norm1, m->la[l].mean1, m->la[l].rstd1};
  return n;
}
static norm_at ln2_at(const cf_model *m, int l) {
  norm_at n = {m->lp[l].ln2_w, m->lp[l].ln2_b, m->la[l].norm2, m->la[l].mean2, m->la[l].rstd2};
  return n;
}

/* Pre-LN: the LayerNorm that reads block l's output (LN1 of block l + 1, or the final one), which
 * block l computes fused with its last residual add; 0 when there is none. */
static int next_norm(const cf_model *m, int l, norm_at *n) {
  if (l + 1 < m->L) { *n = ln1_at(m, l + 1); return 1; }
  if (m->lnf_w == SIZE_MAX) return 0;
  norm_at f = {m->lnf_w, m->lnf_b, m->lnf_out, m->lnf_mean, m->lnf_rstd};
  *n = f;
  return 1;
}

/* Whether the last block computes the final LayerNorm (Pre-LN: see next_norm). */
static int final_norm_in_block(const cf_model *m) { return m->mc.norm == CF_NORM_PRE && m->L > 0; }

/* ---------- the block: Pre-LN and Post-LN ---------- */

/* Causal self-attention over the fused projection qkv (B, T, 3C), read in place by the fused
 * kernels: q, k, v at channel offsets 0, C, 2C of each row; the output (B, T, C). */
static cf_attention_dims self_attention(const cf_model *m) {
  int C = m->C, HS = C / m->NH;
  cf_attention_dims d = {m->B, m->T, m->T, m->NH, HS, 1, 3 * C, 3 * C, 3 * C, C, (float)(1.0 / sqrt((double)HS))};
  return d;
}

static cf_status attention_forward(cf_model *m, int l, cf_mem inp) {
  layer_params *p = &m->lp[l];
  layer_acts *a = &m->la[l];
  int C = m->C;
  CF_TRY(linear_forward(m, A(a->qkv), inp, p->qkv_w, p->qkv_b, C, 3 * C));
  if (m->mc.attention == CF_ATTENTION_FUSED) {  /* att holds the rows' logsumexp (layout.c) */
    cf_attention_dims d = self_attention(m);
    cf_mem qkv = A(a->qkv);
    CF_TRY(cf_attention_fused_forward(m->ctx, A(a->atty), A(a->att), S(m->s_attn), qkv, cf_shift(qkv, C),
                                      cf_shift(qkv, 2 * C), absent(), &d, attn_key(m, l)));
  } else {
    CF_TRY(cf_attention_forward(m->ctx, A(a->atty), A(a->qkvp), A(a->att), S(m->s_attn), A(a->qkv), absent(), m->B,
                                m->T, C, m->NH, attn_key(m, l)));
  }
  return linear_forward(m, S(m->s_branch), A(a->atty), p->proj_w, p->proj_b, C, C);
}

static cf_status ffn_forward(cf_model *m, int l, cf_mem inp) {
  layer_params *p = &m->lp[l];
  layer_acts *a = &m->la[l];
  int N = m->B * m->T, C = m->C, F = m->F;
  CF_TRY(linear_forward(m, A(a->h), inp, p->fc1_w, SIZE_MAX, C, F));
  CF_TRY(cf_bias_act_forward(m->ctx, A(a->a), A(a->h), P(p->fc1_b), N, F, m->act));
  CF_TRY(cf_dropout_forward(m->ctx, A(a->a), (size_t)N * F, dropout_key(m, l, DROP_FFN_ACT, m->mc.dropout)));
  return linear_forward(m, S(m->s_branch), A(a->a), p->fc2_w, p->fc2_b, F, C);
}

/* res = x + dropout(branch in s_branch), then the LayerNorm n of res: one kernel. */
static cf_status residual_norm_forward(cf_model *m, size_t res, cf_mem x, norm_at n, cf_dropout d) {
  return cf_residual_dropout_layernorm_forward(m->ctx, A(n.out), A(n.mean), A(n.rstd), A(res), x, S(m->s_branch),
                                               P(n.w), P(n.b), m->B * m->T, m->C, (float)m->mc.ln_eps, d);
}

static cf_status block_forward(cf_model *m, int l) {
  layer_acts *a = &m->la[l];
  double pd = m->mc.dropout;
  cf_mem x = block_input(m, l);
  if (m->mc.norm == CF_NORM_PRE) {
    /* x1 = x + Attn(LN1(x)); x2 = x1 + FFN(LN2(x1)). Each residual add runs fused with the
     * LayerNorm of its sum: LN2, then the next block's LN1 (or the final LayerNorm), so LN1(x)
     * is computed here only for the embedding. */
    norm_at ln1 = ln1_at(m, l), next;
    if (l == 0)
      CF_TRY(cf_layernorm_forward(m->ctx, A(ln1.out), A(ln1.mean), A(ln1.rstd), x, P(ln1.w), P(ln1.b), m->B * m->T,
                                  m->C, (float)m->mc.ln_eps));
    CF_TRY(attention_forward(m, l, A(a->norm1)));
    CF_TRY(residual_norm_forward(m, a->res1, x, ln2_at(m, l), dropout_key(m, l, DROP_ATT_OUT, pd)));
    CF_TRY(ffn_forward(m, l, A(a->norm2)));
    cf_dropout d_ffn = dropout_key(m, l, DROP_FFN_OUT, pd);
    if (next_norm(m, l, &next)) return residual_norm_forward(m, a->res2, A(a->res1), next, d_ffn);
    return cf_residual_dropout_forward(m->ctx, A(a->res2), A(a->res1), S(m->s_branch), (size_t)m->B * m->T * m->C, d_ffn);
  }
  /* x1 = LN1(x + Attn(x)); x2 = LN2(x1 + FFN(x1)) */
  CF_TRY(attention_forward(m, l, x));
  CF_TRY(residual_norm_forward(m, a->res1, x, ln1_at(m, l), dropout_key(m, l, DROP_ATT_OUT, pd)));
  CF_TRY(ffn_forward(m, l, A(a->norm1)));
  return residual_norm_forward(m, a->res2, A(a->norm1), ln2_at(m, l), dropout_key(m, l, DROP_FFN_OUT, pd));
}

/* The gradient of a residual branch's output: dropout's backward of dres, into s_branch, or
 * dres itself when there is no dropout (no copy). */
static cf_status branch_grad(cf_model *m, cf_mem dres, cf_dropout d, cf_mem *dbranch) {
  if (d.p == 0.0f) { *dbranch = dres; return CF_OK; }
  *dbranch = S(m->s_branch);
  return cf_residual_dropout_backward(m->ctx, *dbranch, dres, (size_t)m->B * m->T * m->C, d);
}

/* The backward of residual_norm_forward: dres = (accumulate: +=) the LayerNorm's input gradient
 * from dnorm, and *dbranch = dropout's backward of dres (s_branch, or dres itself without
 * dropout), in one kernel. */
static cf_status residual_norm_backward(cf_model *m, cf_mem dres, cf_mem dnorm, size_t res, norm_at n, int accumulate,
                                        cf_dropout d, cf_mem *dbranch) {
  *dbranch = d.p == 0.0f ? dres : S(m->s_branch);
  return cf_residual_dropout_layernorm_backward(m->ctx, dres, *dbranch, G(n.w), G(n.b), dnorm, A(res), P(n.w),
                                                A(n.mean), A(n.rstd), m->B * m->T, m->C, accumulate, d);
}

/* dffn_out -> grads of the FFN; d(input) written (or added, accumulate) into dinp */
static cf_status ffn_backward(cf_model *m, int l, cf_mem dinp, cf_mem dout, cf_mem inp, int accumulate) {
  layer_params *p = &m->lp[l];
  layer_acts *a = &m->la[l];
  int N = m->B * m->T, C = m->C, F = m->F;
  CF_TRY(linear_backward(m, S(m->s_wide), p->fc2_w, p->fc2_b, dout, A(a->a), F, C, 0));
  CF_TRY(cf_dropout_backward(m->ctx, S(m->s_wide), (size_t)N * F, dropout_key(m, l, DROP_FFN_ACT, m->mc.dropout)));
  CF_TRY(cf_bias_act_backward(m->ctx, S(m->s_wide), G(p->fc1_b), S(m->s_wide), A(a->h), N, F, m->act));
  return linear_backward(m, dinp, p->fc1_w, SIZE_MAX, S(m->s_wide), inp, C, F, accumulate);
}

static cf_status attention_backward(cf_model *m, int l, cf_mem dinp, cf_mem dout, cf_mem inp, int accumulate) {
  layer_params *p = &m->lp[l];
  layer_acts *a = &m->la[l];
  int C = m->C;
  CF_TRY(linear_backward(m, S(m->s_res), p->proj_w, p->proj_b, dout, A(a->atty), C, C, 0));
  if (m->mc.attention == CF_ATTENTION_FUSED) {  /* dq | dk | dv straight into s_dqkv (B, T, 3C) */
    cf_attention_dims d = self_attention(m);
    cf_mem qkv = A(a->qkv), dqkv = S(m->s_dqkv);
    CF_TRY(cf_attention_fused_backward(m->ctx, dqkv, cf_shift(dqkv, C), cf_shift(dqkv, 2 * C), S(m->s_attn),
                                       S(m->s_res), qkv, cf_shift(qkv, C), cf_shift(qkv, 2 * C), A(a->atty),
                                       A(a->att), absent(), &d, attn_key(m, l)));
  } else {
    CF_TRY(cf_attention_backward(m->ctx, S(m->s_dqkv), S(m->s_attn), S(m->s_res), A(a->qkvp), A(a->att), absent(),
                                 m->B, m->T, C, m->NH, attn_key(m, l)));
  }
  return linear_backward(m, dinp, p->qkv_w, p->qkv_b, S(m->s_dqkv), inp, C, 3 * C, accumulate);
}

/* s_stream holds d(block output) on entry and d(block input) on return. Pre-LN mirrors the
 * forward's fusion: s_res holds on entry the gradient of the output of next_norm (and s_stream
 * nothing yet for the last block), and on return, for l > 0, that of LN1(x), whose backward the
 * block before runs fused with its last residual's. */
static cf_status block_backward(cf_model *m, int l) {
  layer_acts *a = &m->la[l];
  double pd = m->mc.dropout;
  cf_mem dx = S(m->s_stream), dres = S(m->s_res), dbranch, x = block_input(m, l);
  if (m->mc.norm == CF_NORM_PRE) {
    /* x2 = x1 + FFN(LN2(x1)), read by the next LayerNorm: dx2 (+)= LNnext'(dres);
     * dx1 = dx2 + LN2'(FFN'(dx2)) */
    norm_at ln1 = ln1_at(m, l), next;
    cf_dropout d_ffn = dropout_key(m, l, DROP_FFN_OUT, pd), d_att = dropout_key(m, l, DROP_ATT_OUT, pd);
    if (next_norm(m, l, &next)) CF_TRY(residual_norm_backward(m, dx, dres, a->res2, next, l + 1 < m->L, d_ffn, &dbranch));
    else CF_TRY(branch_grad(m, dx, d_ffn, &dbranch));
    CF_TRY(ffn_backward(m, l, dres, dbranch, A(a->norm2), 0));
    /* x1 = x + Attn(LN1(x)): dx1 += LN2'(dres); dx = dx1 + LN1'(Attn'(dx1)) */
    CF_TRY(residual_norm_backward(m, dx, dres, a->res1, ln2_at(m, l), 1, d_att, &dbranch));
    CF_TRY(attention_backward(m, l, dres, dbranch, A(a->norm1), 0));
    if (l > 0) return CF_OK;
    return cf_layernorm_backward(m->ctx, dx, G(ln1.w), G(ln1.b), dres, x, P(ln1.w), A(ln1.mean), A(ln1.rstd),
                                 m->B * m->T, m->C, 1);
  }
  cf_dropout d_ffn = dropout_key(m, l, DROP_FFN_OUT, pd), d_att = dropout_key(m, l, DROP_ATT_OUT, pd);
  /* x2 = LN2(r2), r2 = x1 + FFN(x1): dr2 = LN2'(dx2); dx1 = dr2 + FFN'(dr2) */
  CF_TRY(residual_norm_backward(m, dres, dx, a->res2, ln2_at(m, l), 0, d_ffn, &dbranch));
  CF_TRY(ffn_backward(m, l, dres, dbranch, A(a->norm1), 1));
  /* x1 = LN1(r1), r1 = x + Attn(x): dr1 = LN1'(dx1); dx = dr1 + Attn'(dr1) */
  CF_TRY(residual_norm_backward(m, dx, dres, a->res1, ln1_at(m, l), 0, d_att, &dbranch));
  return attention_backward(m, l, dx, dbranch, x, 1);
}

/* ---------- the model ---------- */

static float token_scale(const cf_model *m) { return m->mc.scale_embeddings ? sqrtf((float)m->C) : 1.0f; }

/* An accumulated step's mean loss: the parts' losses summed into step_loss, divided at the last. */
static cf_status step_loss(cf_model *m) {
  if (m->parts == 1) return CF_OK;  /* the loss itself is the step's */
  if (m->part == 0) CF_TRY(cf_copy(m->ctx, A(m->step_loss), A(m->loss), 1));
  else CF_TRY(cf_add_inplace(m->ctx, A(m->step_loss), A(m->loss), 1));
  return m->part == m->parts - 1 ? cf_scale(m->ctx, A(m->step_loss), 1, 1.0f / (float)m->parts) : CF_OK;
}

/* Where the last step's loss is, for the watch and cf_model_add_loss. */
cf_mem cf_model_step_loss_at(const cf_model *m) { return A(m->parts > 1 ? m->step_loss : m->loss); }

cf_status cf_model_forward(cf_model *m, const int *inputs, const int *targets, uint32_t step, int train) {
  return cf_model_forward_part(m, inputs, targets, step, 0, 1, train);
}

cf_status cf_model_set_shard(cf_model *m, int first, int total) {
  if (first < 0 || total < 0 || total > 65535 || (total && first >= total))
    return CF_FAIL(CF_ERR_INVALID_ARG, "shard from micro-batch %d of %d: needs 0 <= first < total <= 65535", first, total);
  m->shard_first = first;
  m->shard_total = total;
  return CF_OK;
}

cf_status cf_model_forward_part(cf_model *m, const int *inputs, const int *targets, uint32_t step, int part, int parts,
                                int train) {
  int N = m->B * m->T, C = m->C, V = m->V;
  if (parts < 1 || part < 0 || part >= parts || parts > 65535)
    return CF_FAIL(CF_ERR_INVALID_ARG, "micro-batch %d of %d: needs 0 <= part < parts <= 65535", part, parts);
  int total = m->shard_total ? m->shard_total : parts;  /* micro-batches of the step, over all ranks */
  if (m->shard_first + parts > total)
    return CF_FAIL(CF_ERR_INVALID_ARG, "micro-batches %d .. %d of a step of %d", m->shard_first,
                   m->shard_first + parts - 1, total);
  CF_TRY(dropout_fits(m, total));
  long bad = cf_embedding_check_tokens(inputs, (size_t)N, V);
  if (bad >= 0) return CF_FAIL(CF_ERR_INVALID_ARG, "token %d at position %ld is outside the vocabulary [0, %d)", inputs[bad], bad, V);
  m->step = step;
  m->part = part;
  m->parts = parts;
  m->train = train;
  CF_TRY(cf_upload_put(&m->tokens, inputs));
  CF_TRY(cf_embedding_forward(m->ctx, A(m->emb), cf_at(cf_upload_current(&m->tokens), 0), P(m->wte),
                              m->wpe == SIZE_MAX ? absent() : P(m->wpe), m->B, m->T, C, V, token_scale(m)));
  CF_TRY(cf_dropout_forward(m->ctx, A(m->emb), (size_t)N * C, dropout_key(m, -1, DROP_EMB, m->mc.dropout)));
  for (int l = 0; l < m->L; l++) CF_TRY(block_forward(m, l));
  cf_mem xf = m->lnf_w != SIZE_MAX ? A(m->lnf_out) : model_output(m);
  if (m->lnf_w != SIZE_MAX && !final_norm_in_block(m))
    CF_TRY(cf_layernorm_forward(m->ctx, A(m->lnf_out), A(m->lnf_mean), A(m->lnf_rstd), model_output(m), P(m->lnf_w),
                                P(m->lnf_b), N, C, (float)m->mc.ln_eps));
  CF_TRY(linear_forward(m, A(m->logits), xf, m->out_w, SIZE_MAX, C, V));
  m->count = 0;
  if (!targets) return CF_OK;
  m->count = cf_crossentropy_count(targets, N, -1);
  CF_TRY(cf_upload_put(&m->targets, targets));
  /* the loss and, in the same pass over the logits, their gradient for a backward that may follow
   * (over `parts` micro-batches of equal count: the step's mean is the mean of their means) */
  CF_TRY(cf_crossentropy_forward_backward(m->ctx, A(m->loss), A(m->losses), A(m->dlogits), A(m->logits),
                                          cf_at(cf_upload_current(&m->targets), 0), N, V, (float)m->mc.label_smoothing, -1,
                                          1.0f / ((float)m->count * (float)total)));
  return step_loss(m);
}

cf_status cf_model_zero_grads(cf_model *m) { return cf_fill(m->ctx, cf_at(m->grads, 0), 0.0f, m->nparams); }

cf_status cf_model_backward(cf_model *m) {
  if (m->count <= 0) return CF_FAIL(CF_ERR_INVALID_ARG, "backward needs a forward with targets first");
  CF_TRY(cf_model_zero_grads(m));
  return cf_model_backward_add(m);
}

void cf_model_on_grads_ready(cf_model *m, cf_grads_ready_fn fn, void *user) {
  m->ready_fn = fn;
  m->ready_user = user;
}

/* The hook told that the gradients from `from` to the end are final (in the last micro-batch). */
static cf_status grads_ready(cf_model *m, size_t from) {
  if (!m->ready_fn || m->part != m->parts - 1 || from >= m->ready_from) return CF_OK;
  cf_grads_ready r = {m->grads, from, m->ready_from, cf_model_step_loss_at(m)};
  m->ready_from = from;
  return m->ready_fn(m->ready_user, &r);
}

/* Where the gradients final after block l's backward begin: its LN1 is done by block l - 1 under
 * Pre-LN (fused with that block's last residual), so from its attention on; from its start else. */
static size_t block_done_from(const cf_model *m, int l) {
  return m->mc.norm == CF_NORM_PRE && l > 0 ? m->lp[l].qkv_w : m->lp[l].ln1_w;
}

cf_status cf_model_backward_add(cf_model *m) {
  if (m->count <= 0) return CF_FAIL(CF_ERR_INVALID_ARG, "backward needs a forward with targets first");
  int N = m->B * m->T, C = m->C, V = m->V;
  cf_mem xf = m->lnf_w != SIZE_MAX ? A(m->lnf_out) : model_output(m);
  size_t done = m->out_w != m->wte ? m->out_w : m->nparams;  /* tied: the embeddings' backward adds more */
  m->ready_from = m->nparams;
  if (m->lnf_w != SIZE_MAX) {
    /* d(lnf_out) in s_res; the final LayerNorm's backward here, or in the last block (Pre-LN) */
    CF_TRY(linear_backward(m, S(m->s_res), m->out_w, SIZE_MAX, A(m->dlogits), xf, C, V, 0));
    if (!final_norm_in_block(m)) {
      CF_TRY(cf_layernorm_backward(m->ctx, S(m->s_stream), G(m->lnf_w), G(m->lnf_b), S(m->s_res), model_output(m),
                                   P(m->lnf_w), A(m->lnf_mean), A(m->lnf_rstd), N, C, 0));
      done = m->lnf_w;
    }
  } else {
    CF_TRY(linear_backward(m, S(m->s_stream), m->out_w, SIZE_MAX, A(m->dlogits), xf, C, V, 0));
  }
  CF_TRY(grads_ready(m, done));
  for (int l = m->L - 1; l >= 0; l--) {
    CF_TRY(block_backward(m, l));
    CF_TRY(grads_ready(m, block_done_from(m, l)));
  }
  CF_TRY(cf_dropout_backward(m->ctx, S(m->s_stream), (size_t)N * C, dropout_key(m, -1, DROP_EMB, m->mc.dropout)));
  CF_TRY(cf_embedding_backward(m->ctx, G(m->wte), m->wpe == SIZE_MAX ? absent() : G(m->wpe), S(m->s_stream),
                               cf_at(cf_upload_current(&m->tokens), 0), m->B, m->T, C, V, token_scale(m)));
  return grads_ready(m, 0);
}

cf_status cf_model_global_grad_norm(cf_model *m) {
  return cf_global_norm(m->ctx, A(m->grad_norm), cf_at(m->grads, 0), m->nparams, S(m->s_norm));
}

cf_status cf_model_update(cf_model *m, float lr, int step) {
  const cf_optim_config *o = &m->oc;
  cf_mem norm = o->clip_norm > 0 ? A(m->grad_norm) : absent();
  if (o->name == CF_OPTIM_SGD)
    return cf_sgd_update(m->ctx, cf_at(m->params, 0), cf_at(m->grads, 0), o->momentum > 0 ? cf_at(m->m1, 0) : absent(),
                         m->nparams, lr, (float)o->momentum, (float)o->weight_decay, norm,
                         (float)o->clip_norm);
  cf_adam h = {lr, (float)o->beta1, (float)o->beta2, (float)o->eps, (float)o->weight_decay,
               o->name == CF_OPTIM_ADAMW, step};
  return cf_adam_update(m->ctx, cf_at(m->params, 0), cf_at(m->grads, 0), cf_at(m->m1, 0), cf_at(m->m2, 0), m->nparams,
                        &h, norm, (float)o->clip_norm);
}

cf_status cf_model_add_loss(cf_model *m, cf_mem acc) { return cf_add_inplace(m->ctx, acc, cf_model_step_loss_at(m), 1); }
cf_status cf_model_read_step_loss(cf_model *m, float *loss) { return cf_read(m->ctx, cf_model_step_loss_at(m), loss, 1); }
cf_status cf_model_write_step_loss(cf_model *m, float loss) { return cf_write(m->ctx, cf_model_step_loss_at(m), &loss, 1); }
cf_status cf_model_loss(cf_model *m, float *loss) { return cf_read(m->ctx, A(m->loss), loss, 1); }
cf_status cf_model_read_global_grad_norm(cf_model *m, float *norm) { return cf_read(m->ctx, A(m->grad_norm), norm, 1); }

cf_status cf_model_logits(cf_model *m, int b, int t, float *out) {
  if (b < 0 || b >= m->B || t < 0 || t >= m->T) return CF_FAIL(CF_ERR_INVALID_ARG, "logits of (%d, %d) outside the batch", b, t);
  return cf_read(m->ctx, A(m->logits + ((size_t)b * m->T + t) * m->V), out, (size_t)m->V);
}

cf_status cf_model_tensor_grad_norms(cf_model *m, float *out) {
  size_t *offs = malloc((size_t)m->nviews * sizeof *offs), *counts = malloc((size_t)m->nviews * sizeof *counts);
  cl_mem o = NULL, s = NULL;
  cf_status st = CF_OK;
  if (!offs || !counts) { st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); goto done; }
  for (int i = 0; i < m->nviews; i++) { offs[i] = m->views[i].off; counts[i] = m->views[i].numel; }
  if ((st = cf_buffer_create(m->ctx, (size_t)m->nviews * 4, &o)) != CF_OK) goto done;
  if ((st = cf_buffer_create(m->ctx, cf_segment_norms_scratch_floats(counts, m->nviews) * 4, &s)) != CF_OK) goto done;
  if ((st = cf_segment_norms(m->ctx, cf_at(o, 0), cf_at(m->grads, 0), offs, counts, m->nviews, cf_at(s, 0))) != CF_OK) goto done;
  st = cf_read(m->ctx, cf_at(o, 0), out, (size_t)m->nviews);
done:
  cf_buffer_free(o);
  cf_buffer_free(s);
  free(offs);
  free(counts);
  return st;
}

static cl_mem flat(cf_model *m, int which) {
  return which == 0 ? m->params : which == 1 ? m->grads : which == 2 ? m->m1 : m->m2;
}

static int flat_present(const cf_model *m, int which) {
  if (which == 2) return !(m->oc.name == CF_OPTIM_SGD && m->oc.momentum == 0);
  if (which == 3) return m->oc.name != CF_OPTIM_SGD;
  return which >= 0 && which < 2;
}

cf_status cf_model_read(cf_model *m, int which, float *host) {
  if (!flat_present(m, which)) { memset(host, 0, m->nparams * sizeof *host); return CF_OK; }
  return cf_read(m->ctx, cf_at(flat(m, which), 0), host, m->nparams);
}

cf_status cf_model_write(cf_model *m, int which, const float *host) {
  if (!flat_present(m, which)) return CF_OK;
  return cf_write(m->ctx, cf_at(flat(m, which), 0), host, m->nparams);
}

cf_status cf_model_map(cf_model *m, int which, const float **host) {
  *host = NULL;
  if (!flat_present(m, which)) return CF_OK;
  return cf_map_read(m->ctx, cf_at(flat(m, which), 0), m->nparams, host);
}

cf_status cf_model_unmap(cf_model *m, int which, const float *host) {
  return host ? cf_unmap(m->ctx, flat(m, which), host) : CF_OK;
}
