/* Where everything of a model lives: the parameter views in the flat buffers, the activations and
 * workspaces in their arenas. Host arithmetic only: cf_model_create allocates what this lays out,
 * and cf_model_plan counts the same layout without a device, so sizes have one owner. */
#include <stdlib.h>
#include <string.h>
#include "clformer/ops.h"
#include "model/model_internal.h"
#include "runtime/runtime.h"

/* ---------- arenas ---------- */

int cf_arena_segment(cf_arena *a, const char *name) {
  if (a->n == a->cap) {
    int cap = a->cap ? 2 * a->cap : 16;
    struct cf_segment *s = realloc(a->seg, (size_t)cap * sizeof *s);
    if (!s) return -1;
    a->seg = s;
    a->cap = cap;
  }
  struct cf_segment *s = &a->seg[a->n++];
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "%s", name);
  s->base = a->total;
  return 0;
}

size_t cf_arena_take(cf_arena *a, size_t n) {
  size_t off = a->total, len = cf_round_up(n ? n : 1, 16);
  a->total += len;
  a->seg[a->n - 1].floats += len;
  return off;
}

cf_mem cf_arena_at(const cf_arena *a, size_t off) {
  int lo = 0, hi = a->n - 1;  /* the last segment starting at or before off */
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (a->seg[mid].base <= off) lo = mid;
    else hi = mid - 1;
  }
  return cf_at(a->seg[lo].buf, off - a->seg[lo].base);
}

void cf_arena_free(cf_arena *a) {
  for (int i = 0; i < a->n; i++) cf_buffer_free(a->seg[i].buf);
  free(a->seg);
  memset(a, 0, sizeof *a);
}

/* ---------- parameters ---------- */

static size_t add_view(cf_model *m, const char *name, int rows, int cols, int kind) {
  if (m->nviews == m->cap_views) {
    int cap = m->cap_views ? 2 * m->cap_views : 64;
    cf_tensor_view *v = realloc(m->views, (size_t)cap * sizeof *v);
    if (!v) return SIZE_MAX;
    m->views = v;
    m->cap_views = cap;
  }
  cf_tensor_view *v = &m->views[m->nviews++];
  memset(v, 0, sizeof *v);
  snprintf(v->name, sizeof v->name, "%s", name);
  v->off = m->nparams;
  v->ndim = cols > 0 ? 2 : 1;
  v->shape[0] = rows;
  v->shape[1] = cols > 0 ? cols : 0;
  v->numel = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
  v->kind = kind;
  /* keep every tensor 16-float aligned: vector loads and cache lines stay whole */
  m->nparams += cf_round_up(v->numel, 16);
  return v->off;
}

/* A block's parameters, named PREFIX.N.*: "layers.3.ffn.fc1.weight" (the language model),
 * "encoder.layers.0.attn.qkv.weight", "decoder.layers.1.cross.kv.weight". */
