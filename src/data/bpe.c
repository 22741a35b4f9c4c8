/* Byte-pair encoding: the vocabulary (special ids, bytes, merges and the bytes each id stands for),
 * the chunker that cuts text before merging, and encode/decode. Learning is in bpe_learn.c, the
 * merges file in bpe_file.c. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "base/base.h"
#include "data/bpe.h"

struct cf_bpe {
  int n_merges, merges_cap;
  int (*merge)[2];             /* (n_merges, 2): the ids merge k joins */
  bpe_pair_map rank;           /* (left, right) -> k */
  uint32_t *piece_off, *piece_len;  /* (CF_BPE_FIRST_MERGE + merges_cap): where each id's bytes lie */
  uint8_t *bytes;              /* every id's bytes, one after another */
  size_t n_bytes, bytes_cap;
};

/* ---- the pair map ---- */

static uint64_t pair_key(int left, int right) { return (uint64_t)(uint32_t)(left + 1) << 32 | (uint32_t)right; }
static size_t pair_slot(uint64_t key, size_t cap) {  /* splitmix64's finalizer: every key bit moves the low bits */
  key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ull;
  key = (key ^ (key >> 27)) * 0x94d049bb133111ebull;
  return (size_t)(key ^ (key >> 31)) & (cap - 1);
}

int bpe_map_get(const bpe_pair_map *m, int left, int right) {
  if (!m->cap) return -1;
  uint64_t key = pair_key(left, right);
  for (size_t i = pair_slot(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
    if (m->keys[i] == key) return m->values[i];
    if (!m->keys[i]) return -1;
  }
}

static void map_insert(bpe_pair_map *m, uint64_t key, int value) {
  size_t i = pair_slot(key, m->cap);
  while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
  if (!m->keys[i]) m->n++;
  m->keys[i] = key;
  m->values[i] = value;
}

cf_status bpe_map_put(bpe_pair_map *m, int left, int right, int value) {
  if ((m->n + 1) * 2 > m->cap) {  /* at most half full, so probes stay short */
    bpe_pair_map grown = {.cap = m->cap ? m->cap * 2 : 1024};
    grown.keys = calloc(grown.cap, sizeof *grown.keys);
    grown.values = malloc(grown.cap * sizeof *grown.values);
    if (!grown.keys || !grown.values) {
      bpe_map_free(&grown);
      return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory for the BPE pair table (%zu pairs)", m->n);
    }
    for (size_t i = 0; i < m->cap; i++)
      if (m->keys[i]) map_insert(&grown, m->keys[i], m->values[i]);
    bpe_map_free(m);
    *m = grown;
  }
  map_insert(m, pair_key(left, right), value);
  return CF_OK;
}

void bpe_map_free(bpe_pair_map *m) {
  free(m->keys);
  free(m->values);
  memset(m, 0, sizeof *m);
}

/* ---- the vocabulary ---- */

static int append_bytes(cf_bpe *b, const uint8_t *p, size_t n) {
  if (b->n_bytes + n > b->bytes_cap) {
    size_t cap = b->bytes_cap * 2 > b->n_bytes + n ? b->bytes_cap * 2 : b->n_bytes + n + 4096;
    uint8_t *grown = realloc(b->bytes, cap);
    if (!grown) return 0;
    b->bytes = grown;
    b->bytes_cap = cap;
  }
  memcpy(b->bytes + b->n_bytes, p, n);
  b->n_bytes += n;
  return 1;
}

cf_bpe *bpe_new(void) {
  cf_bpe *b = calloc(1, sizeof *b);
  if (b) {
    b->piece_off = calloc(CF_BPE_FIRST_MERGE, sizeof *b->piece_off);
    b->piece_len = calloc(CF_BPE_FIRST_MERGE, sizeof *b->piece_len);
  }
  if (!b || !b->piece_off || !b->piece_len) {
    cf_bpe_free(b);
    CF_FAIL(CF_ERR_NO_MEMORY, "out of memory for a BPE vocabulary");
    return NULL;
  }
  for (int v = 0; v < 256; v++) {
    uint8_t byte = (uint8_t)v;
    b->piece_off[CF_BPE_BYTE0 + v] = (uint32_t)b->n_bytes;
    b->piece_len[CF_BPE_BYTE0 + v] = 1;
    if (!append_bytes(b, &byte, 1)) { cf_bpe_free(b); CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); return NULL; }
  }
  return b;
}

