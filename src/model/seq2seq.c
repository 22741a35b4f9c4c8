/* The encoder-decoder's forward on a batch of sentence pairs, and decoding: encode the sources
 * once, then the next token's log-probabilities after a batch of prefixes (the scorer beam.c
 * asks for). The blocks are block.c's; here only the two stacks' order and the batch's shape. */
#include <math.h>
#include <string.h>
#include "clformer/gemm.h"
#include "clformer/ops.h"
#include "model/model_internal.h"
#include "runtime/runtime.h"

#define P(off) cf_at(m->params, (off))
#define A(off) cf_arena_at(&m->acts, (off))

enum { PAD = 0 };  /* the BPE's pad id (CF_BPE_PAD, a layer above): no loss */

static cf_status need_seq2seq(const cf_model *m, const char *what) {
  if (m->seq2seq) return CF_OK;
  return CF_FAIL(CF_ERR_INVALID_ARG, "%s needs an encoder-decoder (model.arch encoder_decoder)", what);
}

/* B sequences of T ids: within what the model was laid out for, every id in the vocabulary. */
static cf_status check_side(const cf_model *m, const char *side, const int *ids, int B, int T) {
  if (B < 1 || T < 1 || T > m->T || (size_t)B * T > (size_t)m->B * m->T)
    return CF_FAIL(CF_ERR_INVALID_ARG, "%s batch of %d x %d tokens: the model holds sequences of at most %d tokens "
                   "and %d tokens a batch (data.max_len, data.max_tokens)", side, B, T, m->T, m->B * m->T);
  long bad = cf_embedding_check_tokens(ids, (size_t)B * T, m->V);
  if (bad >= 0)
    return CF_FAIL(CF_ERR_INVALID_ARG, "%s id %d at (%ld, %ld) is outside the vocabulary [0, %d)", side, ids[bad],
                   bad / T, bad % T, m->V);
  return CF_OK;
}

/* The encoder over B sources of S tokens (enc.B and enc.T set), then every decoder block's keys
 * and values of its output. */
static cf_status encoder_forward(cf_model *m, const int *src, const int *src_len) {
  block_stack *e = &m->enc;
  m->cache.rows = 0;  /* the cache holds other sentences' keys and values now */
  CF_TRY(check_side(m, "source", src, e->B, e->T));
  for (int b = 0; b < e->B; b++)
    if (src_len[b] < 1 || src_len[b] > e->T)
      return CF_FAIL(CF_ERR_INVALID_ARG, "source %d has length %d: needs 1 .. %d", b, src_len[b], e->T);
  CF_TRY(cf_model_upload_ids(m, &m->sources, src, (size_t)e->B * e->T));
  CF_TRY(cf_model_upload_ids(m, &m->source_lens, src_len, (size_t)e->B));
  e->key_len = cf_at(cf_upload_current(&m->source_lens), 0);
  CF_TRY(cf_model_embed(m, e, &m->sources));
  CF_TRY(cf_stack_forward(m, e));
  return cf_cross_memory(m);
}

/* The decoder over B prefixes of T ids (the encoder's batch). */
static cf_status decoder_forward(cf_model *m, const char *side, const int *ids, int B, int T) {
  CF_TRY(check_side(m, side, ids, B, T));
  m->dec.B = B;
  m->dec.T = T;
  CF_TRY(cf_model_upload_ids(m, &m->tokens, ids, (size_t)B * T));
  CF_TRY(cf_model_embed(m, &m->dec, &m->tokens));
  return cf_stack_forward(m, &m->dec);
}