static void layout_block_params(cf_model *m, const char *prefix, int l, int cross, layer_params *p) {
  char n[64];
  int C = m->C, F = m->F;
#define V2(field, suffix, r, c, kind) (snprintf(n, sizeof n, "%s.%d.%s", prefix, l, suffix), p->field = add_view(m, n, r, c, kind))
  V2(ln1_w, "ln1.weight", C, 0, CF_INIT_ONE);
  V2(ln1_b, "ln1.bias", C, 0, CF_INIT_ZERO);
  V2(qkv_w, "attn.qkv.weight", 3 * C, C, CF_INIT_XAVIER);
  V2(qkv_b, "attn.qkv.bias", 3 * C, 0, CF_INIT_ZERO);
  V2(proj_w, "attn.proj.weight", C, C, CF_INIT_XAVIER);
  V2(proj_b, "attn.proj.bias", C, 0, CF_INIT_ZERO);
  p->lnx_w = p->lnx_b = p->xq_w = p->xq_b = p->xkv_w = p->xkv_b = p->xproj_w = p->xproj_b = SIZE_MAX;
  if (cross) {
    V2(lnx_w, "lnx.weight", C, 0, CF_INIT_ONE);
    V2(lnx_b, "lnx.bias", C, 0, CF_INIT_ZERO);
    V2(xq_w, "cross.q.weight", C, C, CF_INIT_XAVIER);
    V2(xq_b, "cross.q.bias", C, 0, CF_INIT_ZERO);
    V2(xkv_w, "cross.kv.weight", 2 * C, C, CF_INIT_XAVIER);
    V2(xkv_b, "cross.kv.bias", 2 * C, 0, CF_INIT_ZERO);
    V2(xproj_w, "cross.proj.weight", C, C, CF_INIT_XAVIER);
    V2(xproj_b, "cross.proj.bias", C, 0, CF_INIT_ZERO);
  }
  V2(ln2_w, "ln2.weight", C, 0, CF_INIT_ONE);
  V2(ln2_b, "ln2.bias", C, 0, CF_INIT_ZERO);
  V2(fc1_w, "ffn.fc1.weight", F, C, CF_INIT_XAVIER);
  V2(fc1_b, "ffn.fc1.bias", F, 0, CF_INIT_ZERO);
  V2(fc2_w, "ffn.fc2.weight", C, F, CF_INIT_XAVIER);
  V2(fc2_b, "ffn.fc2.bias", C, 0, CF_INIT_ZERO);
#undef V2
}

/* A stack's blocks, then its final LayerNorm (named PREFIX.lnf, or "lnf" for the language model). */
static void layout_stack_params(cf_model *m, block_stack *s, const char *prefix) {
  char blocks[32], lnf[32];
  snprintf(blocks, sizeof blocks, "%slayers", prefix);
  snprintf(lnf, sizeof lnf, "%slnf", prefix);
  for (int l = 0; l < s->L; l++) layout_block_params(m, blocks, l, s->cross, &s->lp[l]);
  s->lnf_w = s->lnf_b = SIZE_MAX;
  if (m->mc.final_norm != CF_FINAL_NORM_ON) return;
  char n[64];
  snprintf(n, sizeof n, "%s.weight", lnf);
  s->lnf_w = add_view(m, n, m->C, 0, CF_INIT_ONE);
  snprintf(n, sizeof n, "%s.bias", lnf);
  s->lnf_b = add_view(m, n, m->C, 0, CF_INIT_ZERO);
}

/* In backward order from the end: the output, the decoder, the encoder, the embeddings (the
 * gradient-ready hook's ranges rely on it: cf_model_on_grads_ready). */
static void layout_params(cf_model *m) {
  int C = m->C, V = m->V;
  m->wte = add_view(m, "wte", V, C, CF_INIT_EMBED);
  m->wpe = m->mc.positions == CF_POS_LEARNED ? add_view(m, "wpe", m->T, C, CF_INIT_EMBED) : SIZE_MAX;
  if (m->seq2seq) layout_stack_params(m, &m->enc, "encoder.");
  layout_stack_params(m, &m->dec, m->seq2seq ? "decoder." : "");
  m->out_w = m->mc.tie_embeddings ? m->wte : add_view(m, "out.weight", V, C, CF_INIT_EMBED);
}

/* ---------- activations and workspaces ---------- */