static int grow_merges(cf_bpe *b) {
  int cap = b->merges_cap ? b->merges_cap * 2 : 1024;
  int (*merge)[2] = realloc(b->merge, (size_t)cap * sizeof *merge);
  if (merge) b->merge = merge;
  uint32_t *off = realloc(b->piece_off, (size_t)(CF_BPE_FIRST_MERGE + cap) * sizeof *off);
  if (off) b->piece_off = off;
  uint32_t *len = realloc(b->piece_len, (size_t)(CF_BPE_FIRST_MERGE + cap) * sizeof *len);
  if (len) b->piece_len = len;
  if (!merge || !off || !len) return 0;
  b->merges_cap = cap;
  return 1;
}

bpe_merge_check bpe_add_merge(cf_bpe *b, int left, int right) {
  int next = CF_BPE_FIRST_MERGE + b->n_merges;
  if (left < 0 || right < 0 || left >= next || right >= next) return BPE_MERGE_UNDEFINED_ID;
  if (left < CF_BPE_BYTE0 || right < CF_BPE_BYTE0) return BPE_MERGE_SPECIAL_ID;
  if (bpe_map_get(&b->rank, left, right) >= 0) return BPE_MERGE_REPEATED;
  uint32_t off = (uint32_t)b->n_bytes, len = b->piece_len[left] + b->piece_len[right];
  if (len > BPE_PIECE_MAX) return BPE_MERGE_TOO_LONG;
  if (b->n_merges == b->merges_cap && !grow_merges(b)) return BPE_MERGE_NO_MEMORY;
  uint8_t piece[2 * BPE_PIECE_MAX];  /* copied out first: append_bytes may move b->bytes */
  memcpy(piece, b->bytes + b->piece_off[left], b->piece_len[left]);
  memcpy(piece + b->piece_len[left], b->bytes + b->piece_off[right], b->piece_len[right]);
  if (!append_bytes(b, piece, len) || bpe_map_put(&b->rank, left, right, b->n_merges) != CF_OK)
    return BPE_MERGE_NO_MEMORY;
  b->merge[b->n_merges][0] = left;
  b->merge[b->n_merges][1] = right;
  b->piece_off[next] = off;
  b->piece_len[next] = len;
  b->n_merges++;
  return BPE_MERGE_OK;
}

void cf_bpe_free(cf_bpe *b) {
  if (!b) return;
  free(b->merge);
  bpe_map_free(&b->rank);
  free(b->piece_off);
  free(b->piece_len);
  free(b->bytes);
  free(b);
}

int cf_bpe_vocab_size(const cf_bpe *b) { return CF_BPE_FIRST_MERGE + b->n_merges; }
int cf_bpe_merges(const cf_bpe *b) { return b->n_merges; }

void cf_bpe_merge_pair(const cf_bpe *b, int k, int *left, int *right) {
  *left = b->merge[k][0];
  *right = b->merge[k][1];
}

const uint8_t *cf_bpe_piece(const cf_bpe *b, int id, size_t *len) {
  if (id < 0 || id >= cf_bpe_vocab_size(b)) return NULL;
  *len = b->piece_len[id];
  return id < CF_BPE_BYTE0 ? (const uint8_t *)"" : b->bytes + b->piece_off[id];
}

/* ---- the chunker ---- */

enum { CHAR_LETTER, CHAR_DIGIT, CHAR_SPACE, CHAR_SYMBOL };