cf_status cf_model_forward_pairs(cf_model *m, const cf_pair_input *in, uint32_t step, int part, int parts, int train) {
  CF_TRY(need_seq2seq(m, "a forward on sentence pairs"));
  int total = 1;
  CF_TRY(cf_model_begin_forward(m, step, part, parts, train, &total));
  m->count = 0;
  m->enc.B = m->dec.B = in->B;
  m->enc.T = in->S;
  m->dec.T = in->T;
  CF_TRY(cf_block_dropout_fits(m, &m->enc, total));
  CF_TRY(cf_block_dropout_fits(m, &m->dec, total));
  if (in->tgt_out) CF_TRY(check_side(m, "target", in->tgt_out, in->B, in->T));
  CF_TRY(encoder_forward(m, in->src, in->src_len));
  CF_TRY(decoder_forward(m, "target", in->tgt_in, in->B, in->T));
  return cf_model_output_and_loss(m, in->tgt_out, PAD, total);
}

cf_status cf_model_encode(cf_model *m, const int *src, const int *src_len, int B, int S) {
  CF_TRY(need_seq2seq(m, "encoding"));
  m->train = 0;
  m->count = 0;  /* no backward of this */
  m->enc.B = B;
  m->enc.T = S;
  return encoder_forward(m, src, src_len);
}

/* Each row of x (B, V) replaced by its log-softmax. */
static void log_softmax_rows(float *x, int B, int V) {
  for (int b = 0; b < B; b++) {
    float *row = x + (size_t)b * V, most = row[0];
    for (int v = 1; v < V; v++) most = fmaxf(most, row[v]);
    double sum = 0;
    for (int v = 0; v < V; v++) sum += exp((double)(row[v] - most));
    float lse = most + (float)log(sum);
    for (int v = 0; v < V; v++) row[v] -= lse;
  }
}

/* Log-probabilities (B, V) from the decoder's output rows (stride `stride` floats) at `first`. */
static cf_status output_logprobs(cf_model *m, cf_mem first, size_t stride, int B, float *logprobs) {
  int C = m->C, V = m->V;
  CF_TRY(cf_gemm(m->ctx, 0, 1, (size_t)B, (size_t)V, (size_t)C, 1.0f, first, stride, P(m->out_w), (size_t)C, 0.0f,
                 A(m->logits), (size_t)V));
  CF_TRY(cf_read(m->ctx, A(m->logits), logprobs, (size_t)B * V));
  log_softmax_rows(logprobs, B, V);
  return CF_OK;
}

cf_status cf_model_decode_start(cf_model *m, int max_len) {
  CF_TRY(need_seq2seq(m, "decoding"));
  decode_cache *c = &m->cache;
  int R = m->enc.B;
  if (R < 1) return CF_FAIL(CF_ERR_INVALID_ARG, "decoding needs cf_model_encode first");
  if (max_len < 1 || max_len > m->T || (size_t)R * max_len > (size_t)m->B * m->T)
    return CF_FAIL(CF_ERR_INVALID_ARG, "%d rows of %d positions: the model holds sequences of at most %d tokens and %d "
                   "tokens a batch", R, max_len, m->T, m->B * m->T);
  size_t floats = (size_t)m->dec.L * R * max_len * 2 * m->C;
  if (floats > c->floats) {  /* grown as needed, kept for the next sentences */
    cf_buffer_free(c->kv);
    cf_buffer_free(c->moved);
    c->kv = c->moved = NULL;
    c->floats = 0;
    CF_TRY(cf_buffer_create(m->ctx, floats * 4, &c->kv));
    CF_TRY(cf_buffer_create(m->ctx, floats * 4, &c->moved));
    c->floats = floats;
  }
  if (!c->lens) CF_TRY(cf_buffer_create(m->ctx, (size_t)m->B * m->T * sizeof(int), &c->lens));
  c->rows = R;
  c->len = max_len;
  c->pos = 0;
  return CF_OK;
}

