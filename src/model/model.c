/* The Transformer: creation and initialisation, the forward and backward of the language model
 * (embedding, the stack of blocks in block.c, output and loss; the encoder-decoder's order of its
 * two stacks is seq2seq.c's), the optimizer step, reads and writes. */
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
  if (m->seq2seq) {
    CF_TRY(cf_upload_create(m->ctx, &m->sources, "source ids", f.sources / sizeof(int)));
    CF_TRY(cf_upload_create(m->ctx, &m->source_lens, "source lengths", f.source_lens / sizeof(int)));
    m->bytes += f.sources + f.source_lens;
    m->stage = malloc(f.sources);
    if (!m->stage) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  }
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
  const char *advice = p->seq2seq  ? "lower data.max_tokens, or choose a smaller model (model.d_model, model.layers, "
                                     "model.encoder_layers, model.d_ff) or data.max_len"
                     : p->max_batch ? "lower data.batch_size (and raise train.accumulate to keep the tokens per step)"
                                    : "no batch size fits: choose a smaller model (model.d_model, model.layers, "
                                      "model.d_ff) or data.seq_len";
  cf_status st = CF_FAIL(CF_ERR_CONFIG, "the model does not fit %s at batch %d x %d tokens:\n%s\n%s", p->device,
                         p->batch, p->seq_len, text, advice);
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
  cf_upload_free(&m->sources);
  cf_upload_free(&m->source_lens);
  cf_model_decode_end(m);
  free(m->stage);
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

/* ---------- forward and backward ---------- */

#define P(off) cf_at(m->params, (off))
#define G(off) cf_at(m->grads, (off))
#define A(off) cf_arena_at(&m->acts, (off))
#define S(off) cf_arena_at(&m->scratch, (off))

/* An optional buffer left out (no learned positions, no momentum, no clipping norm). */
static cf_mem absent(void) { return cf_at(NULL, 0); }

float cf_model_token_scale(const cf_model *m) { return m->mc.scale_embeddings ? sqrtf((float)m->C) : 1.0f; }

cf_status cf_model_embed(cf_model *m, const block_stack *s, const cf_upload *ids) {
  CF_TRY(cf_embedding_forward(m->ctx, A(s->emb), cf_at(cf_upload_current(ids), 0), P(m->wte),
                              m->wpe == SIZE_MAX ? absent() : P(m->wpe), s->B, s->T, m->C, m->V, cf_model_token_scale(m)));
  return cf_dropout_forward(m->ctx, A(s->emb), (size_t)s->B * s->T * m->C,
                            cf_block_dropout(m, s, -1, s->emb_key, m->mc.dropout));
}

static cf_status embed_backward(cf_model *m, const block_stack *s, const cf_upload *ids) {
  cf_mem d = S(m->s_stream);
  CF_TRY(cf_dropout_backward(m->ctx, d, (size_t)s->B * s->T * m->C, cf_block_dropout(m, s, -1, s->emb_key, m->mc.dropout)));
  return cf_embedding_backward(m->ctx, G(m->wte), m->wpe == SIZE_MAX ? absent() : G(m->wpe), d,
                               cf_at(cf_upload_current(ids), 0), s->B, s->T, m->C, m->V, cf_model_token_scale(m));
}

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

cf_status cf_model_begin_forward(cf_model *m, uint32_t step, int part, int parts, int train, int *total) {
  if (parts < 1 || part < 0 || part >= parts || parts > 65535)
    return CF_FAIL(CF_ERR_INVALID_ARG, "micro-batch %d of %d: needs 0 <= part < parts <= 65535", part, parts);
  *total = m->shard_total ? m->shard_total : parts;
  if (m->shard_first + parts > *total)
    return CF_FAIL(CF_ERR_INVALID_ARG, "micro-batches %d .. %d of a step of %d", m->shard_first,
                   m->shard_first + parts - 1, *total);
  m->step = step;
  m->part = part;
  m->parts = parts;
  m->train = train;
  return CF_OK;
}

cf_status cf_model_upload_ids(cf_model *m, cf_upload *u, const int *ids, size_t n) {
  if (n == u->n) return cf_upload_put(u, ids);
  if (!m->stage || n > u->n) return CF_FAIL(CF_ERR_INVALID_ARG, "%zu %s for an upload of %zu", n, u->name, u->n);
  memcpy(m->stage, ids, n * sizeof *ids);
  memset(m->stage + n, 0, (u->n - n) * sizeof *ids);
  return cf_upload_put(u, m->stage);
}

