/* Learning BPE merges: the text's chunks counted once (distinct chunks become "words" with a
 * frequency), every adjacent pair of ids counted over the words, then merge after merge the most
 * frequent pair is joined. Counts are kept up to date incrementally: a merge touches only the words
 * that hold its pair (each pair keeps the list of words it occurs in), and a lazy max-heap finds the
 * next pair, so a merge costs what it changes, not a recount of the text. */
#include <stdlib.h>
#include <string.h>
#include "base/base.h"
#include "data/bpe.h"

typedef struct {  /* a distinct chunk of the training text */
  const uint8_t *text;
  size_t len;
  unsigned long long hash;
  long long count;
} chunk_entry;

typedef struct {
  chunk_entry *cells;  /* open addressing; text NULL marks an empty cell */
  size_t cap, n;
} chunk_table;

typedef struct {
  int left, right, stamp;     /* stamp: the merge that last touched the count */
  long long count, before;    /* before: the count when that merge first touched it */
  int *words, n_words, cap;   /* the words the pair occurs in (may repeat, or list one it left) */
} pair_slot;

typedef struct { long long count; int left, right; } heap_entry;

typedef struct {
  int *sym;                    /* every word's ids, word w at sym[start[w] .. start[w] + len[w]) */
  size_t *start;
  int *len, *stamp, n_words;   /* stamp: the merge that last visited the word */
  long long *freq;
  pair_slot *slots;
  int n_slots, slots_cap;
  bpe_pair_map slot_of;        /* (left, right) -> index in slots */
  heap_entry *heap;
  size_t heap_n, heap_cap;
  int *touched, n_touched, touched_cap;  /* the slots the current merge changed */
} learner;

/* ---- counting the chunks ---- */

static int chunk_table_grow(chunk_table *t) {
  size_t cap = t->cap ? t->cap * 2 : 1 << 14;
  chunk_entry *cells = calloc(cap, sizeof *cells);
  if (!cells) return 0;
  for (size_t i = 0; i < t->cap; i++) {
    if (!t->cells[i].text) continue;
    size_t j = (size_t)t->cells[i].hash & (cap - 1);
    while (cells[j].text) j = (j + 1) & (cap - 1);
    cells[j] = t->cells[i];
  }
  free(t->cells);
  t->cells = cells;
  t->cap = cap;
  return 1;
}

static int chunk_table_add(chunk_table *t, const uint8_t *text, size_t len) {
  if ((t->n + 1) * 2 > t->cap && !chunk_table_grow(t)) return 0;
  unsigned long long h = cf_hash64(CF_HASH_SEED, text, len);
  size_t j = (size_t)h & (t->cap - 1);
  for (; t->cells[j].text; j = (j + 1) & (t->cap - 1))
    if (t->cells[j].hash == h && t->cells[j].len == len && !memcmp(t->cells[j].text, text, len)) {
      t->cells[j].count++;
      return 1;
    }
  t->cells[j] = (chunk_entry){text, len, h, 1};
  t->n++;
  return 1;
}

static cf_status count_chunks(const char *const *texts, const size_t *lens, int n_texts, chunk_table *t,
                              cf_bpe_learn_stats *stats) {
  for (int i = 0; i < n_texts; i++) {
    const uint8_t *s = (const uint8_t *)texts[i];
    for (size_t at = 0, chunk; at < lens[i]; at += chunk) {
      chunk = bpe_chunk_len(s + at, lens[i] - at);
      if (!chunk_table_add(t, s + at, chunk))
        return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory counting the training text's chunks (%zu distinct)", t->n);
      stats->chunks++;
    }
    stats->bytes += lens[i];
  }
  stats->distinct_chunks = t->n;
  return CF_OK;
}

/* The distinct chunks as words of byte ids. */
static cf_status make_words(const chunk_table *t, learner *L) {
  size_t total = 0;
  for (size_t i = 0; i < t->cap; i++) total += t->cells[i].len;
  L->sym = malloc((total + 1) * sizeof *L->sym);
  L->start = malloc((t->n + 1) * sizeof *L->start);
  L->len = malloc((t->n + 1) * sizeof *L->len);
  L->stamp = malloc((t->n + 1) * sizeof *L->stamp);
  L->freq = malloc((t->n + 1) * sizeof *L->freq);
  if (!L->sym || !L->start || !L->len || !L->stamp || !L->freq)
    return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory for %zu distinct chunks", t->n);
  size_t at = 0;
  for (size_t i = 0; i < t->cap; i++) {
    const chunk_entry *e = &t->cells[i];
    if (!e->text) continue;
    int w = L->n_words++;
    L->start[w] = at;
    L->len[w] = (int)e->len;
    L->stamp[w] = -1;
    L->freq[w] = e->count;
    for (size_t k = 0; k < e->len; k++) L->sym[at++] = CF_BPE_BYTE0 + e->text[k];
  }
  return CF_OK;
}