/* The class of the character at s[0..n) and its length in bytes. */
static int char_class(const uint8_t *s, size_t n, size_t *len) {
  uint8_t c = s[0];
  *len = 1;
  if (c < 0x80) {
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return CHAR_LETTER;
    if (c >= '0' && c <= '9') return CHAR_DIGIT;
    return c == ' ' || (c >= '\t' && c <= '\r') ? CHAR_SPACE : CHAR_SYMBOL;
  }
  size_t need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (!need || need > n) return CHAR_SYMBOL;
  for (size_t k = 1; k < need; k++)
    if ((s[k] & 0xC0) != 0x80) return CHAR_SYMBOL;
  *len = need;
  /* U+0080..U+00BF (no-break space, inverted ! and ?, guillemets) and U+2000..U+207F (dashes, curly
   * quotes) are punctuation; other characters are taken as letters, which keeps accented words whole */
  return c == 0xC2 || (c == 0xE2 && s[1] <= 0x81) ? CHAR_SYMBOL : CHAR_LETTER;
}

static int leads_word(const uint8_t *s, size_t n) {  /* a space followed by a character that is not white space */
  size_t len;
  return n > 1 && s[0] == ' ' && char_class(s + 1, n - 1, &len) != CHAR_SPACE;
}

size_t bpe_chunk_len(const uint8_t *s, size_t n) {
  size_t len, i = 0;
  if (leads_word(s, n)) i = 1;
  int cls = char_class(s + i, n - i, &len);
  for (i += len; i < n && i < BPE_CHUNK_MAX; i += len) {
    if (char_class(s + i, n - i, &len) != cls) break;
    if (cls == CHAR_SPACE && leads_word(s + i, n - i)) break;  /* that space goes with the next word */
  }
  return i;
}

/* ---- encode and decode ---- */

/* The ids of one chunk: its bytes, then merges by rank, each joining every occurrence left to right. */
static size_t encode_chunk(const cf_bpe *b, const uint8_t *s, size_t n, int *ids) {
  for (size_t i = 0; i < n; i++) ids[i] = CF_BPE_BYTE0 + s[i];
  for (size_t m = n;;) {
    int best = INT_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < m; i++) {
      int r = bpe_map_get(&b->rank, ids[i], ids[i + 1]);
      if (r >= 0 && r < best) best = r, at = i;
    }
    if (best == INT_MAX) return m;
    int left = b->merge[best][0], right = b->merge[best][1], w = (int)at;
    for (size_t i = at; i < m;) {
      if (i + 1 < m && ids[i] == left && ids[i + 1] == right) ids[w++] = CF_BPE_FIRST_MERGE + best, i += 2;
      else ids[w++] = ids[i++];
    }
    m = (size_t)w;
  }
}

size_t cf_bpe_encode(const cf_bpe *b, const void *text, size_t len, int *ids) {
  const uint8_t *s = text;
  size_t n = 0;
  for (size_t at = 0, chunk; at < len; at += chunk) {
    chunk = bpe_chunk_len(s + at, len - at);
    n += encode_chunk(b, s + at, chunk, ids + n);
  }
  return n;
}

cf_status cf_bpe_decode(const cf_bpe *b, const int *ids, size_t n, char **text, size_t *len) {
  *text = NULL;
  *len = 0;
  size_t total = 0, piece_len;
  for (size_t i = 0; i < n; i++) {
    if (!cf_bpe_piece(b, ids[i], &piece_len))
      return CF_FAIL(CF_ERR_DATA, "token %zu: id %d is not in the vocabulary (0 .. %d)", i + 1, ids[i],
                     cf_bpe_vocab_size(b) - 1);
    total += piece_len;
  }
  char *out = malloc(total + 1);
  if (!out) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory decoding %zu tokens", n);
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    const uint8_t *p = cf_bpe_piece(b, ids[i], &piece_len);
    memcpy(out + at, p, piece_len);
    at += piece_len;
  }
  out[at] = 0;
  *text = out;
  *len = at;
  return CF_OK;
}
