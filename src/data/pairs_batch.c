/* Translation batches: an epoch's pairs sorted by length and cut into batches under a token budget
 * (similar lengths waste little padding), the batches shuffled; every draw is Philox keyed by
 * (seed, epoch), so an epoch's batches are the same whenever they are made again. */
#include <stdlib.h>
#include <string.h>
#include "base/base.h"
#include "data/pairs.h"

enum { STREAM_TIES = 0x7a1e5u, STREAM_BATCHES = 0xba7c4u };  /* one random stream per use */

static uint64_t draw(uint64_t seed, uint64_t epoch, uint64_t i, uint32_t stream) {
  uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)epoch, (uint32_t)(epoch >> 32)};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32) ^ stream}, w[4];
  cf_philox4x32_10(ctr, key, w);
  return (uint64_t)w[0] << 32 | w[1];
}

typedef struct { int src, tgt; uint64_t rnd; size_t index; } sort_key;

static int by_key(const void *pa, const void *pb) {  /* lengths, then the drawn tie-break */
  const sort_key *a = pa, *b = pb;
  if (a->src != b->src) return a->src < b->src ? -1 : 1;
  if (a->tgt != b->tgt) return a->tgt < b->tgt ? -1 : 1;
  if (a->rnd != b->rnd) return a->rnd < b->rnd ? -1 : 1;
  return a->index < b->index ? -1 : a->index > b->index;
}

static int pair_tokens(const sort_key *k) { return k->src > k->tgt ? k->src : k->tgt; }

/* The pairs' keys, sorted; NULL after reporting when out of memory or a pair alone is over budget. */
static sort_key *sorted_pairs(const cf_pairs *p, uint64_t seed, uint64_t epoch, int max_tokens) {
  sort_key *keys = malloc((p->n + 1) * sizeof *keys);
  if (!keys) { CF_FAIL(CF_ERR_NO_MEMORY, "out of memory sorting %zu pairs", p->n); return NULL; }
  size_t longest = 0;
  for (size_t i = 0; i < p->n; i++) {
    keys[i] = (sort_key){p->pair[i].n_src + 1, p->pair[i].n_tgt + 1, draw(seed, epoch, i, STREAM_TIES), i};
    if (pair_tokens(&keys[i]) > pair_tokens(&keys[longest])) longest = i;
  }
  if (p->n && pair_tokens(&keys[longest]) > max_tokens) {
    CF_FAIL(CF_ERR_DATA, "a batch of at most %d tokens cannot hold line %zu's pair (%d source and %d target tokens, "
            "eos included): raise the token budget, or leave out pairs that long", max_tokens,
            p->pair[longest].line, keys[longest].src, keys[longest].tgt);
    free(keys);
    return NULL;
  }
  qsort(keys, p->n, sizeof *keys, by_key);
  return keys;
}

/* Cuts the sorted pairs into batches: start[0 .. *n_batches], each batch's B x longest <= max_tokens. */
static void cut_batches(const sort_key *keys, size_t n, int max_tokens, size_t *start, size_t *n_batches) {
  size_t nb = 0, count = 0;
  int longest = 0;
  start[0] = 0;
  for (size_t j = 0; j < n; j++) {
    int len = pair_tokens(&keys[j]), l = len > longest ? len : longest;
    if (count && (count + 1) * (size_t)l > (size_t)max_tokens) start[++nb] = j, count = 0, l = len;
    longest = l;
    count++;
  }
  if (n) start[++nb] = n;
  *n_batches = nb;
}

cf_status cf_pairs_epoch(const cf_pairs *p, uint64_t seed, uint64_t epoch, int max_tokens, cf_pair_epoch *e) {
  memset(e, 0, sizeof *e);
  if (max_tokens < 2) return CF_FAIL(CF_ERR_INVALID_ARG, "a token budget of %d: at least 2", max_tokens);
  sort_key *keys = sorted_pairs(p, seed, epoch, max_tokens), *batches = NULL;
  if (!keys) return CF_ERR_DATA;
  size_t *cut = malloc((p->n + 2) * sizeof *cut), nb = 0;
  e->order = malloc((p->n + 1) * sizeof *e->order);
  e->start = malloc((p->n + 2) * sizeof *e->start);
  if (cut && e->order && e->start) cut_batches(keys, p->n, max_tokens, cut, &nb);
  if (cut && e->order && e->start) batches = malloc((nb + 1) * sizeof *batches);
  if (!batches) {
    free(keys);
    free(cut);
    cf_pair_epoch_free(e);
    return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory making the batches of %zu pairs", p->n);
  }
  for (size_t k = 0; k < nb; k++) batches[k] = (sort_key){0, 0, draw(seed, epoch, k, STREAM_BATCHES), k};
  qsort(batches, nb, sizeof *batches, by_key);  /* a shuffle: equal lengths, random keys */
  size_t at = 0;
  for (size_t k = 0; k < nb; k++) {
    e->start[k] = at;
    for (size_t j = cut[batches[k].index]; j < cut[batches[k].index + 1]; j++) e->order[at++] = keys[j].index;
  }
  e->start[nb] = at;
  e->n_batches = nb;
  e->n_pairs = p->n;
  e->max_tokens = max_tokens;
  free(keys);
  free(cut);
  free(batches);
  return CF_OK;
}