/* ---- the lazy max-heap of (count, pair): most frequent first, ties to the smallest ids ---- */

static int heap_above(const heap_entry *a, const heap_entry *b) {
  if (a->count != b->count) return a->count > b->count;
  return a->left != b->left ? a->left < b->left : a->right < b->right;
}

static int heap_push(learner *L, long long count, int left, int right) {
  if (L->heap_n == L->heap_cap) {
    size_t cap = L->heap_cap ? L->heap_cap * 2 : 1 << 14;
    heap_entry *grown = realloc(L->heap, cap * sizeof *grown);
    if (!grown) return 0;
    L->heap = grown;
    L->heap_cap = cap;
  }
  size_t i = L->heap_n++;
  L->heap[i] = (heap_entry){count, left, right};
  for (; i > 0 && heap_above(&L->heap[i], &L->heap[(i - 1) / 2]); i = (i - 1) / 2) {
    heap_entry tmp = L->heap[i];
    L->heap[i] = L->heap[(i - 1) / 2];
    L->heap[(i - 1) / 2] = tmp;
  }
  return 1;
}

static heap_entry heap_pop(learner *L) {
  heap_entry top = L->heap[0];
  L->heap[0] = L->heap[--L->heap_n];
  for (size_t i = 0;;) {
    size_t best = i, l = 2 * i + 1, r = l + 1;
    if (l < L->heap_n && heap_above(&L->heap[l], &L->heap[best])) best = l;
    if (r < L->heap_n && heap_above(&L->heap[r], &L->heap[best])) best = r;
    if (best == i) break;
    heap_entry tmp = L->heap[i];
    L->heap[i] = L->heap[best];
    L->heap[best] = tmp;
    i = best;
  }
  return top;
}

/* ---- pair counts ---- */

static int slot_for(learner *L, int left, int right) {
  int s = bpe_map_get(&L->slot_of, left, right);
  if (s >= 0) return s;
  if (L->n_slots == L->slots_cap) {
    int cap = L->slots_cap ? L->slots_cap * 2 : 1 << 14;
    pair_slot *grown = realloc(L->slots, (size_t)cap * sizeof *grown);
    if (!grown) return -1;
    L->slots = grown;
    L->slots_cap = cap;
  }
  s = L->n_slots;
  if (bpe_map_put(&L->slot_of, left, right, s) != CF_OK) return -1;
  L->slots[L->n_slots++] = (pair_slot){.left = left, .right = right, .stamp = -1};
  return s;
}

static int slot_note_word(pair_slot *p, int w) {
  if (p->n_words && p->words[p->n_words - 1] == w) return 1;
  if (p->n_words == p->cap) {
    int cap = p->cap ? p->cap * 2 : 4;
    int *grown = realloc(p->words, (size_t)cap * sizeof *grown);
    if (!grown) return 0;
    p->words = grown;
    p->cap = cap;
  }
  p->words[p->n_words++] = w;
  return 1;
}

/* Adds sign * the word's frequency to the count of each of its adjacent pairs, noting for merge
 * `merge` which counts it changed (and, when adding, that the word holds the pair). */
static int count_word_pairs(learner *L, int w, int sign, int merge) {
  const int *s = L->sym + L->start[w];
  for (int i = 0; i + 1 < L->len[w]; i++) {
    int k = slot_for(L, s[i], s[i + 1]);
    if (k < 0) return 0;
    pair_slot *p = &L->slots[k];
    if (p->stamp != merge) {
      if (L->n_touched == L->touched_cap) {
        int cap = L->touched_cap ? L->touched_cap * 2 : 1024;
        int *grown = realloc(L->touched, (size_t)cap * sizeof *grown);
        if (!grown) return 0;
        L->touched = grown;
        L->touched_cap = cap;
      }
      L->touched[L->n_touched++] = k;
      p->stamp = merge;
      p->before = p->count;
    }
    p->count += sign * L->freq[w];
    if (sign > 0 && !slot_note_word(p, w)) return 0;
  }
  return 1;
}

/* Pushes the counts merge `merge` raised (a lowered one is found stale when popped and pushed anew). */
static int push_raised(learner *L) {
  for (int i = 0; i < L->n_touched; i++) {
    const pair_slot *p = &L->slots[L->touched[i]];
    if (p->count > p->before && p->count >= 2 && !heap_push(L, p->count, p->left, p->right)) return 0;
  }
  L->n_touched = 0;
  return 1;
}

/* ---- merging ---- */

static int word_holds(const learner *L, int w, int left, int right) {
  const int *s = L->sym + L->start[w];
  for (int i = 0; i + 1 < L->len[w]; i++)
    if (s[i] == left && s[i + 1] == right) return 1;
  return 0;
}