static void layout_layer(cf_model *m, const block_stack *s, layer_acts *a, size_t N, size_t C, size_t F) {
  cf_arena *x = &m->acts;
  a->norm1 = cf_arena_take(x, N * C);
  a->mean1 = cf_arena_take(x, N);
  a->rstd1 = cf_arena_take(x, N);
  a->res1 = cf_arena_take(x, N * C);
  a->norm2 = cf_arena_take(x, N * C);
  a->mean2 = cf_arena_take(x, N);
  a->rstd2 = cf_arena_take(x, N);
  a->res2 = cf_arena_take(x, N * C);
  a->qkv = cf_arena_take(x, N * 3 * C);
  /* materialised: the probabilities (B, NH, T, T); fused: the logsumexp of each query row
   * (B, NH, T) in att (both read q, k and v from qkv in place) */
  size_t BNHT = N * (size_t)m->NH;
  int fused = m->mc.attention == CF_ATTENTION_FUSED;
  a->att = cf_arena_take(x, fused ? BNHT : BNHT * m->T);
  a->atty = cf_arena_take(x, N * C);
  /* the FFN's output act(h) in a; ReLU's derivative reads as well from its output (h > 0 exactly
   * where act(h) > 0, or where dropout zeroed it, and the gradient is zero), so there h is a */
  a->a = cf_arena_take(x, N * F);
  a->h = m->act == CF_ACT_RELU ? a->a : cf_arena_take(x, N * F);
  a->normx = a->meanx = a->rstdx = a->resx = a->xq = a->xkv = a->xlse = a->xatty = SIZE_MAX;
  if (!s->cross) return;
  a->normx = cf_arena_take(x, N * C);
  a->meanx = cf_arena_take(x, N);
  a->rstdx = cf_arena_take(x, N);
  a->resx = cf_arena_take(x, N * C);
  a->xq = cf_arena_take(x, N * C);
  a->xkv = cf_arena_take(x, N * 2 * C);
  a->xlse = cf_arena_take(x, BNHT);
  a->xatty = cf_arena_take(x, N * C);
}

/* A segment for the stack's embedding, one per layer (each buffer a layer's size, not the whole
 * model's), the final LayerNorm's in the segment after (the caller's). */
static int layout_stack_acts(cf_model *m, block_stack *s, const char *side) {
  size_t N = (size_t)m->B * m->T, C = (size_t)m->C, F = (size_t)m->F;
  cf_arena *x = &m->acts;
  char name[40];
  snprintf(name, sizeof name, "%sembedding activations", side);
  if (cf_arena_segment(x, name)) return -1;
  s->emb = cf_arena_take(x, N * C);
  for (int l = 0; l < s->L; l++) {
    snprintf(name, sizeof name, "%slayer %d activations", side, l);
    if (cf_arena_segment(x, name)) return -1;
    layout_layer(m, s, &s->la[l], N, C, F);
  }
  snprintf(name, sizeof name, "%soutput activations", side);
  if (cf_arena_segment(x, name)) return -1;
  s->lnf_out = cf_arena_take(x, N * C);
  s->lnf_mean = cf_arena_take(x, N);
  s->lnf_rstd = cf_arena_take(x, N);
  return 0;
}

static int layout_acts(cf_model *m) {
  size_t N = (size_t)m->B * m->T;
  cf_arena *x = &m->acts;
  if (m->seq2seq && layout_stack_acts(m, &m->enc, "encoder ")) return -1;
  if (layout_stack_acts(m, &m->dec, m->seq2seq ? "decoder " : "")) return -1;
  m->logits = cf_arena_take(x, N * (size_t)m->V);
  m->dlogits = cf_arena_take(x, N * (size_t)m->V);
  m->losses = cf_arena_take(x, N);
  m->loss = cf_arena_take(x, 1);
  m->step_loss = cf_arena_take(x, 1);
  m->grad_norm = cf_arena_take(x, 1);
  m->watch_state = cf_arena_take(x, 3);
  m->watch_flags = cf_arena_take(x, (size_t)m->nviews);
  m->watch_table = cf_arena_take(x, 2 * (size_t)m->nviews);
  return 0;
}

static int layout_scratch(cf_model *m) {
  size_t N = (size_t)m->B * m->T, C = (size_t)m->C, F = (size_t)m->F;
  cf_arena *s = &m->scratch;
  if (cf_arena_segment(s, "attention workspace")) return -1;
  if (m->mc.attention == CF_ATTENTION_FUSED) {  /* its scratch depends on B, NH and Tq alone */
    cf_attention_dims d = {.B = m->seq2seq ? (int)N : m->B, .Tq = m->seq2seq ? 1 : m->T, .NH = m->NH};
    m->s_attn = cf_arena_take(s, cf_attention_fused_scratch_floats(&d));
  } else {
    m->s_attn = cf_arena_take(s, cf_attention_scratch_floats(m->B, m->T, m->C, m->NH, m->mc.attn_dropout > 0));
  }
  if (cf_arena_segment(s, "backward workspace")) return -1;
  m->s_branch = cf_arena_take(s, N * C);
  m->s_stream = cf_arena_take(s, N * C);
  m->s_res = cf_arena_take(s, N * C);
  m->s_wide = cf_arena_take(s, N * F);
  m->s_dqkv = cf_arena_take(s, N * 3 * C);
  m->s_datt = cf_arena_take(s, N * C);
  m->s_dmem = m->seq2seq ? cf_arena_take(s, N * C) : SIZE_MAX;
  m->s_norm = cf_arena_take(s, cf_norm_scratch_floats(m->nparams));
  return 0;
}