void cf_pair_epoch_free(cf_pair_epoch *e) {
  free(e->order);
  free(e->start);
  memset(e, 0, sizeof *e);
}

static int grow_batch(cf_pair_batch *b, size_t cap) {
  if (cap <= b->cap) return 1;
  cf_pair_batch grown = {.cap = cap};
  grown.src = malloc(cap * sizeof *grown.src);
  grown.tgt_in = malloc(cap * sizeof *grown.tgt_in);
  grown.tgt_out = malloc(cap * sizeof *grown.tgt_out);
  grown.src_len = malloc(cap * sizeof *grown.src_len);
  grown.tgt_len = malloc(cap * sizeof *grown.tgt_len);
  grown.pair = malloc(cap * sizeof *grown.pair);
  cf_pair_batch_free(b);
  if (!grown.src || !grown.tgt_in || !grown.tgt_out || !grown.src_len || !grown.tgt_len || !grown.pair) {
    cf_pair_batch_free(&grown);
    return 0;
  }
  *b = grown;
  return 1;
}

/* Row r of b: pair i's source, eos, pad; bos, target, pad; target, eos, pad. */
static void fill_row(const cf_pairs *p, size_t i, int r, cf_pair_batch *b) {
  const pairs_entry *e = &p->pair[i];
  int *src = b->src + (size_t)r * b->S, *in = b->tgt_in + (size_t)r * b->T, *out = b->tgt_out + (size_t)r * b->T;
  memcpy(src, p->ids + e->src, (size_t)e->n_src * sizeof *src);
  src[e->n_src] = CF_BPE_EOS;
  for (int t = e->n_src + 1; t < b->S; t++) src[t] = CF_BPE_PAD;
  in[0] = CF_BPE_BOS;
  memcpy(in + 1, p->ids + e->tgt, (size_t)e->n_tgt * sizeof *in);
  memcpy(out, p->ids + e->tgt, (size_t)e->n_tgt * sizeof *out);
  out[e->n_tgt] = CF_BPE_EOS;
  for (int t = e->n_tgt + 1; t < b->T; t++) in[t] = out[t] = CF_BPE_PAD;
  b->src_len[r] = e->n_src + 1;
  b->tgt_len[r] = e->n_tgt + 1;
  b->pair[r] = i;
}

cf_status cf_pairs_batch(const cf_pairs *p, const cf_pair_epoch *e, size_t k, cf_pair_batch *b) {
  if (k >= e->n_batches)
    return CF_FAIL(CF_ERR_INVALID_ARG, "batch %zu of an epoch of %zu batches", k, e->n_batches);
  if (!grow_batch(b, (size_t)e->max_tokens))
    return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory for a batch of %d tokens", e->max_tokens);
  b->B = (int)(e->start[k + 1] - e->start[k]);
  b->S = b->T = 0;
  for (size_t j = e->start[k]; j < e->start[k + 1]; j++) {
    const pairs_entry *pe = &p->pair[e->order[j]];
    if (pe->n_src + 1 > b->S) b->S = pe->n_src + 1;
    if (pe->n_tgt + 1 > b->T) b->T = pe->n_tgt + 1;
  }
  for (int r = 0; r < b->B; r++) fill_row(p, e->order[e->start[k] + (size_t)r], r, b);
  return CF_OK;
}

void cf_pair_batch_free(cf_pair_batch *b) {
  free(b->src);
  free(b->src_len);
  free(b->tgt_in);
  free(b->tgt_out);
  free(b->tgt_len);
  free(b->pair);
  memset(b, 0, sizeof *b);
}
