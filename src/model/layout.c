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

static void layout_params(cf_model *m) {
  char n[64];
  int C = m->C, F = m->F, V = m->V;
  m->wte = add_view(m, "wte", V, C, CF_INIT_EMBED);
  m->wpe = m->mc.positions == CF_POS_LEARNED ? add_view(m, "wpe", m->T, C, CF_INIT_EMBED) : SIZE_MAX;
  for (int l = 0; l < m->L; l++) {
    layer_params *p = &m->lp[l];
#define V2(field, suffix, r, c, kind) (snprintf(n, sizeof n, "layers.%d.%s", l, suffix), p->field = add_view(m, n, r, c, kind))
    V2(ln1_w, "ln1.weight", C, 0, CF_INIT_ONE);
    V2(ln1_b, "ln1.bias", C, 0, CF_INIT_ZERO);
    V2(qkv_w, "attn.qkv.weight", 3 * C, C, CF_INIT_XAVIER);
    V2(qkv_b, "attn.qkv.bias", 3 * C, 0, CF_INIT_ZERO);
    V2(proj_w, "attn.proj.weight", C, C, CF_INIT_XAVIER);
    V2(proj_b, "attn.proj.bias", C, 0, CF_INIT_ZERO);
    V2(ln2_w, "ln2.weight", C, 0, CF_INIT_ONE);
    V2(ln2_b, "ln2.bias", C, 0, CF_INIT_ZERO);
    V2(fc1_w, "ffn.fc1.weight", F, C, CF_INIT_XAVIER);
    V2(fc1_b, "ffn.fc1.bias", F, 0, CF_INIT_ZERO);
    V2(fc2_w, "ffn.fc2.weight", C, F, CF_INIT_XAVIER);
    V2(fc2_b, "ffn.fc2.bias", C, 0, CF_INIT_ZERO);
#undef V2
  }
  if (m->mc.final_norm == CF_FINAL_NORM_ON) {
    m->lnf_w = add_view(m, "lnf.weight", C, 0, CF_INIT_ONE);
    m->lnf_b = add_view(m, "lnf.bias", C, 0, CF_INIT_ZERO);
  } else m->lnf_w = m->lnf_b = SIZE_MAX;
  m->out_w = m->mc.tie_embeddings ? m->wte : add_view(m, "out.weight", V, C, CF_INIT_EMBED);
}

/* ---------- activations and workspaces ---------- */

static void layout_layer(cf_model *m, layer_acts *a, size_t N, size_t C, size_t F) {
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
  /* materialised: q, k, v per head and the probabilities (B, NH, T, T); fused: the logsumexp of
   * each query row (B, NH, T) in att, and no permuted copy (the kernels read qkv in place) */
  size_t BNHT = (size_t)m->B * m->NH * m->T;
  int fused = m->mc.attention == CF_ATTENTION_FUSED;
  a->qkvp = fused ? SIZE_MAX : cf_arena_take(x, N * 3 * C);
  a->att = cf_arena_take(x, fused ? BNHT : BNHT * m->T);
  a->atty = cf_arena_take(x, N * C);
  a->h = cf_arena_take(x, N * F);
  a->a = cf_arena_take(x, N * F);
}

/* A segment per layer keeps each buffer a layer's size, not the whole model's. */
static int layout_acts(cf_model *m) {
  size_t N = (size_t)m->B * m->T, C = (size_t)m->C, F = (size_t)m->F;
  cf_arena *x = &m->acts;
  char name[40];
  if (cf_arena_segment(x, "embedding activations")) return -1;
  m->emb = cf_arena_take(x, N * C);
  for (int l = 0; l < m->L; l++) {
    snprintf(name, sizeof name, "layer %d activations", l);
    if (cf_arena_segment(x, name)) return -1;
    layout_layer(m, &m->la[l], N, C, F);
  }
  if (cf_arena_segment(x, "output activations")) return -1;
  m->lnf_out = cf_arena_take(x, N * C);
  m->lnf_mean = cf_arena_take(x, N);
  m->lnf_rstd = cf_arena_take(x, N);
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
    cf_attention_dims d = {.B = m->B, .Tq = m->T, .NH = m->NH};
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
  m->s_norm = cf_arena_take(s, cf_norm_scratch_floats(m->nparams));
  return 0;
}

cf_status cf_model_lay_out(cf_model *m, const cf_model_config *mc, const cf_optim_config *oc, int B, int T) {
  if (B < 1 || T < 1) return CF_FAIL(CF_ERR_INVALID_ARG, "batch %d x %d tokens: both must be positive", B, T);
  if (mc->final_norm == CF_FINAL_NORM_AUTO || mc->vocab < 2) return CF_FAIL(CF_ERR_INVALID_ARG, "config not validated");
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
  m->lp = calloc((size_t)m->L, sizeof *m->lp);
  m->la = calloc((size_t)m->L, sizeof *m->la);
  if (!m->lp || !m->la) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  layout_params(m);
  if (!m->views || layout_acts(m) || layout_scratch(m)) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  return CF_OK;
}

cf_model_flat_bytes cf_model_flat_sizes(const cf_model *m) {
  size_t P = m->nparams * 4, N = (size_t)m->B * m->T * 4;
  int sgd_plain = m->oc.name == CF_OPTIM_SGD && m->oc.momentum == 0, adam = m->oc.name != CF_OPTIM_SGD;
  cf_model_flat_bytes b = {P, P, sgd_plain ? 4 : P, adam ? P : 4, N, N};
  return b;
}

void cf_model_lay_out_free(cf_model *m) {
  cf_arena_free(&m->acts);
  cf_arena_free(&m->scratch);
  free(m->views);
  free(m->lp);
  free(m->la);
  m->views = NULL;
  m->lp = NULL;
  m->la = NULL;
}