cf_status cf_model_output_and_loss(cf_model *m, const int *targets, int ignore, int total) {
  int N = m->dec.B * m->dec.T;
  CF_TRY(cf_linear_forward(m, N, A(m->logits), cf_stack_output(m, &m->dec), m->out_w, SIZE_MAX, m->C, m->V));
  m->count = 0;
  if (!targets) return CF_OK;
  m->count = cf_crossentropy_count(targets, N, ignore);
  if (m->count == 0) return CF_FAIL(CF_ERR_INVALID_ARG, "a batch without a target to learn from");
  CF_TRY(cf_model_upload_ids(m, &m->targets, targets, (size_t)N));
  CF_TRY(cf_crossentropy_forward_backward(m->ctx, A(m->loss), A(m->losses), A(m->dlogits), A(m->logits),
                                          cf_at(cf_upload_current(&m->targets), 0), N, m->V, (float)m->mc.label_smoothing,
                                          ignore, 1.0f / ((float)m->count * (float)total)));
  return step_loss(m);
}

cf_status cf_model_forward_part(cf_model *m, const int *inputs, const int *targets, uint32_t step, int part, int parts,
                                int train) {
  if (m->seq2seq) return CF_FAIL(CF_ERR_INVALID_ARG, "an encoder-decoder takes pairs (cf_model_forward_pairs)");
  int total = 1;
  CF_TRY(cf_model_begin_forward(m, step, part, parts, train, &total));
  m->dec.B = m->B;
  m->dec.T = m->T;
  CF_TRY(cf_block_dropout_fits(m, &m->dec, total));
  long bad = cf_embedding_check_tokens(inputs, (size_t)m->B * m->T, m->V);
  if (bad >= 0) return CF_FAIL(CF_ERR_INVALID_ARG, "token %d at position %ld is outside the vocabulary [0, %d)", inputs[bad], bad, m->V);
  CF_TRY(cf_upload_put(&m->tokens, inputs));
  CF_TRY(cf_model_embed(m, &m->dec, &m->tokens));
  CF_TRY(cf_stack_forward(m, &m->dec));
  return cf_model_output_and_loss(m, targets, -1, total);
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

cf_status cf_tell_grads_ready(cf_model *m, size_t from) {
  if (!m->ready_fn || m->part != m->parts - 1 || from >= m->ready_from) return CF_OK;
  cf_grads_ready r = {m->grads, from, m->ready_from, cf_model_step_loss_at(m)};
  m->ready_from = from;
  return m->ready_fn(m->ready_user, &r);
}

/* d(stack output) where cf_stack_backward takes it: s_res with a final LayerNorm, else s_stream. */
static cf_mem stack_dout(cf_model *m, const block_stack *s) {
  return S(s->lnf_w != SIZE_MAX ? m->s_res : m->s_stream);
}

cf_status cf_model_backward_add(cf_model *m) {
  if (m->count <= 0) return CF_FAIL(CF_ERR_INVALID_ARG, "backward needs a forward with targets first");
  block_stack *dec = &m->dec, *enc = &m->enc;
  m->ready_from = m->nparams;
  CF_TRY(cf_linear_backward(m, dec->B * dec->T, stack_dout(m, dec), m->out_w, SIZE_MAX, A(m->dlogits),
                            cf_stack_output(m, dec), m->C, m->V, 0));
  /* tied: the embeddings' backward adds more to the output's gradient */
  CF_TRY(cf_tell_grads_ready(m, m->out_w != m->wte ? m->out_w : m->nparams));
  CF_TRY(cf_stack_backward(m, dec));
  CF_TRY(embed_backward(m, dec, &m->tokens));
  if (m->seq2seq) {
    CF_TRY(cf_copy(m->ctx, stack_dout(m, enc), S(m->s_dmem), (size_t)enc->B * enc->T * m->C));
    CF_TRY(cf_stack_backward(m, enc));
    CF_TRY(embed_backward(m, enc, &m->sources));
  }
  return cf_tell_grads_ready(m, 0);
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
  const block_stack *d = &m->dec;
  if (b < 0 || b >= d->B || t < 0 || t >= d->T) return CF_FAIL(CF_ERR_INVALID_ARG, "logits of (%d, %d) outside the batch", b, t);
  return cf_read(m->ctx, A(m->logits + ((size_t)b * d->T + t) * m->V), out, (size_t)m->V);
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