/* Joins every (left, right) of word w, left to right, into id. */
static int merge_word(learner *L, int w, int left, int right, int id) {
  int *s = L->sym + L->start[w], n = L->len[w], out = 0;
  for (int i = 0; i < n;) {
    if (i + 1 < n && s[i] == left && s[i + 1] == right) s[out++] = id, i += 2;
    else s[out++] = s[i++];
  }
  L->len[w] = out;
  return 1;
}

/* Applies merge number `merge` (the pair in slot k) to every word holding it. */
static int apply_merge(learner *L, int k, int merge) {
  int left = L->slots[k].left, right = L->slots[k].right, *words = L->slots[k].words, n = L->slots[k].n_words;
  L->slots[k].words = NULL;  /* taken: after this merge no word holds the pair */
  L->slots[k].n_words = L->slots[k].cap = 0;
  int ok = 1;
  for (int i = 0; i < n && ok; i++) {
    int w = words[i];
    if (L->stamp[w] == merge) continue;
    L->stamp[w] = merge;
    if (!word_holds(L, w, left, right)) continue;  /* a word the pair has left since it was listed */
    ok = count_word_pairs(L, w, -1, merge) && merge_word(L, w, left, right, CF_BPE_FIRST_MERGE + merge) &&
         count_word_pairs(L, w, +1, merge);
  }
  free(words);
  return ok && push_raised(L);
}

/* The next pair to merge (its slot), or -1 when no pair occurs twice. */
static int next_pair(learner *L) {
  while (L->heap_n) {
    heap_entry e = heap_pop(L);
    int k = bpe_map_get(&L->slot_of, e.left, e.right);
    long long now = L->slots[k].count;
    if (e.count == now) return now >= 2 ? k : -1;
    /* stale: a count lowered since is pushed again (a raised one has its own entry) */
    if (e.count > now && now >= 2 && !heap_push(L, now, e.left, e.right)) return -2;
  }
  return -1;
}

static void learner_free(learner *L) {
  free(L->sym);
  free(L->start);
  free(L->len);
  free(L->stamp);
  free(L->freq);
  for (int i = 0; i < L->n_slots; i++) free(L->slots[i].words);
  free(L->slots);
  bpe_map_free(&L->slot_of);
  free(L->heap);
  free(L->touched);
}

static cf_status learn_merges(learner *L, cf_bpe *b, int max_merges, cf_bpe_learn_stats *stats) {
  for (int w = 0; w < L->n_words; w++)
    if (!count_word_pairs(L, w, +1, -1)) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory counting pairs");
  L->n_touched = 0;
  for (int k = 0; k < L->n_slots; k++)
    if (L->slots[k].count >= 2 && !heap_push(L, L->slots[k].count, L->slots[k].left, L->slots[k].right))
      return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory for the pair heap");
  while (stats->merges < max_merges) {
    int k = next_pair(L);
    if (k == -1) break;
    long long count = k >= 0 ? L->slots[k].count : 0;
    if (k < 0 || bpe_add_merge(b, L->slots[k].left, L->slots[k].right) != BPE_MERGE_OK ||
        !apply_merge(L, k, stats->merges))
      return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory learning merge %d", stats->merges + 1);
    stats->last_count = count;
    stats->merges++;
  }
  return CF_OK;
}

cf_status cf_bpe_learn(const char *const *texts, const size_t *lens, int n_texts, int vocab_size, cf_bpe **out,
                       cf_bpe_learn_stats *stats) {
  *out = NULL;
  cf_bpe_learn_stats local;
  if (!stats) stats = &local;
  memset(stats, 0, sizeof *stats);
  if (vocab_size < CF_BPE_FIRST_MERGE || vocab_size > CF_BPE_FIRST_MERGE + BPE_MAX_MERGES)
    return CF_FAIL(CF_ERR_INVALID_ARG, "a BPE vocabulary of %d ids: it holds %d to %d (3 special ids, 256 bytes, then "
                   "at most %d merges)", vocab_size, CF_BPE_FIRST_MERGE, CF_BPE_FIRST_MERGE + BPE_MAX_MERGES, BPE_MAX_MERGES);
  chunk_table t = {0};
  learner L = {0};
  cf_bpe *b = bpe_new();
  cf_status st = b ? count_chunks(texts, lens, n_texts, &t, stats) : CF_ERR_NO_MEMORY;
  if (st == CF_OK) st = make_words(&t, &L);
  free(t.cells);
  if (st == CF_OK) st = learn_merges(&L, b, vocab_size - CF_BPE_FIRST_MERGE, stats);
  learner_free(&L);
  if (st != CF_OK) { cf_bpe_free(b); return st; }
  *out = b;
  return CF_OK;
}