cf_status cf_model_decode_next(cf_model *m, const int *prefix, int len, float *logprobs) {
  CF_TRY(need_seq2seq(m, "decoding"));
  decode_cache *c = &m->cache;
  if (!c->rows || c->rows != m->enc.B || len != c->pos + 1 || len > c->len)
    return CF_FAIL(CF_ERR_INVALID_ARG, "decoding position %d: cf_model_decode_start first, then positions 1, 2, ... "
                   "up to its %d in turn", len, c->len);
  int R = c->rows, C = m->C;
  CF_TRY(check_side(m, "prefix", prefix, R, len));
  m->train = 0;
  m->count = 0;
  /* the new position's embedding: every position embedded (a lookup), the last of each row kept */
  cf_mem all = cf_arena_at(&m->scratch, m->s_dqkv);
  CF_TRY(cf_model_upload_ids(m, &m->tokens, prefix, (size_t)R * len));
  CF_TRY(cf_embedding_forward(m->ctx, all, cf_at(cf_upload_current(&m->tokens), 0), P(m->wte),
                              m->wpe == SIZE_MAX ? cf_at(NULL, 0) : P(m->wpe), R, len, C, m->V, cf_model_token_scale(m)));
  CF_TRY(cf_copy_rows(m->ctx, A(m->dec.emb), (size_t)C, cf_shift(all, (size_t)(len - 1) * C), (size_t)len * C,
                      (size_t)C, (size_t)R));
  int *lens = m->stage;  /* every row sees its len positions */
  for (int r = 0; r < R; r++) lens[r] = len;
  CF_TRY(cf_write(m->ctx, cf_at(c->lens, 0), lens, (size_t)R));
  c->pos = len - 1;
  m->dec.B = R;
  m->dec.T = 1;
  m->dec.decoding = 1;
  cf_status st = cf_stack_forward(m, &m->dec);
  m->dec.decoding = 0;
  CF_TRY(st);
  c->pos = len;
  return output_logprobs(m, cf_stack_output(m, &m->dec), (size_t)C, R, logprobs);
}

void cf_model_decode_end(cf_model *m) {
  decode_cache *c = &m->cache;
  cf_buffer_free(c->kv);
  cf_buffer_free(c->moved);
  cf_buffer_free(c->lens);
  memset(c, 0, sizeof *c);
}

cf_status cf_model_decode_reorder(cf_model *m, const int *parents) {
  CF_TRY(need_seq2seq(m, "decoding"));
  decode_cache *c = &m->cache;
  if (!c->rows) return CF_FAIL(CF_ERR_INVALID_ARG, "a reorder before cf_model_decode_start");
  size_t row = (size_t)c->len * 2 * m->C, block = (size_t)c->rows * row, kept = (size_t)c->pos * 2 * m->C;
  for (int i = 0; i < c->rows; i++)
    if (parents[i] < 0 || parents[i] >= c->rows)
      return CF_FAIL(CF_ERR_INVALID_ARG, "row %d's parent %d: not one of the %d rows", i, parents[i], c->rows);
  /* each moving row's parent, every block's at once (blocks a pitch apart), aside; then into place */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < c->rows; i++) {
      if (parents[i] == i) continue;
      cf_mem from = pass ? cf_at(c->moved, i * row) : cf_at(c->kv, (size_t)parents[i] * row);
      cf_mem to = pass ? cf_at(c->kv, i * row) : cf_at(c->moved, i * row);
      CF_TRY(cf_copy_rows(m->ctx, to, block, from, block, kept, (size_t)m->dec.L));
    }
  return CF_OK;
}

cf_status cf_model_next_logprobs(cf_model *m, const int *prefix, int B, int len, float *logprobs) {
  CF_TRY(need_seq2seq(m, "decoding"));
  if (B != m->enc.B)
    return CF_FAIL(CF_ERR_INVALID_ARG, "%d prefixes for %d encoded sources (cf_model_encode first, a row each)", B,
                   m->enc.B);
  m->train = 0;
  m->count = 0;
  CF_TRY(decoder_forward(m, "prefix", prefix, B, len));
  /* the output projection of each row's last position only: rows at a stride of len x C */
  size_t C = (size_t)m->C;
  return output_logprobs(m, cf_shift(cf_stack_output(m, &m->dec), (size_t)(len - 1) * C), (size_t)len * C, B, logprobs);
}