/* The two stacks' shapes: the language model's decoder alone, or an encoder and a decoder whose
 * blocks attend to the encoder's output. */
static int set_up_stacks(cf_model *m) {
  m->dec.L = m->L;
  m->dec.causal = 1;
  m->dec.emb_key = DROP_EMB;
  if (m->seq2seq) {
    m->enc.L = m->mc.encoder_layers;
    m->enc.emb_key = DROP_SRC_EMB;
    m->dec.first_layer = m->enc.L;
    m->dec.cross = 1;
    m->enc.lp = calloc((size_t)m->enc.L, sizeof *m->enc.lp);
    m->enc.la = calloc((size_t)m->enc.L, sizeof *m->enc.la);
    if (!m->enc.lp || !m->enc.la) return -1;
  }
  m->dec.lp = calloc((size_t)m->L, sizeof *m->dec.lp);
  m->dec.la = calloc((size_t)m->L, sizeof *m->dec.la);
  return m->dec.lp && m->dec.la ? 0 : -1;
}

cf_status cf_model_lay_out(cf_model *m, const cf_model_config *mc, const cf_optim_config *oc, int B, int T) {
  if (B < 1 || T < 1) return CF_FAIL(CF_ERR_INVALID_ARG, "batch %d x %d tokens: both must be positive", B, T);
  if (mc->final_norm == CF_FINAL_NORM_AUTO || mc->attention == CF_ATTENTION_AUTO || mc->vocab < 2) return CF_FAIL(CF_ERR_INVALID_ARG, "config not validated");
  m->mc = *mc;
  m->oc = *oc;
  m->B = B;
  m->T = T;
  m->C = mc->d_model;
  m->NH = mc->heads;
  m->F = mc->d_ff;
  m->L = mc->layers;
  m->V = mc->vocab;
  m->act = mc->activation;
  m->seq2seq = mc->arch == CF_ARCH_ENCODER_DECODER;
  if (m->seq2seq && (mc->attention != CF_ATTENTION_FUSED || mc->encoder_layers < 1))
    return CF_FAIL(CF_ERR_INVALID_ARG, "an encoder-decoder needs fused attention and encoder layers (config not validated)");
  if (set_up_stacks(m)) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  layout_params(m);
  if (!m->views || layout_acts(m) || layout_scratch(m)) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  return CF_OK;
}

cf_model_flat_bytes cf_model_flat_sizes(const cf_model *m) {
  size_t P = m->nparams * 4, N = (size_t)m->B * m->T * 4;
  int sgd_plain = m->oc.name == CF_OPTIM_SGD && m->oc.momentum == 0, adam = m->oc.name != CF_OPTIM_SGD;
  size_t src = m->seq2seq ? N : 0;  /* a batch has at most N/4 sequences: N ints hold their lengths */
  cf_model_flat_bytes b = {P, P, sgd_plain ? 4 : P, adam ? P : 4, N, N, src, src};
  return b;
}

void cf_model_lay_out_free(cf_model *m) {
  cf_arena_free(&m->acts);
  cf_arena_free(&m->scratch);
  free(m->views);
  m->views = NULL;
  block_stack *stacks[] = {&m->dec, &m->enc};
  for (int i = 0; i < 2; i++) {
    free(stacks[i]->lp);
    free(stacks[i]->la);
    stacks[i]->lp = NULL;
    stacks[i]->la = NULL;
  }
}
