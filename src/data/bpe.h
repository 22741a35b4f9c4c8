/* The byte-pair-encoding tokenizer, internal: what bpe.c (the vocabulary, the chunker, encode and
 * decode), bpe_learn.c (learning merges) and bpe_file.c (the merges file, both ways) share. */
#ifndef CLFORMER_DATA_BPE_H
#define CLFORMER_DATA_BPE_H

#include <stddef.h>
#include <stdint.h>
#include "clformer/data.h"

/* An open-addressing map from a pair of ids (left, right) to an int; the learner's pair slots and
 * the encoder's merge ranks. */
typedef struct bpe_pair_map {
  uint64_t *keys;  /* (left + 1) << 32 | right; 0 marks an empty cell */
  int *values;
  size_t cap, n;   /* cap: a power of two */
} bpe_pair_map;

/* The value of (left, right), or -1 when absent. */
int bpe_map_get(const bpe_pair_map *m, int left, int right);
/* Set (left, right) to value: CF_OK or CF_ERR_NO_MEMORY (reported). */
cf_status bpe_map_put(bpe_pair_map *m, int left, int right, int value);
void bpe_map_free(bpe_pair_map *m);

/* Why a merge cannot be added (bpe_add_merge); the merges file loader words each for its line. */
typedef enum {
  BPE_MERGE_OK, BPE_MERGE_UNDEFINED_ID, BPE_MERGE_SPECIAL_ID, BPE_MERGE_REPEATED,
  BPE_MERGE_TOO_LONG,  /* its piece would be longer than any chunk, so it could never apply */
  BPE_MERGE_NO_MEMORY
} bpe_merge_check;

/* The most merges a vocabulary holds, learned or loaded. */
enum { BPE_MAX_MERGES = CF_BPE_MAX_VOCAB - CF_BPE_FIRST_MERGE };

/* An empty vocabulary: the special ids and the 256 bytes. NULL when out of memory (reported). */
cf_bpe *bpe_new(void);
/* Appends the merge (left, right) as id CF_BPE_FIRST_MERGE + cf_bpe_merges(b). */
bpe_merge_check bpe_add_merge(cf_bpe *b, int left, int right);

/* Text is cut into chunks before merging, and no merge crosses a chunk boundary: the length of the
 * chunk that starts text[0..n) (n > 0). A chunk is a run of letters, of digits or of other symbols
 * (UTF-8 characters; a byte that is not valid UTF-8 counts as a symbol), with the space before it
 * when there is one, or a run of white space; at most BPE_PIECE_MAX bytes (BPE_CHUNK_MAX and a
 * character). */
enum { BPE_CHUNK_MAX = 64, BPE_PIECE_MAX = BPE_CHUNK_MAX + 3 };
size_t bpe_chunk_len(const uint8_t *text, size_t n);

#endif
